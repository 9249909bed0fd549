"""Kafka client settings, timeouts, and Kafka's error codes as streamrep's errors.

Shared by the store, its transactions and its folds. Every call to Kafka is bounded by
``TIMEOUT_SECONDS``, so a cluster that is down fails in one line instead of hanging.

A client whose credentials or TLS the brokers refuse sees only timeouts on its requests: librdkafka
tells the cause through its error callback (``_AUTHENTICATION``, ``_SSL``) and log lines, which the
version probe (``versions.check_cluster``) reads before the store's first client; :func:`refusal`
names it (:func:`unanswered` when no broker answered at all), and :func:`translate` turns every Kafka
error into the one line that names its cause: authentication, TLS, a missing ACL (``principal X
lacks <operation> on <resource>``) or a cluster that does not answer.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from streamrep.errors import (
    AuthenticationFailed,
    InvalidArgument,
    LimitExceeded,
    PermissionDenied,
    RetryNow,
    StreamrepError,
    TlsHandshakeFailed,
    Unavailable,
)
from streamrep.model.naming import INTERNAL_PREFIX

NAMESPACE_SETTING = "streamrep.namespace"
TIMEOUT_SECONDS = 15.0  # one admin call, flush or commit; a cluster that is down fails within it
CATALOG_RETRIES = 30
# A client whose answers stay transient this long is replaced (see ``KafkaStore._watermarks``).
STALE_CLIENT_SECONDS = 2.0
MAX_TRANSACTIONAL_PRODUCERS = 64  # each holds a connection: the least recently used are closed
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
UNREACHABLE = {KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN, KafkaError._TIMED_OUT}
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
# Among them, a partition the client does not know: NotFound, unless the brokers' metadata lists it.
UNKNOWN_PART = (KafkaError._UNKNOWN_PARTITION, KafkaError._UNKNOWN_TOPIC, KafkaError.UNKNOWN_TOPIC_OR_PART)


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


# ---------------------------------------------------------------- naming the cause of a failure

_SECURITY: dict[int, tuple[type[AuthenticationFailed], str]] = {
    KafkaError._AUTHENTICATION: (AuthenticationFailed, "authentication failed"),
    KafkaError._SSL: (TlsHandshakeFailed, "TLS handshake failed"),
}
# librdkafka's lines: "<proto>://<host:port>/<id>: <reason> (after 12ms in state AUTH_REQ[, ...])"
_BROKER = re.compile(r"^(?:[a-z_]+://)?([^/\s]+)/\S*: ")
_AFTER = re.compile(r" \(after \d+ms in state \w+[^)]*\)$")
_OPENSSL = re.compile(r"^(?:SSL handshake failed: )?|(?:\S+:\d+:\S+ )?error:[0-9A-F]+:[^:]*::")
# A failed TLS handshake that librdkafka sometimes reports as a transport failure (_TRANSPORT), not _SSL:
# OpenSSL's own error when the handshake fails while its socket is read (e.g. a certificate that does
# not name the host), or a TLS client the peer hung up on in the handshake (a PLAINTEXT listener).
_OPENSSL_FAILED = re.compile(r"\berror:[0-9A-F]+:SSL routines::|^(?:[a-z_]+://)?\S+: SSL handshake failed: ")
# The peer refused the client's certificate, or wanted one (a listener with ssl.client.auth=required).
_CLIENT_CERTIFICATE = re.compile(r"alert (?:bad certificate|certificate required)")
_NO_MECHANISMS = re.compile(r"supported mechanisms: *$")
# A plaintext client on a TLS listener: the broker closes the connection before it answers ApiVersions.
_CLOSED_EARLY = re.compile(
    r"\]: (?:[a-z_]+://)?([^/\s]+)/\S*: Disconnected: connection closed by peer.*APIVERSION_QUERY"
)
# A client with no SASL on a SASL listener: the broker answers ApiVersions (allowed before SASL), then
# closes the connection at the next request, which is not the SASL handshake it waits for.
_CLOSED_UP = re.compile(
    r"\]: (?:[a-z_]+://)?([^/\s]+)/\S*: Disconnected: (?:SSL )?connection closed by peer \(after \d+ms in state UP\)"
)


def principal(settings: Mapping[str, Any]) -> str:
    """The Kafka principal a client with ``settings`` authenticates as, as the broker names it."""
    user = settings.get("sasl.username")
    if user:
        return f"User:{user}"
    if str(settings.get("security.protocol", "")).upper() == "SSL" and settings.get("ssl.certificate.location"):
        return f"the principal of certificate {settings['ssl.certificate.location']}"
    return "User:ANONYMOUS"


class Refusal(KafkaException, AuthenticationFailed):
    """The brokers refused the client's credentials (``_AUTHENTICATION``), as the version probe saw it
    before the store's first client. A KafkaException, so the store's ``_translate`` names the cluster;
    a StreamrepError, so where no ``_errors`` wraps the first client it is still one line."""

    def __str__(self) -> str:
        err = kafka_error(self)
        kind = _SECURITY.get(err.code()) if err is not None else None
        return f"{kind[1] if kind else 'refused'}: {err.str() if err is not None else ''}"


class TlsRefusal(Refusal, TlsHandshakeFailed):
    """The brokers' TLS handshake failed (``_SSL``), as the version probe saw it."""


