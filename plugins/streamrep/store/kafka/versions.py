"""The Kafka brokers streamrep can use, decided on a broker's ApiVersions answer.

A Kafka broker answers every client's first request, ApiVersions, with the versions of each API it
serves. What the Kafka store needs of them (:data:`NEEDS`), and the first Apache Kafka release that
serves each:

- transactions (InitProducerId, AddPartitionsToTxn, EndTxn) and the last stable offset through a
  read_committed ListOffsets (v2): 0.11. Retention's DeleteRecords: 0.11. CreatePartitions: 1.0.
- a stream's grants are PREFIXED ACLs (KIP-290: DescribeAcls, CreateAcls, DeleteAcls v1): 2.0.
- InitProducerId v3 (KIP-360): 2.5. librdkafka (since 1.7) recovers a transactional producer from an
  abortable error by bumping its epoch only on brokers that serve it; before 2.5 such an error is fatal
  to the producer. The store keeps each transactional producer for many transactions (aborting one that
  lost a race and going on), and its fencing rests on the epochs.

So streamrep needs Kafka 2.5 or later (:data:`MINIMUM`). It does not use KIP-447's
``send_offsets_to_transaction`` (consumer cursors are committed by the admin API, outside transactions).

confluent-kafka has no call that returns ApiVersions, so :func:`probe` reads librdkafka's own account
of them (its ``feature`` debug lines, ``ApiKey <name> (<key>) Versions <min>..<max>``) from a short-lived
admin client with the cluster's settings, so it speaks whatever security the cluster asks for. It waits
for the answer to one request after ApiVersions too: a SASL listener refuses the client only then. A
probe refused for its credentials or TLS (librdkafka's error callback says ``_AUTHENTICATION`` or
``_SSL``, or a broker hung up where only a security mismatch makes it) is refused at once in one line
naming the cause (``client.refusal``): the store's own requests would only time out. A cluster none of
whose brokers answered within :data:`ANSWER_SECONDS` is unreachable (``client.unanswered``), said in
one line within that bound; an answer the probe cannot read decides nothing.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from streamrep.errors import Misinstalled

ApiTable = Mapping[int, tuple[int, int]]  # api key -> (lowest, highest) version the broker serves
# A cluster none of whose brokers answered within this is unreachable: the one-line error must come
# within 15 s of the call (issue 29), and 5 s are left for a loaded machine's process start and clients.
ANSWER_SECONDS = 10.0


@dataclass(frozen=True)
class Need:
    """One API version the Kafka store uses.

    :param api: Kafka's name of the API
    :param key: its api key
    :param version: the lowest version of it the store needs
    :param release: the first Apache Kafka release that serves that version
    :param why: what streamrep does with it, as the error line says it
    """

    api: str
    key: int
    version: int
    release: str
    why: str


NEEDS = (
    Need("InitProducerId", 22, 0, "0.11", "transactions"),
    Need("AddPartitionsToTxn", 24, 0, "0.11", "transactions"),
    Need("EndTxn", 26, 0, "0.11", "transactions"),
    Need("ListOffsets", 2, 2, "0.11", "read_committed offsets (the last stable offset)"),
    Need("DeleteRecords", 21, 0, "0.11", "retention"),
    Need("CreatePartitions", 37, 0, "1.0", "adding partitions"),
    Need("DescribeAcls", 29, 1, "2.0", "a stream's prefixed ACLs (KIP-290)"),
    Need("CreateAcls", 30, 1, "2.0", "a stream's prefixed ACLs (KIP-290)"),
    Need("DeleteAcls", 31, 1, "2.0", "a stream's prefixed ACLs (KIP-290)"),
    Need(
        "InitProducerId",
        22,
        3,
        "2.5",
        "transactional writers that go on after an aborted transaction (KIP-360)",
    ),
)


def _release_key(release: str) -> tuple[int, ...]:
    return tuple(int(part) for part in release.split("."))


MINIMUM = max((need.release for need in NEEDS), key=_release_key)

# (api key, version, release): the first release that served that version of that API, oldest first.
# The newest one a broker serves names its release (from 3.0 on, only "3.0 or later").
MARKERS = (
    (22, 0, "0.11"),  # InitProducerId (KIP-98)
    (37, 0, "1.0"),  # CreatePartitions (KIP-195)
    (42, 0, "1.1"),  # DeleteGroups (KIP-229)
    (29, 1, "2.0"),  # DescribeAcls v1 (KIP-290)
    (2, 4, "2.1"),  # ListOffsets v4 (KIP-320)
    (43, 0, "2.2"),  # ElectLeaders (KIP-183)
    (44, 0, "2.3"),  # IncrementalAlterConfigs (KIP-339)
    (47, 0, "2.4"),  # OffsetDelete (KIP-496)
    (22, 3, "2.5"),  # InitProducerId v3 (KIP-360)
    (48, 0, "2.6"),  # DescribeClientQuotas (KIP-546)
    (51, 0, "2.7"),  # AlterUserScramCredentials (KIP-554)
    (60, 0, "2.8"),  # DescribeCluster (KIP-700)
    (66, 0, "3.0"),  # ListTransactions (KIP-664)
)


METADATA, VOTE = 3, 52  # api keys: what every broker serves, and what only KRaft controllers serve


class UnsupportedBroker(Misinstalled):
    """A Kafka broker older than streamrep needs: retrying cannot help until the cluster is upgraded."""


def _serves(table: ApiTable, key: int, version: int) -> bool:
    # The highest version decides: clients speak the newest both sides know, and Kafka 4.0 dropped the
    # oldest versions of many APIs (ListOffsets v0, for one) without taking anything away.
    return key in table and table[key][1] >= version


def broker_release(table: ApiTable) -> str:
    """The Apache Kafka release a broker's ApiVersions answer is (``2.4``), ``3.0 or later``, or
    ``older than 0.11``."""
    served = [release for key, version, release in MARKERS if _serves(table, key, version)]
    if not served:
        return f"older than {MARKERS[0][2]}"
    newest = max(served, key=_release_key)
    return f"{newest} or later" if newest == MARKERS[-1][2] else newest


def missing(table: ApiTable) -> list[Need]:
    """The needs a broker's ApiVersions answer does not meet."""
    return [need for need in NEEDS if not _serves(table, need.key, need.version)]


