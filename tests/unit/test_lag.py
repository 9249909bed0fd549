"""Lag history, alert thresholds and the alert check (``replication/lag.py``), and the gateway's
Prometheus endpoint, on real embedded and Kafka clusters with the in-process gateway."""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from types import SimpleNamespace

import kafka_local  # loaded by tests/conftest.py from scripts/kafka_local.py
import pytest

from streamrep.cli.main import run
from streamrep.client.producer import Producer
from streamrep.errors import AlertRaised, InvalidArgument, NotFound, PermissionDenied
from streamrep.replication import lag
from streamrep.replication.gateway import Gateway
from streamrep.replication.status import replica_status

ON_BOTH = pytest.mark.backends("embedded", "kafka")
SF = "/mapr/sanfrancisco/activity"
NY = "/mapr/newyork/activity"
MINUTE_MS = 60_000


@pytest.fixture
def linked(admin):
    """SF (topic t, one partition) and its replica NY, agreed both ways."""
    admin.create_stream(SF)
    admin.create_topic(SF, "t", 1)
    admin.create_stream(NY, copymetafrom=SF)
    admin.add_replica(SF, NY)
    admin.add_upstream(NY, SF)
    return admin


def produce(admin, count: int, age_ms: int = 0) -> None:
    stamp = int(time.time() * 1000) - age_ms
    with Producer(admin) as producer:
        for i in range(count):
            producer.send(SF + ":t", f"value-{i}", timestamp=stamp)


def cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = run(list(argv), out, err, io.StringIO())
    return code, out.getvalue(), err.getvalue()


def replica_count(admin) -> int:
    sp = admin.path(NY)
    store = admin.store(sp)
    try:
        first, end = store.offsets(admin.entry(sp).uuid, "t", 0)
    except NotFound:  # the gateway's first pass has not created the replica's topic yet
        return 0
    return end - first


def test_a_running_gateway_samples_the_lag_beside_its_passes_not_between_them(linked, monkeypatch):
    """A sample reads what is pending of every flow, which took up to 1.5 s on Kafka under load
    (bench/README.md, "Kafka latency profile"): taken between passes it held the next pass back
    (a latency stall at p99). A sample that does not end must not stop replication."""
    import threading

    stuck, release = threading.Event(), threading.Event()
    real_measure = lag.measure

    def slow_measure(*args, **kwargs):
        stuck.set()
        release.wait(60)
        return real_measure(*args, **kwargs)

    monkeypatch.setattr(lag, "measure", slow_measure)
    gateway = Gateway(linked, "newyork", "gw1")
    runner = threading.Thread(target=gateway.run, kwargs={"interval": 0.05, "stop_after": 60})
    runner.start()
    try:
        assert stuck.wait(30), "the gateway never sampled"
        produce(linked, 7)
        deadline = time.monotonic() + 30
        while replica_count(linked) < 7 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert replica_count(linked) == 7  # replicated while the sample is still under way
    finally:
        release.set()
        gateway.watch.stop_requested = lambda force=False: True  # end the run at its next pass
        runner.join(60)
    assert not runner.is_alive()


# -- history --------------------------------------------------------------------------------------
@ON_BOTH
def test_a_gateway_records_each_replicas_lag_over_time(linked):
    linked.pause_replica(SF, NY)  # paused replicas are sampled too: their lag grows
    produce(linked, 5, age_ms=MINUTE_MS)
    gateway = Gateway(linked, "newyork", "gw1")
    # No SAMPLE_SECONDS between samples (the product's 10 s). The sampling-share limit still
    # applies (MAX_SAMPLING_SHARE): after a sampling that took s seconds, the recorder samples
    # again no sooner than 10 × s seconds later. Whether the second pass samples is a matter of timing:
    # on a quiet machine it usually ends sooner and does not; on a loaded one it often does.
    gateway.lag.every = 0.0
    gateway.run_once()  # the first pass always samples: 5 behind
    linked.resume_replica(SF, NY)
    gateway.run_once()  # replicates the 5 (and samples 0 behind when the limit allows)
    gateway.lag.sample(force=True)  # 0 behind, whatever the limit says
    history = lag.lag_history(linked, SF, NY)
    first, *caught_up = history
    assert (first.messages, first.bytes) == (5, sum(len(f"value-{i}") for i in range(5)))
    assert MINUTE_MS <= first.ms < MINUTE_MS + 60_000
    assert 1 <= len(caught_up) <= 2  # the forced sample, after the second pass's if it was taken
    assert [(s.messages, s.bytes, s.ms) for s in caught_up] == [(0, 0, 0)] * len(caught_up)
    stamps = [s.t for s in history]
    assert stamps == sorted(stamps) and stamps[-1] <= time.time() * 1000
    code, out, err = cli("stream", "replica", "lag", "-path", SF, "-replica", NY, "-json")
    assert (code, err) == (0, "")
    rows = json.loads(out)["data"]
    expected = [(5, True)] + [(0, False)] * len(caught_up)
    assert [(r["lagMessages"], r["lagMillis"] >= MINUTE_MS) for r in rows] == expected
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", rows[0]["time"])


