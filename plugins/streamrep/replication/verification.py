"""Each replica link's last verification: what the latest ``diffstreams`` (or
``diffstreamswithcrc``) of a source and its replica found, when, how and by whom. The scheduled
``stream_replica_verify`` DAG records it (``record``); ``stream replica list`` and the Stream
replication page show it (``verifications``, through ``status.replica_status``); ``last`` reads a
replica's.

Where it is kept: in the catalog of the replica's cluster, beside the link's lag history and alert
thresholds (``lag.py``): one ``replica-verification`` document per link, keyed by the two stream
UUIDs (``lag.flow_key``), so a stream deleted and created again at the same path starts with no
verification. Only the last one is kept (each record replaces it: a clean verification clears a
difference), and ``record`` deletes the documents of replicas that no longer exist in the cluster,
so the documents stay as many as the links.

It is information, not a state of replication: a replica found different keeps replicating, and
its link's ``replicaState`` is unchanged; operators see ``verification: differs`` and the summary.

Who may record: the catalog is written only by a cluster's administrators and its gateway
principal (docs/kafka.md), and a verification is run by the Airflow service identity, which is one
of the two. So recording needs what running the replica's cluster's gateway needs
(``StreamAdmin.require_gateway``: adminperm on the replica's cluster, or being its gateway
principal); anyone who may read the catalog may read it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from streamrep.client.admin import StreamAdmin
from streamrep.client.catalog import now_ms
from streamrep.errors import Conflict, InvalidArgument, NotFound, PermissionDenied
from streamrep.model import replication as rules
from streamrep.model.catalog import STREAM_KIND
from streamrep.replication.lag import flow_key
from streamrep.store.base import Store

VERIFICATION_KIND = "replica-verification"
COMMANDS = ("diffstreams", "diffstreamswithcrc")
ENGINES = ("local", "spark")  # what ran the compare (an ``auto`` choice is recorded as what it chose)
# The counts of a compare's result (``DiffResult.to_dict``, the ``-json`` row), in that row's names.
COUNTS = ("missingInDst", "extraInDst", "changed", "outOfOrder", "duplicated", "lost", "dstBehind", "compared")
# Those that make two streams differ (``DiffResult.same``): the differences, and messages lost to the
# source's retention unacknowledged; behind is in flight, not a difference.
DIFFERENCES = COUNTS[:6]
MAX_SUMMARY = 500  # characters of the summary line kept: the document stays small

SAME, DIFFERS, NEVER = "same", "differs", "never"  # a link's verification, as ``replica list`` shows it


@dataclass(frozen=True)
class Verification:
    """One link's last verification.

    :param at: when it was recorded (ms since the epoch).
    :param same: the compare found no difference (a replica behind its source can be the same).
    :param counts: ``COUNTS``, by name.
    :param summary: the compare's one-line summary.
    :param command: ``diffstreams`` or ``diffstreamswithcrc``.
    :param engine: ``local`` or ``spark``.
    :param by: who ran it.
    """

    source: str
    source_uuid: str
    replica: str
    replica_uuid: str
    at: int
    same: bool
    counts: Mapping[str, int]
    summary: str
    command: str
    engine: str
    by: str

    @property
    def result(self) -> str:
        """``same`` or ``differs``."""
        return SAME if self.same else DIFFERS

    def to_dict(self) -> dict[str, Any]:
        document = {key: getattr(self, name) for name, key in _KEYS.items()}
        return document | {name: self.counts[name] for name in COUNTS}

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> Verification:
        # a count added later: 0 in older records
        return cls(
            **{name: doc[key] for name, key in _KEYS.items()}, counts={name: doc.get(name, 0) for name in COUNTS}
        )


# The document's key of each field but ``counts`` (whose counts are keys of their own, ``COUNTS``).
_KEYS = {
    "source": "source",
    "source_uuid": "sourceUuid",
    "replica": "replica",
    "replica_uuid": "replicaUuid",
    "at": "at",
    "same": "same",
    "summary": "summary",
    "command": "command",
    "engine": "engine",
    "by": "by",
}


def _checked(result: Mapping[str, Any]) -> tuple[bool, dict[str, int], str]:
    """``same``, the counts and the summary of a compare's result, or InvalidArgument naming the field."""
    if not isinstance(result, Mapping):
        raise InvalidArgument(
            f"a verification's result must be a compare's row (a mapping), not {type(result).__name__}"
        )
    for name in ("same", *COUNTS, "summary"):
        if name not in result:
            raise InvalidArgument(f"the compare's result has no {name!r} field: no verification recorded")
    same, summary = result["same"], result["summary"]
    counts = {name: result[name] for name in COUNTS}
    for name, value in counts.items():
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise InvalidArgument(f"the compare's result has {name} {value!r}, not a count: no verification recorded")
    if not isinstance(same, bool) or not isinstance(summary, str):
        raise InvalidArgument("the compare's result needs a true/false 'same' and a 'summary' line")
    if same != (sum(counts[name] for name in DIFFERENCES) == 0):
        raise InvalidArgument(
            f"the compare's result says same={same} with {', '.join(f'{n} {counts[n]}' for n in DIFFERENCES)}: "
            "no verification recorded"
        )
    return same, counts, summary.splitlines()[0][:MAX_SUMMARY] if summary else ""


