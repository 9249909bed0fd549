"""A sensor that waits until a replica is up to date."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseSensorOperator, PokeReturnValue
from airflow.sdk.exceptions import AirflowFailException

from streamrep.airflow.assets import emit_replica_caught_up, emits_caught_up
from streamrep.airflow.hook import StreamrepHook, user_errors
from streamrep.airflow.params import as_bool
from streamrep.airflow.triggers import ReplicaUpToDateTrigger, replica_row, stuck_reason

if TYPE_CHECKING:
    from airflow.sdk import Context


class ReplicaUpToDateSensor(BaseSensorOperator):
    """Wait until ``replica`` of ``path`` is up to date: nothing pending at the source and a
    replicating state (``isUptodate`` in ``maprcli stream replica list``).

    Fails at once, with streamrep's message, if the replica is not registered (or is removed
    while it waits), is paused, or is in an error state such as ``REPLICA_STATE_UNEXPECTED``:
    none of these ends by waiting, so the sensor does not wait out its timeout.

    :param path: the source stream. (templated)
    :param replica: the replica stream. (templated)
    :param streamrep_conn_id: the streamrep connection with settings common to all clusters.
    :param cluster_conn_ids: the Airflow connection of each cluster whose connection is not
        named ``streamrep_<cluster>``, by cluster name (``{"newyork": "ny_prod"}``). (templated)
    :param deferrable: wait in the triggerer (``ReplicaUpToDateTrigger``) instead of holding
        a worker slot. (templated)
    :return: (XCom) the replica's ``replica list`` row once it is up to date.

    With ``REPLICAS_ALIAS`` (``streamrep.airflow.assets``) in its ``outlets``, the sensor also
    emits an asset event for the replica once it is up to date, so DAGs scheduled on
    ``replica_asset(<replica>)`` run.
    """

    template_fields: Sequence[str] = ("path", "replica", "cluster_conn_ids", "deferrable")
    ui_color = "#e0f2fe"

    def __init__(
        self,
        *,
        path: str,
        replica: str,
        streamrep_conn_id: str = StreamrepHook.default_conn_name,
        cluster_conn_ids: Mapping[str, str] | None = None,
        deferrable: Any = False,
        poke_interval: float = 10,
        **kwargs: Any,
    ):
        super().__init__(poke_interval=poke_interval, **kwargs)
        self.path = path
        self.replica = replica
        self.streamrep_conn_id = streamrep_conn_id
        self.cluster_conn_ids = cluster_conn_ids
        self.deferrable = deferrable

    def _hook(self) -> StreamrepHook:
        with user_errors():
            return StreamrepHook(self.streamrep_conn_id, cluster_conn_ids=self.cluster_conn_ids)

    def _row(self, hook: StreamrepHook) -> dict[str, Any]:
        """The replica's row; fails the task if the replica cannot become up to date."""
        with user_errors():
            row = replica_row(hook.admin, self.path, self.replica)
        reason = stuck_reason(self.path, row)
        if reason:
            raise AirflowFailException(f"streamrep: {reason}")
        return row

    def poke(self, context: Context) -> PokeReturnValue:
        hook = self._hook()
        try:
            row = self._row(hook)
        finally:
            hook.close()
        self.log.info(
            "%s: %s, up to date: %s, %s messages pending, lag %s ms",
            row["replicaPath"],
            row["replicaState"],
            row["isUptodate"],
            row["pendingMessages"],
            row["replicationLagMillis"],
        )
        return PokeReturnValue(is_done=bool(row["isUptodate"]), xcom_value=row)

    def _caught_up(self, context: Context, row: dict[str, Any]) -> dict[str, Any]:
        """The replica is up to date: emit its asset event if the task's outlets ask for it."""
        if emits_caught_up(self):
            extra = emit_replica_caught_up(
                context,
                row["replicaPath"],
                source=self.path,
                row=row,
                streamrep_conn_id=self.streamrep_conn_id,
                cluster_conn_ids=self.cluster_conn_ids,
            )
            self.log.info("asset event for %s (replica up to date): %s", extra["replica"], extra)
        return row

    def execute(self, context: Context) -> Any:
        if not as_bool(self.deferrable):
            return self._caught_up(context, super().execute(context))
        hook = self._hook()
        try:
            row = self._row(hook)  # also resolves the clusters involved, for the trigger
            if row["isUptodate"]:
                self.log.info("%s is up to date", row["replicaPath"])
                return self._caught_up(context, row)
            trigger = ReplicaUpToDateTrigger(
                path=self.path,
                replica=self.replica,
                home=hook.clusters.home,
                clusters=hook.clusters.overridden,
                poll_interval=float(self.poke_interval),
            )
        finally:
            hook.close()
        self.log.info(
            "%s is not up to date (%s, %s pending): deferring",
            row["replicaPath"],
            row["replicaState"],
            row["pendingMessages"],
        )
        self.defer(trigger=trigger, method_name="execute_complete", timeout=timedelta(seconds=self.timeout))

    def execute_complete(self, context: Context, event: dict[str, Any] | None = None) -> dict[str, Any]:
        if not event or event.get("status") != "uptodate":
            raise AirflowFailException((event or {}).get("message") or f"unexpected trigger event {event!r}")
        self.log.info("%s is up to date", event["row"]["replicaPath"])
        return self._caught_up(context, event["row"])
