"""Kafka client settings, timeouts, and Kafka's error codes as streamrep's errors.

Shared by the store, its transactions and its folds. Every call to Kafka is bounded by
``TIMEOUT_SECONDS``, so a cluster that is down fails in one line instead of hanging.
"""

from __future__ import annotations

import logging
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from streamrep.errors import InvalidArgument, LimitExceeded, PermissionDenied
from streamrep.model.naming import INTERNAL_PREFIX

NAMESPACE_SETTING = "streamrep.namespace"
TIMEOUT_SECONDS = 15.0  # one admin call, flush or commit; a cluster that is down fails within it
CATALOG_RETRIES = 30
# A client whose answers stay transient this long is replaced (see ``KafkaStore._watermarks``).
STALE_CLIENT_SECONDS = 2.0
MAX_TRANSACTIONAL_PRODUCERS = 64  # each holds a connection: the least recently used are closed
MAX_READERS = 16
# A reader's wait for its next fetch before it looks again whether it has reached its end: the
# marker that ends a transaction is no record, so the end can be reached with nothing returned.
FETCH_WAIT_SECONDS = 0.002
# Compacted, with small segments: the cleaner only compacts closed segments, and every new store object
# reads these topics from the start, so they must stay near the size of their live keys.
INTERNAL_TOPIC_CONFIG = {
    "cleanup.policy": "compact",
    "segment.ms": "600000",
    "segment.bytes": str(16 << 20),
    "min.cleanable.dirty.ratio": "0.1",
}
CLIENT_LOG = logging.getLogger("streamrep.kafka.client")
if CLIENT_LOG.level == logging.NOTSET:
    CLIENT_LOG.setLevel(logging.CRITICAL)  # fencing and coordinator retries are routine; real failures raise


class _RoutineFencing(logging.Filter):
    """Drops librdkafka's ``TXNERR``/``FATAL ... fenced`` lines (logged at CRITICAL): a writer fenced
    by a newer one of its transactional id is how exactly-once works (a failover or failback
    fences the gateways' producers); the fenced writer raises RetryNow and its caller retries."""

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage().lower()
        return "fenced" not in text and "producer_fenced" not in text and "old epoch" not in text


CLIENT_LOG.addFilter(_RoutineFencing())

USER_ERRORS = {
    KafkaError.INVALID_TIMESTAMP: InvalidArgument,
    KafkaError.MSG_SIZE_TOO_LARGE: LimitExceeded,
    KafkaError.POLICY_VIOLATION: InvalidArgument,
    KafkaError.TOPIC_EXCEPTION: InvalidArgument,
    KafkaError.TOPIC_AUTHORIZATION_FAILED: PermissionDenied,
    KafkaError.CLUSTER_AUTHORIZATION_FAILED: PermissionDenied,
    KafkaError.GROUP_AUTHORIZATION_FAILED: PermissionDenied,
    KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED: PermissionDenied,
}
FENCED = {KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH}
# Abortable commit errors of a writer being fenced: Kafka's coordinator (4.x, transaction version 1)
# answers EndTxn with UNKNOWN_SERVER_ERROR when it arrives while a new writer's InitProducerId is
# fencing the epoch (IllegalStateException "... pending state PREPARE_EPOCH_FENCE" in the broker
# log). Nothing was committed: the new writer's init aborts the transaction, so a retry is safe.
FENCING_RACE = {KafkaError.UNKNOWN, KafkaError.CONCURRENT_TRANSACTIONS}
# Kafka's answers to an offset change for a group with live members.
GROUP_ACTIVE = {KafkaError.UNKNOWN_MEMBER_ID, KafkaError.REBALANCE_IN_PROGRESS, KafkaError.ILLEGAL_GENERATION}
# Brief states of a new or moving partition: asked again until TIMEOUT_SECONDS have passed.
TRANSIENT = {
    KafkaError.NOT_LEADER_FOR_PARTITION,
    KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError._UNKNOWN_PARTITION,
    KafkaError.UNKNOWN_TOPIC_OR_PART,
    KafkaError._UNKNOWN_TOPIC,
    KafkaError.NOT_COORDINATOR,
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
    KafkaError.REQUEST_TIMED_OUT,
}


def kafka_error(err: Any) -> KafkaError | None:
    """The KafkaError an exception or delivery report carries, or None."""
    if isinstance(err, KafkaException) and err.args and isinstance(err.args[0], KafkaError):
        return err.args[0]
    return err if isinstance(err, KafkaError) else None


def fetched(consumer: Consumer, limit: int, wait: float = FETCH_WAIT_SECONDS) -> list[Message]:
    """Up to ``limit`` records (or error events) the consumer holds, waiting at most ``wait`` for
    the first. ``Consumer.consume`` waits its whole timeout unless it fills ``limit``: with a
    20 ms timeout that was 20 of every apply's 36 ms (the marks read after fencing) on a quiet
    machine, while the records themselves were there in about 1 ms."""
    first = consumer.poll(wait)
    if first is None:
        return []
    return [first, *consumer.consume(limit - 1, timeout=0)] if limit > 1 else [first]


def watermarks(consumer: Consumer, name: str, partition: int) -> tuple[int, int]:
    """``(low watermark, last stable offset)``: a read_committed consumer's high mark is the LSO."""
    low, high = consumer.get_watermark_offsets(TopicPartition(name, partition), timeout=TIMEOUT_SECONDS, cached=False)
    return low, high


def internal_prefix(namespace: str) -> str:
    """The start of the internal topics' names of the installation with ``namespace``."""
    return f"{INTERNAL_PREFIX}.{namespace}." if namespace else f"{INTERNAL_PREFIX}."


def installation_of(name: str) -> str | None:
    """The namespace ('' for none) of the installation whose catalog is Kafka topic ``name``, or None."""
    head, tail = internal_prefix(""), ".catalog"
    if name == head + "catalog":
        return ""
    if name.startswith(head) and name.endswith(tail) and len(name) > len(head + tail):
        return name[len(head) : -len(tail)]
    return None