def record(
    admin: StreamAdmin,
    source: str,
    replica: str,
    result: Mapping[str, Any],
    engine: str,
    by: str | None = None,
    command: str = "diffstreams",
) -> Verification:
    """Record ``result``, a compare of ``source`` with its replica ``replica`` (the row
    ``DiffResult.to_dict`` gives, or the JSON line of the Spark app: the same keys), as the link's
    last verification, replacing the one before. Safe to repeat.

    :param engine: ``local`` or ``spark``: what ran the compare.
    :param by: who ran it (None: the caller on the replica's cluster).
    :param command: ``diffstreams`` or ``diffstreamswithcrc``.
    :raises NotFound: ``source`` does not list ``replica``, or either stream does not exist.
    :raises Conflict: the link names another stream now (one was deleted and created again), or
        the result names other streams than these two (by path or, when it has them, by UUID).
    :raises PermissionDenied: the caller administers neither the replica's cluster nor is its
        gateway principal.
    """
    if command not in COMMANDS:
        raise InvalidArgument(f"a verification's command is {' or '.join(COMMANDS)}, not {command!r}")
    if engine not in ENGINES:
        raise InvalidArgument(f"a verification's engine is {' or '.join(ENGINES)}, not {engine!r}")
    same, counts, summary = _checked(result)
    src, dst = admin.path(source), admin.path(replica)
    for side, path in (("src", src), ("dst", dst)):
        named = result.get(side)
        if named is not None and admin.path(str(named)) != path:
            raise Conflict(f"the compare's result is for {side} {named}, not {path}: no verification recorded")
    src_entry, dst_entry = admin.entry(src), admin.entry(dst)
    found = rules.agreement(src, src_entry, dst, dst_entry)
    if found.link is None:
        raise NotFound(f"{dst} is not a replica of {src}: only a replica link's verification is recorded")
    if found.broken:
        raise Conflict(f"no verification recorded: {found.reason}")
    for side, path, entry in (("src", src, src_entry), ("dst", dst, dst_entry)):
        compared = result.get(f"{side}Uuid")  # identity is the UUID: a stream made again since is another one
        if compared is not None and compared != entry.uuid:
            raise Conflict(
                f"the compare's result is for stream {compared} at {path}, which is now {entry.uuid}: "
                "no verification recorded"
            )
    try:
        admin.require_gateway(dst.cluster)
    except PermissionDenied as err:
        raise PermissionDenied(
            f"recording the verification of replica {dst} needs adminperm on cluster {dst.cluster} "
            f"or its gateway principal: {err}"
        ) from None
    done = Verification(
        source=str(src),
        source_uuid=src_entry.uuid,
        replica=str(dst),
        replica_uuid=dst_entry.uuid,
        at=now_ms(),
        same=same,
        counts=counts,
        summary=summary,
        command=command,
        engine=engine,
        by=by or admin.caller(dst.cluster).user,
    )
    store = admin.store(dst)
    store.catalog_update(VERIFICATION_KIND, flow_key(src_entry.uuid, dst_entry.uuid), lambda _: done.to_dict())
    _prune(store)
    return done


def _prune(store: Store) -> None:
    """Delete the verifications of replicas that no longer exist in ``store``'s cluster."""
    alive = {doc["uuid"] for doc in store.catalog_list(STREAM_KIND).values()}
    for key in store.catalog_list(VERIFICATION_KIND):
        if key.rpartition("/")[2] not in alive:
            store.catalog_update(VERIFICATION_KIND, key, lambda _: None)


def verifications(store: Store) -> dict[tuple[str, str], Verification]:
    """Every verification kept in one cluster's catalog (``store``), by (source UUID, replica UUID):
    one read for all of its links. A document that is not a verification is left out."""
    found = {}
    for doc in store.catalog_list(VERIFICATION_KIND).values():
        try:
            done = Verification.from_dict(doc)
        except (KeyError, TypeError):
            continue
        found[(done.source_uuid, done.replica_uuid)] = done
    return found


def last(admin: StreamAdmin, replica: str) -> dict[str, Verification]:
    """The last verification of each link into ``replica``, by source stream UUID (none: never
    verified). Only this stream's: one created before it at the same path left it nothing."""
    dst = admin.path(replica)
    uuid = admin.entry(dst).uuid
    return {src: done for (src, dst_uuid), done in verifications(admin.store(dst)).items() if dst_uuid == uuid}
