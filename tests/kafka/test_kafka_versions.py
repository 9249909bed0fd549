"""Brokers too old for streamrep are refused in one line (``streamrep.store.kafka.versions``, issue 28).

The decision is tested on ApiVersions tables. The tables of 3.9.2, 4.3.1 and 4.4.0 are those brokers' real
answers (read with ``versions.probe`` from the brokers ``scripts/kafka_local.py`` starts). No broker
older than 2.5 runs here: Kafka releases before 2.8 run only with ZooKeeper, which this project's tooling
does not start, and Kafka supports Java 17 (the machine's) only from 3.0 on. So the old brokers' tables are
the 3.9.2 table with what later releases added taken away, and the store's refusal is shown end to end
against a stand-in that answers only ApiVersions, as such a broker would (the one place a fake broker
stands in). The probe itself runs against the session's real broker.
"""

from __future__ import annotations

import socket
import struct
import threading
import uuid

import pytest

from streamrep.errors import Misinstalled
from streamrep.store.kafka import KafkaStore, versions


def table(text: str) -> dict[int, tuple[int, int]]:
    """``"0:0-11 1:0-17"`` as ``{0: (0, 11), 1: (0, 17)}``."""
    out = {}
    for part in text.split():
        key, span = part.split(":")
        low, high = span.split("-")
        out[int(key)] = (int(low), int(high))
    return out


# What versions.probe read from the brokers of scripts/kafka_local.py (28 Nov 2026).
KAFKA_3_9_2 = table(
    "0:0-11 1:0-17 2:0-9 3:0-12 8:0-9 9:0-9 10:0-6 11:0-9 12:0-4 13:0-5 14:0-5 15:0-5 16:0-5 17:0-1 18:0-4 "
    "19:0-7 20:0-6 21:0-2 22:0-5 23:0-4 24:0-5 25:0-4 26:0-4 27:0-1 28:0-4 29:0-3 30:0-3 31:0-3 32:0-4 33:0-2 "
    "34:0-2 35:0-4 36:0-2 37:0-3 38:0-3 39:0-2 40:0-2 41:0-3 42:0-2 43:0-2 44:0-1 45:0-0 46:0-0 47:0-0 48:0-1 "
    "49:0-1 50:0-0 51:0-0 55:0-2 57:0-1 60:0-1 61:0-0 64:0-0 65:0-0 66:0-1 68:0-0 69:0-0 74:0-0 75:0-0 80:0-0 "
    "81:0-0"
)
KAFKA_4_3_1 = table(
    "0:0-13 1:4-18 2:1-11 3:0-13 8:2-10 9:1-10 10:0-6 11:0-9 12:0-4 13:0-5 14:0-5 15:0-6 16:0-5 17:0-1 18:0-4 "
    "19:2-7 20:1-6 21:0-2 22:0-5 23:2-4 24:0-5 25:0-4 26:0-5 27:1-2 28:0-5 29:1-3 30:1-3 31:1-3 32:1-4 33:0-2 "
    "34:1-2 35:1-5 36:0-2 37:0-3 38:1-3 39:1-2 40:1-2 41:1-3 42:0-2 43:0-2 44:0-1 45:0-1 46:0-0 47:0-0 48:0-1 "
    "49:0-1 50:0-0 51:0-0 55:0-2 57:0-2 60:0-2 61:0-0 64:0-0 65:0-0 66:0-2 68:0-1 69:0-1 74:0-1 75:0-0 76:1-1 "
    "77:1-1 78:1-2 79:1-2 80:0-1 81:0-0 83:0-0 84:0-0 85:0-1 86:0-0 87:0-1 88:0-0 89:0-0 90:0-1 91:0-0 92:0-0"
)
KAFKA_4_4_0 = table(
    "0:0-13 1:4-18 2:1-11 3:0-13 8:2-10 9:1-10 10:0-6 11:0-9 12:0-4 13:0-5 14:0-5 15:0-6 16:0-5 17:0-1 18:0-5 "
    "19:2-7 20:1-6 21:0-2 22:0-5 23:2-4 24:0-5 25:0-4 26:0-5 27:1-2 28:0-6 29:1-3 30:1-3 31:1-3 32:1-4 33:0-2 "
    "34:1-2 35:1-5 36:0-2 37:0-3 38:1-3 39:1-2 40:1-2 41:1-3 42:0-3 43:0-2 44:0-1 45:0-1 46:0-0 47:0-0 48:0-1 "
    "49:0-1 50:0-0 51:0-0 55:0-2 57:0-2 60:0-2 61:0-0 64:0-0 65:0-0 66:0-2 68:0-1 69:0-1 74:0-1 75:0-0 76:1-1 "
    "77:1-1 78:1-2 79:1-2 80:0-1 81:0-0 83:0-0 84:0-0 85:0-1 86:0-0 87:0-1 88:0-1 89:0-1 90:0-1 91:0-0 92:0-0 "
    "93:0-0 94:0-0"
)


