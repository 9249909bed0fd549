"""What the Kafka store's parts (its transactions, folds, installations and ACLs) need of the
store that owns them, named as a protocol: the store imports its parts, so a part that imported
the store would close a circle. ``KafkaCore``, the base of ``KafkaStore``, satisfies it (mypy
checks where a part is built)."""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any, Protocol

from confluent_kafka import Consumer

from streamrep.errors import RetryNow, StreamrepError
from streamrep.store.base import CatalogDoc


class StoreCore(Protocol):
    cluster: str
    namespace: str
    _client: dict[str, Any]
    _topics: dict[str, str]

    @property
    def internal_prefix(self) -> str: ...

    def _errors(self, what: str) -> AbstractContextManager[None]: ...

    def _translate(self, exc: Any, what: str) -> StreamrepError | RetryNow: ...

    def _consumer(self, **extra: Any) -> Consumer: ...

    def _ensure_internal(self) -> None: ...

    def _watermarks(self, name: str, partition: int, topic: str, uncommitted: bool = False) -> tuple[int, int]: ...

    def _kafka_topics(self) -> dict[str, int]: ...

    def _learn(self, doc: CatalogDoc) -> None: ...
