"""Helpers for the replication tests: produce unique values, read back everything a stream
holds, and check that a replica holds every expected message exactly once."""

from __future__ import annotations

import json
from collections import Counter
from typing import Iterable

from streamrep.client import Producer, StreamAdmin
from streamrep.model.message import Message
from streamrep.replication.apply import ORIGIN_HEADER
from streamrep.replication.gateway import Gateway

Contents = dict[tuple[str, int], list[Message]]


def produce(admin: StreamAdmin, topic: str, values: Iterable[str], **send) -> list[str]:
    """Send ``values`` to ``topic`` (``<stream>:<topic>``) and flush; returns the values sent."""
    values = list(values)
    with Producer(admin, batch_size=1 << 30) as producer:
        for value in values:
            producer.send(topic, value, **send)
    return values


def contents(admin: StreamAdmin, stream: str) -> Contents:
    """Every message of every topic and partition of ``stream``, by ``(topic, partition)``,
    read from its store; checks that the offsets held are gap-free (on Kafka, where transaction
    markers take offsets, that they increase within the partition's bounds)."""
    sp = admin.path(stream)
    entry = admin.entry(sp)
    store = admin.store(sp)
    on_kafka = admin.clusters.get(sp.cluster).kind == "kafka"
    result: Contents = {}
    for topic, count in store.topics(entry.uuid).items():
        for partition in range(count):
            start, end = store.offsets(entry.uuid, topic, partition)
            held = store.read(entry.uuid, topic, partition, start, end - start + 1)
            offsets = [m.offset for m in held]
            if on_kafka:
                assert offsets == sorted(set(offsets)) and all(start <= o < end for o in offsets), \
                    f"{stream}:{topic}/{partition} holds offsets out of order or bounds"
            else:
                assert offsets == list(range(start, end)), f"{stream}:{topic}/{partition} has a gap"
            result[(topic, partition)] = held
    return result


def all_values(admin: StreamAdmin, stream: str) -> list[str]:
    return [m.value.decode() for held in contents(admin, stream).values() for m in held]


def count(admin: StreamAdmin, stream: str) -> int:
    """How many messages ``stream`` holds, from the partition bounds only (cheap); on Kafka, where
    transaction markers take offsets too, by counting the messages."""
    sp = admin.path(stream)
    entry = admin.entry(sp)
    store = admin.store(sp)
    on_kafka = admin.clusters.get(sp.cluster).kind == "kafka"
    total = 0
    for topic, partitions in store.topics(entry.uuid).items():
        for p in range(partitions):
            start, end = store.offsets(entry.uuid, topic, p)
            total += store.range_stats(entry.uuid, topic, p, start)[0] if on_kafka else end - start
    return total


def assert_exactly_once(admin: StreamAdmin, stream: str, expected: Iterable[str]) -> None:
    """``stream`` holds every value of ``expected`` once and nothing else."""
    expected = list(expected)
    assert len(set(expected)) == len(expected), "the test's expected values must be unique"
    held = Counter(all_values(admin, stream))
    duplicated = sorted(v for v, n in held.items() if n > 1)
    missing = sorted(set(expected) - set(held))
    extra = sorted(set(held) - set(expected))
    assert not (duplicated or missing or extra), (
        f"{stream}: {len(duplicated)} duplicated {duplicated[:5]}, {len(missing)} missing {missing[:5]}, "
        f"{len(extra)} unexpected {extra[:5]} (holds {sum(held.values())}, expected {len(expected)})"
    )


def origin(message: Message) -> tuple[str, int, int] | None:
    """``(uuid, partition, offset)`` of the stream where ``message`` was first produced."""
    raw = message.header(ORIGIN_HEADER)
    if raw is None:
        return None
    uuid, partition, offset = raw.decode("ascii").rsplit("/", 2)
    return uuid, int(partition), int(offset)


def user_view(message: Message) -> tuple:
    """What a consumer sees of a message, without the replication header and the offset."""
    headers = tuple(h for h in message.headers if h[0] != ORIGIN_HEADER)
    return message.value, message.key, headers, message.timestamp


def drain(*gateways: Gateway, max_messages: int | None = None) -> int:
    """Run every gateway once, again and again, until a full round moves nothing."""
    total = 0
    for _ in range(100):
        moved = sum(g.run_once() if max_messages is None else g.run_once(max_messages) for g in gateways)
        total += moved
        if moved == 0:
            return total
    raise AssertionError("gateways never went idle")


def json_rows(result) -> list[dict]:
    """The ``data`` of a successful CLI call made with ``-json``."""
    code, out, err = result
    assert code == 0, f"exit {code}, stderr: {err!r}"
    doc = json.loads(out)
    assert doc["status"] == "OK"
    return doc["data"]


def one_line_error(result, *fragments: str, code: int = 1) -> str:
    """A CLI failure: exit ``code``, one ``streamrep: error:`` line naming every fragment."""
    rc, out, err = result
    assert rc == code, f"expected exit {code}, got {rc}; stdout {out!r} stderr {err!r}"
    assert "Traceback" not in err
    assert err.startswith("streamrep: error: ") and err.count("\n") == 1, f"not one line: {err!r}"
    for fragment in fragments:
        assert fragment.lower() in err.lower(), f"{fragment!r} not in {err!r}"
    return err