# What the KRaft controller's listener of a 4.3.1 node answered versions.probe (30 Nov 2026): no Produce (0),
# no Metadata (3), but the controllers' Vote (52).
KAFKA_4_3_1_CONTROLLER = table(
    "1:4-18 17:0-1 18:0-4 19:2-7 20:1-6 29:1-3 30:1-3 31:1-3 32:1-4 33:0-2 36:0-2 37:0-3 38:1-3 39:1-2 40:1-2 "
    "41:1-3 43:0-2 44:0-1 45:0-1 46:0-0 49:0-1 50:0-0 51:0-0 52:0-2 53:0-1 54:0-1 55:0-2 56:2-3 57:0-2 58:0-0 "
    "59:0-1 60:0-2 62:0-4 63:0-2 64:0-0 67:0-0 70:0-0 73:0-0 80:0-1 81:0-0 82:0-0"
)


def older(keep_below: int, **highest: int) -> dict[int, tuple[int, int]]:
    """The 3.9.2 table without the APIs numbered ``keep_below`` and up, and with lower highest versions
    (``InitProducerId=2``: by Kafka's names of the keys used here)."""
    keys = {"ListOffsets": 2, "InitProducerId": 22, "TxnOffsetCommit": 28, "DescribeAcls": 29, "CreateAcls": 30}
    keys |= {"DeleteAcls": 31}
    out = {key: span for key, span in KAFKA_3_9_2.items() if key < keep_below}
    for name, high in highest.items():
        out[keys[name]] = (0, high)
    return out


KAFKA_2_4 = older(48, InitProducerId=2, TxnOffsetCommit=2, ListOffsets=5)
KAFKA_2_0 = older(43, InitProducerId=1, TxnOffsetCommit=1, ListOffsets=3)
KAFKA_1_1 = older(43, InitProducerId=0, TxnOffsetCommit=0, ListOffsets=2, DescribeAcls=0, CreateAcls=0, DeleteAcls=0)
KAFKA_0_10 = {key: span for key, span in older(21, ListOffsets=1).items()}


@pytest.mark.parametrize("real", [KAFKA_3_9_2, KAFKA_4_3_1, KAFKA_4_4_0], ids=["3.9.2", "4.3.1", "4.4.0"])
def test_the_releases_tested_here_serve_everything_streamrep_needs(real):
    assert versions.missing(real) == []
    assert versions.broker_release(real) == "3.0 or later"
    versions.check("127.0.0.1:9092", real)  # no refusal


def test_the_minimum_is_the_newest_release_of_what_the_store_needs():
    assert versions.MINIMUM == "2.5"
    assert [need.api for need in versions.NEEDS if need.release == "2.5"] == ["InitProducerId"]


@pytest.mark.parametrize(
    "broker,answered,line",
    [
        (
            "kafka-old:9092",
            KAFKA_2_4,
            "Kafka broker at kafka-old:9092 is 2.4 (API versions: InitProducerId v0-v2; needed: InitProducerId v3): "
            "streamrep needs Kafka 2.5 or later for transactional writers that go on after an aborted transaction "
            "(KIP-360)",
        ),
        # A url naming a KRaft controller's port: no broker, not an old release (it said "is 2.8 (...)").
        (
            "127.0.0.1:9094",
            KAFKA_4_3_1_CONTROLLER,
            "Kafka at 127.0.0.1:9094 is not a broker's client listener (it serves Vote: a KRaft controller's "
            "listener): the cluster's url must name the brokers' client listeners",
        ),
    ],
    ids=["a 2.4 broker", "a controller's port"],
)
def test_a_refused_broker_is_one_line_naming_its_release_and_what_streamrep_needs(broker, answered, line):
    with pytest.raises(versions.UnsupportedBroker) as refused:
        versions.check(broker, answered)
    assert str(refused.value) == line
    assert isinstance(refused.value, Misinstalled)  # not retried: an upgrade fixes it, time does not


def test_older_brokers_name_their_release_and_every_need_they_miss():
    assert versions.broker_release(KAFKA_2_0) == "2.0"
    assert [need.version for need in versions.missing(KAFKA_2_0)] == [3]
    assert versions.broker_release(KAFKA_1_1) == "1.1"
    with pytest.raises(versions.UnsupportedBroker) as refused:
        versions.check("b:1", KAFKA_1_1)
    line = str(refused.value)
    assert line.startswith("Kafka broker at b:1 is 1.1 (API versions: DescribeAcls v0 only, CreateAcls v0 only, ")
    assert "needed: DescribeAcls v1, CreateAcls v1, DeleteAcls v1, InitProducerId v3)" in line
    assert line.endswith(
        "streamrep needs Kafka 2.5 or later for a stream's prefixed ACLs (KIP-290); transactional writers that "
        "go on after an aborted transaction (KIP-360)"
    )
    assert "\n" not in line
    assert versions.broker_release(KAFKA_0_10) == "older than 0.11"
    assert (
        "no InitProducerId"
        in pytest.raises(versions.UnsupportedBroker, versions.check, "b:1", KAFKA_0_10).value.args[0]
    )


