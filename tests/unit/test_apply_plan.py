"""Pure replication planning: ``plan_apply``, its marks and the origin header, cursor
translation, and how source partitions are dealt to live gateways. No store, no I/O."""

from __future__ import annotations

from collections import Counter
from typing import NamedTuple

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamrep.errors import Conflict
from streamrep.model.lanes import APPLY_LANES, apply_lane
from streamrep.model.message import Message
from streamrep.model.replication import origin_key, position_key
from streamrep.replication.apply import ORIGIN_HEADER, plan_apply
from streamrep.replication.assignment import deal, live_gateways, shares_seen_by
from streamrep.replication.translate import translate_offset

SRC = "11111111-aaaa-4aaa-8aaa-000000000001"
REP = "22222222-bbbb-4bbb-8bbb-000000000002"
OTHER = "33333333-cccc-4ccc-8ccc-000000000003"
T = "clicks"


class Origin(NamedTuple):
    """Where a message was first produced, as the ``streamrep.origin`` header says."""

    uuid: str
    partition: int
    offset: int

    def encode(self) -> bytes:
        return f"{self.uuid}/{self.partition}/{self.offset}".encode("ascii")

    @classmethod
    def of(cls, message: Message) -> Origin | None:
        raw = message.header(ORIGIN_HEADER)
        if raw is None:
            return None
        uuid, partition, offset = raw.decode("ascii").rsplit("/", 2)
        return cls(uuid, int(partition), int(offset))


def msg(
    offset: int,
    value: str | None = None,
    partition: int = 0,
    origin: Origin | None = None,
    headers: tuple = (),
    key: bytes | None = None,
    ts: int = 1_700_000_000_000,
) -> Message:
    """A message as read from the source at ``offset``, optionally carrying an origin header."""
    if origin is not None:
        headers = headers + ((ORIGIN_HEADER, origin.encode()),)
    return Message(
        value=(value or f"v{offset}").encode(),
        key=key,
        headers=headers,
        timestamp=ts + offset,
        partition=partition,
        offset=offset,
        topic=T,
    )


def origins(plan) -> list[Origin]:
    return [Origin.of(m) for m in plan.messages]


# -- the origin header ----------------------------------------------------------------
def test_a_message_without_origin_gets_the_source_as_origin():
    m = msg(7, partition=3)
    [planned] = plan_apply(REP, SRC, T, 3, [m], {position_key(SRC, T, 3): 7}).messages
    assert Origin.of(planned) == Origin(SRC, 3, 7)
    assert planned.header(ORIGIN_HEADER) == f"{SRC}/3/7".encode()


def test_an_origin_header_is_kept_along_a_chain_with_the_other_headers():
    o = Origin(OTHER, 2, 123456789)
    m = msg(5, partition=2, headers=(("h1", b"x"), ("h2", b"\x00\xff")), key=b"k", origin=o)
    [planned] = plan_apply(REP, SRC, T, 2, [m], {position_key(SRC, T, 2): 5}).messages
    assert Origin.of(planned) == o  # a chain A -> B -> C keeps A as the origin
    assert planned.headers == m.headers  # nothing added, nothing lost
    assert [h for h, _ in planned.headers].count(ORIGIN_HEADER) == 1
    assert (planned.value, planned.key, planned.timestamp, planned.topic) == (m.value, m.key, m.timestamp, T)
    assert planned.offset == -1  # the replica assigns its own offsets


def test_headers_of_a_fresh_message_are_kept_before_the_origin():
    m = msg(0, headers=(("h1", b"x"), ("h1", b"y")))
    [planned] = plan_apply(REP, SRC, T, 0, [m], {}).messages
    assert planned.headers == (("h1", b"x"), ("h1", b"y"), (ORIGIN_HEADER, Origin(SRC, 0, 0).encode()))


# -- plan_apply -----------------------------------------------------------------------
def test_empty_batch_plans_nothing():
    plan = plan_apply(REP, SRC, T, 0, [], {})
    assert plan.empty and plan.messages == [] and plan.marks == {} and plan.syncs == []


def test_fresh_replica_takes_everything_and_marks_both_positions():
    batch = [msg(i, partition=1, key=b"k%d" % i, headers=(("h", b"%d" % i),)) for i in range(5)]
    plan = plan_apply(REP, SRC, T, 1, batch, {})
    assert [m.value for m in plan.messages] == [m.value for m in batch]
    assert [m.key for m in plan.messages] == [m.key for m in batch]
    assert [m.timestamp for m in plan.messages] == [m.timestamp for m in batch]
    assert [m.header("h") for m in plan.messages] == [m.header("h") for m in batch]
    assert origins(plan) == [Origin(SRC, 1, i) for i in range(5)]
    assert plan.marks == {position_key(SRC, T, 1): 5, origin_key(SRC, T, 1): 5}
    assert plan.syncs == [(0, 0)]
    assert plan.skipped == 0


