"""Operators for replica and upstream links: ``stream replica add|list|resume|pause|edit|remove``,
``stream upstream add|list``, and autosetup's precondition.

Each is safe to retry. A retry finds the state it wanted and succeeds: ``replica add`` when the
same replica stream (by UUID) is registered with the same settings, ``upstream add`` when the same
upstream stream (by UUID) is registered, ``replica pause|resume`` when already paused or resumed,
``replica remove`` when the replica is no longer registered.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from streamrep.airflow import rows as presented
from streamrep.airflow.operators.base import NetworkOptionsMixin, StreamrepOperator, is_retry, log_rows
from streamrep.airflow.params import as_bool
from streamrep.client.admin import StreamAdmin
from streamrep.errors import InvalidArgument, NotFound
from streamrep.model import replication as rules
from streamrep.model.paths import StreamPath
from streamrep.replication.setup import begin_autosetup, ensure_replica, ensure_upstream
from streamrep.replication.status import replica_status

if TYPE_CHECKING:
    from airflow.sdk import Context

UPSTREAM_COLUMNS = ("cluster", "stream", "idx", "uuid")  # the ``stream upstream list`` fields


class _ReplicaLinkOperator(StreamrepOperator):
    """An operator on the replica link from ``path`` to ``replica``.

    :param path: the source stream. (templated)
    :param replica: the replica stream. (templated)
    """

    template_fields: Sequence[str] = (*StreamrepOperator.template_fields, "path", "replica")

    def __init__(self, *, path: str, replica: str, **kwargs: Any):
        super().__init__(**kwargs)
        self.path = path
        self.replica = replica


class _UpstreamLinkOperator(StreamrepOperator):
    """An operator on the upstream link of ``path`` from ``upstream``.

    :param path: the replica stream. (templated)
    :param upstream: the source stream it accepts updates from. (templated)
    """

    template_fields: Sequence[str] = (*StreamrepOperator.template_fields, "path", "upstream")

    def __init__(self, *, path: str, upstream: str, **kwargs: Any):
        super().__init__(**kwargs)
        self.path = path
        self.upstream = upstream


class ReplicaAddOperator(NetworkOptionsMixin, _ReplicaLinkOperator):
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
    :param throttle: and ``networkencryption``, ``networkcompression``, ``maxbytespersec``: the
        link's network options (``NetworkOptionsMixin``). (templated)
    :return: (XCom) the replica link: ``path``, ``paused``, ``synchronous``, ``state``...
    """

    template_fields: Sequence[str] = (
        *_ReplicaLinkOperator.template_fields,
        "paused",
        "synchronous",
        *NetworkOptionsMixin.template_fields,
    )

    def __init__(self, *, paused: Any = False, synchronous: Any = False, **kwargs: Any):
        super().__init__(**kwargs)
        self.paused = paused
        self.synchronous = synchronous

    def run(self, admin: StreamAdmin, context: Context) -> dict[str, Any]:
        src, dst = admin.path(self.path), admin.path(self.replica)
        paused, synchronous = as_bool(self.paused), as_bool(self.synchronous)
        link, added = ensure_replica(admin, src, dst, paused=paused, synchronous=synchronous, **self.network_options())
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


class ReplicaVerifyOperator(_ReplicaLinkOperator):
    """``maprcli stream replica list -path <source>``, checking that ``replica`` is listed.

    :param path: the source stream. (templated)
    :param replica: the replica expected in the list. (templated)
    :return: (XCom) the ``replica list`` rows, with state, pending messages and lag.
    """

    def run(self, admin: StreamAdmin, context: Context) -> list[dict[str, Any]]:
        src, dst = admin.path(self.path), admin.path(self.replica)
        rows = replica_list(
            admin,
            src,
            self.log,
            ("replicaPath", "paused", "synchronous", "replicaState", "pendingMessages", "replicationLagMillis"),
        )
        rules.require_link(admin.entry(src).replicas, dst, src, "replica")
        self.log.info("verified: %s is a replica of %s", dst, src)
        return rows


class UpstreamAddOperator(_UpstreamLinkOperator):
    """``maprcli stream upstream add -path <replica> -upstream <source>``: the replica's side of
    the two-way agreement. Succeeds on a retry (or a rerun of the DAG) when the link is already
    there to the same upstream stream, by UUID (``setup.ensure_upstream``); fails if it names a
    stream deleted and recreated at ``upstream``.

    :param path: the replica stream. (templated)
    :param upstream: the source stream it accepts updates from. (templated)
    :return: (XCom) the ``upstream list`` rows of the replica: ``cluster``, ``stream``, ``idx``, ``uuid``.
    """

    def run(self, admin: StreamAdmin, context: Context) -> list[dict[str, Any]]:
        dst, src = admin.path(self.path), admin.path(self.upstream)
        _, added = ensure_upstream(admin, dst, src)
        if added:
            self.log.info("stream upstream add -path %s -upstream %s: registered", dst, src)
        else:
            self.log.info("%s is already an upstream of %s (the same stream): nothing to do", src, dst)
        return upstream_list(admin, dst, self.log)


