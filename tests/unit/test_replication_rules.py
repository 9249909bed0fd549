"""Tests for streamrep.model.replication: the replica/upstream rules and limits."""

import pytest

from streamrep.errors import (
    AlreadyExists,
    Conflict,
    InvalidArgument,
    LimitExceeded,
    NotFound,
)
from streamrep.model.fanin import check_new_topic, topic_conflicts
from streamrep.model.paths import StreamPath
from streamrep.model.replication import (
    MAX_REPLICAS,
    MAX_UPSTREAMS,
    ReplicaLink,
    ReplicaState,
    UpstreamLink,
    check_replica_add,
    check_upstream_add,
    effective_state,
    find_link,
    require_link,
    validate_gateways,
)

SRC = StreamPath("sanfrancisco", "/activity")
DST = StreamPath("newyork", "/activity")


def streams(n: int, cluster: str = "newyork") -> list[StreamPath]:
    return [StreamPath(cluster, f"/s{i}") for i in range(n)]


# --- replicas -------------------------------------------------------------------


def test_limits_are_the_documented_64():
    assert MAX_REPLICAS == 64
    assert MAX_UPSTREAMS == 64


def test_replica_add_accepted():
    check_replica_add(SRC, DST, [])
    check_replica_add(SRC, DST, [ReplicaLink(str(p)) for p in streams(3, "other")])


def test_self_replica_refused():
    with pytest.raises(InvalidArgument, match="cannot be a replica of itself"):
        check_replica_add(SRC, SRC, [])


def test_same_path_on_other_cluster_is_not_self():
    check_replica_add(SRC, StreamPath("newyork", SRC.path), [])


def test_duplicate_replica_refused():
    with pytest.raises(AlreadyExists, match=f"{DST} is already a replica of {SRC}"):
        check_replica_add(SRC, DST, [ReplicaLink(str(DST), paused=True)])


def test_64th_replica_accepted_65th_refused():
    links = [ReplicaLink(str(p)) for p in streams(63)]
    check_replica_add(SRC, DST, links)
    links.append(ReplicaLink(str(DST)))
    with pytest.raises(LimitExceeded, match="maximum is 64") as err:
        check_replica_add(SRC, StreamPath("newyork", "/one-more"), links)
    assert "already has 64 replicas" in str(err.value)


# --- upstreams ------------------------------------------------------------------


def test_upstream_add_accepted():
    check_upstream_add(DST, SRC, [], {}, {"clicks"})


def test_self_upstream_refused():
    with pytest.raises(InvalidArgument, match="cannot be an upstream of itself"):
        check_upstream_add(DST, DST, [], {}, set())


def test_duplicate_upstream_refused():
    with pytest.raises(AlreadyExists, match=f"{SRC} is already an upstream of {DST}"):
        check_upstream_add(DST, SRC, [UpstreamLink(str(SRC))], {str(SRC): set()}, set())


def test_64th_upstream_accepted_65th_refused():
    links = [UpstreamLink(str(p)) for p in streams(63, "sanfrancisco")]
    check_upstream_add(DST, SRC, links, {}, set())
    links.append(UpstreamLink(str(SRC)))
    with pytest.raises(LimitExceeded, match="maximum is 64") as err:
        check_upstream_add(DST, StreamPath("sanfrancisco", "/more"), links, {}, set())
    assert "already has 64 upstreams" in str(err.value)


def test_topic_name_conflict_between_upstreams_names_the_topic():
    other = StreamPath("sanfrancisco", "/other")
    with pytest.raises(Conflict, match="topic name conflict") as err:
        check_upstream_add(
            DST, SRC, [UpstreamLink(str(other))], {str(other): {"clicks", "views"}}, {"clicks", "orders"}
        )
    message = str(err.value)
    assert "clicks" in message
    assert "views" not in message and "orders" not in message
    assert str(other) in message and str(SRC) in message


def test_disjoint_topics_accepted():
    other = StreamPath("sanfrancisco", "/other")
    check_upstream_add(DST, SRC, [UpstreamLink(str(other))], {str(other): {"views"}}, {"clicks"})


def test_conflict_message_lists_at_most_five_topics():
    other = StreamPath("sanfrancisco", "/other")
    shared = {f"t{i}" for i in range(8)}
    with pytest.raises(Conflict) as err:
        check_upstream_add(DST, SRC, [UpstreamLink(str(other))], {str(other): shared}, shared)
    message = str(err.value)
    assert "t0, t1, t2, t3, t4 ..." in message
    assert "t5" not in message
    assert "\n" not in message


# --- links ------------------------------------------------------------------------


def test_find_and_require_link():
    links = [ReplicaLink(str(SRC)), ReplicaLink(str(DST), paused=True)]
    assert find_link(links, DST).paused is True
    assert find_link(links, StreamPath("x", "/y")) is None
    assert require_link(links, DST, SRC, "replica") is links[1]


def test_require_link_not_found_messages():
    with pytest.raises(NotFound, match=f"{DST} is not a replica of {SRC}"):
        require_link([], DST, SRC, "replica")
    with pytest.raises(NotFound, match=f"{SRC} is not an upstream of {DST}"):
        require_link([], SRC, DST, "upstream")


