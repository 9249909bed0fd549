"""copystream as a Spark batch job (``StreamCopyOperator``), the step of replica setup that copies
what the source holds into the new replica."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

from streamrep.airflow import rows as presented
from streamrep.airflow.hook import StreamrepHook
from streamrep.airflow.operators.spark_submit import StreamrepSparkSubmitOperator
from streamrep.replication.copy import copy_ended, plan_copy, summary

if TYPE_CHECKING:
    from airflow.sdk import Context


class StreamCopyOperator(StreamrepSparkSubmitOperator):
    """``mapr copystream -src <source> -dst <destination>`` as a Spark batch job.

    Copies everything ``source`` holds when the copy starts into ``destination`` (created with
    the source's metadata if missing). The copy stores replication positions with the messages,
    so a retry, or the gateways taking over after ``replica resume``, never duplicates or skips
    a message. Before starting Spark the copy is planned in the task: a user error fails at
    once, and when the destination already holds everything (a retry after a completed copy)
    Spark is not started at all.

    :param source: the source stream. (templated)
    :param destination: the destination stream. (templated)
    :param numthreads: copy threads (the thread count of a local master).
    :return: (XCom) the copy summary: ``source``, ``destination``, ``messages`` written and the
        source ``positions`` reached, by ``topic:partition``.
    """

    app = "copystream"
    template_fields: Sequence[str] = (
        *SparkSubmitOperator.template_fields,
        "cluster_conn_ids",
        "source",
        "destination",
    )

    def __init__(self, *, source: str, destination: str, numthreads: int | None = None, **kwargs: Any):
        super().__init__(**kwargs)
        self.source = source
        self.destination = destination
        self.numthreads = numthreads

    def preflight(self, hook: StreamrepHook, context: Context) -> dict[str, Any] | None:
        admin = hook.admin
        plan = plan_copy(admin, self.source, self.destination)
        pending = plan.total(admin)
        if pending:
            self.log.info("copystream %s -> %s: %d messages to copy", plan.source, plan.destination, pending)
            self._plan, self._pending = plan, pending
            return None
        copy_ended(admin, plan)  # a retry after a copy whose end was never recorded
        self.log.info(
            "copystream %s -> %s: the destination already holds every message: nothing to copy",
            plan.source,
            plan.destination,
        )
        return presented.copy_summary_row(summary(plan, 0))

    def app_args(self, hook: StreamrepHook) -> list[str]:
        args = ["--src", self.source, "--dst", self.destination, "--home", hook.registry_home()]
        if self.numthreads:
            args += ["--numthreads", str(self.numthreads)]
        return args

    def result(self, hook: StreamrepHook, context: Context) -> dict[str, Any]:
        """The copy's summary: the copy planned in ``preflight`` (its ends are the positions
        reached), and the messages it wrote: what the destination lacked then and lacks no more."""
        copied = presented.copy_summary_row(summary(self._plan, self._pending - self._plan.total(hook.admin)))
        self.log.info("copied %s messages; source positions reached: %s", copied["messages"], copied["positions"])
        return copied
