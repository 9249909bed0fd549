"""Issue 21 item 1: exactly-once across ``stream replica edit`` while a gateway runs. A gateway
runs in a thread, a producer writes numbered messages, and the replica's options are edited in
the middle (synchronous on and off, compression, throttle); the replica then holds every message
exactly once."""

from __future__ import annotations

import threading
import time

import pytest
from replication_helpers import assert_exactly_once, count

from streamrep.client import Producer
from streamrep.replication.gateway import Gateway

SF = "/mapr/sanfrancisco/activity"
NY = "/mapr/newyork/activity"
TOTAL = 300
EDITS = [
    {"synchronous": True},
    {"networkcompression": "zstd"},
    {"throttle": True, "synchronous": False},
    {"networkcompression": "off", "networkencryption": False},
]


@pytest.mark.backends("embedded", "kafka")
def test_edit_while_a_gateway_runs_loses_and_repeats_nothing(admin, monkeypatch):
    monkeypatch.setenv("STREAMREP_SYNC_TIMEOUT", "1")  # a synchronous flush waits the running gateway
    admin.create_stream(SF, ttl=0)
    admin.create_topic(SF, "t", 3)
    admin.create_stream(NY, copymetafrom=SF)
    admin.add_replica(SF, NY)
    admin.add_upstream(NY, SF)
    gateway = Gateway(admin, "newyork", "gw1")
    halt = threading.Event()
    failures: list[BaseException] = []

    def run_gateway() -> None:
        try:
            while not halt.is_set():
                if gateway.run_once() == 0:
                    time.sleep(0.02)
        except BaseException as err:  # noqa: BLE001 - reported by the test
            failures.append(err)

    thread = threading.Thread(target=run_gateway, daemon=True)
    thread.start()
    sent: list[str] = []
    edits = iter(EDITS)
    try:
        with Producer(admin) as producer:
            for i in range(TOTAL):
                value = f"n{i:04d}"
                producer.send(f"{SF}:t", value.encode())
                sent.append(value)
                if i % 20 == 19:
                    producer.flush()
                if i % 70 == 35:  # in the middle of the flow, with the gateway applying
                    edit = next(edits, None)
                    if edit is not None:
                        admin.edit_replica(SF, NY, **edit)
        deadline = time.monotonic() + 120
        while count(admin, NY) < TOTAL and time.monotonic() < deadline and not failures:
            time.sleep(0.2)
    finally:
        halt.set()
        thread.join(60)
        gateway.stop()
    assert not failures, failures
    assert next(edits, None) is None  # every edit was made mid-flow
    (row,) = admin.list_replicas(SF)
    assert (row.synchronous, row.throttle, row.networkcompression) == (False, True, "off")
    assert_exactly_once(admin, NY, sent)
    assert gateway.run_once(whole=True) == 0  # nothing left, nothing applied twice
    assert_exactly_once(admin, NY, sent)
