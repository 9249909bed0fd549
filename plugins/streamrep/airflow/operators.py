"""Operators for the ``maprcli stream`` steps of replication setup and control.

Each operator is one maprcli step and a thin call into ``streamrep.client`` /
``streamrep.replication``; the rules (paths, permissions, limits, states) live there.

Every operator is safe to retry. A retry finds the state it wanted and succeeds:

- ``stream create -copymetafrom``: the stream exists with the same metadata;
- ``replica add``: the same replica stream (by UUID) is registered with the same settings;
- ``upstream add``: the same upstream stream (by UUID) is registered;
- ``replica pause/resume``: already paused/resumed;
- ``replica remove``: on a retry, the replica is no longer registered.

Anything else fails the task with streamrep's one-line message. A user error (bad path,
missing stream or permission, limit) fails at once with no retry; a cluster that cannot be
reached fails and is retried.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import fields
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowSkipException

from streamrep.airflow import rows as presented
from streamrep.airflow import supervisor
from streamrep.airflow.assets import emit_replica_caught_up, emits_caught_up
from streamrep.airflow.hook import ConnectionClusters, StreamrepHook, discover_connection_clusters, user_errors
from streamrep.airflow.params import as_bool
from streamrep.airflow.supervisor import GATEWAYS_DAG_ID, ServiceAction
from streamrep.client.admin import StreamAdmin
from streamrep.errors import AlreadyExists, InvalidArgument, NotFound
from streamrep.model import replication as rules
from streamrep.model.paths import StreamPath
from streamrep.model.stream import StreamMeta
from streamrep.replication import failover as failovers
from streamrep.replication import lag, service
from streamrep.replication.flows import flows_into
from streamrep.replication.gateway import default_gateway_id
from streamrep.replication.importstream import import_stream
from streamrep.replication.setup import begin_autosetup, ensure_replica, ensure_upstream
from streamrep.replication.status import replica_status

if TYPE_CHECKING:
    from airflow.sdk import Context

UPSTREAM_COLUMNS = ("cluster", "stream", "idx", "uuid")  # the ``stream upstream list`` fields


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


class StreamCreateOperator(StreamrepOperator):
    """``maprcli stream create -path <path> [-copymetafrom <source>]``.

    Succeeds on a retry when the stream already exists with the metadata it would have been
    created with; fails if it exists with other metadata.

    :param path: the stream to create. (templated)
    :param copymetafrom: a stream, on any cluster, whose metadata (settings and access control
        expressions) the new stream copies. (templated)
    :param settings: stream settings (``defaultpartitions``, ``ttl``, ``autocreate`` and the
        ``*perm`` ACEs); with ``copymetafrom`` they override the copied ones. (templated)
    :return: (XCom) ``stream info`` of the stream.
    """

    template_fields: Sequence[str] = (*StreamrepOperator.template_fields, "path", "copymetafrom", "settings")

    def __init__(
        self, *, path: str, copymetafrom: str | None = None, settings: dict[str, Any] | None = None, **kwargs: Any
    ):
        super().__init__(**kwargs)
        self.path = path
        self.copymetafrom = copymetafrom
        self.settings = settings

    def run(self, admin: StreamAdmin, context: Context) -> dict[str, Any]:
        settings = dict(self.settings or {})
        copymetafrom = self.copymetafrom or None
        sp = admin.path(self.path)
        try:
            admin.create_stream(str(sp), copymetafrom=copymetafrom, **settings)
            self.log.info(
                "stream create -path %s%s: created", sp, f" -copymetafrom {copymetafrom}" if copymetafrom else ""
            )
        except AlreadyExists as exists:
            if copymetafrom:
                wanted = admin.entry(copymetafrom).meta.edited(**settings)
            else:
                wanted = StreamMeta.for_creator(admin.identity.user, **settings)
            have = admin.entry(sp).meta
            differences = [
                f"{f.name} is {getattr(have, f.name)!r}, not {getattr(wanted, f.name)!r}"
                for f in fields(StreamMeta)
                if getattr(have, f.name) != getattr(wanted, f.name)
            ]
            if differences:
                raise AlreadyExists(
                    f"stream {sp} already exists with other metadata: {'; '.join(differences)}"
                ) from exists
            self.log.info("stream %s already exists with the same metadata: nothing to do", sp)
        return presented.stream_info_row(admin.stream_info(str(sp)))


# MapR's network options of a replica, and streamrep's byte-rate limit
NETWORK_FIELDS = ("throttle", "networkencryption", "networkcompression", "maxbytespersec")


def network_options(operator: Any) -> dict[str, Any]:
    """An operator's network options as given (templated): the core library checks them
    (``model/network.py``), so a bad value fails the task with its one line."""
    return {name: getattr(operator, name) for name in NETWORK_FIELDS}


class ReplicaAddOperator(StreamrepOperator):
    """``maprcli stream replica add -path <source> -replica <replica> [-paused] [-synchronous]
    [-throttle] [-networkencryption] [-networkcompression]``, and streamrep's ``[-maxbytespersec]``.

    Succeeds on a retry (or a rerun of the DAG) when the link is already there to the same
    replica stream, by UUID, with the same settings (``setup.ensure_replica``: a link registered
    paused may have been resumed since); fails if it names a stream deleted and recreated at
    ``replica``, or has other settings.

    :param path: the source stream. (templated)
    :param replica: the replica stream; it must exist. (templated)
    :param paused: register it paused, so replication waits for ``replica resume``. (templated)
    :param synchronous: synchronous replication. (templated)
    :param throttle: MapR's ``-throttle``, true or false (default false): the gateways back off
        while the replica's cluster is under load. (templated)
    :param networkencryption: true or false (default false): replicate over TLS only; refused
        if a Kafka cluster of the pair is not SSL/SASL_SSL. (templated)
    :param networkcompression: off, lz4, zlib, gzip, snappy or zstd (default lz4): the codec the
        gateway writes the replica with on Kafka. (templated)
    :param maxbytespersec: bytes a second into the replica at most, over all its gateways
        (``10M``; default 0, no limit). (templated)
    :return: (XCom) the replica link: ``path``, ``paused``, ``synchronous``, ``state``...
    """

    template_fields: Sequence[str] = (
        *StreamrepOperator.template_fields,
        "path",
        "replica",
        "paused",
        "synchronous",
        *NETWORK_FIELDS,
    )

    def __init__(
        self,
        *,
        path: str,
        replica: str,
        paused: Any = False,
        synchronous: Any = False,
        throttle: Any = None,
        networkencryption: Any = None,
        networkcompression: Any = None,
        maxbytespersec: Any = None,
        **kwargs: Any,
    ):
        super().__init__(**kwargs)
        self.path = path
        self.replica = replica
        self.paused = paused
        self.synchronous = synchronous
        self.throttle = throttle
        self.networkencryption = networkencryption
        self.networkcompression = networkcompression
        self.maxbytespersec = maxbytespersec

    def run(self, admin: StreamAdmin, context: Context) -> dict[str, Any]:
        src, dst = admin.path(self.path), admin.path(self.replica)
        paused, synchronous = as_bool(self.paused), as_bool(self.synchronous)
        link, added = ensure_replica(admin, src, dst, paused=paused, synchronous=synchronous, **network_options(self))
        if added:
            self.log.info(
                "stream replica add -path %s -replica %s -paused %s -synchronous %s -throttle %s "
                "-networkencryption %s -networkcompression %s -maxbytespersec %d: registered",
                src,
                dst,
                str(paused).lower(),
                str(synchronous).lower(),
                str(link.throttle).lower(),
                str(link.networkencryption).lower(),
                link.networkcompression,
                link.maxbytespersec,
            )
        else:
            self.log.info("%s is already a replica of %s (the same stream and settings): nothing to do", dst, src)
        return {"source": str(src), **link.to_dict()}


class ReplicaVerifyOperator(StreamrepOperator):
    """``maprcli stream replica list -path <source>``, checking that ``replica`` is listed.

    :param path: the source stream. (templated)
    :param replica: the replica expected in the list. (templated)
    :return: (XCom) the ``replica list`` rows, with state, pending messages and lag.
    """

    template_fields: Sequence[str] = (*StreamrepOperator.template_fields, "path", "replica")

    def __init__(self, *, path: str, replica: str, **kwargs: Any):
        super().__init__(**kwargs)
        self.path = path
        self.replica = replica

    def run(self, admin: StreamAdmin, context: Context) -> list[dict[str, Any]]:
        src, dst = admin.path(self.path), admin.path(self.replica)
        rows = presented.replica_status_rows(replica_status(admin, str(src)))
        log_rows(
            self.log,
            f"stream replica list -path {src}",
            rows,
            ("replicaPath", "paused", "synchronous", "replicaState", "pendingMessages", "replicationLagMillis"),
        )
        rules.require_link(admin.entry(src).replicas, dst, src, "replica")
        self.log.info("verified: %s is a replica of %s", dst, src)
        return rows


class UpstreamAddOperator(StreamrepOperator):
    """``maprcli stream upstream add -path <replica> -upstream <source>``: the replica's side of
    the two-way agreement. Succeeds on a retry (or a rerun of the DAG) when the link is already
    there to the same upstream stream, by UUID (``setup.ensure_upstream``); fails if it names a
    stream deleted and recreated at ``upstream``.

    :param path: the replica stream. (templated)
    :param upstream: the source stream it accepts updates from. (templated)
    :return: (XCom) the ``upstream list`` rows of the replica: ``cluster``, ``stream``, ``idx``, ``uuid``.
    """

    template_fields: Sequence[str] = (*StreamrepOperator.template_fields, "path", "upstream")

    def __init__(self, *, path: str, upstream: str, **kwargs: Any):
        super().__init__(**kwargs)
        self.path = path
        self.upstream = upstream

    def run(self, admin: StreamAdmin, context: Context) -> list[dict[str, Any]]:
        dst, src = admin.path(self.path), admin.path(self.upstream)
        _, added = ensure_upstream(admin, dst, src)
        if added:
            self.log.info("stream upstream add -path %s -upstream %s: registered", dst, src)
        else:
            self.log.info("%s is already an upstream of %s (the same stream): nothing to do", src, dst)
        rows = [presented.upstream_row(row) for row in admin.list_upstreams(str(dst))]
        log_rows(self.log, f"stream upstream list -path {dst}", rows, UPSTREAM_COLUMNS)
        return rows


class UpstreamVerifyOperator(StreamrepOperator):
    """``maprcli stream upstream list -path <replica>``, checking that ``upstream`` is listed.

    :param path: the replica stream. (templated)
    :param upstream: the upstream expected in the list. (templated)
    :return: (XCom) the ``upstream list`` rows: ``cluster``, ``stream``, ``idx``, ``uuid``.
    """

    template_fields: Sequence[str] = (*StreamrepOperator.template_fields, "path", "upstream")

    def __init__(self, *, path: str, upstream: str, **kwargs: Any):
        super().__init__(**kwargs)
        self.path = path
        self.upstream = upstream

    def run(self, admin: StreamAdmin, context: Context) -> list[dict[str, Any]]:
        dst, src = admin.path(self.path), admin.path(self.upstream)
        rows = [presented.upstream_row(row) for row in admin.list_upstreams(str(dst))]
        log_rows(self.log, f"stream upstream list -path {dst}", rows, UPSTREAM_COLUMNS)
        rules.require_link(admin.entry(dst).upstreams, src, dst, "upstream")
        self.log.info("verified: %s is an upstream of %s", src, dst)
        return rows


class _ReplicaChangeOperator(StreamrepOperator):
    """A change to one replica link of a source stream; returns the ``replica list`` after it.

    :param path: the source stream. (templated)
    :param replica: the replica stream. (templated)
    """

    template_fields: Sequence[str] = (*StreamrepOperator.template_fields, "path", "replica")
    verb = ""

    def __init__(self, *, path: str, replica: str, **kwargs: Any):
        super().__init__(**kwargs)
        self.path = path
        self.replica = replica

    def change(self, admin: StreamAdmin, src: str, dst: str, context: Context) -> None:
        raise NotImplementedError

    def run(self, admin: StreamAdmin, context: Context) -> list[dict[str, Any]]:
        src, dst = admin.path(self.path), admin.path(self.replica)
        self.change(admin, str(src), str(dst), context)
        rows = presented.replica_status_rows(replica_status(admin, str(src)))
        log_rows(
            self.log,
            f"stream replica list -path {src}",
            rows,
            ("replicaPath", "paused", "replicaState", "pendingMessages", "replicationLagMillis"),
        )
        return rows


class ReplicaResumeOperator(_ReplicaChangeOperator):
    """``maprcli stream replica resume -path <source> -replica <replica>``: start (or restart)
    replication to the replica. Resuming a running replica changes nothing.

    :param path: the source stream. (templated)
    :param replica: the replica stream. (templated)
    :return: (XCom) the ``replica list`` rows after the change.
    """

    def change(self, admin: StreamAdmin, src: str, dst: str, context: Context) -> None:
        admin.resume_replica(src, dst)
        self.log.info("stream replica resume -path %s -replica %s: replication runs", src, dst)


class ReplicaPauseOperator(_ReplicaChangeOperator):
    """``maprcli stream replica pause -path <source> -replica <replica>``: stop replicating to
    the replica until it is resumed; updates wait at the source. Pausing a paused replica
    changes nothing.

    :param path: the source stream. (templated)
    :param replica: the replica stream. (templated)
    :return: (XCom) the ``replica list`` rows after the change.
    """

    def change(self, admin: StreamAdmin, src: str, dst: str, context: Context) -> None:
        admin.pause_replica(src, dst)
        self.log.info("stream replica pause -path %s -replica %s: paused", src, dst)


class ReplicaEditOperator(_ReplicaChangeOperator):
    """``maprcli stream replica edit -path <source> -replica <replica> [-newreplica]
    [-synchronous] [-throttle] [-networkencryption] [-networkcompression] [-maxbytespersec]``:
    change a replica's options in place; only those given (not None) change, so a retry finds them set.

    :param path: the source stream. (templated)
    :param replica: the replica stream, as the source lists it now. (templated)
    :param newreplica: the replica's new path after a rename or move; it must be the same stream
        (its UUID). A retry after it moved is given the new path as ``replica``. (templated)
    :param synchronous: true or false. (templated)
    :param throttle: and the other network options, as ``ReplicaAddOperator`` takes them. (templated)
    :return: (XCom) the ``replica list`` rows after the change.
    """

    template_fields: Sequence[str] = (
        *_ReplicaChangeOperator.template_fields,
        "newreplica",
        "synchronous",
        *NETWORK_FIELDS,
    )

    def __init__(
        self,
        *,
        newreplica: str | None = None,
        synchronous: Any = None,
        throttle: Any = None,
        networkencryption: Any = None,
        networkcompression: Any = None,
        maxbytespersec: Any = None,
        **kwargs: Any,
    ):
        super().__init__(**kwargs)
        self.newreplica = newreplica
        self.synchronous = synchronous
        self.throttle = throttle
        self.networkencryption = networkencryption
        self.networkcompression = networkcompression
        self.maxbytespersec = maxbytespersec

    def change(self, admin: StreamAdmin, src: str, dst: str, context: Context) -> None:
        link = admin.edit_replica(src, dst, self.newreplica or None, self.synchronous, **network_options(self))
        self.log.info("stream replica edit -path %s -replica %s: now %s", src, dst, link.to_dict())


class ReplicaRemoveOperator(_ReplicaChangeOperator):
    """``maprcli stream replica remove -path <source> -replica <replica>``: stop replicating to
    the replica for good (the replica stream and its data stay).

    A first try fails if the replica is not registered; a retry succeeds when it is gone
    (an earlier try removed it). It refuses to run unless ``confirmed`` renders true, so a
    trigger has to ask for the removal explicitly.

    :param path: the source stream. (templated)
    :param replica: the replica stream. (templated)
    :param confirmed: the explicit confirmation that the replica is to be removed; the
        control DAG passes its ``confirm_remove`` param. (templated)
    :return: (XCom) the ``replica list`` rows after the change.
    """

    template_fields: Sequence[str] = (*_ReplicaChangeOperator.template_fields, "confirmed")

    def __init__(self, *, confirmed: Any = False, **kwargs: Any):
        super().__init__(**kwargs)
        self.confirmed = confirmed

    def change(self, admin: StreamAdmin, src: str, dst: str, context: Context) -> None:
        if not as_bool(self.confirmed):
            raise InvalidArgument(
                f"stream replica remove -path {src} -replica {dst} was not confirmed: "
                f"set confirm_remove to true to remove the replica"
            )
        try:
            admin.remove_replica(src, dst)
        except NotFound:
            gone = rules.find_link(admin.entry(src).replicas, admin.path(dst)) is None
            if not (gone and is_retry(context)):
                raise
            self.log.info("%s is no longer a replica of %s (removed by an earlier try)", dst, src)
            return
        self.log.info("stream replica remove -path %s -replica %s: removed", src, dst)


class ReplicaStatusOperator(StreamrepOperator):
    """``maprcli stream replica list -path <source>``: each replica's state, pending messages
    and lag.

    :param path: the source stream. (templated)
    :return: (XCom) the ``replica list`` rows.
    """

    template_fields: Sequence[str] = (*StreamrepOperator.template_fields, "path")

    def __init__(self, *, path: str, **kwargs: Any):
        super().__init__(**kwargs)
        self.path = path

    def run(self, admin: StreamAdmin, context: Context) -> list[dict[str, Any]]:
        src = admin.path(self.path)
        rows = presented.replica_status_rows(replica_status(admin, str(src)))
        log_rows(
            self.log,
            f"stream replica list -path {src}",
            rows,
            ("replicaPath", "paused", "replicaState", "isUptodate", "pendingMessages", "replicationLagMillis"),
        )
        return rows


class AutosetupCheckOperator(StreamrepOperator):
    """The precondition of ``maprcli stream replica autosetup``: the network options are valid
    and can be given, the source exists, the caller may administer and copy it, and the replica
    stream does not exist yet (autosetup creates it), or an unfinished autosetup of this source
    created it. Then it creates the replica marked as this autosetup's
    (``setup.begin_autosetup``), so a rerun of a failed run completes it.

    :param path: the source stream. (templated)
    :param replica: the replica stream to be created. (templated)
    :param throttle: as ``ReplicaAddOperator``, and ``networkencryption``, ``networkcompression``,
        ``maxbytespersec``:
        checked here, before the replica is created. (templated)
    :return: (XCom) ``stream info`` of the source.
    """

    template_fields: Sequence[str] = (*StreamrepOperator.template_fields, "path", "replica", *NETWORK_FIELDS)

    def __init__(
        self,
        *,
        path: str,
        replica: str,
        throttle: Any = None,
        networkencryption: Any = None,
        networkcompression: Any = None,
        maxbytespersec: Any = None,
        **kwargs: Any,
    ):
        super().__init__(**kwargs)
        self.path = path
        self.replica = replica
        self.throttle = throttle
        self.networkencryption = networkencryption
        self.networkcompression = networkcompression
        self.maxbytespersec = maxbytespersec

    def run(self, admin: StreamAdmin, context: Context) -> dict[str, Any]:
        src, dst = begin_autosetup(admin, self.path, self.replica, **network_options(self))
        self.log.info("autosetup of %s from %s can go on: the replica stream is this autosetup's", dst, src)
        return presented.stream_info_row(admin.stream_info(str(src)))


class GatewayPlanOperator(StreamrepOperator):
    """Which gateways serve the replicas on ``cluster``: those that the source clusters list
    for it (``cluster gateway set -dstcluster <cluster>``), or one gateway named after this
    host if no source cluster lists any.

    :param cluster: the destination cluster. (templated)
    :param gateways: explicit gateway names, overriding the lists (space or comma separated,
        or a list). (templated)
    :return: (XCom) the gateway names, sorted.
    """

    template_fields: Sequence[str] = (*StreamrepOperator.template_fields, "cluster", "gateways")

    def __init__(self, *, cluster: str, gateways: Any = None, **kwargs: Any):
        super().__init__(**kwargs)
        self.cluster = cluster
        self.gateways = gateways

    def run(self, admin: StreamAdmin, context: Context) -> list[str]:
        admin.clusters.get(self.cluster)  # NotFound for an unknown cluster
        if self.gateways:
            given = rules.validate_gateways(self.gateways)
            self.log.info("gateways of %s, as given: %s", self.cluster, " ".join(given))
            return sorted(given)
        flows, blocked = flows_into(admin, self.cluster)
        sources = sorted({f.source.cluster for f in flows} | {b.source.cluster for b in blocked})
        names: set[str] = set()
        for source in sources:
            listed = admin.gateways(source).get(self.cluster)
            self.log.info(
                "cluster %s lists gateways for %s: %s",
                source,
                self.cluster,
                " ".join(listed) if listed else "(none: any gateway)",
            )
            names.update(listed or ())
        for blocked_flow in blocked:
            self.log.warning(
                "%s -> %s does not flow: %s", blocked_flow.source, blocked_flow.replica, blocked_flow.reason
            )
        if not names:
            names = {default_gateway_id()}
            self.log.info(
                "no source cluster lists gateways for %s: running gateway %s", self.cluster, next(iter(names))
            )
        return sorted(names)


class GatewayServiceOperator(StreamrepOperator):
    """The gateways as a service (``streamrep.replication.service``): ``start`` or ``stop`` a
    cluster's gateways (``gateway start|stop -cluster C``), or ``supervise``: for each cluster
    whose gateways should run and have no live heartbeat and no launch in flight, plan a
    ``stream_gateways`` run, with a deterministic run id and a doubling backoff between launches.
    ``start`` also supervises its cluster, so the gateways start in this run.

    :param action: ``supervise``, ``start`` or ``stop``. (templated)
    :param cluster: the cluster to start or stop; for ``supervise``, only this cluster (default:
        every cluster the hook knows). (templated)
    :param gateways_dag_id: the DAG that runs a cluster's gateways.
    :return: (XCom) the runs to trigger, as ``TriggerDagRunOperator`` kwargs:
        ``trigger_run_id`` and ``conf`` (``cluster``, ``once: false``).
    """

    template_fields: Sequence[str] = (*StreamrepOperator.template_fields, "action", "cluster")

    def __init__(
        self,
        *,
        action: str = "supervise",
        cluster: str | None = None,
        gateways_dag_id: str = GATEWAYS_DAG_ID,
        **kwargs: Any,
    ):
        super().__init__(**kwargs)
        self.action = action
        self.cluster = cluster
        self.gateways_dag_id = gateways_dag_id

    def run(self, admin: StreamAdmin, context: Context) -> list[dict[str, Any]]:
        action = ServiceAction.parse(self.action)
        cluster = self.cluster or None
        if action is not ServiceAction.SUPERVISE:
            if cluster is None:
                raise InvalidArgument(f"action {action.value} needs a cluster")
            req = service.request(admin, cluster, action.desired)
            self.log.info(
                "gateways of %s: desired state %s (by %s); live now: %s",
                cluster,
                req.desired.value,
                req.by,
                " ".join(req.live) or "none",
            )
            if action is ServiceAction.STOP:
                if req.live:
                    self.log.info("%s stop after their current batch; their runs end as success", " ".join(req.live))
                return []
        names = [cluster] if cluster is not None else supervisor.managed_clusters(admin, known_clusters(admin))
        ti = context.get("ti") if hasattr(context, "get") else None
        run_state = None
        if ti is not None and hasattr(ti, "get_dagrun_state"):
            run_state = lambda run_id: ti.get_dagrun_state(self.gateways_dag_id, run_id)  # noqa: E731
        return supervisor.launches(admin, names, run_state, self.log)


class ReplicaLagMonitorOperator(StreamrepOperator):
    """The replicas' alerts (``streamrep.replication.lag.check_alerts``): fails with one line
    naming each replica whose lag passed its threshold (``stream replica alert``), or that no
    live gateway serves. A failure is the alert, not a fault to retry.

    :param cluster: check only the replicas on this cluster (default: on every cluster the hook
        knows). (templated)
    :return: (XCom) one row per replica checked: its lag, thresholds and problems.
    """

    template_fields: Sequence[str] = (*StreamrepOperator.template_fields, "cluster")
    ui_color = "#fee2e2"

    def __init__(self, *, cluster: str | None = None, **kwargs: Any):
        super().__init__(**kwargs)
        self.cluster = cluster

    def run(self, admin: StreamAdmin, context: Context) -> list[dict[str, Any]]:
        names = [self.cluster] if self.cluster else known_clusters(admin)
        checks = lag.check_alerts(admin, names)
        rows = [presented.alert_check_row(check) for check in checks]
        log_rows(
            self.log,
            f"replica lag on {', '.join(names) or 'no cluster'}",
            rows,
            (
                "source",
                "replicaPath",
                "paused",
                "lagMessages",
                "lagMillis",
                "maxLagMessages",
                "maxLagMillis",
                "problems",
            ),
        )
        lag.raise_alerts(checks)
        return rows


class StreamImportOperator(StreamrepOperator):
    """``mapr importstream -src <ops dir> -dst <stream>``: apply an ``opsForDst`` or ``opsForSrc``
    directory that ``StreamDiffOperator`` (diffstreams) wrote, exactly once
    (``replication.importstream.import_stream``): a retry, or a second run, applies nothing twice.
    Its ``differs`` lines (a changed or misplaced message, which a log cannot fix in place) are
    left for a person, and the result's summary says so.

    :param folder: the ops directory, e.g. ``{{ ti.xcom_pull(task_ids='diff')['outdir'] }}/opsForDst``. (templated)
    :param destination: the stream the directory was made for. (templated)
    :return: (XCom) what was applied, already present and left for a person, and the summary line.
    """

    template_fields: Sequence[str] = (*StreamrepOperator.template_fields, "folder", "destination")

    def __init__(self, *, folder: str, destination: str, **kwargs: Any):
        super().__init__(**kwargs)
        self.folder = folder
        self.destination = destination

    def run(self, admin: StreamAdmin, context: Context) -> dict[str, Any]:
        done = import_stream(admin, self.folder, self.destination)
        self.log.info("importstream -src %s -dst %s: %s", self.folder, self.destination, done.summary())
        return done.to_dict()


class ReplicaLinksOperator(StreamrepOperator):
    """Every replica link of the streams on ``cluster``: each stream there and each replica its
    ``replica list`` names (on any cluster), as ``{"source", "destination"}`` kwargs for a
    ``StreamDiffOperator`` mapped over them (``expand_kwargs``). A failed-over link is left out: its
    replica was promoted and takes writes of its own, so it is no longer a copy of the source.

    :param cluster: the source cluster (default: every cluster the hook knows). (templated)
    :return: (XCom) the links, by source then replica path.
    """

    template_fields: Sequence[str] = (*StreamrepOperator.template_fields, "cluster")

    def __init__(self, *, cluster: str | None = None, **kwargs: Any):
        super().__init__(**kwargs)
        self.cluster = cluster

    def run(self, admin: StreamAdmin, context: Context) -> list[dict[str, str]]:
        names = [self.cluster] if self.cluster else known_clusters(admin)
        links = []
        for name in names:
            for entry in admin.list_streams(name):  # NotFound for an unknown cluster
                source = StreamPath(name, entry.path)
                for link in entry.replicas:
                    if link.state is rules.ReplicaState.FAILED_OVER:
                        self.log.info("%s -> %s: failed over, not verified", source, link.path)
                        continue
                    links.append({"source": str(source), "destination": str(admin.path(link.path))})
        links.sort(key=lambda found: (found["source"], found["destination"]))
        log_rows(self.log, f"replica links of {', '.join(names) or 'no cluster'}", links, ("source", "destination"))
        return links


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


# -- failover and failback (replication/failover.py) ---------------------------------------------
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
