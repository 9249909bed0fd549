"""The replica/upstream registry rules of the seeds, in one place.

- A source stream lists its replicas; a replica lists its upstreams. Data flows only
  while both hold (the two-way agreement) and the replica is not paused.
- At most 64 replicas per stream and 64 upstreams per replica.
- A stream is never its own replica or upstream (compared by UUID: one stream reached through
  two cluster names is still one stream), and a link is registered once.
- A link binds a stream identity, not a path: the source's link records the replica's UUID and
  the replica's link records the upstream's UUID. A stream created later at the same path is
  not the agreed stream, and nothing flows to or from it.
- Two upstreams of one replica must not share a topic name unless they are related (the fan-in
  topic rule, ``model/fanin.py``): ``check_upstream_add`` holds it at ``stream upstream add``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, fields, replace
from enum import Enum
from typing import Any, TypeVar

from streamrep.errors import AlreadyExists, Conflict, InvalidArgument, LimitExceeded, NotFound
from streamrep.model.fanin import Lineage, related
from streamrep.model.network import LEGACY_NETWORK_COMPRESSION, NO_BYTE_LIMIT
from streamrep.model.paths import StreamPath

MAX_REPLICAS = 64
MAX_UPSTREAMS = 64
GATEWAY_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,252}(:[0-9]{1,5})?$")


class ReplicaState(str, Enum):
    """Replica states, in MapR's names (``maprcli stream replica list``) where MapR has one."""

    # Registered, but the replica does not list the source as an upstream yet.
    WAITING_FOR_UPSTREAM = "REPLICA_STATE_WAITING_FOR_UPSTREAM"
    # Agreed on both sides, but no gateway has applied anything to it yet.
    WAITING_FOR_GATEWAY = "REPLICA_STATE_WAITING_FOR_GATEWAY"
    COPY_IN_PROGRESS = "REPLICA_STATE_COPY_IN_PROGRESS"
    REPLICATING = "REPLICA_STATE_REPLICATING"
    # A synchronous replica that missed its deadline is served asynchronously until it catches up.
    SYNC_FALLBACK = "REPLICA_STATE_SYNC_FELL_BACK_TO_ASYNC"
    # Paused by ``stream replica pause``. MapR documents no state for this (it shows ``paused``
    # beside the state); streamrep names it so the state never says REPLICATING while nothing flows.
    PAUSED = "REPLICA_STATE_PAUSED"
    UNEXPECTED = "REPLICA_STATE_UNEXPECTED"
    # streamrep: the replica was promoted by ``stream replica failover``; nothing flows into it
    # from this source until ``stream replica failback`` restores the link.
    FAILED_OVER = "REPLICA_STATE_FAILED_OVER"


@dataclass(frozen=True)
class ReplicaLink:
    """One entry of a source stream's replica list."""

    path: str
    paused: bool = False
    synchronous: bool = False
    state: ReplicaState = ReplicaState.WAITING_FOR_GATEWAY
    error: str | None = None
    added: int = 0
    uuid: str | None = None  # the replica stream agreed to; None in links written before UUIDs (see binds)
    # MapR's network options (``model/network.py``). The defaults are what a link written before
    # they existed had: no throttle, no encryption check, uncompressed writes. ``replica add``
    # sets all three (its compression default is lz4). ``maxbytespersec`` is streamrep's (0: no limit).
    throttle: bool = False
    networkencryption: bool = False
    networkcompression: str = LEGACY_NETWORK_COMPRESSION
    maxbytespersec: int = NO_BYTE_LIMIT

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ReplicaLink:
        known = _known_fields(cls, data)
        if "state" in known:
            known["state"] = ReplicaState(known["state"])
        return cls(**known)

    def with_changes(self, **changes: Any) -> ReplicaLink:
        return replace(self, **changes)


@dataclass(frozen=True)
class UpstreamLink:
    """One entry of a replica's upstream list."""

    path: str
    added: int = 0
    uuid: str | None = None  # the upstream stream agreed to; None in links written before UUIDs (see binds)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> UpstreamLink:
        return cls(**_known_fields(cls, data))


_Link = TypeVar("_Link", ReplicaLink, UpstreamLink)