class Unanswered(KafkaException, Unavailable):
    """No broker answered the version probe within its bound: the cluster is unreachable. A
    KafkaException, so the store's ``_translate`` names the cluster; an Unavailable, so it is retried."""

    def __str__(self) -> str:
        err = kafka_error(self)
        return err.str() if err is not None else "unreachable"


def _broker_and_reason(text: str) -> tuple[str | None, str]:
    """A librdkafka line split into its broker (if it names one) and its reason, without the state suffix."""
    found = _BROKER.match(text)
    return (found.group(1) if found else None), _AFTER.sub("", text[found.end() :] if found else text)


def _security_reason(err: KafkaError, settings: Mapping[str, Any]) -> str:
    """librdkafka's account of a refused connection as one short line naming the broker and principal."""
    broker, reason = _broker_and_reason(err.str())
    if err.code() == KafkaError._SSL:
        reason = _OPENSSL.sub("", reason)
        if _CLIENT_CERTIFICATE.search(reason) and not settings.get("ssl.certificate.location"):
            reason += ": the listener wants a client certificate (ssl.certificate.location is not set)"
    reason = _NO_MECHANISMS.sub("supported mechanisms: none (the listener does not use SASL)", reason)
    where = f"Kafka at {broker}" if broker else "Kafka"
    return f"{reason} ({where}, as {principal(settings)})"


def refusal(errors: Sequence[KafkaError], lines: Sequence[str], settings: Mapping[str, Any]) -> Refusal | None:
    """The brokers' refusal of a client's security, from what librdkafka reported while it connected
    (its error callback's ``errors``, its log ``lines``), or None: no refusal seen (reached, or not
    reached at all, which :func:`unanswered` or the client's own requests then report).

    :param settings: the client's settings (its principal and security.protocol, for the line)
    """
    for err in errors:
        if err.code() == KafkaError._TRANSPORT and _OPENSSL_FAILED.search(err.str()):
            err = KafkaError(KafkaError._SSL, err.str())
        if err.code() in _SECURITY:
            refused = TlsRefusal if err.code() == KafkaError._SSL else Refusal
            return refused(KafkaError(err.code(), _security_reason(err, settings)))
    protocol = str(settings.get("security.protocol", "PLAINTEXT")).upper()
    if protocol in ("PLAINTEXT", "SSL"):
        sasl = _no_sasl(lines, settings, protocol)
        if sasl is not None:
            return sasl
    if protocol in ("PLAINTEXT", "SASL_PLAINTEXT") and any(e.code() == KafkaError._ALL_BROKERS_DOWN for e in errors):
        closed = [found.group(1) for found in map(_CLOSED_EARLY.search, lines) if found]
        if closed:
            return TlsRefusal(
                KafkaError(
                    KafkaError._SSL,
                    f"Kafka at {closed[0]} closed the connection before answering: its listener may expect TLS "
                    f"(security.protocol is {protocol}) (as {principal(settings)})",
                )
            )
    return None


def _no_sasl(lines: Sequence[str], settings: Mapping[str, Any], protocol: str) -> Refusal | None:
    """A client without SASL whose first request after ApiVersions the broker hung up on: its listener
    waits for a SASL handshake (the client's requests would only be retried until they time out). Twice,
    on two connections: a broker that hung up once may have been shutting down."""
    closed = [found.group(1) for found in map(_CLOSED_UP.search, lines) if found]
    if len(closed) < 2:
        return None
    wanted = "SASL_SSL" if protocol == "SSL" else "SASL_PLAINTEXT or SASL_SSL"
    return Refusal(
        KafkaError(
            KafkaError._AUTHENTICATION,
            f"Kafka at {closed[0]} closed the connection at the first request after ApiVersions: its listener "
            f"may expect SASL (security.protocol is {protocol}, which sends none; {wanted} with sasl.mechanism, "
            f"sasl.username and sasl.password does) (as {principal(settings)})",
        )
    )