def _served(table: ApiTable, need: Need) -> str:
    if need.key not in table:
        return f"no {need.api}"
    low, high = table[need.key]
    return f"{need.api} v{low}-v{high}" if low != high else f"{need.api} v{low} only"


def check(broker: str, table: ApiTable) -> None:
    """Refuse a broker too old for streamrep, in one line.

    :param broker: the broker's address, as the line names it
    :param table: its ApiVersions answer
    :raises UnsupportedBroker: naming the broker's release, what it serves of what streamrep needs,
        and what for
    """
    if METADATA not in table:  # every broker serves Metadata; a KRaft controller's listener does not
        controller = " (it serves Vote: a KRaft controller's listener)" if VOTE in table else ""
        raise UnsupportedBroker(
            f"Kafka at {broker} is not a broker's client listener{controller}: "
            "the cluster's url must name the brokers' client listeners"
        )
    lacking = missing(table)
    if not lacking:
        return
    served = ", ".join(dict.fromkeys(_served(table, need) for need in lacking))
    wanted = ", ".join(dict.fromkeys(f"{need.api} v{need.version}" for need in lacking))
    why = "; ".join(dict.fromkeys(need.why for need in lacking))
    raise UnsupportedBroker(
        f"Kafka broker at {broker} is {broker_release(table)} (API versions: {served}; needed: {wanted}): "
        f"streamrep needs Kafka {MINIMUM} or later for {why}"
    )


# ---------------------------------------------------------------- asking a broker

_API_LINE = re.compile(r"ApiKey .*\((\d+)\) Versions (\d+)\.\.(\d+)")
_THREAD = re.compile(r"\[thrd:(?:[a-z_]+://)?([^\]/]+)/[^\]]*\]")


def parse_api_lines(lines: list[str]) -> tuple[str | None, dict[int, tuple[int, int]]]:
    """The broker and its API table from librdkafka's ``APIVERSION`` debug lines (the first broker's)."""
    broker: str | None = None
    table: dict[int, tuple[int, int]] = {}
    for line in lines:
        found = _API_LINE.search(line)
        if found is None:
            continue
        thread = _THREAD.search(line)
        name = thread.group(1) if thread else "?"
        if broker is None:
            broker = name
        elif name != broker:
            continue
        table[int(found.group(1))] = (int(found.group(2)), int(found.group(3)))
    return broker, table


def _table_told(lines: list[str]) -> bool:
    """librdkafka has logged a whole table: its ``ApiKey`` lines, then a line of what it enables."""
    told = False
    for line in lines:
        if _API_LINE.search(line):
            told = True
        elif told and "APIVERSION" in line:
            return True
    return False


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


# librdkafka reads a reply's first 4 bytes as its size: a server that is no Kafka broker answers text.
_RESPONSE_SIZE = re.compile(r"Invalid response size (\d+) ")


def not_kafka(errors: list[Any]) -> str | None:
    """What a server that answered, but not as Kafka does, sent (``'HTTP'...``), from librdkafka's
    errors; None if no such answer."""
    for err in errors:
        found = _RESPONSE_SIZE.search(err.str())
        head = int(found.group(1)).to_bytes(4, "big") if found and int(found.group(1)) < 1 << 32 else b""
        if head and all(32 <= byte < 127 for byte in head):
            return head.decode("ascii")
    return None


def _decided(errors: list[Any], lines: list[str], client: Mapping[str, Any]) -> bool:
    """What librdkafka reported so far decides the probe before its request's answer: a refusal of the
    client's security, an answer that is not Kafka's, or the table of a listener that is refused whatever
    it answers next."""
    from streamrep.store.kafka.client import refusal

    if refusal(errors, lines, client) is not None or not_kafka(errors) is not None:
        return True
    if not _table_told(lines):
        return False
    _, table = parse_api_lines(lines)
    return METADATA not in table or bool(missing(table))


