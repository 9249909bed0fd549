"""Airflow Assets: the streamrep:// URIs (through Airflow's own Asset, with the provider's
normalizer), the replica's caught-up event from the up-to-date sensor run for real on embedded
clusters, and StreamMessageTrigger's run against real stores of both backends: each message fires
once, and a restarted trigger goes on after the last message fired. The same trigger through
common-messaging's MessageQueueTrigger(scheme="streamrep"): found by common-messaging's own
lookup, run for real, and one line for each bad argument."""

from __future__ import annotations

import asyncio
import threading

import pytest
from airflow.providers.common.messaging.triggers.msg_queue import MESSAGE_QUEUE_PROVIDERS, MessageQueueTrigger
from airflow.providers_manager import ProvidersManager
from airflow.sdk import Asset
from airflow.sdk.definitions.asset import AssetUniqueKey
from airflow.sdk.exceptions import AirflowFailException, TaskDeferred
from airflow.sdk.execution_time.context import OutletEventAccessors
from airflow.triggers.base import BaseEventTrigger
from airflow_support import DST, SRC, ctx, running_replica

from streamrep.airflow.assets import (
    REPLICAS_ALIAS,
    asset_uri,
    emit_replica_caught_up,
    path_of,
    replica_asset,
    topic_asset,
)
from streamrep.airflow.provider import get_provider_info
from streamrep.airflow.queues import StreamrepMessageQueueProvider
from streamrep.airflow.sensors import ReplicaUpToDateSensor
from streamrep.airflow.triggers import StreamMessageTrigger
from streamrep.client import Producer
from streamrep.errors import InvalidArgument, PermissionDenied
from streamrep.replication.gateway import Gateway

TOPIC = f"{SRC}:clicks"


@pytest.fixture(autouse=True)
def as_alice(empty_home, monkeypatch):
    monkeypatch.setenv("STREAMREP_USER", "alice")
    monkeypatch.setenv("STREAMREP_GROUPS", "eng")


# --- URIs ------------------------------------------------------------------------------------


def test_a_replica_is_an_asset_named_by_its_path_with_a_streamrep_uri():
    asset = replica_asset(DST)
    assert (asset.name, asset.uri, asset.group) == (DST, "streamrep://newyork/activity", "streamrep")
    assert replica_asset("mapr/newyork/activity/") == asset  # one asset however the path is written
    assert replica_asset("/mapr/newyork/apps/my stream").uri == "streamrep://newyork/apps/my%20stream"
    assert topic_asset(TOPIC).uri == "streamrep://sanfrancisco/activity:clicks"
    for path in (DST, "/mapr/newyork/apps/my stream", "/mapr/a.b_c-1/x/50%~=,+@:t-1"):
        assert path_of(asset_uri(path)) == path


def test_airflow_normalizes_streamrep_uris_through_the_provider_handler():
    assert {"schemes": ["streamrep"], "handler": "streamrep.airflow.assets.normalize_uri"} in get_provider_info()[
        "asset-uris"
    ]
    # written by hand, other ways: Airflow's Asset applies the handler and finds the same URI
    assert Asset(uri="streamrep://newyork/activity/").uri == replica_asset(DST).uri
    assert Asset(uri="STREAMREP://newyork/apps/my stream").uri == "streamrep://newyork/apps/my%20stream"
    assert Asset(uri="streamrep://newyork/activity").normalized_uri == "streamrep://newyork/activity"


@pytest.mark.parametrize(
    "uri",
    [
        "streamrep://newyork/a:b:c",
        "streamrep:///activity",
        "streamrep://newyork",
        "streamrep://newyork:9092/activity",
        "streamrep://newyork/a//b",
        "streamrep://newyork/activity?x=1",
        "streamrep://-bad/activity",
    ],
)
def test_a_uri_naming_no_stream_is_refused(uri):
    with pytest.raises(ValueError):
        Asset(uri=uri)


def test_replica_and_topic_assets_refuse_what_they_are_not():
    with pytest.raises(InvalidArgument, match="a replica is a stream, not a topic"):
        replica_asset(TOPIC)
    with pytest.raises(InvalidArgument, match="a topic path is <stream>:<topic>"):
        topic_asset(DST)
    with pytest.raises(InvalidArgument, match="names no cluster"):
        replica_asset("/activity")  # an asset names its cluster: no registry at parse time


# --- the replica's caught-up event -----------------------------------------------------------


def task_context() -> dict:
    return {**ctx(), "outlet_events": OutletEventAccessors()}


def alias_events(context: dict) -> list:
    return context["outlet_events"][REPLICAS_ALIAS].asset_alias_events


