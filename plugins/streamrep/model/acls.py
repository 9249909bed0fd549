"""A stream's ACEs as Kafka ACLs: the exact grants a broker's authorizer needs to enforce them.

On a Kafka cluster with an authorizer, a plain Kafka client meets the same rules as streamrep's own
commands only if the broker holds the ACEs. An ACE is a boolean expression over user, group and
role terms; a Kafka ACL names principals, and DENY wins over ALLOW. The mapping is exact, never
wider than the ACE:

- Groups are not a Kafka concept: they come from the cluster's settings
  (``streamrep.group.<group>=<user>,<user>...``). An ACE naming a group without such a mapping, or
  a role, cannot be expressed and is refused, naming the term.
- Every user outside the *universe* (the users the ACE names, and the members of mapped groups)
  has no mapped group and a name the ACE does not mention, so the ACE answers the same for all of
  them: that answer is the ``User:*`` entry. Each user of the universe gets its own answer; only
  where it differs from ``User:*``'s is an entry written (a DENY under an ALLOW for everyone, an
  ALLOW where everyone else is refused).
- One Kafka operation can follow from several rights (DESCRIBE from all of them), so the answer is
  worked out per operation: a user may DESCRIBE if any right that implies it allows the user.

The ``gateway`` principal is the service that replicates: it gets what replication needs and is
never denied by a user-facing ACE (a DENY would stop replication, not a user).

A stream's document decides which rights write (``entry_grants``): a one-way replica is read-only
for everyone but the gateway (topicperm and adminperm only describe it, produceperm does not write),
and a stream whose failover record refuses producers (``model/failover.py`` REFUSING) grants
produceperm nothing, so the broker holds the fence against every client, not only streamrep's.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

from streamrep.errors import InvalidArgument
from streamrep.model.ace import Ace, And, Group, Identity, Not, Or, Role, User, parse_ace
from streamrep.model.catalog import StreamEntry
from streamrep.model.failover import REFUSING
from streamrep.model.stream import PERMISSIONS, StreamMeta

GROUP_SETTING_PREFIX = "streamrep.group."
GATEWAY_SETTING = "streamrep.gateway.principal"
DEFAULT_GATEWAY = "gateway"
EVERYONE = "*"

TOPIC_ADMIN = ("CREATE", "DELETE", "ALTER", "DESCRIBE", "DESCRIBE_CONFIGS", "ALTER_CONFIGS")
TOPIC_DESCRIBE = ("DESCRIBE", "DESCRIBE_CONFIGS")  # topicperm and adminperm on a one-way replica
# The Kafka operations on a stream's topics that each right implies.
TOPIC_OPERATIONS: Mapping[str, tuple[str, ...]] = {
    "produceperm": ("WRITE", "DESCRIBE"),
    "consumeperm": ("READ", "DESCRIBE"),
    "copyperm": ("READ", "DESCRIBE"),
    "topicperm": TOPIC_ADMIN,
    "adminperm": TOPIC_ADMIN,
}
GATEWAY_SOURCE = ("READ", "DESCRIBE", "DESCRIBE_CONFIGS")  # a stream with replicas: the gateway reads it
# The gateway writes a replica, adds its topics and partitions, places consumer groups' cursors there (a commit
# needs the topic's READ), and deletes the records the replica's ttl expires (Kafka's DeleteRecords asks for
# DELETE, which also lets it delete a topic: Kafka has no narrower right; the gateway never deletes one).
GATEWAY_REPLICA = ("WRITE", "READ", "DESCRIBE", "CREATE", "ALTER", "DESCRIBE_CONFIGS", "DELETE")


@dataclass(frozen=True, order=True)
class Grant:
    """One Kafka ACL entry.

    :param resource: ``topic``, ``group``, ``transactional_id`` or ``cluster``
    :param name: the resource name, or its prefix when ``prefixed``
    :param prefixed: a PREFIXED pattern (every resource whose name starts with ``name``), else LITERAL
    :param principal: a user name, or ``*`` for every principal
    :param operation: Kafka's operation name (``READ``, ``WRITE``, ...)
    :param allow: ALLOW, else DENY
    """

    resource: str
    name: str
    prefixed: bool
    principal: str
    operation: str
    allow: bool = True


@dataclass(frozen=True)
class Principals:
    """Who the ACLs of a cluster may name.

    :param groups: group name -> its member users (from the cluster's settings)
    :param gateway: the principal gateways and copystream run as
    """

    groups: Mapping[str, frozenset[str]]
    gateway: str = DEFAULT_GATEWAY

    @classmethod
    def from_settings(cls, settings: Mapping[str, object]) -> Principals:
        """The groups mapping and gateway principal kept in a cluster's client settings."""
        groups = {}
        for key, value in settings.items():
            if key.startswith(GROUP_SETTING_PREFIX):
                group = key[len(GROUP_SETTING_PREFIX) :]
                groups[group] = frozenset(u for u in str(value).replace(",", " ").split() if u)
        return cls(groups, str(settings.get(GATEWAY_SETTING) or DEFAULT_GATEWAY))

    def identity(self, user: str) -> Identity:
        """``user`` with the groups the mapping gives it."""
        return Identity(user, frozenset(g for g, members in self.groups.items() if user in members))


def _terms(ace: Ace) -> Iterator[Ace]:
    if isinstance(ace, Not):
        yield from _terms(ace.term)
    elif isinstance(ace, (And, Or)):
        for item in ace.items:
            yield from _terms(item)
    else:
        yield ace


def _universe(aces: Iterable[Ace], principals: Principals, what: str) -> set[str]:
    """The users whose answer may differ from everyone else's; refuses terms Kafka cannot hold."""
    users: set[str] = set()
    for ace in aces:
        for term in _terms(ace):
            if isinstance(term, Role):
                raise InvalidArgument(f"{what}: the role term {term} cannot be held in Kafka ACLs (Kafka has no roles)")
            if isinstance(term, Group):
                if term.name not in principals.groups:
                    raise InvalidArgument(
                        f"{what}: the group term {term} cannot be held in Kafka ACLs: the cluster's settings map no "
                        f"members to it (add {GROUP_SETTING_PREFIX}{term.name}=<user>,<user>)"
                    )
            elif isinstance(term, User):
                users.add(term.name)
    for members in principals.groups.values():
        users |= members
    return users


def _operation_grants(
    resource: str, name: str, operation: str, rights: list[Ace], users: set[str], principals: Principals
) -> Iterator[Grant]:
    def allowed(identity: Identity) -> bool:
        return any(ace.allows(identity) for ace in rights)

    everyone = allowed(Identity(""))  # a name no ACE term can match, in no group
    if everyone:
        yield Grant(resource, name, True, EVERYONE, operation)
    for user in sorted(users - {principals.gateway}):
        if allowed(principals.identity(user)) != everyone:
            yield Grant(resource, name, True, user, operation, allow=not everyone)


def stream_grants(
    meta: StreamMeta,
    topic_prefix: str,
    principals: Principals,
    *,
    writable: bool = True,
    read_only: bool = False,
    replicated: bool = False,
    replica: bool = False,
    what: str = "",
) -> set[Grant]:
    """The ACL entries on a stream's topics (all of them: ``topic_prefix`` is a PREFIXED pattern).

    :param meta: the stream's ACEs
    :param topic_prefix: the Kafka topic prefix every topic of the stream has
    :param writable: whether produceperm grants WRITE (False on a fenced stream, or a read-only one)
    :param read_only: a one-way replica: topicperm and adminperm only describe its topics, and
        produceperm does not write (only the gateway creates, changes, deletes and writes them)
    :param replicated: the stream has replicas, so the gateway reads it
    :param replica: the stream has upstreams, so the gateway writes it
    :param what: names the stream in errors
    :raises InvalidArgument: an ACE that Kafka ACLs cannot hold, or a stream whose topics share no prefix
    """
    if not topic_prefix:
        raise InvalidArgument(
            f"{what}: a stream over every topic of the cluster (-topicnaming cluster) "
            "cannot be held in Kafka ACLs; use a topic prefix"
        )
    aces = {perm: parse_ace(getattr(meta, perm)) for perm in PERMISSIONS}
    users = _universe(aces.values(), principals, what)
    by_operation: dict[str, list[Ace]] = {}
    for perm, operations in TOPIC_OPERATIONS.items():
        if perm == "produceperm" and (read_only or not writable):
            continue
        if read_only and operations == TOPIC_ADMIN:
            operations = TOPIC_DESCRIBE
        for operation in operations:
            by_operation.setdefault(operation, []).append(aces[perm])
    grants = {
        g
        for op, rights in sorted(by_operation.items())
        for g in _operation_grants("topic", topic_prefix, op, rights, users, principals)
    }
    gateway_ops = (GATEWAY_SOURCE if replicated else ()) + (GATEWAY_REPLICA if replica else ())
    grants |= {Grant("topic", topic_prefix, True, principals.gateway, op) for op in gateway_ops}
    return grants


def one_way_replica(entry: StreamEntry) -> bool:
    """A replica whose upstreams are not also its replicas: only the gateway writes it. A stream
    that replicates back to one of its upstreams is a master (multi-master) and keeps its rights."""
    if not entry.upstreams:
        return False
    back = {r.uuid or r.path for r in entry.replicas}
    return not any((u.uuid or u.path) in back for u in entry.upstreams)


def fenced(entry: StreamEntry) -> bool:
    """A stream whose failover record refuses producers (FENCED, FAILED_OVER, and the failback steps)."""
    return entry.failover is not None and entry.failover.state in REFUSING


def entry_grants(entry: StreamEntry, topic_prefix: str, principals: Principals, what: str = "") -> set[Grant]:
    """The grants a stream's catalog document calls for: its ACEs, its links and its failover state."""
    return stream_grants(
        entry.meta,
        topic_prefix,
        principals,
        writable=not fenced(entry),
        read_only=one_way_replica(entry),
        replicated=bool(entry.replicas),
        replica=bool(entry.upstreams),
        what=what,
    )


def installation_grants(internal_prefix: str, group_prefix: str, principals: Principals) -> set[Grant]:
    """The ACL entries every streamrep installation on a cluster needs, whatever its streams.

    - Everyone reads the catalog, marks and offset syncs (paths, ACEs and positions, never messages),
      as streamrep's commands must to resolve a path. Only the administrator (a super user) and the
      gateway write them.
    - Consumer groups hold only cursors: a commit needs READ on the group and on the topic, and the
      topic's READ is consumeperm's, so every principal may use the installation's groups.
    - The gateway writes with transactions named under the installation's prefix.

    :param internal_prefix: the prefix of the installation's internal topics and transactional ids
    :param group_prefix: the prefix of its consumer groups, or ``""`` (every group) without a namespace
    """
    grants = {
        Grant(resource, internal_prefix, True, EVERYONE, op)  # streamrep's readers name a group, and
        for resource in ("topic", "group")
        for op in ("READ", "DESCRIBE")
    }  # commit nothing in it
    grants |= {
        Grant("group", group_prefix or EVERYONE, bool(group_prefix), EVERYONE, op) for op in ("READ", "DESCRIBE")
    }
    gateway = principals.gateway
    grants |= {Grant("topic", internal_prefix, True, gateway, op) for op in ("WRITE", "CREATE")}
    grants |= {Grant("transactional_id", internal_prefix, True, gateway, op) for op in ("WRITE", "DESCRIBE")}
    grants.add(Grant("cluster", "kafka-cluster", False, gateway, "IDEMPOTENT_WRITE"))
    return grants
