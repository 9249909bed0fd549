"""Fixtures of the Store conformance suite: one store per test on each backend.

Embedded: a fresh SQLite file per test. Memory: a fresh ``MemoryState`` per test (``memory_store.py``,
test code). Kafka: a fresh store object per test on the session's broker (``kafka_broker`` in
tests/conftest.py), all in one namespace for the module, so its internal topics are made once; tests
keep apart by their own stream UUIDs, catalog kinds and group names.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from store.memory_store import MemoryState, MemoryStore
from streamrep.store.base import Store
from streamrep.store.embedded import EmbeddedStore

OpenStore = Callable[[], Store]


@pytest.fixture(scope="module")
def kafka_conformance_namespace(kafka_broker: str) -> Iterator[str]:
    from confluent_kafka.admin import AdminClient

    namespace = f"t{uuid.uuid4().hex[:10]}-conformance"
    yield namespace
    admin = AdminClient({"bootstrap.servers": kafka_broker})
    names = [n for n in admin.list_topics(timeout=30).topics if namespace in n]
    if names:
        for future in admin.delete_topics(names, request_timeout=30).values():
            try:
                future.result()
            except Exception:  # noqa: BLE001 - best effort: the broker is discarded at session end anyway
                pass


@pytest.fixture
def open_store(request: pytest.FixtureRequest, backend: str, tmp_path: Path) -> Iterator[OpenStore]:
    """``open_store()``: another store object on the test's backing store (the same file, memory
    state or Kafka namespace), as a second process or gateway would have. Closed after the test."""
    opened: list[Store] = []
    memory = MemoryState()

    def open_() -> Store:
        store: Store
        if backend == "embedded":
            store = EmbeddedStore("conformance", str(tmp_path / "conformance.db"))
        elif backend == "memory":
            store = MemoryStore("conformance", memory)
        else:
            from streamrep.store.kafka import KafkaStore

            bootstrap = request.getfixturevalue("kafka_broker")
            namespace = request.getfixturevalue("kafka_conformance_namespace")
            store = KafkaStore("conformance", bootstrap, {"streamrep.namespace": namespace})
        opened.append(store)
        return store

    yield open_
    for store in opened:
        store.close()


@pytest.fixture
def store(open_store: OpenStore) -> Store:
    return open_store()


@pytest.fixture
def new_stream(store: Store) -> Callable[..., str]:
    """``new_stream(ttl=0)``: a new stream in the catalog (as ``stream create`` writes it), by its UUID."""

    def new(ttl: int = 0) -> str:
        stream = str(uuid.uuid4())
        path = f"/conformance/s{stream[:8]}"
        store.catalog_update("stream", path, lambda _: {"uuid": stream, "path": path, "meta": {"ttl": ttl}})
        return stream

    return new


@pytest.fixture
def stream(new_stream: Callable[..., str]) -> str:
    return new_stream()
