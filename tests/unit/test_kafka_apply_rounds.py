"""How the Kafka store groups one call's applies into transactions open at once (``_rounds``)."""

from __future__ import annotations

import streamrep.store.kafka.store as kafka_store
from streamrep.store.base import ReplicaApply
from streamrep.store.kafka.store import _ApplyTask, _rounds


def task(stream: str, partition: int, source: str, position: int | None = None) -> _ApplyTask:
    return _ApplyTask("t", partition, source, ReplicaApply(stream, [], {source: 1}, {source: position}))


def txid(t: _ApplyTask) -> str:
    return f"{t.apply.stream}/{t.topic}/{t.partition}"


def test_applies_with_nothing_shared_are_open_at_once():
    tasks = [task("a", 0, "p|s|t|0"), task("a", 1, "p|s|t|1"), task("b", 0, "p|s|t|0")]
    assert _rounds(tasks, txid) == [[0, 1, 2]]


def test_one_transactional_id_or_one_mark_waits_for_the_round_before_in_order():
    tasks = [
        task("a", 0, "p|s1|t|0"),
        task("a", 0, "p|s2|t|0"),  # fan-in: a's partition 0 again, from another source
        task("a", 1, "p|s1|t|1"),
        task("a", 0, "p|s1|t|0", 1),  # the first source's next batch: after both of the above
        task("a", 1, "p|s1|t|0"),  # another partition, but the first one's mark
    ]
    assert _rounds(tasks, txid) == [[0, 2], [1], [3], [4]]


def test_a_round_holds_no_more_transactions_than_the_producers_kept(monkeypatch):
    monkeypatch.setattr(kafka_store, "MAX_TRANSACTIONAL_PRODUCERS", 2)
    tasks = [task("a", p, f"p|s|t|{p}") for p in range(5)]
    assert _rounds(tasks, txid) == [[0, 1], [2, 3], [4]]