def _known_fields(cls: type, data: Mapping[str, Any]) -> dict[str, Any]:
    # Catalog documents may come from older or newer releases: unknown keys are ignored and
    # missing ones take their defaults.
    names = {f.name for f in fields(cls)}
    return {k: v for k, v in data.items() if k in names}


def binds(link: ReplicaLink | UpstreamLink, stream_uuid: str, stream_created: int) -> bool:
    """Whether ``link`` names the stream with ``stream_uuid`` (created at ``stream_created``, ms).

    A link without a UUID was written before links recorded one. It binds the stream that
    existed at its path when the link was added: a stream created after the link is a newcomer
    at an old path (the agreed stream was deleted), so it is not bound. Links added from now on
    always carry the UUID.
    """
    if link.uuid is None:
        return stream_created <= link.added
    return link.uuid == stream_uuid


def _agreed_uuid(link: ReplicaLink | UpstreamLink) -> str:
    return link.uuid if link.uuid is not None else "(the one at that path when the link was added)"


@dataclass(frozen=True)
class Agreement:
    """Whether data may flow from a source stream to a replica stream, and if not, why.

    :param link: the source's link to the replica (None if the source does not list it).
    :param reason: why it does not flow (None when it does).
    :param broken: the reason is an identity mismatch (a stream recreated at a linked path):
        an error to report, unlike a side that has simply not agreed yet.
    """

    link: ReplicaLink | None
    reason: str | None = None
    broken: bool = False

    @property
    def agreed(self) -> bool:
        return self.reason is None


def agreement(source: StreamPath, source_entry: Any, replica: StreamPath, replica_entry: Any) -> Agreement:
    """The two-way agreement between two streams, by identity: the source lists the replica
    and the replica lists the source as an upstream, and each link names the stream now at its
    path (its UUID). The entries are catalog entries (``uuid``, ``created``, ``replicas``,
    ``upstreams``)."""
    link = find_link(source_entry.replicas, replica)
    if link is None:
        return Agreement(None, f"{source} does not list {replica} as a replica")
    if not binds(link, replica_entry.uuid, replica_entry.created):
        return _recreated(link, f"replica {replica}", replica_entry.uuid, link, f"remove it from {source}")
    upstream = find_link(replica_entry.upstreams, source)
    if upstream is None:
        return Agreement(link, f"{replica} does not list {source} as an upstream")
    if not binds(upstream, source_entry.uuid, source_entry.created):
        return _recreated(
            link, f"upstream {source}", source_entry.uuid, upstream, f"remove the upstream from {replica}"
        )
    return Agreement(link)


def _recreated(link: ReplicaLink, stream: str, uuid: str, bound: ReplicaLink | UpstreamLink, remedy: str) -> Agreement:
    """No agreement: ``stream`` (its ``uuid`` now) is not the one ``bound`` agreed to, an error."""
    return Agreement(
        link,
        f"{stream} is now stream {uuid}, not the agreed stream {_agreed_uuid(bound)}: "
        f"it was deleted and recreated; {remedy} and add it again",
        broken=True,
    )


def position_key(source_uuid: str, topic: str, partition: int) -> str:
    """The replica's mark of the next source offset to apply from one source partition."""
    return f"p|{source_uuid}|{topic}|{partition}"


def origin_key(origin_uuid: str, topic: str, partition: int) -> str:
    """The replica's mark of the next offset it needs from a message's stream of origin."""
    return f"o|{origin_uuid}|{topic}|{partition}"


def loss_key(source_uuid: str, topic: str, partition: int, first: int) -> str:
    """The replica's record of source offsets ``first`` up to (not including) the mark's value,
    removed by the source's retention before they were replicated; kept until acknowledged."""
    return f"l|{source_uuid}|{topic}|{partition}|{first}"


def acknowledged_key(source_uuid: str, topic: str, partition: int, first: int) -> str:
    """The replica's record that a loss (``loss_key``, same fields and value) was acknowledged by
    an admin: kept, so that diffstreams can tell a known, accepted loss from one nobody saw."""
    return f"a|{source_uuid}|{topic}|{partition}|{first}"


