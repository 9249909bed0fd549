"""The Kafka releases users run besides the default (issue 28): the Store conformance suite, a replication
with gateways killed at random moments, and cursor translation, on each release of
``kafka_local.RELEASES`` other than the default (4.4.0, and 3.9.2, the newest 3.x). The default release
(4.3.1) runs all of them already, as every Kafka test does, in their own modules.

One plain single-node broker per release, started when the first test of that release begins and
stopped after its last (pytest runs a module's tests grouped by the module-scoped ``kafka_broker``
parameter), so one release runs at a time. Everything is in this one module so that pytest-xdist's
``loadfile`` puts it on one worker; ``--durations`` shows what it costs.

The tests are the same functions as in their own modules: the conformance suite's are collected here
too (with the fixtures of ``tests/store/conftest.py``), the others are called with this module's clusters.
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

import kafka_local  # loaded by tests/conftest.py from scripts/kafka_local.py
import pytest
import test_kafka_faults as faults  # tests/kafka is on sys.path, as for every module of this folder
from confluent_kafka.admin import AdminClient

import store.test_conformance as conformance
from integration.replication_helpers import STREAMREP_EXE, clean_env
from store.conftest import kafka_conformance_namespace, new_stream, open_store, store, stream  # noqa: F401
from streamrep.client import StreamAdmin
from streamrep.model.ace import Identity
from streamrep.store.kafka import KafkaStore, versions

# tests/integration/test_replication.py imports its helpers by their bare name, as its folder is on sys.path.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))
import test_replication as replication  # noqa: E402

pytestmark = [pytest.mark.backends("kafka"), pytest.mark.kafka]

ALICE = Identity(user="alice", groups=frozenset({"eng"}))
RELEASES = [version for version in kafka_local.RELEASES if kafka_local.RELEASES[version] is not kafka_local.DEFAULT]
# As the fault module's own run: with 50,000 a quiet machine's gateway finished before the first kill.
KILL_BACKLOG = faults.BACKLOG

# The conformance suite, collected in this module: each runs on every release below.
globals().update({name: test for name, test in vars(conformance).items() if name.startswith("test_")})


@pytest.fixture(scope="module", params=RELEASES)
def kafka_broker(request, tmp_path_factory) -> str:
    """The bootstrap address of one single-node broker of release ``request.param`` for this module's tests
    of that release (overrides the session's broker of the default release, so ``home``, ``add_cluster`` and
    the conformance fixtures use it). Skips when the install step could not get that release's jars."""
    release = kafka_local.RELEASES[request.param]
    missing = kafka_local.jars_missing_reason(release.jars)
    if missing:
        pytest.skip(missing)
    port, controller_port = kafka_local.free_ports(2)
    broker = kafka_local.Broker(
        f"kafka-{release.version}", port, controller_port, tmp_path_factory.mktemp("kafka"), release=release
    )
    try:
        kafka_local.start(broker, die_with_parent=True)
        yield broker.bootstrap
    finally:
        kafka_local.stop(broker, timeout=10)


@pytest.fixture(autouse=True)
def _on_release(kafka_broker: str) -> None:
    """Every test of the module takes the release's broker, so each is run once per release (the
    fixtures that ask for ``kafka_broker`` by name only would find no parameter)."""


@pytest.fixture
def cli(empty_home):
    """The real ``streamrep`` executable over ``empty_home``, as tests/integration's ``cli``."""

    def run(*args, timeout: float = 60):
        done = subprocess.run(
            [str(STREAMREP_EXE), *map(str, args)],
            capture_output=True,
            text=True,
            env=clean_env(empty_home.home),
            timeout=timeout,
        )
        return done.returncode, done.stdout, done.stderr

    return run


def test_the_broker_is_the_release_and_the_store_accepts_it(kafka_broker, request, tmp_path):
    """The broker runs the release's jars (its metadata version names the release), and the Kafka store's
    check of its ApiVersions lets it through: each release serves what streamrep needs."""
    version = request.node.callspec.params["kafka_broker"]
    broker, table = versions.probe({"bootstrap.servers": kafka_broker})
    assert broker == kafka_broker and table, "the broker told no API versions"
    assert versions.missing(table) == []
    assert versions.broker_release(table) == "3.0 or later"
    assert AdminClient({"bootstrap.servers": kafka_broker}).describe_cluster(request_timeout=30).result().cluster_id
    # The finalized metadata version, read back with the release's own tool, starts with the release.
    release = kafka_local.RELEASES[version]
    tool = subprocess.run(
        [
            "java",
            "-cp",
            str(release.libs / "*"),
            f"-D{release.log_property}{release.log_config}",
            f"-Dkafka.logs.dir={tmp_path}",
            "org.apache.kafka.tools.FeatureCommand",
            "--bootstrap-server",
            kafka_broker,
            "describe",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert tool.returncode == 0, tool.stderr
    [metadata] = [line for line in tool.stdout.splitlines() if line.startswith("Feature: metadata.version")]
    major_minor = ".".join(version.split(".")[:2])
    assert f"FinalizedVersionLevel: {major_minor}-IV" in metadata, metadata
    kafka_store = KafkaStore("release", kafka_broker, {"streamrep.namespace": f"t{uuid.uuid4().hex[:10]}"})
    try:
        assert kafka_store.store_id()
    finally:
        kafka_store.close()


@pytest.mark.slow
def test_gateway_killed_at_random_moments_then_restarted(api, child_env):
    faults.gateway_killed_then_restarted(api, child_env, KILL_BACKLOG)


def test_cursor_translation_with_interleaved_messages(cli, empty_home, add_cluster):
    api = StreamAdmin(empty_home, ALICE)
    for name in ("sanfrancisco", "newyork", "tokyo"):
        add_cluster(api.clusters, name)
    replication.test_cursor_translation_with_interleaved_messages(cli, api)
