"""Stream ACEs as Kafka ACLs (``model/acls.py``): exact for every principal, never wider.

The check simulates Kafka's authorizer over the grants (DENY wins over ALLOW; ``User:*`` matches
everyone; no matching ALLOW refuses) and compares its answer with the ACE's, operation by
operation, for every user the ACE could treat differently and for users it never names.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamrep.errors import InvalidArgument
from streamrep.model.ace import And, Group, Not, Or, Public, User
from streamrep.model.acls import (
    EVERYONE,
    TOPIC_OPERATIONS,
    Grant,
    Principals,
    entry_grants,
    installation_grants,
    stream_grants,
)
from streamrep.model.catalog import StreamEntry
from streamrep.model.failover import REFUSING, FailoverRecord, FailoverState
from streamrep.model.replication import ReplicaLink, UpstreamLink
from streamrep.model.stream import PERMISSIONS, StreamMeta

GROUPS = {"eng": frozenset({"alice", "carol"}), "sales": frozenset({"bob"})}
PRINCIPALS = Principals(GROUPS)
PREFIX = "ns.apps.clicks__"
OUTSIDERS = ("dave", "mallory")


def kafka_allows(grants: set[Grant], user: str, operation: str) -> bool:
    """Kafka's StandardAuthorizer for one principal and operation on a topic under PREFIX."""
    matching = [
        g
        for g in grants
        if g.resource == "topic" and g.name == PREFIX and g.operation == operation and g.principal in (user, EVERYONE)
    ]
    return not any(not g.allow for g in matching) and any(g.allow for g in matching)


def ace_allows(meta: StreamMeta, user: str, operation: str, writable: bool = True) -> bool:
    identity = PRINCIPALS.identity(user)
    from streamrep.model.ace import parse_ace

    return any(
        parse_ace(getattr(meta, perm)).allows(identity)
        for perm, ops in TOPIC_OPERATIONS.items()
        if operation in ops and (writable or perm != "produceperm")
    )


def assert_exact(meta: StreamMeta, writable: bool = True) -> None:
    grants = stream_grants(meta, PREFIX, PRINCIPALS, writable=writable)
    for user in ("alice", "bob", "carol", *OUTSIDERS):
        for operation in {op for ops in TOPIC_OPERATIONS.values() for op in ops}:
            assert kafka_allows(grants, user, operation) == ace_allows(meta, user, operation, writable), (
                str(meta),
                user,
                operation,
                sorted(grants),
            )


def test_the_creator_alone_gets_every_right_and_nobody_else_any():
    meta = StreamMeta.for_creator("alice")
    grants = stream_grants(meta, PREFIX, PRINCIPALS)
    assert {g.principal for g in grants} == {"alice"} and all(g.allow for g in grants)
    assert {g.operation for g in grants} == {op for ops in TOPIC_OPERATIONS.values() for op in ops}
    assert_exact(meta)


def test_everyone_but_one_is_an_allow_for_everyone_under_a_deny():
    meta = StreamMeta.for_creator("alice").edited(consumeperm="p & !u:bob")
    grants = stream_grants(meta, PREFIX, PRINCIPALS)
    assert Grant("topic", PREFIX, True, EVERYONE, "READ") in grants
    assert Grant("topic", PREFIX, True, "bob", "READ", allow=False) in grants
    # bob keeps DESCRIBE through no right at all here, and loses it: DESCRIBE follows every right
    assert Grant("topic", PREFIX, True, "bob", "DESCRIBE", allow=False) in grants
    assert_exact(meta)


def test_groups_expand_to_their_mapped_members():
    meta = StreamMeta.for_creator("alice").edited(produceperm="g:eng & !u:carol")
    grants = stream_grants(meta, PREFIX, PRINCIPALS)
    assert {g.principal for g in grants if g.operation == "WRITE"} == {"alice"}
    assert_exact(meta)


def test_a_one_way_replica_grants_no_write_to_anyone_but_the_gateway():
    meta = StreamMeta.for_creator("alice").edited(produceperm="p")
    grants = stream_grants(meta, PREFIX, PRINCIPALS, writable=False, replica=True)
    assert {g.principal for g in grants if g.operation == "WRITE"} == {"gateway"}
    assert_exact(meta, writable=False)


def entry(meta: StreamMeta, **links) -> StreamEntry:
    return StreamEntry("u-ny", "/s", "alice", 0, meta, **links)


def rights(grants: set[Grant], user: str) -> set[str]:
    operations = {op for ops in TOPIC_OPERATIONS.values() for op in ops}
    return {op for op in operations if kafka_allows(grants, user, op)}