def stop_key(source_uuid: str, topic: str, partition: int) -> str:
    """The replica's mark that replication from one source partition was stopped by a failover
    (value: when, ms). While it is there no apply from that partition commits: an apply expects
    it absent in its own transaction, so a batch in flight either committed before the stop or
    is refused. Failback removes it when the flow is restored."""
    return f"{stop_prefix(source_uuid)}{topic}|{partition}"


def own_writes_key(source_uuid: str, topic: str, partition: int) -> str:
    """The replica's mark of where its own writes end (the offset after them) in one partition that
    nothing was applied to from ``source_uuid``: written by a failback, for the messages produced
    while the replica was promoted. The planted-topic check (``replication/held.py``) takes only
    what comes after it for messages not replicated."""
    return f"w|{source_uuid}|{topic}|{partition}"


def stop_prefix(source_uuid: str) -> str:
    """What every stop mark of one source's partitions starts with (``stop_key``)."""
    return f"s|{source_uuid}|"


def mark_partition(key: str) -> tuple[str, int]:
    """``(topic, partition)`` of the replica partition a position, origin, loss, stop or own-writes
    mark belongs to: the mark is written with that partition's messages."""
    parts = key.split("|")
    return parts[2], int(parts[3])


def retention_loss(position: int | None, source_start: int) -> tuple[int, int] | None:
    """Source offsets ``[first, end)`` lost to the source's retention: those between a replica's
    stored position and the oldest offset the source still holds. A replica with no position yet
    (never replicated from this source) has lost nothing: it starts from what the source holds."""
    if position is None or position >= source_start:
        return None
    return position, source_start


def parse_loss_key(key: str, prefix: str = "l|") -> tuple[str, str, int, int] | None:
    """``(source uuid, topic, partition, first lost offset)`` of a loss mark (``prefix`` "a|": of an
    acknowledged loss), or None for another mark."""
    if not key.startswith(prefix):
        return None
    source_uuid, rest = key[2:].split("|", 1)
    topic, partition, first = rest.rsplit("|", 2)
    return source_uuid, topic, int(partition), int(first)


def recorded_losses(marks: Mapping[str, int], source_uuid: str, prefix: str = "l|") -> dict[str, int]:
    """A replica's loss marks from one source (key -> end); ``prefix`` "a|": its acknowledged ones."""
    return {
        key: end
        for key, end in marks.items()
        if (parsed := parse_loss_key(key, prefix)) is not None and parsed[0] == source_uuid
    }


def unrecorded_losses(
    marks: Mapping[str, int], source_uuid: str, starts: Mapping[tuple[str, int], int]
) -> list[tuple[str, int, int, int]]:
    """``(topic, partition, first, end)`` of the losses a gateway has yet to record: the replica's
    position (in ``marks``) is below the source partition's first offset (``starts``)."""
    found = []
    for (topic, partition), start in sorted(starts.items()):
        lost = retention_loss(marks.get(position_key(source_uuid, topic, partition)), start)
        if lost is not None:
            found.append((topic, partition, *lost))
    return found


def find_link(links: Iterable[_Link], path: StreamPath) -> _Link | None:
    """The link to ``path`` in ``links``, or None."""
    wanted = str(path)
    return next((link for link in links if link.path == wanted), None)


def check_replica_add(
    source: StreamPath,
    replica: StreamPath,
    replicas: list[ReplicaLink],
    source_uuid: str | None = None,
    replica_uuid: str | None = None,
) -> None:
    """Refuse a replica registration that breaks a rule.

    :param source_uuid: the source stream's UUID, and ``replica_uuid`` the replica's: equal
        UUIDs are one stream, even under two cluster names.
    """
    _check_new_link(source, source_uuid, replica, replica_uuid, replicas, "replica", MAX_REPLICAS)


