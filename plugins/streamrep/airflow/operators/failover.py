"""Operators for failover and failback (``replication/failover.py``): the plan with its Markdown
summary for a person's approval, the failover, and the failback."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from streamrep.airflow import rows as presented
from streamrep.airflow.assets import emit_replica_caught_up, emits_caught_up
from streamrep.airflow.operators.base import StreamrepOperator
from streamrep.airflow.params import as_bool
from streamrep.client.admin import StreamAdmin
from streamrep.replication import failover as failovers

if TYPE_CHECKING:
    from airflow.sdk import Context


def plan_markdown(plan: dict[str, Any], procedure: str) -> str:
    """A failover or failback plan as the Markdown body of the approval task: what a person
    needs to decide (lag, pending messages, live gateways, the consumer groups affected, steps)."""
    lines = [
        f"### {procedure}: {plan['path']} → {plan['replica']}",
        "",
        f"- stage: **{plan['stage']}**",
        f"- source reachable: **{'yes' if plan['sourceReachable'] else 'no'}**"
        + (f" ({plan['sourceError']})" if plan.get("sourceError") else ""),
    ]
    for key, label in (
        ("pendingMessages", "pending messages"),
        ("toCopyBack", "messages to copy back"),
        ("bytesPending", "pending bytes"),
        ("replicationLagMillis", "lag (ms)"),
        ("lastKnownLag", "last known lag (messages)"),
    ):
        if key in plan:
            lines.append(f"- {label}: **{'unknown' if plan[key] is None else plan[key]}**")
    lines.append(f"- live gateways: {', '.join(plan.get('gateways') or []) or 'none'}")
    groups = plan.get("groups")
    lines.append(f"- consumer groups affected: {'unknown' if groups is None else ', '.join(groups) or 'none'}")
    if plan.get("topics"):
        lines += ["", "| topic | pending messages | bytes | lag (ms) |", "| --- | ---: | ---: | ---: |"]
        lines += [
            f"| {t['topic']} | {t['pendingMessages']} | {t['bytesPending']} | {t['replicationLagMillis']} |"
            for t in plan["topics"]
        ]
    lines += ["", "**Steps**", ""] + [f"{n}. {step}" for n, step in enumerate(plan["steps"], 1)]
    return "\n".join(lines)


class _FailoverOperator(StreamrepOperator):
    """Base of the failover operators: a source stream and its replica.

    :param path: the source stream. (templated)
    :param replica: the replica stream (the promoted one, for failback). (templated)
    """

    template_fields: Sequence[str] = (*StreamrepOperator.template_fields, "path", "replica")

    def __init__(self, *, path: str, replica: str, **kwargs: Any):
        super().__init__(**kwargs)
        self.path = path
        self.replica = replica


class FailoverPlanOperator(_FailoverOperator):
    """What ``stream replica failover -plan true`` (or ``failback -plan true``) prints: the plan,
    with its Markdown summary under ``markdown`` for the approval task. Changes nothing.

    :param procedure: ``failover`` or ``failback``.
    :return: (XCom) the plan (``replication.failover.failover_plan``), plus ``markdown``.
    """

    def __init__(self, *, procedure: str = "failover", **kwargs: Any):
        super().__init__(**kwargs)
        if procedure not in ("failover", "failback"):
            raise ValueError(f"procedure must be failover or failback, not {procedure!r}")
        self.procedure = procedure

    def run(self, admin: StreamAdmin, context: Context) -> dict[str, Any]:
        planner = failovers.failover_plan if self.procedure == "failover" else failovers.failback_plan
        plan = presented.plan_fields(planner(admin, self.path, self.replica))
        plan["markdown"] = plan_markdown(plan, self.procedure)
        self.log.info("%s", plan["markdown"])
        return plan


class FailoverOperator(_FailoverOperator):
    """``stream replica failover -path <source> -replica <replica>``: promote the replica. Safe
    to retry: a retry finds it failed over and says so.

    :param force: promote even if the source is unreachable (or has not drained). (templated)
    :param timeout: seconds to wait for the replica to catch up. (templated)
    :return: (XCom) the result row (``replication.failover.failover``).
    """

    template_fields: Sequence[str] = (*_FailoverOperator.template_fields, "force", "timeout")

    def __init__(self, *, force: Any = False, timeout: Any = failovers.DEFAULT_TIMEOUT, **kwargs: Any):
        super().__init__(**kwargs)
        self.force = force
        self.timeout = timeout

    def run(self, admin: StreamAdmin, context: Context) -> dict[str, Any]:
        done = failovers.failover(admin, self.path, self.replica, force=as_bool(self.force), timeout=self.timeout)
        self.log.info("stream replica failover -path %s -replica %s: %s", self.path, self.replica, done.result)
        if emits_caught_up(self):  # up to date only if it holds everything its source held
            if not done.forced and done.late_messages == 0:
                emit_replica_caught_up(context, self.replica, source=self.path, admin=admin, uptodate=True)
            else:
                self.log.info("no replica up-to-date event: %s may lack messages of %s", self.replica, self.path)
        return presented.failover_row(done)


class FailbackOperator(_FailoverOperator):
    """``stream replica failback -path <source> -replica <promoted>``: give the source its role
    back, copying back only what it lacks. Safe to retry.

    :param phase: ``all``, ``reverse`` or ``return``. (templated)
    :param timeout: seconds each wait lasts at most. (templated)
    :return: (XCom) the result row (``replication.failover.failback``).
    """

    template_fields: Sequence[str] = (*_FailoverOperator.template_fields, "phase", "timeout")

    def __init__(self, *, phase: str = "all", timeout: Any = failovers.DEFAULT_TIMEOUT, **kwargs: Any):
        super().__init__(**kwargs)
        self.phase = phase
        self.timeout = timeout

    def run(self, admin: StreamAdmin, context: Context) -> dict[str, Any]:
        done = failovers.failback(admin, self.path, self.replica, phase=self.phase, timeout=self.timeout)
        self.log.info("stream replica failback -path %s -replica %s: %s", self.path, self.replica, done.result)
        if self.phase != "reverse" and emits_caught_up(self):  # it waited until the source held it all
            emit_replica_caught_up(context, self.path, source=self.replica, admin=admin, uptodate=True)
        return presented.failback_row(done)