def test_marks_have_distinct_namespaces():
    assert position_key(SRC, T, 0) == f"p|{SRC}|{T}|0"
    assert origin_key(SRC, T, 0) == f"o|{SRC}|{T}|0"
    assert position_key(SRC, T, 0) != origin_key(SRC, T, 0)


def test_replayed_batch_is_skipped_entirely():
    batch = [msg(i) for i in range(3)]
    marks = {position_key(SRC, T, 0): 3, origin_key(SRC, T, 0): 3}
    plan = plan_apply(REP, SRC, T, 0, batch, marks)
    assert plan.empty and plan.skipped == 3


def test_overlapping_batch_applies_only_what_is_new():
    batch = [msg(i) for i in range(2, 8)]
    marks = {position_key(SRC, T, 0): 5, origin_key(SRC, T, 0): 5}
    plan = plan_apply(REP, SRC, T, 0, batch, marks)
    assert [m.value for m in plan.messages] == [b"v5", b"v6", b"v7"]
    assert plan.skipped == 3
    assert plan.syncs == [(0, 5)]
    assert plan.marks == {position_key(SRC, T, 0): 8, origin_key(SRC, T, 0): 8}


def test_batch_starting_above_the_position_is_a_gap():
    with pytest.raises(Conflict, match="gap"):
        plan_apply(REP, SRC, T, 0, [msg(6), msg(7)], {position_key(SRC, T, 0): 5})
    with pytest.raises(Conflict, match="gap"):
        plan_apply(REP, SRC, T, 0, [msg(1)], {})  # nothing applied yet: must start at 0


def test_position_lost_to_source_retention_is_not_a_gap():
    plan = plan_apply(REP, SRC, T, 0, [msg(10), msg(11)], {position_key(SRC, T, 0): 4}, source_start=10)
    assert [m.value for m in plan.messages] == [b"v10", b"v11"]
    assert plan.marks[position_key(SRC, T, 0)] == 12
    # and below the retained start is still refused as a gap
    with pytest.raises(Conflict):
        plan_apply(REP, SRC, T, 0, [msg(11)], {position_key(SRC, T, 0): 4}, source_start=10)


def test_loop_messages_are_skipped_but_the_position_moves_past_them():
    # source partition: mine(0), back from the replica (1, 2), mine(3), back(4), mine(5)
    batch = [
        msg(0),
        msg(1, origin=Origin(REP, 0, 0)),
        msg(2, origin=Origin(REP, 0, 1)),
        msg(3),
        msg(4, origin=Origin(REP, 0, 2)),
        msg(5),
    ]
    plan = plan_apply(REP, SRC, T, 0, batch, {})
    assert [m.value for m in plan.messages] == [b"v0", b"v3", b"v5"]
    assert plan.skipped == 3
    assert plan.marks == {position_key(SRC, T, 0): 6, origin_key(SRC, T, 0): 6}
    assert origin_key(REP, T, 0) not in plan.marks
    # a new run of consecutive source offsets starts after every skipped stretch
    assert plan.syncs == [(0, 0), (1, 3), (2, 5)]


def test_batch_of_only_loop_messages_moves_only_the_position():
    batch = [msg(i, origin=Origin(REP, 0, i)) for i in range(4)]
    plan = plan_apply(REP, SRC, T, 0, batch, {})
    assert plan.messages == [] and plan.syncs == [] and plan.skipped == 4
    assert plan.marks == {position_key(SRC, T, 0): 4}
    assert not plan.empty  # the position must still be stored


def test_messages_already_here_by_another_path_are_skipped():
    # the replica already has OTHER's partition-0 messages up to origin offset 10 (by another path)
    batch = [msg(i, origin=Origin(OTHER, 0, 8 + i)) for i in range(4)]  # origin offsets 8..11
    marks = {origin_key(OTHER, T, 0): 10}
    plan = plan_apply(REP, SRC, T, 0, batch, marks)
    assert origins(plan) == [Origin(OTHER, 0, 10), Origin(OTHER, 0, 11)]
    assert plan.marks == {position_key(SRC, T, 0): 4, origin_key(OTHER, T, 0): 12}
    assert plan.syncs == [(0, 2)]