@dataclass
class _Answer:
    """What a probe saw: the broker and its API table (empty: none read), whether its request went
    unanswered for the whole bound, and librdkafka's error callback's errors and log lines (all empty
    when librdkafka refused the settings themselves)."""

    broker: str | None
    table: dict[int, tuple[int, int]]
    unanswered: bool
    errors: list[Any]
    lines: list[str]


def _ask(client: Mapping[str, Any], timeout: float) -> _Answer:
    """:func:`probe`, with what librdkafka reported while connecting."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient

    handler = _Lines()
    log = logging.getLogger(f"streamrep.kafka.versions.{threading.get_ident()}")
    log.propagate = False
    log.setLevel(logging.DEBUG)
    log.addHandler(handler)
    failed: list[KafkaError] = []
    settings: dict[str, Any] = {k: v for k, v in client.items() if k not in ("logger", "debug", "error_cb")}
    settings.update({"debug": "feature", "logger": log, "error_cb": failed.append})
    try:
        admin = AdminClient(settings)
    except KafkaException:  # settings librdkafka refuses: the store's own client names them in one line
        log.removeHandler(handler)
        return _Answer(None, {}, False, [], [])
    try:
        # Any request makes the client connect, and ApiVersions comes first on a connection. The request's
        # own answer (or failure) is awaited too: SASL authenticates after ApiVersions, and a SASL listener
        # hangs up on a client without SASL only at the next request. A transport error alone decides
        # nothing: librdkafka connects again, and another broker of the bootstrap list may answer.
        future = admin.describe_cluster(request_timeout=timeout)
        deadline = time.monotonic() + timeout
        seen = 0
        while time.monotonic() < deadline and not future.done():
            admin.poll(0.005)
            if len(failed) + len(handler.lines) != seen:  # only what is new can decide
                seen = len(failed) + len(handler.lines)
                if _decided(failed, handler.lines, client):
                    break
        admin.poll(0)  # the lines logged before the answer
        broker, table = parse_api_lines(handler.lines)
        unanswered = not future.done() or future.exception() is not None
        return _Answer(broker, table, unanswered, failed, handler.lines)
    finally:
        log.removeHandler(handler)
        del admin


def probe(client: Mapping[str, Any], timeout: float = 10.0) -> tuple[str | None, dict[int, tuple[int, int]]]:
    """Ask one broker of a cluster for its ApiVersions, with the cluster's client settings.

    :param client: confluent-kafka settings, ``bootstrap.servers`` included (``logger`` and ``debug``
        are replaced)
    :param timeout: the bound of the whole probe
    :returns: the broker's address and its API table; an empty table when no broker answered (unreachable,
        refused, or librdkafka's lines not understood)
    """
    answer = _ask(client, timeout)
    return answer.broker, answer.table


# (bootstrap, the client's settings) -> the broker's refusal, or None: it passed. The settings are part of
# the key: one process may reach the same brokers with other credentials, which must be probed again.
_checked: dict[tuple[str, tuple[tuple[str, str], ...]], UnsupportedBroker | None] = {}
_checked_lock = threading.Lock()


def _settings_key(client: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((str(k), str(v)) for k, v in client.items() if k not in ("logger", "debug", "error_cb")))


def check_cluster(bootstrap: str, client: Mapping[str, Any]) -> None:
    """:func:`check` the broker a cluster's client reaches first, once per process, bootstrap address and
    settings; and refuse settings whose credentials or TLS the brokers refuse, at once: the client's own
    requests would only time out.

    :raises UnsupportedBroker: as :func:`check`
    :raises client.Refusal: the brokers refused the client's authentication or TLS handshake (never
        remembered: the cluster may be fixed)
    :raises client.Unanswered: no broker answered within :data:`ANSWER_SECONDS` (never remembered)
    """
    from streamrep.store.kafka.client import refusal, unanswered

    key = (bootstrap, _settings_key(client))
    with _checked_lock:
        if key in _checked:
            refused = _checked[key]
            if refused is not None:
                raise UnsupportedBroker(str(refused))
            return
    answer = _ask(client, ANSWER_SECONDS)
    security = refusal(answer.errors, answer.lines, client)
    if security is not None:
        raise security
    if not answer.table:
        other = not_kafka(answer.errors)
        if other is not None:
            raise UnsupportedBroker(
                f"{bootstrap} is no Kafka listener: it answered {other!r}... (an HTTP or other server's port?): "
                "the cluster's url must name the brokers' client listeners"
            )
        if answer.unanswered:
            raise unanswered(bootstrap, answer.errors, ANSWER_SECONDS)
        return  # an answer the probe could not read: nothing decided, asked again by the next store object
    try:
        check(answer.broker or bootstrap, answer.table)
    except UnsupportedBroker as err:
        with _checked_lock:
            _checked[key] = err
        raise
    with _checked_lock:
        _checked[key] = None