def test_the_sensor_emits_the_replicas_event_once_it_is_up_to_date(admin):
    running_replica(admin, copied=5)
    Gateway(admin, "newyork", "gw1").run_once()
    context = task_context()
    sensor = ReplicaUpToDateSensor(
        task_id="wait", path=SRC, replica=DST, poke_interval=0.1, timeout=5, outlets=[REPLICAS_ALIAS]
    )
    row = sensor.execute(context)
    (event,) = alias_events(context)
    assert event.source_alias_name == REPLICAS_ALIAS.name
    assert event.dest_asset_key == AssetUniqueKey(name=DST, uri="streamrep://newyork/activity")
    assert event.extra["replica"] == DST and event.extra["source"] == SRC
    assert event.extra["pendingMessages"] == 0 == row["pendingMessages"]
    assert event.extra["replicationLagMillis"] == 0 and event.extra["isUptodate"] is True
    assert event.extra["replicaState"] == row["replicaState"] and event.extra["at"] > 0


def test_without_the_alias_in_its_outlets_the_sensor_emits_nothing(admin):
    running_replica(admin, copied=5)
    Gateway(admin, "newyork", "gw1").run_once()
    context = task_context()
    ReplicaUpToDateSensor(task_id="wait", path=SRC, replica=DST, poke_interval=0.1, timeout=5).execute(context)
    assert alias_events(context) == []


def test_a_deferred_sensor_emits_when_its_trigger_fires(admin):
    running_replica(admin, copied=5)  # 5 pending: not up to date
    context = task_context()
    sensor = ReplicaUpToDateSensor(
        task_id="wait", path=SRC, replica=DST, poke_interval=0.1, timeout=60, deferrable=True, outlets=[REPLICAS_ALIAS]
    )
    with pytest.raises(TaskDeferred) as deferred:
        sensor.execute(context)
    assert alias_events(context) == []  # not caught up yet: no event
    threading.Timer(0.3, lambda: Gateway(admin, "newyork", "gw1").run_once()).start()

    async def first_event():
        return await anext(deferred.value.trigger.run())

    event = asyncio.run(asyncio.wait_for(first_event(), 30))
    sensor.execute_complete(context, event.payload)
    (alias_event,) = alias_events(context)
    assert alias_event.extra["replica"] == DST and alias_event.extra["pendingMessages"] == 0


def test_a_paused_replica_fails_the_sensor_and_emits_nothing(admin):
    running_replica(admin, copied=5)
    admin.pause_replica(SRC, DST)
    context = task_context()
    sensor = ReplicaUpToDateSensor(
        task_id="wait", path=SRC, replica=DST, poke_interval=0.1, timeout=5, outlets=[REPLICAS_ALIAS]
    )
    with pytest.raises(AirflowFailException, match="is paused"):
        sensor.execute(context)
    assert alias_events(context) == []


def test_emit_finds_the_source_and_the_lag_of_the_moment(admin):
    """As the failover DAG calls it: the context and the replica's path only. The event means up
    to date (issue 21, item 12): a replica with messages pending gets none."""
    running_replica(admin, copied=5, pending=3)
    context = task_context()
    extra = emit_replica_caught_up(context, DST)
    assert (extra["replica"], extra["source"], extra["pendingMessages"]) == (DST, SRC, 3)
    assert extra["replicationLagMillis"] >= 0 and extra["isUptodate"] is False
    assert alias_events(context) == []  # 3 pending: not up to date, so no event
    # the caller knows better (a failover that drained it): the event, with the lag of the moment
    extra = emit_replica_caught_up(context, DST, uptodate=True)
    (event,) = alias_events(context)
    assert event.dest_asset_key.uri == "streamrep://newyork/activity" and event.extra == extra
    assert extra["isUptodate"] is True and extra["pendingMessages"] == 3
    # a replica whose link is gone (as after a failover) gets its event from what the caller knows
    admin.remove_replica(SRC, DST)
    extra = emit_replica_caught_up(context, DST, source=SRC)
    assert extra["source"] == SRC and extra["pendingMessages"] is None and extra["isUptodate"] is None
    assert len(alias_events(context)) == 1
    assert emit_replica_caught_up(context, DST, source=SRC, uptodate=True)["isUptodate"] is True
    assert len(alias_events(context)) == 2


# --- StreamMessageTrigger ---------------------------------------------------------------------


def produce(admin, values: list[str], topic: str = TOPIC) -> None:
    with Producer(admin) as producer:
        for v in values:
            producer.send(topic, v.encode(), key=v.encode())


def fired_values(event) -> list[str]:
    return sorted(m["value"] for m in event.payload["messages"])


