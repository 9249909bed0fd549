"""ReplicaUpToDateSensor and its trigger on real embedded clusters, with a real (in-process)
gateway replicating while the sensor waits."""

from __future__ import annotations

import asyncio
import threading

import pytest
from airflow.sdk.exceptions import (
    AirflowFailException,
    AirflowSensorTimeout,
    TaskDeferred,
)
from airflow_support import DST, SRC, ctx, running_replica

from streamrep.airflow.sensors import ReplicaUpToDateSensor
from streamrep.airflow.triggers import ReplicaUpToDateTrigger
from streamrep.client import Clusters, StreamAdmin
from streamrep.replication.gateway import Gateway


@pytest.fixture(autouse=True)
def as_alice(empty_home, monkeypatch):
    monkeypatch.setenv("STREAMREP_USER", "alice")
    monkeypatch.setenv("STREAMREP_GROUPS", "eng")


@pytest.fixture
def running(admin):
    """A resumed replica holding a copy of the source's 5 messages, and 5 more pending."""
    return running_replica(admin, copied=5)


def replicate_later(admin, delay: float = 0.5) -> threading.Thread:
    """A gateway of newyork that replicates everything after ``delay`` seconds."""

    def run():
        threading.Event().wait(delay)
        gateway = Gateway(StreamAdmin(Clusters(admin.clusters.home), admin.identity), "newyork", "gw1")
        while gateway.run_once():
            pass
        gateway.stop()
        gateway.admin.clusters.close()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def test_sensor_succeeds_at_once_when_up_to_date(running):
    Gateway(running, "newyork", "gw1").run_once()
    sensor = ReplicaUpToDateSensor(task_id="wait", path=SRC, replica=DST, poke_interval=0.1, timeout=5)
    row = sensor.execute(ctx())
    assert row["replicaPath"] == DST and row["isUptodate"] and row["pendingMessages"] == 0
    assert sensor.execute(ctx(2))["isUptodate"]  # a retry: same answer


def test_sensor_waits_for_the_gateway(running):
    sensor = ReplicaUpToDateSensor(task_id="wait", path=SRC, replica=DST, poke_interval=0.2, timeout=20)
    assert sensor.poke(ctx()).is_done is False
    thread = replicate_later(running)
    row = sensor.execute(ctx())
    thread.join()
    # the gateway may have stopped by the last poke: up to date either way
    assert row["isUptodate"] and row["replicaState"] in (
        "REPLICA_STATE_REPLICATING",
        "REPLICA_STATE_WAITING_FOR_GATEWAY",
    )


def test_sensor_fails_at_once_while_paused(running):
    running.pause_replica(SRC, DST)
    sensor = ReplicaUpToDateSensor(task_id="wait", path=SRC, replica=DST, poke_interval=0.1, timeout=3600)
    with pytest.raises(AirflowFailException, match=f"^streamrep: replica {DST} of {SRC} is paused"):
        sensor.execute(ctx())  # not after the hour of its timeout


def test_sensor_times_out_while_no_gateway_runs(running):
    sensor = ReplicaUpToDateSensor(task_id="wait", path=SRC, replica=DST, poke_interval=0.1, timeout=0.5)
    with pytest.raises(AirflowSensorTimeout):
        sensor.execute(ctx())


def test_sensor_fails_clearly_for_an_unknown_replica(running):
    sensor = ReplicaUpToDateSensor(task_id="wait", path=SRC, replica="/mapr/newyork/other", timeout=5)
    with pytest.raises(AirflowFailException, match=f"^streamrep: /mapr/newyork/other is not a replica of {SRC}$"):
        sensor.execute(ctx())


def test_deferrable_sensor_defers_to_the_trigger_which_fires_when_up_to_date(running):
    sensor = ReplicaUpToDateSensor(
        task_id="wait", path=SRC, replica=DST, deferrable=True, poke_interval=0.2, timeout=30
    )
    with pytest.raises(TaskDeferred) as deferred:
        sensor.execute(ctx())
    trigger = deferred.value.trigger
    assert isinstance(trigger, ReplicaUpToDateTrigger) and deferred.value.method_name == "execute_complete"
    classpath, kwargs = trigger.serialize()
    assert classpath == "streamrep.airflow.triggers.ReplicaUpToDateTrigger"
    rebuilt = ReplicaUpToDateTrigger(**kwargs)  # what the triggerer does

    async def first_event():
        async for event in rebuilt.run():
            return event

    thread = replicate_later(running)
    event = asyncio.run(asyncio.wait_for(first_event(), timeout=20))
    thread.join()
    assert event.payload["status"] == "uptodate"
    row = sensor.execute_complete(ctx(), event.payload)
    assert row["replicaPath"] == DST and row["isUptodate"]


def test_deferrable_sensor_returns_at_once_when_up_to_date(running):
    Gateway(running, "newyork", "gw1").run_once()
    sensor = ReplicaUpToDateSensor(task_id="wait", path=SRC, replica=DST, deferrable="true")
    assert sensor.execute(ctx())["isUptodate"]


def test_trigger_reports_a_removed_replica_as_an_error(running):
    trigger = ReplicaUpToDateTrigger(path=SRC, replica=DST, home=running.clusters.home, poll_interval=0.1)
    running.remove_replica(SRC, DST)

    async def first_event():
        async for event in trigger.run():
            return event

    event = asyncio.run(asyncio.wait_for(first_event(), timeout=10))
    assert event.payload == {"status": "error", "message": f"streamrep: {DST} is not a replica of {SRC}"}
    sensor = ReplicaUpToDateSensor(task_id="wait", path=SRC, replica=DST, deferrable=True)
    with pytest.raises(AirflowFailException, match="is not a replica of"):
        sensor.execute_complete(ctx(), event.payload)