class UpstreamVerifyOperator(_UpstreamLinkOperator):
    """``maprcli stream upstream list -path <replica>``, checking that ``upstream`` is listed.

    :param path: the replica stream. (templated)
    :param upstream: the upstream expected in the list. (templated)
    :return: (XCom) the ``upstream list`` rows: ``cluster``, ``stream``, ``idx``, ``uuid``.
    """

    def run(self, admin: StreamAdmin, context: Context) -> list[dict[str, Any]]:
        dst, src = admin.path(self.path), admin.path(self.upstream)
        rows = upstream_list(admin, dst, self.log)
        rules.require_link(admin.entry(dst).upstreams, src, dst, "upstream")
        self.log.info("verified: %s is an upstream of %s", src, dst)
        return rows


class _ReplicaChangeOperator(_ReplicaLinkOperator):
    """A change to one replica link of a source stream; returns the ``replica list`` after it.

    :param path: the source stream. (templated)
    :param replica: the replica stream. (templated)
    """

    def change(self, admin: StreamAdmin, src: str, dst: str, context: Context) -> None:
        raise NotImplementedError

    def run(self, admin: StreamAdmin, context: Context) -> list[dict[str, Any]]:
        src, dst = admin.path(self.path), admin.path(self.replica)
        self.change(admin, str(src), str(dst), context)
        return replica_list(
            admin, src, self.log, ("replicaPath", "paused", "replicaState", "pendingMessages", "replicationLagMillis")
        )


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


class ReplicaEditOperator(NetworkOptionsMixin, _ReplicaChangeOperator):
    """``maprcli stream replica edit -path <source> -replica <replica> [-newreplica]
    [-synchronous] [-throttle] [-networkencryption] [-networkcompression] [-maxbytespersec]``:
    change a replica's options in place; only those given (not None) change, so a retry finds them set.

    :param path: the source stream. (templated)
    :param replica: the replica stream, as the source lists it now. (templated)
    :param newreplica: the replica's new path after a rename or move; it must be the same stream
        (its UUID). A retry after it moved is given the new path as ``replica``. (templated)
    :param synchronous: true or false. (templated)
    :param throttle: and the other network options (``NetworkOptionsMixin``). (templated)
    :return: (XCom) the ``replica list`` rows after the change.
    """

    template_fields: Sequence[str] = (
        *_ReplicaChangeOperator.template_fields,
        "newreplica",
        "synchronous",
        *NetworkOptionsMixin.template_fields,
    )

    def __init__(
        self,
        *,
        newreplica: str | None = None,
        synchronous: Any = None,
        **kwargs: Any,
    ):
        super().__init__(**kwargs)
        self.newreplica = newreplica
        self.synchronous = synchronous

    def change(self, admin: StreamAdmin, src: str, dst: str, context: Context) -> None:
        link = admin.edit_replica(src, dst, self.newreplica or None, self.synchronous, **self.network_options())
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
        return replica_list(
            admin,
            src,
            self.log,
            ("replicaPath", "paused", "replicaState", "isUptodate", "pendingMessages", "replicationLagMillis"),
        )


class AutosetupCheckOperator(NetworkOptionsMixin, _ReplicaLinkOperator):
    """The precondition of ``maprcli stream replica autosetup``: the network options are valid
    and can be given, the source exists, the caller may administer and copy it, and the replica
    stream does not exist yet (autosetup creates it), or an unfinished autosetup of this source
    created it. Then it creates the replica marked as this autosetup's
    (``setup.begin_autosetup``), so a rerun of a failed run completes it.

    :param path: the source stream. (templated)
    :param replica: the replica stream to be created. (templated)
    :param throttle: and the other network options (``NetworkOptionsMixin``): checked here,
        before the replica is created. (templated)
    :return: (XCom) ``stream info`` of the source.
    """

    template_fields: Sequence[str] = (*_ReplicaLinkOperator.template_fields, *NetworkOptionsMixin.template_fields)

    def run(self, admin: StreamAdmin, context: Context) -> dict[str, Any]:
        src, dst = begin_autosetup(admin, self.path, self.replica, **self.network_options())
        self.log.info("autosetup of %s from %s can go on: the replica stream is this autosetup's", dst, src)
        return presented.stream_info_row(admin.stream_info(str(src)))


def replica_list(admin: StreamAdmin, src: StreamPath, log: Any, columns: Sequence[str]) -> list[dict[str, Any]]:
    """``stream replica list -path <src>``: its rows, logged with ``columns`` as the CLI prints them."""
    rows = presented.replica_status_rows(replica_status(admin, str(src)))
    log_rows(log, f"stream replica list -path {src}", rows, columns)
    return rows


def upstream_list(admin: StreamAdmin, dst: StreamPath, log: Any) -> list[dict[str, Any]]:
    """``stream upstream list -path <dst>``: its rows, logged as the CLI prints them."""
    rows = [presented.upstream_row(row) for row in admin.list_upstreams(str(dst))]
    log_rows(log, f"stream upstream list -path {dst}", rows, UPSTREAM_COLUMNS)
    return rows