def test_chain_keeps_the_first_origin():
    batch = [msg(i, origin=Origin(OTHER, 0, 100 + i)) for i in range(3)]
    plan = plan_apply(REP, SRC, T, 0, batch, {})
    assert origins(plan) == [Origin(OTHER, 0, 100 + i) for i in range(3)]
    assert plan.marks[origin_key(OTHER, T, 0)] == 103
    assert origin_key(SRC, T, 0) not in plan.marks


class Replica:
    """A replica partition fed by plans, as the store would apply them."""

    def __init__(self, uuid: str, check_syncs: bool = True):
        self.uuid = uuid
        self.check_syncs = check_syncs
        self.marks: dict[str, int] = {}
        self.held: list[Message] = []

    def feed(self, source: str, batch: list[Message]) -> None:
        plan = plan_apply(self.uuid, source, T, 0, batch, self.marks)
        # each sync starts a run of consecutive source offsets (values are "v<source offset>")
        if not self.check_syncs:
            self.held.extend(plan.messages)
            self.marks.update(plan.marks)
            return
        bounds = [i for i, _ in plan.syncs[1:]] + [len(plan.messages)]
        assert [i for i, _ in plan.syncs] == sorted({i for i, _ in plan.syncs})
        assert (plan.syncs[0][0] if plan.syncs else 0) == 0
        for (index, source_offset), bound in zip(plan.syncs, bounds, strict=False):
            run = [m.value for m in plan.messages[index:bound]]
            assert run == [f"v{source_offset + k}".encode() for k in range(bound - index)]
        self.held.extend(plan.messages)
        self.marks.update(plan.marks)


@settings(max_examples=150, deadline=None)
@given(
    kinds=st.lists(st.sampled_from("MLO"), min_size=1, max_size=60),
    cuts=st.lists(st.tuples(st.integers(0, 8), st.integers(1, 12)), min_size=1, max_size=40),
)
def test_any_replay_pattern_applies_every_message_exactly_once(kinds, cuts):
    """A source partition holding the source's own messages (M), loops back from the replica (L)
    and messages of a third origin (O) is delivered in batches that replay up to 8 messages
    already applied: the replica ends with every non-loop message once, in source order."""
    own = other = mine_back = 0
    source: list[Message] = []
    for offset, kind in enumerate(kinds):
        if kind == "M":
            source.append(msg(offset))
            own += 1
        elif kind == "L":
            source.append(msg(offset, origin=Origin(REP, 0, mine_back)))
            mine_back += 1
        else:
            source.append(msg(offset, origin=Origin(OTHER, 0, other)))
            other += 1
    replica = Replica(REP)
    for back, size in cuts + [(0, len(source))] * 2:
        position = replica.marks.get(position_key(SRC, T, 0), 0)
        start = max(0, position - back)
        batch = source[start : start + size]
        if batch:
            replica.feed(SRC, batch)
    expected = [m.value for m in source if (Origin.of(m) or Origin(SRC, 0, 0)).uuid != REP]
    assert [m.value for m in replica.held] == expected
    assert replica.marks[position_key(SRC, T, 0)] == len(source)


@settings(max_examples=100, deadline=None)
@given(
    count=st.integers(1, 40),
    steps=st.lists(st.tuples(st.booleans(), st.integers(1, 7)), min_size=1, max_size=40),
)
def test_two_paths_of_one_origin_deliver_each_message_once(count, steps):
    """A diamond: origin A reaches the replica directly and through B, which holds A's messages
    at other offsets (after some of its own). Interleaved in any way, each arrives once, in order."""
    a_msgs = [msg(i, value=f"a{i}") for i in range(count)]
    # B holds two messages of its own, then A's messages (carrying A as their origin).
    b_msgs = [msg(0, value="b0"), msg(1, value="b1")] + [
        msg(2 + i, value=f"a{i}", origin=Origin(SRC, 0, i)) for i in range(count)
    ]
    replica = Replica(REP, check_syncs=False)
    for via_b, size in steps + [(False, count), (True, count + 2)]:
        source, uuid = (b_msgs, OTHER) if via_b else (a_msgs, SRC)
        position = replica.marks.get(position_key(uuid, T, 0), 0)
        batch = source[position : position + size]
        if batch:
            replica.feed(uuid, batch)
    values = [m.value.decode() for m in replica.held]
    assert Counter(values) == Counter([f"a{i}" for i in range(count)] + ["b0", "b1"])
    assert [v for v in values if v.startswith("a")] == [f"a{i}" for i in range(count)]


# -- translate_offset -----------------------------------------------------------------
# source offsets 0-4 at replica 10-14, 5-6 skipped (loops), 7-9 at replica 20-22
SYNCS = [(0, 0, 10, 5), (7, 0, 20, 3)]


