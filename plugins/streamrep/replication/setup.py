"""``stream replica autosetup``: the whole setup as one command, in the seeds' order; and its
steps safe to retry one by one (``ensure_stream``, ``ensure_replica``, ``ensure_upstream``), as the
Airflow setup DAGs run them.

An autosetup that fails part-way (an error, a lost cluster, a ``kill -9``) is completed by
running the same command again; it is never rolled back. The replica it creates carries the
source's UUID (``autosetup_from``) from the moment it exists until the last step (resuming the
replica) clears it. A rerun accepts a replica with that mark and performs only the steps still
missing: each step finds its work done or does it, and the copy resumes from the positions it
recorded, so nothing is copied twice. A replica without the mark (a finished autosetup, or a
stream made any other way) is refused, as the seeds say.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from typing import Any

from streamrep.client.admin import StreamAdmin
from streamrep.errors import AlreadyExists, NotFound
from streamrep.model import replication as rules
from streamrep.model.catalog import StreamEntry
from streamrep.model.paths import StreamPath
from streamrep.model.replication import ReplicaLink, UpstreamLink
from streamrep.model.stream import StreamMeta
from streamrep.replication.copy import CopySummary, copy_stream

Copier = Callable[[StreamAdmin, str, str], CopySummary]


@dataclass(frozen=True)
class AutosetupResult:
    """What ``autosetup`` did: the replica link's options, the ``steps`` taken, in order, and
    the messages the copy step ``copied``."""

    path: StreamPath
    replica: StreamPath
    multimaster: bool
    synchronous: bool
    throttle: bool
    networkencryption: bool
    networkcompression: str
    maxbytespersec: int
    steps: tuple[str, ...]
    copied: int


def check_autosetup(admin: StreamAdmin, path: str, replica: str, **network: Any) -> tuple[StreamPath, StreamPath]:
    """The precondition of autosetup, checked before anything is created: the network options
    are valid and can be given (``StreamAdmin.network_options``: encryption needs TLS to both
    clusters, which covers the multi-master reverse link too), and the caller may
    administer and copy the source (so it may administer the replica it creates with the
    source's ACEs, which lets its copy step write into it). The replica stream must not exist yet (the seeds:
    "If the replica already exists, the command terminates with an error message"), unless an
    unfinished autosetup of this same source created it: then this run completes it.

    :param network: ``throttle``, ``networkencryption``, ``networkcompression``, ``maxbytespersec``
        (None: defaults).
    """
    src, dst = admin.path(path), admin.path(replica)
    admin.network_options(src, dst, **network)
    src_entry = admin.entry(src)
    admin.require(src_entry, src, "adminperm", "copyperm")
    try:
        dst_entry = admin.entry(dst)
    except NotFound:
        return src, dst
    if dst_entry.autosetup_from is None or dst_entry.autosetup_from != src_entry.uuid:
        raise AlreadyExists(
            f"replica stream {dst} already exists; autosetup creates it (use the manual setup steps instead)"
        )
    return src, dst


def begin_autosetup(admin: StreamAdmin, path: str, replica: str, **network: Any) -> tuple[StreamPath, StreamPath]:
    """Check the precondition and create the replica marked as this autosetup's (or find it
    from an earlier, unfinished run). Safe to retry.

    :param network: the replica's network options, checked first (``check_autosetup``).
    """
    src, dst = check_autosetup(admin, path, replica, **network)
    source_uuid = admin.entry(src).uuid
    try:
        admin.create_stream(str(dst), copymetafrom=str(src), autosetup_from=source_uuid)
    except AlreadyExists:
        if admin.entry(dst).autosetup_from != source_uuid:  # created by someone else meanwhile
            raise
    return src, dst


def ensure_stream(
    admin: StreamAdmin, path: str | StreamPath, copymetafrom: str | None = None, **settings: Any
) -> tuple[StreamPath, bool]:
    """``stream create [-copymetafrom]``, or the stream an earlier run (or try) created: safe to
    retry. An existing stream is accepted only if it has the metadata it would have been created
    with. (The CLI's ``stream create`` refuses any existing stream, as maprcli's does.)

    :param path: the stream to create.
    :param copymetafrom: a stream whose metadata (settings and ACEs) the new stream copies.
    :param settings: stream settings; with ``copymetafrom`` they override the copied ones.
    :return: the stream's path, and whether this call created it.
    :raises AlreadyExists: the stream exists with other metadata (each difference named).
    """
    sp = admin.path(path)
    try:
        admin.create_stream(str(sp), copymetafrom=copymetafrom, **settings)
        return sp, True
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
            raise AlreadyExists(f"stream {sp} already exists with other metadata: {'; '.join(differences)}") from exists
    return sp, False


def ensure_replica(
    admin: StreamAdmin,
    path: str | StreamPath,
    replica: str | StreamPath,
    paused: bool = True,
    synchronous: bool = False,
    **network: Any,
) -> tuple[ReplicaLink, bool]:
    """``stream replica add``, or the link an earlier run (or try) added: safe to retry.

    An existing link is accepted only if it names the stream now at ``replica`` (its UUID) and
    has the same ``synchronous`` setting and network options. A link asked for paused may have
    been resumed since (a later step of the earlier run resumes it); one asked for running must
    be running.

    :param path: the source stream.
    :param replica: the replica stream; it must exist.
    :param paused: register it paused, so replication waits for ``replica resume``.
    :param synchronous: synchronous replication.
    :param network: ``throttle``, ``networkencryption``, ``networkcompression``, ``maxbytespersec``
        (None: defaults).
    :return: the link, and whether this call added it.
    :raises AlreadyExists: the link names a stream since deleted and recreated at ``replica``,
        or has other settings.
    """
    src, dst = admin.path(path), admin.path(replica)
    options = admin.network_options(src, dst, **network)
    try:
        added = admin.add_replica(
            str(src),
            str(dst),
            paused=paused,
            synchronous=synchronous,
            throttle=options.throttle,
            networkencryption=options.networkencryption,
            networkcompression=options.networkcompression,
            maxbytespersec=options.maxbytespersec,
        )
        return added, True
    except AlreadyExists:
        link = rules.find_link(admin.entry(src).replicas, dst)
        if link is None:
            raise
    _require_current(link, admin.entry(dst), f"{dst} is already a replica of {src}", f"the replica from {src}")
    wanted = {"synchronous": synchronous, **asdict(options)}
    have = {name: getattr(link, name) for name in wanted}
    if have != wanted or (link.paused and not paused):
        # paused and synchronous always, the network options where they differ
        names = ["synchronous", *(name for name in asdict(options) if have[name] != wanted[name])]

        def shown(was_paused: bool, values: dict[str, Any]) -> str:
            return " ".join(
                [f"paused={str(was_paused).lower()}", *(f"{name}={str(values[name]).lower()}" for name in names)]
            )

        raise AlreadyExists(
            f"{dst} is already a replica of {src} with {shown(link.paused, have)}, not {shown(paused, wanted)}"
        )
    return link, False


def ensure_upstream(
    admin: StreamAdmin, path: str | StreamPath, upstream: str | StreamPath
) -> tuple[UpstreamLink, bool]:
    """``stream upstream add``, or the link an earlier run (or try) added: safe to retry.

    An existing link is accepted only if it names the stream now at ``upstream`` (its UUID).

    :param path: the replica stream.
    :param upstream: the source stream it accepts updates from.
    :return: the link, and whether this call added it.
    :raises AlreadyExists: the link names a stream since deleted and recreated at ``upstream``.
    """
    dst, src = admin.path(path), admin.path(upstream)
    try:
        return admin.add_upstream(str(dst), str(src)), True
    except AlreadyExists:
        link = rules.find_link(admin.entry(dst).upstreams, src)
        if link is None:
            raise
    _require_current(link, admin.entry(src), f"{src} is already an upstream of {dst}", f"the upstream from {dst}")
    return link, False


def _require_current(link: ReplicaLink | UpstreamLink, entry: StreamEntry, already: str, remove: str) -> None:
    """Refuse an existing ``link`` that names an earlier stream than ``entry``, the one now at its
    path (deleted and recreated since): ``already`` says what the link is, ``remove`` what to remove."""
    if not rules.binds(link, entry.uuid, entry.created):
        raise AlreadyExists(
            f"{already}, but of an earlier stream at that path, not stream {entry.uuid} now there: "
            f"it was deleted and recreated; remove {remove} and add it again"
        )


def autosetup(
    admin: StreamAdmin,
    path: str,
    replica: str,
    multimaster: bool = False,
    synchronous: bool = False,
    copier: Copier = copy_stream,
    throttle: Any = None,
    networkencryption: Any = None,
    networkcompression: Any = None,
    maxbytespersec: Any = None,
) -> AutosetupResult:
    """Create the replica, register it paused, agree upstream, copy, (reverse link for
    multi-master), resume. If it fails part-way, the same call again completes it (see the
    module's docstring).

    :param copier: runs the copy (in-process by default; the CLI and Airflow pass a Spark one).
    :param throttle: MapR's ``-throttle``, and ``networkencryption``, ``networkcompression``
        its other network options, and streamrep's ``maxbytespersec`` (``StreamAdmin.add_replica``),
        for both links of multi-master.
        Checked before anything is created.
    """
    network = {
        "throttle": throttle,
        "networkencryption": networkencryption,
        "networkcompression": networkcompression,
        "maxbytespersec": maxbytespersec,
    }
    src, dst = begin_autosetup(admin, path, replica, **network)
    steps = ["create"]
    link, _ = ensure_replica(admin, src, dst, synchronous=synchronous, **network)
    steps.append("replica add -paused true")
    ensure_upstream(admin, dst, src)
    steps.append("upstream add")
    copied = copier(admin, str(src), str(dst))
    steps.append("copystream")
    if multimaster:
        ensure_replica(admin, dst, src, synchronous=synchronous, **network)
        ensure_upstream(admin, src, dst)
        steps.append("reverse replica add + upstream add")
        admin.resume_replica(str(dst), str(src))
    admin.resume_replica(str(src), str(dst))  # last: it finishes the autosetup
    steps.append("resume")
    return AutosetupResult(
        path=src,
        replica=dst,
        multimaster=multimaster,
        synchronous=synchronous,
        throttle=link.throttle,
        networkencryption=link.networkencryption,
        networkcompression=link.networkcompression,
        maxbytespersec=link.maxbytespersec,
        steps=tuple(steps),
        copied=copied.messages,
    )
