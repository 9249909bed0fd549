"""Every public method of a Kafka store object runs one thread at a time (``store/kafka/serialized.py``).

No broker: a store object connects only when a method's body runs, and these tests stop every body
as it starts (a trace function raises there), so they only see whether it started while another
thread held the store's lock.
"""

from __future__ import annotations

import inspect
import os
import sys
import threading
import time
from types import FrameType
from typing import Any

import pytest

import streamrep.store
from streamrep.store.base import Store
from streamrep.store.kafka import KafkaStore
from streamrep.store.kafka.serialized import SERIALIZED, UNHELD, public_methods

STORE_PACKAGE = os.path.dirname(streamrep.store.__file__)
WRAPPER_FILE = sys.modules["streamrep.store.kafka.serialized"].__file__
# Methods that take the lock per store call, not throughout (see each one's comment).
UNHELD_ON_PURPOSE = {"range_stats"}


def store_interface() -> list[str]:
    """Every public method the Store interface defines, as the interface says today."""
    return sorted(name for name, value in vars(Store).items() if not name.startswith("_") and callable(value))


def test_the_interface_is_what_the_serialization_covers():
    assert set(store_interface()) <= set(public_methods(KafkaStore))
    assert {"range_stats", "retain", "apply_many"} <= set(store_interface())  # the ones a list once missed


@pytest.mark.parametrize("name", public_methods(KafkaStore))
def test_every_public_method_is_serialized_or_unheld_on_purpose(name):
    method = getattr(KafkaStore, name)
    if name in UNHELD_ON_PURPOSE:
        assert getattr(method, UNHELD, False) and not getattr(method, SERIALIZED, False)
    else:
        assert getattr(method, SERIALIZED, False), f"KafkaStore.{name} does not take the store's lock"


class Entered(Exception):
    """Raised by the trace function where a store body starts, so nothing reaches Kafka."""


def body_start(name: str, store: KafkaStore, lock_released: threading.Event) -> dict[str, Any]:
    """Call ``store.<name>`` in a thread while this thread holds the store's lock, release the lock
    after a while, and say whether the first store code past the lock started before the release."""
    seen: dict[str, Any] = {}
    unheld_bodies = {getattr(KafkaStore, n).__code__ for n in UNHELD_ON_PURPOSE}

    def trace(frame: FrameType, event: str, arg: Any) -> Any:
        code = frame.f_code
        if (
            event == "call"
            and code.co_filename.startswith(STORE_PACKAGE)
            and code.co_filename != WRAPPER_FILE
            and code not in unheld_bodies  # it only calls serialized methods: traced further in
        ):
            seen["body"] = code.co_name
            seen["before release"] = not lock_released.is_set()
            raise Entered
        return None

    arguments = [None] * sum(
        1
        for p in list(inspect.signature(getattr(KafkaStore, name)).parameters.values())[1:]
        if p.default is inspect.Parameter.empty and p.kind is p.POSITIONAL_OR_KEYWORD
    )

    def call() -> None:
        sys.settrace(trace)
        try:
            getattr(store, name)(*arguments)
        except Entered:
            pass
        finally:
            sys.settrace(None)

    worker = threading.Thread(target=call)
    with store._lock:
        worker.start()
        worker.join(0.2)  # a method that does not wait for the lock starts its body meanwhile
        lock_released.set()
    worker.join(10)
    assert not worker.is_alive()
    return seen


@pytest.mark.parametrize("name", public_methods(KafkaStore))
def test_no_store_code_runs_while_another_thread_holds_the_lock(name):
    store = KafkaStore("c", "127.0.0.1:9")  # never connected: every body is stopped as it starts
    seen = body_start(name, store, threading.Event())
    assert seen.get("body"), f"KafkaStore.{name} ran no store code"
    assert seen["before release"] is False, f"KafkaStore.{name} ran {seen['body']} while another thread held the lock"


def test_the_check_sees_an_unserialized_method():
    """The check itself: a method added without the lock (bypassing the decorator) is caught."""

    class Careless(KafkaStore):
        pass

    def offsets(self: KafkaStore, stream: str, topic: str, partition: int) -> tuple[int, int]:
        return self._watermarks(stream, partition, topic)

    type.__setattr__(Careless, "offsets", offsets)  # after the class was made: not wrapped
    store = Careless("c", "127.0.0.1:9")
    started = time.monotonic()
    seen = body_start("offsets", store, threading.Event())
    assert seen["before release"] is True and time.monotonic() - started < 5


def test_a_subclass_method_is_serialized_too():
    class Extended(KafkaStore):
        def extra(self) -> None:
            pass

        def offsets(self, stream: str, topic: str, partition: int) -> tuple[int, int]:
            return super().offsets(stream, topic, partition)

    assert getattr(Extended.extra, SERIALIZED, False) and getattr(Extended.offsets, SERIALIZED, False)