@pytest.mark.parametrize(
    "cursor,expected",
    [
        (0, 10),
        (3, 13),
        (4, 14),  # inside the first run
        (5, 20),
        (6, 20),  # skipped messages: the next replicated one
        (7, 20),
        (9, 22),  # inside the second run
        (10, 99),
        (50, 99),  # not replicated yet: the replica's end
    ],
)
def test_translate_offset(cursor, expected):
    assert translate_offset(SYNCS, cursor, 99) == expected


def test_translate_before_the_first_run_and_with_no_syncs():
    assert translate_offset([(5, 0, 40, 2)], 0, 99) == 40  # copied from offset 5 on (retention)
    assert translate_offset([], 0, 7) == 7
    assert translate_offset([], 123, 7) == 7


# -- assignment -----------------------------------------------------------------------
def test_deal_is_round_robin_in_sorted_order():
    shares = deal([5, 3, 1, 0, 2, 4], ["g2", "g1"])
    assert shares == {"g1": [0, 2, 4], "g2": [1, 3, 5]}
    assert deal([1, 2], []) == {}
    assert deal([], ["g1"]) == {"g1": []}


@settings(max_examples=100, deadline=None)
@given(
    parts=st.sets(st.tuples(st.sampled_from("abc"), st.integers(0, 20)), max_size=60),
    gateways=st.sets(st.sampled_from([f"g{i}" for i in range(6)]), min_size=1),
)
def test_deal_shares_are_disjoint_cover_everything_and_balanced(parts, gateways):
    shares = deal(list(parts), list(gateways))
    assert set(shares) == gateways
    dealt = [p for share in shares.values() for p in share]
    assert Counter(dealt) == Counter(parts)
    sizes = [len(s) for s in shares.values()]
    assert max(sizes) - min(sizes) <= 1
    assert deal(list(reversed(sorted(parts))), list(gateways)) == shares  # order of input does not matter


@settings(max_examples=100, deadline=None)
@given(
    parts=st.sets(st.tuples(st.sampled_from("abc"), st.integers(0, 40)), max_size=80),
    gateways=st.sets(st.sampled_from([f"g{i}" for i in range(6)]), min_size=1),
)
def test_deal_by_lane_keeps_each_lane_on_one_gateway(parts, gateways):
    """Every partition of one apply lane goes to one gateway (two would fence each other's
    transactions in turn); the lanes are spread as evenly as whole lanes allow."""
    lane = lambda p: (p[0], apply_lane(p[0], p[1]))  # noqa: E731 - SourcePartition.lane_group's shape
    shares = deal(list(parts), list(gateways), lane)
    assert Counter(p for share in shares.values() for p in share) == Counter(parts)
    holders: dict = {}
    for gateway, share in shares.items():
        assert share == sorted(share)
        for p in share:
            assert holders.setdefault(lane(p), gateway) == gateway, f"lane {lane(p)} dealt to two gateways"
    counts = Counter(holders.values())
    assert max(counts.values(), default=0) - min((counts[g] for g in gateways), default=0) <= 1


def test_the_lanes_of_a_topic_are_consecutive_and_wrap():
    lanes = [apply_lane("t", p) for p in range(APPLY_LANES * 2)]
    assert sorted(lanes[:APPLY_LANES]) == list(range(APPLY_LANES))  # a topic of 16 partitions: one per lane
    assert lanes[APPLY_LANES:] == lanes[:APPLY_LANES]  # partition p and p + 16 share a lane


def test_live_gateways_and_expiry():
    beats = {"g1": 100.0, "g2": 95.0, "g3": 90.0}
    assert live_gateways(beats, now=100.0, expiry=10.0) == ["g1", "g2"]  # g3 is exactly expired
    assert live_gateways(beats, now=200.0, expiry=10.0) == []


def test_share_of_counts_itself_live_and_others_take_over_an_expired_one():
    parts = list(range(10))
    beats = {"g1": 100.0, "g2": 100.0}
    s1 = shares_seen_by("g1", parts, beats, now=101.0, expiry=5.0)["g1"]
    s2 = shares_seen_by("g2", parts, beats, now=101.0, expiry=5.0)["g2"]
    assert set(s1).isdisjoint(s2) and sorted(s1 + s2) == parts
    # g1 stopped heartbeating: g2 takes everything
    assert shares_seen_by("g2", parts, {"g1": 100.0, "g2": 110.0}, now=110.0, expiry=5.0)["g2"] == parts
    # a gateway that has not heartbeated yet still counts itself
    s3 = shares_seen_by("g3", parts, beats, now=101.0, expiry=5.0)["g3"]
    assert s3 == deal(parts, ["g1", "g2", "g3"])["g3"] and s3