class Watch:
    """A trigger's run() driven as the triggerer drives it: next event within a deadline."""

    def __init__(self, trigger: BaseEventTrigger):
        self.trigger = trigger
        self.loop = asyncio.new_event_loop()
        self.events = trigger.run()

    def next(self, timeout: float):
        """The next event, or None if none came within ``timeout`` seconds (the run goes on)."""
        task = self.loop.create_task(self._anext())
        done, _ = self.loop.run_until_complete(asyncio.wait({task}, timeout=timeout))
        if not done:
            self.pending = task
            return None
        return task.result()

    async def _anext(self):
        return await anext(self.events)

    def next_after_none(self, timeout: float):
        """After ``next`` returned None: the event the same pending read brings."""
        done, _ = self.loop.run_until_complete(asyncio.wait({self.pending}, timeout=timeout))
        return self.pending.result() if done else None

    def stop(self) -> None:
        """As a triggerer stopping: cancel the run (its cleanup closes the connections)."""
        pending = getattr(self, "pending", None)
        if pending is not None and not pending.done():
            pending.cancel()
            self.loop.run_until_complete(asyncio.wait({pending}))
        self.loop.run_until_complete(self.events.aclose())
        self.loop.close()


def new_trigger(**kwargs) -> StreamMessageTrigger:
    """A trigger as the triggerer makes it: from its serialized kwargs."""
    classpath, args = StreamMessageTrigger(path=TOPIC, poll_interval=0.05, **kwargs).serialize()
    assert classpath == "streamrep.airflow.triggers.StreamMessageTrigger"
    return StreamMessageTrigger(**args)


@pytest.fixture
def topic(admin):
    admin.create_stream(SRC, defaultpartitions=2)
    admin.create_topic(SRC, "clicks")
    return admin


@pytest.mark.backends("embedded", "kafka")
def test_each_message_fires_once_and_a_restart_goes_on_after_the_last_fired(topic, backend):
    produce(topic, ["old-1", "old-2"])  # before the watcher: not fired (it starts at the end)
    watch = Watch(new_trigger())
    try:
        assert watch.next(timeout=1.5) is None  # opens, commits its start, finds nothing new
        produce(topic, ["a", "b", "c"])
        event = watch.next_after_none(timeout=30)
        assert fired_values(event) == ["a", "b", "c"]
        assert event.payload["path"] == TOPIC and event.payload["group"] == "airflow-asset-watcher"
        assert {m["key"] for m in event.payload["messages"]} == {"a", "b", "c"}
        assert sum(event.payload["cursors"].values()) >= 5  # past old-1, old-2, a, b, c
        assert watch.next(timeout=1.5) is None  # nothing fires twice
    finally:
        watch.stop()
    produce(topic, ["while-down-1", "while-down-2"])  # the triggerer is down
    watch = Watch(new_trigger())  # a restart: the same kwargs as the first run
    try:
        event = watch.next(timeout=30)
        assert fired_values(event) == ["while-down-1", "while-down-2"]  # and none of the earlier ones
        assert watch.next(timeout=1.5) is None
    finally:
        watch.stop()


def test_a_watcher_restarted_before_any_fire_still_fires_what_came_while_it_was_down(topic):
    produce(topic, ["before"])
    watch = Watch(new_trigger())
    try:
        assert watch.next(timeout=1) is None  # started: its place (the end) is committed
    finally:
        watch.stop()
    produce(topic, ["while-down"])
    watch = Watch(new_trigger())
    try:
        assert fired_values(watch.next(timeout=30)) == ["while-down"]
    finally:
        watch.stop()


@pytest.mark.backends("embedded", "kafka")
def test_a_new_group_from_start_fires_what_the_topic_holds(topic, backend):
    produce(topic, [f"m{i}" for i in range(7)])
    watch = Watch(new_trigger(group="replay", from_start=True, max_messages=5))
    try:
        first = watch.next(timeout=30)
        second = watch.next(timeout=30)
        assert len(first.payload["messages"]) == 5 and len(second.payload["messages"]) == 2
        assert sorted(fired_values(first) + fired_values(second)) == [f"m{i}" for i in range(7)]
        assert watch.next(timeout=1.5) is None
    finally:
        watch.stop()


def test_a_missing_topic_is_waited_for_and_a_denied_reader_fails(admin, monkeypatch):
    watch = Watch(new_trigger())
    try:
        assert watch.next(timeout=1) is None  # no stream yet: logged and tried again
        admin.create_stream(SRC, defaultpartitions=1)
        admin.create_topic(SRC, "clicks")
        assert watch.next_after_none(timeout=1.5) is None  # found: starts at the (empty) end
        produce(admin, ["first"])
        assert fired_values(watch.next_after_none(timeout=30)) == ["first"]
    finally:
        watch.stop()
    monkeypatch.setenv("STREAMREP_USER", "bob")  # the stream's consumeperm is u:alice
    monkeypatch.setenv("STREAMREP_GROUPS", "sales")
    watch = Watch(new_trigger())
    try:
        with pytest.raises(PermissionDenied):
            watch.next(timeout=30)
    finally:
        watch.loop.close()


# --- MessageQueueTrigger(scheme="streamrep") ----------------------------------------------------


