"""diffstreams and diffstreamswithcrc (``StreamDiffOperator``): compare two streams, on Spark or in
the task's process, and write the ops directories; the operators beside it (the links to compare,
``importstream``) are in ``verify``."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from streamrep.airflow.assets import REPLICAS_ALIAS, caught_up_extra, emits_caught_up, replica_asset
from streamrep.airflow.hook import StreamrepHook, user_errors
from streamrep.airflow.operators.spark_submit import StreamrepSparkSubmitOperator
from streamrep.airflow.params import as_bool
from streamrep.errors import InvalidArgument
from streamrep.model import replication as rules
from streamrep.replication import verification
from streamrep.replication.diff import check_diff
from streamrep.replication.ops import DiffRequest, check_outdir, diff_engine, diff_to_ops

if TYPE_CHECKING:
    from airflow.sdk import Context

DIFF_ENGINES = ("auto", "local", "spark")


def fresh_outdir(context: Any, command: str) -> Path:
    """A new folder in the worker's temporary space for a task's ops directories, named after the
    task (DAG, task, map index, try) so that its log and result point a person to it."""
    ti = context.get("ti") if hasattr(context, "get") else None
    parts = [getattr(ti, name, None) for name in ("dag_id", "task_id", "map_index", "try_number")]
    name = ".".join(str(p) for p in parts if p is not None and p != -1)
    return Path(tempfile.mkdtemp(prefix=f"streamrep-{command}-{name}-".replace("/", "_")))


class StreamDiffOperator(StreamrepSparkSubmitOperator):
    """``mapr diffstreams -src <source> -dst <destination> -outdir <dir> [-first_exit]`` (or
    ``diffstreamswithcrc`` with ``crc``): compare two streams and write the ops directories
    (``opsForDst``, ``opsForSrc``) that ``importstream`` applies.

    One operator for both engines, as the CLI's ``-engine``: ``spark`` submits
    ``spark_apps/diffstreams.py``; ``local`` compares in the task's process (``replication/diff/``),
    with no Spark start; ``auto`` chooses by the streams' size (``ops.diff_engine``, as the CLI). The
    rights and the output directory are checked in the task first, so bad input fails in one line
    before Spark starts.

    When ``destination`` is a replica of ``source`` (a replica link), the result is recorded as the
    link's last verification (``replication.verification.record``), which ``replica list`` and the
    Stream replication page show. With ``REPLICAS_ALIAS`` in its outlets, a task that ends well
    emits an asset event for ``destination`` whose extra holds the result (``verification``).

    :param source: the source stream. (templated)
    :param destination: the destination stream, usually a replica of ``source``. (templated)
    :param outdir: a new or empty directory for the ops directories (default: a fresh folder in
        the worker's temporary space, named in the log and the result). (templated)
    :param crc: ``diffstreamswithcrc``: CRCs of runs of messages first. (templated)
    :param first_exit: stop at the first difference. (templated)
    :param engine: ``auto``, ``local`` or ``spark``. (templated)
    :param fail_on_difference: fail the task, with the one-line summary, when the streams differ
        (a difference is a finding: the task is not retried). (templated)
    :param numthreads: Spark parallelism (the thread count of a local master).
    :return: (XCom) the result (``DiffResult.to_dict``): ``same``, the counts by kind,
        ``dstBehind``, ``compared``, ``outdir``, ``summary``; and ``engine``.
    """

    app = "diffstreams"
    template_fields: Sequence[str] = (
        *SparkSubmitOperator.template_fields,
        "cluster_conn_ids",
        "source",
        "destination",
        "outdir",
        "crc",
        "first_exit",
        "engine",
        "fail_on_difference",
    )
    ui_color = "#d9f99d"

    def __init__(
        self,
        *,
        source: str,
        destination: str,
        outdir: str | None = None,
        crc: Any = False,
        first_exit: Any = False,
        engine: str = "auto",
        fail_on_difference: Any = True,
        numthreads: int | None = None,
        **kwargs: Any,
    ):
        super().__init__(**kwargs)
        self.source = source
        self.destination = destination
        self.outdir = outdir
        self.crc = crc
        self.first_exit = first_exit
        self.engine = engine
        self.fail_on_difference = fail_on_difference
        self.numthreads = numthreads

    @property
    def command(self) -> str:
        return "diffstreamswithcrc" if as_bool(self.crc) else "diffstreams"

    def preflight(self, hook: StreamrepHook, context: Context) -> dict[str, Any] | None:
        if self.engine not in DIFF_ENGINES:
            raise InvalidArgument(f"engine must be one of {', '.join(DIFF_ENGINES)}, not {self.engine!r}")
        admin = hook.admin
        check_diff(admin, self.source, self.destination)  # rights and streams, before any folder or Spark
        self._outdir = check_outdir(self.outdir) if self.outdir else fresh_outdir(context, self.command)
        engine = diff_engine(admin, self.source, self.destination) if self.engine == "auto" else self.engine
        self.log.info(
            "%s -src %s -dst %s -outdir %s (engine %s)",
            self.command,
            self.source,
            self.destination,
            self._outdir,
            engine,
        )
        if engine == "spark":
            return None
        outdir = str(self._outdir)
        request = DiffRequest(self.source, self.destination, outdir, as_bool(self.crc), as_bool(self.first_exit))
        result = diff_to_ops(admin, request)
        return self._conclude(admin, context, result.to_dict(outdir), "local")

    def app_args(self, hook: StreamrepHook) -> list[str]:
        args = ["--src", self.source, "--dst", self.destination, "--outdir", str(self._outdir)]
        args += ["--home", hook.registry_home()]
        if as_bool(self.crc):
            args.append("--crc")
        if as_bool(self.first_exit):
            args.append("--first-exit")
        if self.numthreads:
            args += ["--numthreads", str(self.numthreads)]
        return args

    def result(self, hook: StreamrepHook, context: Context) -> dict[str, Any]:
        """The app's one JSON line (the last the job printed)."""
        printed = getattr(self._hook, "json_lines", None) or []
        for line in reversed(printed):
            try:
                row = json.loads(line)
            except ValueError:
                continue
            if isinstance(row, dict) and "summary" in row:
                with user_errors():
                    return self._conclude(hook.admin, context, row, "spark")
        raise AirflowException(f"streamrep {self.app}: the Spark app ended without printing its result")

    def _conclude(self, admin: Any, context: Context, row: dict[str, Any], engine: str) -> dict[str, Any]:
        """Log and record the result, emit the replica's event, and fail on a difference if asked."""
        row = {**row, "engine": engine}
        self.log.info(
            "%s %s -> %s: %s; ops in %s", self.command, self.source, self.destination, row["summary"], row["outdir"]
        )
        src, dst = admin.path(self.source), admin.path(self.destination)
        linked = rules.agreement(src, admin.entry(src), dst, admin.entry(dst)).link is not None
        if linked:
            done = verification.record(admin, str(src), str(dst), row, engine, command=self.command)
            self.log.info("recorded as the last verification of replica %s of %s (by %s)", dst, src, done.by)
        differs = not row["same"] and as_bool(self.fail_on_difference)
        if differs:
            raise AirflowFailException(
                f"streamrep {self.command}: {src} and {dst} {row['summary']}; ops in {row['outdir']}"
            )
        if emits_caught_up(self):  # the replica's event: its lag now, as a caught-up event's, and the result
            extra = {**caught_up_extra(admin, str(dst), str(src)), "verification": row}
            context["outlet_events"][REPLICAS_ALIAS].add(replica_asset(str(dst)), extra=extra)
        return row