def _check_new_link(
    owner: StreamPath,
    owner_uuid: str | None,
    new: StreamPath,
    new_uuid: str | None,
    links: Sequence[_Link],
    role: str,
    limit: int,
) -> None:
    """Refuse ``new`` as ``owner``'s ``role`` ("replica" or "upstream"): itself (by path or UUID),
    listed already, or one over ``limit``."""
    a_role = f"{'an' if role[0] in 'aeiou' else 'a'} {role}"
    if owner == new:
        raise InvalidArgument(f"stream {owner} cannot be {a_role} of itself")
    check_distinct(owner, owner_uuid, new, new_uuid, f"{a_role} of")
    if find_link(links, new):
        raise AlreadyExists(f"{new} is already {a_role} of {owner}")
    if len(links) >= limit:
        raise LimitExceeded(f"stream {owner} already has {len(links)} {role}s; the maximum is {limit}")


def check_new_replica_path(
    source: StreamPath,
    link: ReplicaLink,
    replicas: Iterable[ReplicaLink],
    new: StreamPath,
    new_uuid: str,
    new_created: int,
) -> None:
    """Refuse ``replica edit -newreplica``'s new path unless it is the replica's own stream (its
    UUID) after a rename or move, and not another replica of ``source`` already.

    :param new_uuid: the UUID of the stream now at ``new``, created at ``new_created`` (ms).
    """
    if str(new) != link.path and find_link(replicas, new):
        raise AlreadyExists(f"{new} is already a replica of {source}")
    if not binds(link, new_uuid, new_created):
        raise InvalidArgument(
            f"{new} is stream {new_uuid}, not replica {link.path} (stream {_agreed_uuid(link)}): -newreplica "
            f"takes the replica's new path after a rename or move; add another stream with 'stream replica add'"
        )


def edited_link(
    link: ReplicaLink, path: StreamPath | None = None, uuid: str | None = None, **changes: Any
) -> ReplicaLink:
    """``link`` with ``replica edit``'s changes: options (``synchronous`` and the network options)
    and, with ``path``, the replica's new path and its UUID (the same stream, see
    ``check_new_replica_path``). Positions and marks name streams by UUID, so replication goes
    on from where it was. A replica made asynchronous has no synchronous state to fall back from."""
    new = link.with_changes(**changes)
    if path is not None:
        new = new.with_changes(path=str(path), uuid=uuid)
    if new.state is ReplicaState.SYNC_FALLBACK and not new.synchronous:
        new = new.with_changes(state=ReplicaState.REPLICATING)
    return new


def moved_upstream(link: UpstreamLink, old: StreamPath, new: StreamPath, new_uuid: str) -> UpstreamLink:
    """An upstream link to the stream that moved from ``old`` to ``new`` (``replica edit
    -newreplica``: multi-master's reverse link), at its new path; any other link unchanged."""
    if link.path != str(old) or link.uuid not in (None, new_uuid):
        return link
    return replace(link, path=str(new), uuid=new_uuid)


def check_upstream_add(
    replica: StreamPath,
    upstream: StreamPath,
    upstreams: list[UpstreamLink],
    topics_of_upstreams: Mapping[str, set[str]],
    topics_of_new: set[str],
    replica_uuid: str | None = None,
    upstream_uuid: str | None = None,
    lineages: Mapping[str, Lineage] | None = None,
) -> None:
    """Refuse an upstream registration that breaks a rule.

    :param topics_of_upstreams: topic names of each existing upstream, by path.
    :param topics_of_new: topic names of the upstream being added.
    :param replica_uuid: the replica's UUID, and ``upstream_uuid`` the upstream's (one stream
        under two cluster names has one UUID).
    :param lineages: the lineage of the new upstream and of each existing one, by path: a name
        shared through a common source is no conflict (``related``). None: every shared name is.
    """
    _check_new_link(replica, replica_uuid, upstream, upstream_uuid, upstreams, "upstream", MAX_UPSTREAMS)
    for other, topics in sorted(topics_of_upstreams.items()):
        shared = sorted(topics & topics_of_new)
        if lineages is not None:
            shared = [t for t in shared if not related(lineages[str(upstream)], lineages[other], t)]
        if shared:
            raise Conflict(
                f"topic name conflict: upstreams {other} and {upstream} of {replica} both have "
                f"topic(s) {', '.join(shared[:5])}{' ...' if len(shared) > 5 else ''}; topic names must be unique across upstreams"
            )