def test_common_messagings_lookup_finds_streamrep_for_its_scheme():
    assert get_provider_info()["queues"] == ["streamrep.airflow.queues.StreamrepMessageQueueProvider"]
    assert "streamrep.airflow.queues.StreamrepMessageQueueProvider" in ProvidersManager().queue_class_names
    # common-messaging's own list, built from the providers' "queues" when it is imported
    matching = [p for p in MESSAGE_QUEUE_PROVIDERS if p.scheme_matches("streamrep")]
    assert [type(p) for p in matching] == [StreamrepMessageQueueProvider]
    assert not any(p.scheme_matches("kafka") or p.queue_matches("kafka://broker/clicks") for p in matching)


def test_a_message_queue_trigger_is_a_stream_message_trigger_once_serialized():
    trigger = MessageQueueTrigger(scheme="streamrep", stream=SRC, topic="clicks", group="g", max_messages=7)
    classpath, kwargs = trigger.serialize()
    assert classpath == "streamrep.airflow.triggers.StreamMessageTrigger"
    assert kwargs == StreamMessageTrigger(path=TOPIC, group="g", max_messages=7).serialize()[1]
    # a topic path, or the topic's asset URI, as stream; the deprecated queue= takes the URI too
    for other in (
        MessageQueueTrigger(scheme="streamrep", stream=TOPIC, group="g", max_messages=7),
        MessageQueueTrigger(scheme="streamrep", stream=asset_uri(TOPIC), group="g", max_messages=7),
    ):
        assert other.serialize() == (classpath, kwargs)
    with pytest.warns(DeprecationWarning):
        by_queue = MessageQueueTrigger(queue=asset_uri(TOPIC), group="g", max_messages=7)
    assert by_queue.serialize() == (classpath, kwargs)


@pytest.mark.parametrize(
    "kwargs, cause",
    [
        ({"topic": "clicks"}, "stream is required"),
        ({"path": TOPIC}, "unknown argument 'path'"),
        ({"stream": SRC, "topics": ["clicks"]}, "unknown argument 'topics' (one topic per trigger"),
        ({"stream": SRC, "topic": "clicks", "apply_function": "x.y"}, "unknown argument 'apply_function'"),
        ({"stream": SRC}, "names no topic: give topic="),
        ({"stream": TOPIC, "topic": "views"}, "names topic 'clicks' and topic= says 'views'"),
        ({"stream": "/mapr/sanfrancisco//activity", "topic": "clicks"}, "empty path component"),
        ({"stream": SRC, "topic": "a b"}, "invalid topic name 'a b'"),
        ({"stream": None, "topic": "clicks"}, "stream must be a stream path"),
        ({"stream": TOPIC, "poll_interval": 0}, "poll_interval must be a number of seconds above 0"),
        ({"stream": TOPIC, "max_messages": "10"}, "max_messages must be a whole number"),
        ({"stream": TOPIC, "from_start": "yes"}, "from_start must be True or False"),
        ({"stream": TOPIC, "group": " "}, "group must be a consumer group name"),
        ({"stream": TOPIC, "cluster_conn_ids": ["a"]}, "cluster_conn_ids must map cluster names"),
    ],
)
def test_a_bad_argument_gets_one_line_naming_it(kwargs, cause):
    with pytest.raises(ValueError) as raised:
        MessageQueueTrigger(scheme="streamrep", **kwargs).serialize()
    message = str(raised.value)
    assert message.startswith('MessageQueueTrigger(scheme="streamrep"): ') and "\n" not in message
    assert cause in message, message


def test_a_message_queue_trigger_fires_the_produced_messages_and_its_rebuilt_form_goes_on(topic):
    produce(topic, ["old"])  # before the watcher: not fired
    queue_trigger = MessageQueueTrigger(scheme="streamrep", stream=SRC, topic="clicks", poll_interval=0.05)
    watch = Watch(queue_trigger)  # MessageQueueTrigger.run(), as common-messaging runs it
    try:
        assert watch.next(timeout=1) is None  # opens, commits its start at the end
        produce(topic, ["queued-1", "queued-2"])
        event = watch.next_after_none(timeout=30)
        assert fired_values(event) == ["queued-1", "queued-2"]
        assert event.payload["path"] == TOPIC and event.payload["group"] == "airflow-asset-watcher"
        assert watch.next(timeout=1) is None  # nothing fires twice
    finally:
        watch.stop()
    produce(topic, ["while-down"])
    classpath, kwargs = queue_trigger.serialize()  # what the dag-processor stores for the triggerer
    assert classpath == "streamrep.airflow.triggers.StreamMessageTrigger"
    watch = Watch(StreamMessageTrigger(**kwargs))
    try:
        assert fired_values(watch.next(timeout=30)) == ["while-down"]  # its place is the same group's
    finally:
        watch.stop()