def test_samples_are_rate_limited_per_flow_across_gateways_and_bounded(linked):
    produce(linked, 3)
    one, two = Gateway(linked, "newyork", "gw1"), Gateway(linked, "newyork", "gw2")
    one.run_once()
    two.run_once()  # the flow was sampled a moment ago by gw1: not again
    assert len(lag.lag_history(linked, SF, NY)) == 1
    [flow] = [f for fs in one.active_flows().values() for f in fs]
    store = linked.clusters.store("newyork")
    newest = lag.lag_history(linked, SF, NY)[-1].t
    for i in range(1, 8):
        written = lag.record(
            store, flow, lag.LagSample(t=newest + i * 1000, messages=i, bytes=i, ms=i), every=1.0, keep=4
        )
        assert written
    assert not lag.record(store, flow, lag.LagSample(t=newest + 7500, messages=0, bytes=0, ms=0), every=1.0, keep=4)
    assert [s.messages for s in lag.lag_history(linked, SF, NY)] == [4, 5, 6, 7]  # the newest 4 kept


def test_sampling_takes_at_most_a_tenth_of_a_gateways_time(linked, monkeypatch):
    # The recorder's monotonic clock is the test's: with the real one, a machine too loaded to
    # run the next line within 1.8 s would see the 2 s pass.
    clock = [1000.0]
    monkeypatch.setattr(lag, "time", SimpleNamespace(monotonic=lambda: clock[0], time=time.time))
    real = lag.measure

    def slow(*args, **kwargs):
        clock[0] += 0.2  # measuring takes 0.2 s
        return real(*args, **kwargs)

    monkeypatch.setattr(lag, "measure", slow)
    recorder = lag.LagRecorder(linked, "newyork", every=0.0)
    assert len(recorder.sample()) == 1
    clock[0] += 1.7  # 1.9 s after it started
    assert recorder.sample() == {}  # 0.2 s of sampling: the next waits at least 2 s, whatever ``every`` says
    assert len(recorder.sample(force=True)) == 1
    clock[0] += 2.0  # the forced one took 0.2 s too: 2 s after it, the next is due
    assert len(recorder.sample()) == 1


def test_lag_history_refuses_a_stream_that_is_not_a_replica(linked):
    linked.create_stream("/mapr/newyork/other")
    with pytest.raises(NotFound):
        lag.lag_history(linked, SF, "/mapr/newyork/other")
    code, _, err = cli("stream", "replica", "lag", "-path", SF, "-replica", "/mapr/newyork/other")
    assert code == 1 and err.count("\n") == 1 and "Traceback" not in err


# -- thresholds -----------------------------------------------------------------------------------
@ON_BOTH
def test_alert_thresholds_are_set_shown_in_replica_list_and_removed(linked, monkeypatch):
    monkeypatch.setenv("STREAMREP_USER", "alice")
    code, out, err = cli("stream", "replica", "alert", "-path", SF, "-replica", NY, "-maxlagms", "60000", "-json")
    assert (code, err) == (0, "")
    assert json.loads(out)["data"][0]["maxLagMillis"] == 60000
    lag.set_alert(linked, SF, NY, max_lag_messages=100)  # the other threshold is kept
    [row] = replica_status(linked, SF)
    assert (row.thresholds.max_lag_millis, row.thresholds.max_lag_messages) == (60000, 100)
    lag.set_alert(linked, SF, NY, max_lag_millis=0)
    [row] = replica_status(linked, SF)
    assert (row.thresholds.max_lag_millis, row.thresholds.max_lag_messages) == (None, 100)


def test_alert_thresholds_need_adminperm_and_valid_values(linked, bob, monkeypatch):
    with pytest.raises(PermissionDenied):
        lag.set_alert(bob, SF, NY, max_lag_millis=1000)
    with pytest.raises(InvalidArgument, match="give -maxlagms"):
        lag.set_alert(linked, SF, NY)
    with pytest.raises(InvalidArgument, match="0 \\(none\\) or more"):
        lag.set_alert(linked, SF, NY, max_lag_messages=-1)
    monkeypatch.setenv("STREAMREP_USER", "alice")
    code, _, err = cli("stream", "replica", "alert", "-path", SF, "-replica", NY, "-maxlagmsgs", "many")
    assert code == 2 and err.count("\n") == 1 and "whole number" in err  # a malformed command line