def check_distinct(
    first: StreamPath, first_uuid: str | None, second: StreamPath, second_uuid: str | None, relation: str
) -> None:
    """Refuse a stream linked to itself under another name (the same UUID)."""
    if first_uuid is not None and first_uuid == second_uuid:
        raise InvalidArgument(
            f"{second} is stream {first} under another name (both are stream {first_uuid}): "
            f"a stream cannot be {relation} itself"
        )


def require_link(links: Iterable[_Link], path: StreamPath, owner: StreamPath, kind: str) -> _Link:
    """The link to ``path`` or a NotFound naming ``kind`` ('replica' or 'upstream')."""
    link = find_link(links, path)
    if link is None:
        raise NotFound(f"{path} is not {'a' if kind[0] not in 'aeiou' else 'an'} {kind} of {owner}")
    return link


def validate_gateway_name(name: object) -> str:
    """A gateway's name (its id, as ``cluster gateway set`` lists it): a host name, optionally with
    ``:port``; no ``/``, spaces or control characters."""
    if not isinstance(name, str) or not GATEWAY_NAME.fullmatch(name):
        raise InvalidArgument(f"invalid gateway name {name!r}: a host name, optionally with :port")
    return name


MAX_GATEWAY_INTERVAL = 3_600.0  # an idle gateway's wait between passes, at most


def gateway_interval(value: object) -> float:
    """An idle gateway's wait between passes, in seconds: above 0 (0 would poll the clusters in a
    busy loop) and at most ``MAX_GATEWAY_INTERVAL``."""
    try:
        seconds = float(value) if not isinstance(value, bool) else float("nan")  # type: ignore[arg-type]
    except (TypeError, ValueError):
        seconds = float("nan")
    if not 0 < seconds <= MAX_GATEWAY_INTERVAL:  # NaN fails it too
        raise InvalidArgument(
            f"interval must be a number of seconds above 0 and at most {MAX_GATEWAY_INTERVAL:g}, not {value!r}"
        )
    return seconds


def validate_gateways(text_or_list: str | Iterable[str]) -> list[str]:
    """Parse a gateway list (``"g1 g2:7660"`` or a list); order kept, duplicates refused."""
    names = text_or_list.replace(",", " ").split() if isinstance(text_or_list, str) else list(text_or_list)
    if not names:
        raise InvalidArgument("a gateway list needs at least one gateway name")
    for name in names:
        validate_gateway_name(name)
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise InvalidArgument(f"gateway(s) listed twice: {', '.join(dupes)}")
    return names


def effective_state(
    link: ReplicaLink, agreed: bool, error: str | None = None, no_gateway: str | None = None
) -> tuple[ReplicaState, str | None]:
    """The state ``replica list`` shows, and its error. In order: FAILED_OVER (a failover withdrew
    the agreement on purpose: not an error, not waiting); an error (stored by a gateway,
    or ``error`` found now: a replica that was deleted, messages lost to the source's retention)
    is UNEXPECTED; no two-way agreement is WAITING_FOR_UPSTREAM; a copy in progress shows as such;
    a paused replica is PAUSED; with no live gateway (``no_gateway``, MapR's
    ErrAllGatewaysUnreachable) it is WAITING_FOR_GATEWAY (SYNC_FELL_BACK_TO_ASYNC stays);
    otherwise the stored state."""
    if link.state is ReplicaState.FAILED_OVER:  # the agreement was withdrawn on purpose
        return link.state, None
    error = "; ".join(dict.fromkeys(e for e in (error, link.error) if e)) or None  # a gateway's line found again: once
    if error:
        return ReplicaState.UNEXPECTED, error
    if not agreed:
        return ReplicaState.WAITING_FOR_UPSTREAM, None
    if link.state is ReplicaState.COPY_IN_PROGRESS:
        return link.state, None
    if link.paused:
        return ReplicaState.PAUSED, None
    if no_gateway:  # a synchronous replica that fell back keeps saying so, with the reason
        fell_back = link.state is ReplicaState.SYNC_FALLBACK
        return (link.state if fell_back else ReplicaState.WAITING_FOR_GATEWAY), no_gateway
    return link.state, None