def unanswered(bootstrap: str, errors: Sequence[KafkaError], seconds: float) -> Unanswered:
    """The cluster is unreachable: no broker answered within ``seconds``. Names librdkafka's last reason
    (a refused connection, a name that does not resolve), if it gave one.

    :param errors: what librdkafka's error callback reported meanwhile
    """
    reasons = [e.str() for e in errors if e.code() != KafkaError._ALL_BROKERS_DOWN]
    line = f"Kafka at {bootstrap} is unreachable: it did not answer within {seconds:g} s"
    if reasons:
        line += f" ({_broker_and_reason(reasons[-1])[1]})"
    return Unanswered(KafkaError(KafkaError._TIMED_OUT, line))


# What a call refused for a missing ACL was doing (the start of its ``what``) -> the operation Kafka checked.
_OPERATIONS = (
    ("cannot create", "CREATE"),
    ("cannot write", "WRITE"),
    ("cannot delete", "DELETE"),
    ("cannot add partitions", "ALTER"),
    ("cannot set the ACLs", "ALTER"),
    ("cannot start a transaction", "WRITE"),
    ("transaction failed", "WRITE"),
    ("cannot commit cursors", "READ"),
    ("cannot read offsets", "DESCRIBE"),
    ("cannot read metadata", "DESCRIBE"),
    ("cannot read topics", "DESCRIBE"),
    ("cannot read consumer group", "DESCRIBE"),
    ("cannot read cursors", "DESCRIBE"),
    ("cannot list", "DESCRIBE"),
    ("cannot describe", "DESCRIBE"),
    ("cannot read", "READ"),
)
_GROUP_NAMED = re.compile(r"\bgroup (\S+)")
_TOPIC_NAMED = re.compile(r"\btopics? (\S+)")
_TO_OR_OF_NAMED = re.compile(r"\b(?:to|of) (\S+)$")  # "cannot write to <topic>", "cannot read offsets of <topic>"


def _named(what: str, kind: str) -> str | None:
    """The ``kind`` (``topic`` or ``group``) that ``what`` names, if it names one."""
    if kind == "group":
        found = _GROUP_NAMED.search(what)
    else:
        found = _TOPIC_NAMED.search(what) or (None if _GROUP_NAMED.search(what) else _TO_OR_OF_NAMED.search(what))
    return found.group(1) if found else None


def lacking(code: int, what: str, settings: Mapping[str, Any], internal_prefix: str) -> str | None:
    """``principal X lacks <operation> on <resource>`` for an authorization error ``code`` of a call doing
    ``what``, or None for any other code."""
    operation = next((op for start, op in _OPERATIONS if what.startswith(start)), "access")
    if code == KafkaError.TOPIC_AUTHORIZATION_FAILED:
        name = None if what.startswith("cannot set the ACLs") else _named(what, "topic")
        resource = f"topic {name}" if name else "the topic"
    elif code == KafkaError.GROUP_AUTHORIZATION_FAILED:
        name = _named(what, "group")
        resource = f"group {name}" if name else "the consumer group"
    elif code == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED:
        operation, resource = "WRITE", f"transactional ids {internal_prefix}*"
    elif code == KafkaError.CLUSTER_AUTHORIZATION_FAILED:
        resource = "the cluster"
    else:
        return None
    return f"principal {principal(settings)} lacks {operation} on {resource}"


def translate(
    exc: Any, what: str, *, cluster: str, bootstrap: str, settings: Mapping[str, Any], internal_prefix: str
) -> StreamrepError | RetryNow:
    """A Kafka error as streamrep's one line naming its cause: a fenced transactional writer (only a
    transaction can be fenced) is ``RetryNow``, for the transaction's caller to read again and retry.

    :param exc: the KafkaException, KafkaError or delivery error
    :param what: what the call was doing (``cannot write to <topic>``)
    :param settings: the cluster's client settings (the principal the line names)
    :param internal_prefix: the installation's internal prefix (its transactional ids)
    """
    err = kafka_error(exc)
    if err is None:
        return Unavailable(f"cluster {cluster}: {what}: {exc}")
    code = err.code()
    if code in FENCED:
        return RetryNow(f"cluster {cluster}: another writer took over ({what}: {err.str()}); retry")
    if code in _SECURITY:
        kind, label = _SECURITY[code]
        reason = err.str() if isinstance(exc, Refusal) else _security_reason(err, settings)
        return kind(f"cluster {cluster}: {label}: {reason}")
    missing = lacking(code, what, settings, internal_prefix)
    if missing is not None:
        return PermissionDenied(f"cluster {cluster}: {missing} ({what})")
    user_error = USER_ERRORS.get(code)
    if user_error is not None:
        return user_error(f"cluster {cluster}: {what}: {err.str()}")
    if isinstance(exc, Unanswered):
        return Unavailable(f"cluster {cluster}: {err.str()}")
    if code in UNREACHABLE:
        return Unavailable(f"cluster {cluster}: Kafka at {bootstrap} is unreachable ({what}: {err.str()})")
    return Unavailable(f"cluster {cluster}: {what}: {err.str()}")