def test_a_one_way_replica_lets_topicperm_and_adminperm_only_describe_its_topics():
    meta = StreamMeta.for_creator("alice").edited(topicperm="u:bob", produceperm="u:carol", consumeperm="u:dave")
    one_way = entry(meta, upstreams=(UpstreamLink("/mapr/sf/s", uuid="u-sf"),))
    grants = entry_grants(one_way, PREFIX, PRINCIPALS)
    assert rights(grants, "bob") == {"DESCRIBE", "DESCRIBE_CONFIGS"}  # topicperm
    assert rights(grants, "alice") == {"READ", "DESCRIBE", "DESCRIBE_CONFIGS"}  # adminperm and the others
    assert rights(grants, "carol") == set()  # produceperm: nothing to write
    assert rights(grants, "dave") == {"READ", "DESCRIBE"}
    gateway = {g.operation for g in grants if g.principal == "gateway"}
    assert gateway >= {"WRITE", "CREATE", "ALTER", "DELETE"} and "ALTER_CONFIGS" not in gateway
    # a multi-master replica (it replicates back to its upstream) keeps every right: its users write it
    both = entry(
        meta, upstreams=(UpstreamLink("/mapr/sf/s", uuid="u-sf"),), replicas=(ReplicaLink("/mapr/sf/s", uuid="u-sf"),)
    )
    grants = entry_grants(both, PREFIX, PRINCIPALS)
    assert rights(grants, "bob") >= {"CREATE", "DELETE", "ALTER", "ALTER_CONFIGS"}
    assert "WRITE" in rights(grants, "carol")


@pytest.mark.parametrize("state", sorted(FailoverState, key=lambda s: s.value))
def test_a_stream_whose_failover_record_refuses_producers_grants_no_write_but_the_gateways(state):
    meta = StreamMeta.for_creator("alice").edited(produceperm="p")
    record = FailoverRecord(state, "/mapr/ny/s", "u-ny")
    source = entry(meta, replicas=(ReplicaLink("/mapr/ny/s", uuid="u-ny"),), failover=record)
    grants = entry_grants(source, PREFIX, PRINCIPALS)
    writers = {g.principal for g in grants if g.operation == "WRITE" and g.allow}
    assert writers == (set() if state in REFUSING else {EVERYONE})
    assert rights(grants, "alice") >= {"CREATE", "DELETE", "ALTER"}  # the fence takes WRITE only
    unfenced = entry_grants(source.with_changes(failover=None), PREFIX, PRINCIPALS)
    assert {g.principal for g in unfenced if g.operation == "WRITE"} == {EVERYONE}


def test_the_gateway_is_never_denied_what_replication_needs():
    meta = StreamMeta.for_creator("alice").edited(consumeperm="p & !u:gateway", produceperm="p & !u:gateway")
    grants = stream_grants(meta, PREFIX, PRINCIPALS, replicated=True, replica=True)
    assert not [g for g in grants if g.principal == "gateway" and not g.allow]
    assert Grant("topic", PREFIX, True, "gateway", "READ") in grants
    assert Grant("topic", PREFIX, True, "gateway", "WRITE") in grants


@pytest.mark.parametrize("ace, part", [("r:ops", "role term r:ops"), ("u:a | g:unmapped", "group term g:unmapped")])
def test_terms_kafka_cannot_hold_are_refused_naming_the_part(ace, part):
    meta = StreamMeta.for_creator("alice").edited(consumeperm=ace)
    with pytest.raises(InvalidArgument, match=part) as info:
        stream_grants(meta, PREFIX, PRINCIPALS, what="stream /s")
    assert "\n" not in str(info.value) and str(info.value).startswith("stream /s: ")


def test_a_stream_over_the_whole_cluster_is_refused():
    with pytest.raises(InvalidArgument, match="-topicnaming cluster"):
        stream_grants(StreamMeta.for_creator("alice"), "", PRINCIPALS)


def test_groups_and_gateway_come_from_the_clusters_settings():
    principals = Principals.from_settings(
        {"streamrep.group.eng": "alice, carol", "streamrep.gateway.principal": "gw", "sasl.username": "alice"}
    )
    assert principals.groups == {"eng": frozenset({"alice", "carol"})} and principals.gateway == "gw"
    assert principals.identity("carol").groups == {"eng"} and principals.identity("bob").groups == frozenset()


def test_the_installation_lets_everyone_read_its_catalog_and_only_the_gateway_write_it():
    grants = installation_grants("_streamrep.ns.", "ns.", PRINCIPALS)
    writers = {g.principal for g in grants if g.resource == "topic" and g.operation == "WRITE"}
    assert writers == {"gateway"}
    assert Grant("topic", "_streamrep.ns.", True, EVERYONE, "READ") in grants
    assert Grant("group", "ns.", True, EVERYONE, "READ") in grants
    assert Grant("group", EVERYONE, False, EVERYONE, "READ") in installation_grants("_streamrep.", "", PRINCIPALS)


names = st.sampled_from(["alice", "bob", "carol", "dave"])
leaves = st.one_of(st.builds(User, names), st.builds(Group, st.sampled_from(sorted(GROUPS))), st.just(Public()))
aces = st.recursive(
    leaves,
    lambda inner: st.one_of(
        st.builds(Not, inner.filter(lambda a: not isinstance(a, Not))),
        st.builds(And, st.lists(inner, min_size=2, max_size=3)),
        st.builds(Or, st.lists(inner, min_size=2, max_size=3)),
    ),
    max_leaves=6,
)


@settings(max_examples=300, deadline=None)
@given(st.fixed_dictionaries({perm: aces for perm in PERMISSIONS}), st.booleans())
def test_kafka_decides_exactly_as_the_aces_for_any_expression(expressions, writable):
    meta = StreamMeta(**{perm: str(ace) for perm, ace in expressions.items()})
    assert_exact(meta, writable)