def test_link_dict_round_trip():
    link = ReplicaLink(
        str(DST), paused=True, synchronous=True, state=ReplicaState.REPLICATING.value, error="x", added=5
    )
    assert ReplicaLink.from_dict(link.to_dict()) == link
    up = UpstreamLink(str(SRC), added=7)
    assert UpstreamLink.from_dict(up.to_dict()) == up


def test_new_replica_link_defaults():
    link = ReplicaLink(str(DST))
    assert (link.paused, link.synchronous, link.error) == (False, False, None)
    assert link.state == "REPLICA_STATE_WAITING_FOR_GATEWAY"


# --- gateways ----------------------------------------------------------------------


def test_gateway_list_from_text_keeps_order():
    assert validate_gateways("gw2 gw1:7660, gw3.example.com") == ["gw2", "gw1:7660", "gw3.example.com"]


def test_gateway_list_from_list():
    assert validate_gateways(["a", "b:1"]) == ["a", "b:1"]


@pytest.mark.parametrize("value", ["", "  ", " , ", []])
def test_gateway_list_empty(value):
    with pytest.raises(InvalidArgument, match="at least one gateway"):
        validate_gateways(value)


@pytest.mark.parametrize("name", ["-gw", "gw:", "gw:123456", "gw:port", "gw/1", "gw\n", 7])
def test_bad_gateway_name(name):
    with pytest.raises(InvalidArgument, match="invalid gateway name"):
        validate_gateways(["ok", name])


def test_duplicate_gateway():
    with pytest.raises(InvalidArgument, match="gateway\\(s\\) listed twice: gw1"):
        validate_gateways("gw1 gw2 gw1")


# --- agreement and state ----------------------------------------------------------


def test_effective_state_waits_for_upstream_without_agreement():
    link = ReplicaLink(str(DST), state=ReplicaState.REPLICATING.value)
    assert effective_state(link, agreed=False) == ("REPLICA_STATE_WAITING_FOR_UPSTREAM", None)


def test_effective_state_is_stored_state_with_agreement():
    link = ReplicaLink(str(DST), state=ReplicaState.REPLICATING.value)
    assert effective_state(link, agreed=True) == ("REPLICA_STATE_REPLICATING", None)


def test_effective_state_error_found_now_wins():
    link = ReplicaLink(str(DST), state=ReplicaState.REPLICATING.value)
    assert effective_state(link, agreed=False, error="stream gone") == ("REPLICA_STATE_UNEXPECTED", "stream gone")


def test_effective_state_stored_error_wins_over_agreement():
    link = ReplicaLink(str(DST), state=ReplicaState.REPLICATING.value, error="apply failed")
    assert effective_state(link, agreed=True) == ("REPLICA_STATE_UNEXPECTED", "apply failed")


# -- the fan-in topic rule, always (issue 21 item 3) ---------------------------------------------
def test_unrelated_upstreams_sharing_a_name_conflict_and_the_held_topic_is_kept():
    lineages = {"/a": {"A": {"orders"}}, "/b": {"B": {"orders", "views"}}}
    upstreams = [("/a", {"orders"}), ("/b", {"orders", "views"})]
    [conflict] = topic_conflicts("/agg", upstreams, lineages, holds={})
    assert (conflict.topic, conflict.kept, conflict.stopped) == ("orders", "/a", "/b")  # none held: the first
    [conflict] = topic_conflicts("/agg", upstreams, lineages, holds={"/b": {"orders"}})
    assert (conflict.kept, conflict.stopped) == ("/b", "/a")  # the replica holds /b's orders already
    assert "/a" in conflict.line() and "/b" in conflict.line() and "/agg" in conflict.line()


def test_upstreams_sharing_a_name_through_a_common_source_do_not_conflict():
    # a mesh: /b and /c each feed the other; and /d and /e are both fed by /x, which has the topic
    mesh = {"/b": {"B": {"t"}, "C": {"t"}}, "/c": {"C": {"t"}, "B": {"t"}}}
    assert topic_conflicts("/a", [("/b", {"t"}), ("/c", {"t"})], mesh, {}) == []
    fed = {"/d": {"D": {"t"}, "X": {"t"}}, "/e": {"E": {"t"}, "X": {"t"}}}
    assert topic_conflicts("/a", [("/d", {"t"}), ("/e", {"t"})], fed, {}) == []
    # a common source without the topic does not make two topics of that name one
    fed_other = {"/d": {"D": {"t"}, "X": {"u"}}, "/e": {"E": {"t"}, "X": {"u"}}}
    assert [c.stopped for c in topic_conflicts("/a", [("/d", {"t"}), ("/e", {"t"})], fed_other, {})] == ["/e"]


def test_a_new_topic_is_refused_only_against_an_unrelated_upstream():
    with pytest.raises(Conflict, match=r"upstreams /mapr/c/o and /mapr/c/s of /mapr/c/agg both have topic t"):
        check_new_topic(
            StreamPath("c", "/s"), "t", {"S": set()}, StreamPath("c", "/agg"), {"/mapr/c/o": ({"t"}, {"O": {"t"}})}
        )
    check_new_topic(
        StreamPath("c", "/s"),
        "t",
        {"S": set(), "O": {"t"}},
        StreamPath("c", "/agg"),
        {"/mapr/c/o": ({"t"}, {"O": {"t"}})},
    )
