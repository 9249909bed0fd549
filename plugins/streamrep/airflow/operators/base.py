"""The base of streamrep's operators, and what several areas share: ``StreamrepOperator`` (the hook,
``only_if``, streamrep's errors as task failures), the network options of a replica as one mixin,
and the small helpers that log rows and list the known clusters."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator
from airflow.sdk.bases.operator import BaseOperatorMeta
from airflow.sdk.exceptions import AirflowSkipException

from streamrep.airflow.hook import ConnectionClusters, StreamrepHook, discover_connection_clusters, user_errors
from streamrep.airflow.params import as_bool
from streamrep.client.admin import StreamAdmin

if TYPE_CHECKING:
    from airflow.sdk import Context

# MapR's network options of a replica, and streamrep's byte-rate limit
NETWORK_FIELDS = ("throttle", "networkencryption", "networkcompression", "maxbytespersec")


def is_retry(context: Any) -> bool:
    """Whether this run of the task is a retry of an earlier try."""
    ti = context.get("ti") if hasattr(context, "get") else None
    return bool(ti is not None and (getattr(ti, "try_number", 1) or 1) > 1)


class StreamrepOperator(BaseOperator):
    """Base of the streamrep operators: runs :meth:`run` with the admin API of a
    :class:`~streamrep.airflow.hook.StreamrepHook`, turning streamrep errors into task failures.

    :param streamrep_conn_id: the streamrep connection with settings common to all clusters
        (the registry folder, who the task acts as).
    :param cluster_conn_ids: the Airflow connection of each cluster whose connection is not
        named ``streamrep_<cluster>``, by cluster name (``{"newyork": "ny_prod"}``); the other
        clusters keep that convention. (templated)
    :param only_if: a templated flag; when it renders false the task is skipped (used for the
        optional steps of a DAG, such as the reverse link of multi-master replication).
    """

    template_fields: Sequence[str] = ("only_if", "cluster_conn_ids")
    ui_color = "#dbeafe"

    def __init__(
        self,
        *,
        streamrep_conn_id: str = StreamrepHook.default_conn_name,
        cluster_conn_ids: Mapping[str, str] | None = None,
        only_if: Any = True,
        **kwargs: Any,
    ):
        super().__init__(**kwargs)
        self.streamrep_conn_id = streamrep_conn_id
        self.cluster_conn_ids = cluster_conn_ids
        self.only_if = only_if

    def execute(self, context: Context) -> Any:
        if not as_bool(self.only_if):
            raise AirflowSkipException(f"{self.task_id}: not needed for this run (only_if={self.only_if!r})")
        with user_errors():
            hook = StreamrepHook(self.streamrep_conn_id, cluster_conn_ids=self.cluster_conn_ids)
        try:
            with user_errors():
                return self.run(hook.admin, context)
        finally:
            hook.close()

    def run(self, admin: StreamAdmin, context: Context) -> Any:
        raise NotImplementedError


class NetworkOptionsMixin(metaclass=BaseOperatorMeta):
    """The network options of a replica link, for the operators that register or change one:
    MapR's ``throttle``, ``networkencryption`` and ``networkcompression``, and streamrep's
    ``maxbytespersec``. Put it before the operator's base (``class X(NetworkOptionsMixin,
    StreamrepOperator)``) and add ``*NetworkOptionsMixin.template_fields`` to the operator's own.

    The values are kept as given (templated) and checked by the core library when the task runs
    (``StreamAdmin.network_options``, ``model/network.py``), so a bad value fails the task with
    its one line and the rules live in one place. (The metaclass is the operators' own: it wraps
    this ``__init__`` too, so ``expand``, ``partial`` and ``default_args`` know the options.)

    :param throttle: MapR's ``-throttle``, true or false (default false): the gateways back off
        while the replica's cluster is under load. (templated)
    :param networkencryption: true or false (default false): replicate over TLS only; refused
        if a Kafka cluster of the pair is not SSL/SASL_SSL. (templated)
    :param networkcompression: off, lz4, zlib, gzip, snappy or zstd (default lz4): the codec the
        gateway writes the replica with on Kafka. (templated)
    :param maxbytespersec: bytes a second into the replica at most, over all its gateways
        (``10M``; default 0, no limit). (templated)
    """

    template_fields: Sequence[str] = NETWORK_FIELDS

    def __init__(
        self,
        *,
        throttle: Any = None,
        networkencryption: Any = None,
        networkcompression: Any = None,
        maxbytespersec: Any = None,
        **kwargs: Any,
    ):
        super().__init__(**kwargs)
        self.throttle = throttle
        self.networkencryption = networkencryption
        self.networkcompression = networkcompression
        self.maxbytespersec = maxbytespersec

    def network_options(self) -> dict[str, Any]:
        """The four options as rendered, as the core's ``**network`` arguments (None: the default)."""
        return {name: getattr(self, name) for name in NETWORK_FIELDS}


def known_clusters(admin: StreamAdmin) -> list[str]:
    """Every cluster the hook behind ``admin`` can resolve: the registry's, and those of
    ``streamrep_<cluster>`` connections in the environment (and the metadata database, where
    it is reachable)."""
    if isinstance(admin.clusters, ConnectionClusters):
        discover_connection_clusters(admin.clusters)
    return [c.name for c in admin.clusters.list()]


def log_rows(log: Any, title: str, rows: list[dict[str, Any]], columns: Sequence[str]) -> None:
    """Log ``rows`` as a small table under ``title`` (what the CLI would print)."""
    lines = [title]
    if not rows:
        lines.append("  (none)")
    widths = {c: max(len(c), *(len(str(r.get(c))) for r in rows)) if rows else len(c) for c in columns}
    if rows:
        lines.append("  " + "  ".join(c.ljust(widths[c]) for c in columns))
        for row in rows:
            lines.append("  " + "  ".join(str(row.get(c)).ljust(widths[c]) for c in columns))
    log.info("\n".join(lines))
