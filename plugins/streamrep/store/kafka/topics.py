"""A stream's topics on Kafka: the Kafka topics its naming policy names (``model/naming.py``),
those another installation on the brokers holds left out (``installations``), created, grown,
deleted, and dropped with the stream (its marks and offset syncs as tombstones).

Every call waits until the brokers' metadata shows its change, so the next call sees it.
"""

from __future__ import annotations

import time

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.cimpl import NewPartitions, NewTopic  # where the stubs declare them (admin re-exports)

import streamrep.store.kafka.keys as keys
from streamrep.errors import AlreadyExists, Conflict, InvalidArgument, NotFound
from streamrep.store.kafka.client import TIMEOUT_SECONDS, kafka_error
from streamrep.store.kafka.core import KafkaCore

# A stream's ttl is enforced by ``retain()`` on message timestamps; Kafka's default retention (7 days,
# also by timestamp) would silently drop older messages, such as a replicated or copied backlog.
_STREAM_TOPIC_CONFIG = {"retention.ms": "-1", "retention.bytes": "-1"}


class KafkaTopics(KafkaCore):
    """The Store's topic methods, through the admin client."""

    def topics(self, stream: str) -> dict[str, int]:
        naming = self._naming(stream)
        held = self._held(naming)  # every name held is one of the naming's topics
        return dict(
            sorted((topic, count) for name, count in held.items() if (topic := naming.topic_of(name)) is not None)
        )

    def create_topic(self, stream: str, topic: str, partitions: int) -> None:
        naming = self._naming(stream)
        name = naming.kafka_topic(topic)
        claim = self._installations.foreign(naming, [name], self._kafka_topics(), refresh=True).get(name)
        if claim is not None:
            raise Conflict(
                f"topic {topic} would be Kafka topic {name}, which belongs to {claim.whose} "
                "on the same brokers; choose another topic name"
            )
        future = self._admin().create_topics(
            [NewTopic(name, partitions, config=_STREAM_TOPIC_CONFIG)], request_timeout=TIMEOUT_SECONDS
        )[name]
        try:
            future.result()
        except KafkaException as exc:
            err = kafka_error(exc)
            if err is not None and err.code() == KafkaError.TOPIC_ALREADY_EXISTS:
                raise AlreadyExists(f"topic {topic} already exists") from None
            raise self._translate(exc, f"cannot create Kafka topic {name}") from None
        self._await_topics([name])

    def add_partitions(self, stream: str, topic: str, partitions: int) -> None:
        name = self._kafka_name(stream, topic)
        count = self._kafka_topics().get(name)
        if count is None:
            raise NotFound(f"topic {topic} does not exist")
        if partitions < count:
            raise InvalidArgument(f"topic {topic} has {count} partitions; partitions can only be added")
        if partitions == count:
            return
        future = self._admin().create_partitions([NewPartitions(name, partitions)], request_timeout=TIMEOUT_SECONDS)[
            name
        ]
        with self._errors(f"cannot add partitions to Kafka topic {name}"):
            future.result()
        deadline = time.monotonic() + TIMEOUT_SECONDS
        while self._kafka_topics().get(name, 0) < partitions and time.monotonic() < deadline:
            time.sleep(0.05)

    def delete_topic(self, stream: str, topic: str) -> None:
        self._delete_kafka_topics([self._kafka_name(stream, topic)], topic)

    def _delete_kafka_topics(self, names: list[str], topic: str | None = None) -> None:
        if not names:
            return
        futures = self._admin().delete_topics(names, request_timeout=TIMEOUT_SECONDS)
        for name, future in futures.items():
            try:
                future.result()
            except KafkaException as exc:
                err = kafka_error(exc)
                if err is not None and err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                    if topic is not None:
                        raise NotFound(f"topic {topic} does not exist") from None
                    continue
                raise self._translate(exc, f"cannot delete Kafka topic {name}") from None
        self._reader.forget(names)
        self._await_topics(names, present=False)

    def drop_stream(self, stream: str) -> None:
        naming = self._naming(stream)
        if not naming.adopts:  # adopted topics were there before the stream: they stay in Kafka
            self._delete_kafka_topics(list(self._held(naming)))
        marks = self._marks_fold()
        syncs = self._syncs_fold()
        marks.catch_up()
        syncs.catch_up()
        producer = self._producer()
        for key in list(marks.state.get(stream, {})):
            producer.produce(self._topics["marks"], key=keys.mark_key(stream, key).encode(), value=None)
        for source, runs in syncs.state.get(stream, {}).items():
            for source_offset in runs:
                producer.produce(
                    self._topics["syncs"], key=keys.sync_key(stream, source, source_offset).encode(), value=None
                )
        self._flush(producer, "cannot drop the stream's replication marks")