# -- the monitor's check ----------------------------------------------------------------------
@ON_BOTH
def test_check_alerts_names_the_replica_past_its_threshold_or_without_a_gateway(linked):
    produce(linked, 4, age_ms=MINUTE_MS)
    rows = lag.check_alerts(linked, ["newyork"])
    [row] = rows
    assert str(row.replica) == NY and row.sample is not None and row.sample.messages == 4
    assert len(row.problems) == 1 and "no gateway is live" in row.problems[0]
    gateway = Gateway(linked, "newyork", "gw1")
    gateway.heartbeat()  # live, but nothing replicated yet
    assert lag.check_alerts(linked, ["newyork"])[0].problems == ()  # no threshold set: lag is fine
    lag.set_alert(linked, SF, NY, max_lag_millis=30_000, max_lag_messages=10)
    with pytest.raises(AlertRaised) as raised:
        lag.raise_alerts(lag.check_alerts(linked, ["newyork"]))
    line = str(raised.value)
    assert "\n" not in line and f"replica {NY} (of {SF})" in line and "passes its threshold of 30,000 ms" in line
    assert "messages behind" not in line  # 4 messages: within 10
    gateway.run_once()
    lag.raise_alerts(lag.check_alerts(linked, ["newyork"]))  # caught up: nothing raised


def test_a_paused_replica_needs_no_gateway_but_keeps_its_thresholds(linked):
    linked.pause_replica(SF, NY)
    produce(linked, 12)
    assert lag.check_alerts(linked, ["newyork"])[0].problems == ()
    lag.set_alert(linked, SF, NY, max_lag_messages=10)
    [problem] = lag.check_alerts(linked, ["newyork"])[0].problems
    assert problem == "12 messages behind passes its threshold of 10 messages"


# -- metrics ----------------------------------------------------------------------------------
def scrape(port: int) -> dict[str, float]:
    # polled until a condition holds: a slow answer is a late one, not a failure
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as response:
        text = response.read().decode()
    return {
        line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line and not line.startswith("#")
    }


@ON_BOTH
def test_a_running_gateway_serves_its_metrics_over_http(linked, home, monkeypatch):
    linked.pause_replica(SF, NY)
    produce(linked, 6, age_ms=MINUTE_MS)
    (port,) = kafka_local.free_ports(1)
    env = {**__import__("os").environ, "STREAMREP_USER": "alice", "STREAMREP_HOME": str(home.home)}
    cmd = [
        str(Path(sys.executable).parent / "streamrep"),
        "gateway",
        "run",
        "-cluster",
        "newyork",
        "-id",
        "gw1",
        "-engine",
        "local",
        "-metricsport",
        str(port),
    ]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    flow = f'replica="{NY}",source="{SF}"'
    gw = 'cluster="newyork",gateway="gw1"'
    try:
        deadline = time.monotonic() + 60
        metrics: dict[str, float] = {}
        while time.monotonic() < deadline:
            try:
                metrics = scrape(port)
                if f"streamrep_replica_lag_messages{{{flow}}}" in metrics:
                    break
            except OSError:
                pass
            assert proc.poll() is None, proc.stderr.read()
            time.sleep(0.2)
        assert metrics[f"streamrep_replica_lag_messages{{{flow}}}"] == 6
        assert metrics[f"streamrep_replica_lag_bytes{{{flow}}}"] == sum(len(f"value-{i}") for i in range(6))
        assert metrics[f"streamrep_replica_lag_seconds{{{flow}}}"] >= 60
        assert metrics[f"streamrep_gateway_passes_total{{{gw}}}"] >= 1
        assert abs(metrics[f"streamrep_gateway_last_pass_timestamp_seconds{{{gw}}}"] - time.time()) < 30
        linked.resume_replica(SF, NY)
        deadline = time.monotonic() + 60
        while scrape(port).get(f"streamrep_gateway_replicated_messages_total{{{gw}}}", 0) < 6:
            assert time.monotonic() < deadline, scrape(port)
            time.sleep(0.2)
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_a_port_in_use_is_one_line(linked, monkeypatch):
    monkeypatch.setenv("STREAMREP_USER", "alice")
    gateway = Gateway(linked, "newyork", "gw1")
    metrics = gateway.lag.export("gw1", kafka_local.free_ports(1)[0])
    try:
        code, _, err = cli(
            "gateway",
            "run",
            "-cluster",
            "newyork",
            "-engine",
            "local",
            "-once",
            "-metricsport",
            str(metrics.server.server_port),
        )
        assert code == 1 and err.count("\n") == 1 and "cannot serve metrics on port" in err
    finally:
        metrics.close()