def test_a_version_kafka_4_dropped_is_no_missing_need():
    # Kafka 4.0 serves ListOffsets from v1 and DescribeAcls from v1 on: a need of v0 is met by anything newer.
    assert KAFKA_4_4_0[2][0] == 1 and versions.missing(KAFKA_4_4_0) == []


def test_librdkafkas_lines_give_the_broker_and_its_table():
    prefix = (
        "APIVERSION [rdkafka#producer-2] [thrd:sasl_ssl://10.0.0.7:9093/bootstrap]: sasl_ssl://10.0.0.7:9093/bootstrap:"
    )
    lines = [
        f"{prefix} Broker API support:",
        f"{prefix}   ApiKey Produce (0) Versions 0..11",
        f"{prefix}   ApiKey InitProducerId (22) Versions 0..5",
        f"{prefix}   ApiKey Unknown-80? (80) Versions 0..0",
        f"{prefix}  Feature MsgVer1: Produce (2..32767) supported by broker",
    ]
    assert versions.parse_api_lines(lines) == ("10.0.0.7:9093", {0: (0, 11), 22: (0, 5), 80: (0, 0)})
    assert versions.parse_api_lines(["INIT [rdkafka#producer-1] [thrd:app]: initialized"]) == (None, {})


@pytest.mark.kafka
def test_the_probe_reads_the_session_brokers_table_and_the_store_connects(kafka_broker):
    broker, answered = versions.probe({"bootstrap.servers": kafka_broker})
    assert broker == kafka_broker
    assert answered == KAFKA_4_3_1  # the default release, as measured
    store = KafkaStore("current", kafka_broker, {"streamrep.namespace": f"t{uuid.uuid4().hex[:10]}"})
    try:
        assert store.store_id()
    finally:
        store.close()


def test_an_unreachable_cluster_decides_nothing():
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    assert versions.probe({"bootstrap.servers": f"127.0.0.1:{port}"}, timeout=5) == (None, {})


class OldBroker(threading.Thread):
    """Answers ApiVersions (any version) with ``api_table``, as a broker of that release would, and
    nothing else: a stand-in for a broker older than any that runs here."""

    def __init__(self, api_table: dict[int, tuple[int, int]]):
        super().__init__(daemon=True)
        self.table = api_table
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.asked: list[int] = []

    def answer(self, version: int, correlation: int) -> bytes:
        entries = sorted(self.table.items())
        if version >= 3:  # flexible: compact array, tagged fields
            body = struct.pack(">h", 0) + bytes([len(entries) + 1])
            body += b"".join(struct.pack(">hhhB", key, low, high, 0) for key, (low, high) in entries)
            body += struct.pack(">iB", 0, 0)
        else:
            body = struct.pack(">hi", 0, len(entries))
            body += b"".join(struct.pack(">hhh", key, low, high) for key, (low, high) in entries)
            body += struct.pack(">i", 0) if version >= 1 else b""
        message = struct.pack(">i", correlation) + body
        return struct.pack(">i", len(message)) + message

    def run(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            threading.Thread(target=self.serve, args=(conn,), daemon=True).start()

    def serve(self, conn: socket.socket) -> None:
        with conn:
            while True:
                head = conn.recv(4, socket.MSG_WAITALL)
                if len(head) < 4:
                    return
                request = conn.recv(struct.unpack(">i", head)[0], socket.MSG_WAITALL)
                key, version, correlation = struct.unpack(">hhi", request[:8])
                if key != 18:
                    continue  # a real old broker would answer; the probe has what it asked for
                self.asked.append(version)
                conn.sendall(self.answer(version, correlation))

    def close(self) -> None:
        self.server.close()


def test_a_store_on_a_2_4_broker_refuses_every_call_in_one_line():
    old = OldBroker(KAFKA_2_4 | {18: (0, 3)})
    old.start()
    store = KafkaStore("old", f"127.0.0.1:{old.port}", {})
    try:
        with pytest.raises(versions.UnsupportedBroker) as refused:
            store.store_id()
        assert str(refused.value) == (
            f"Kafka broker at 127.0.0.1:{old.port} is 2.4 (API versions: InitProducerId v0-v2; needed: "
            "InitProducerId v3): streamrep needs Kafka 2.5 or later for transactional writers that go on after "
            "an aborted transaction (KIP-360)"
        )
        asked = len(old.asked)
        assert asked  # librdkafka asked, as it asks every broker
        with pytest.raises(versions.UnsupportedBroker):  # and again, without asking the broker again
            store.topics(str(uuid.uuid4()))
        assert len(old.asked) == asked
    finally:
        store.close()
        old.close()
