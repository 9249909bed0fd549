"""Fixtures of the Kafka fault tests: Alice's StreamAdmin over the test's clusters, the environment
of child processes, and a broker of a test's own (to stop and start again)."""

from __future__ import annotations

import uuid

import kafka_local  # loaded by tests/conftest.py from scripts/kafka_local.py
import pytest

from integration.replication_helpers import clean_env
from streamrep.client import StreamAdmin
from streamrep.model.ace import Identity

ALICE = Identity(user="alice", groups=frozenset({"eng"}))


@pytest.fixture
def api(home) -> StreamAdmin:
    return StreamAdmin(home, ALICE)


@pytest.fixture
def child_env(home) -> dict[str, str]:
    return clean_env(home.home)


@pytest.fixture
def own_broker(tmp_path):
    """A broker of this test's own (it is stopped and started again), on free loopback ports."""
    missing = kafka_local.jars_missing_reason()
    if missing:
        pytest.skip(missing)
    port, controller_port = kafka_local.free_ports(2)
    broker = kafka_local.Broker("faults", port, controller_port, tmp_path / "broker")
    try:
        kafka_local.start(broker, die_with_parent=True)
        yield broker
    finally:
        kafka_local.stop(broker, timeout=10)


@pytest.fixture
def on_own_broker(empty_home, own_broker) -> StreamAdmin:
    """``sanfrancisco`` and ``newyork``: two namespaces on ``own_broker``."""
    for name in ("sanfrancisco", "newyork"):
        empty_home.add(
            name,
            url=f"kafka://{own_broker.bootstrap}",
            settings={"streamrep.namespace": f"t{uuid.uuid4().hex[:10]}-{name}"},
        )
    return StreamAdmin(empty_home, ALICE)
