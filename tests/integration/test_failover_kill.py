"""A failover killed at each of its steps (the real CLI in a child process, kill -9) is
recoverable: the fence shows in ``stream info`` and ``replica list``, ``-abort`` undoes a
failover that had not promoted yet, a rerun finishes one at any step, and nothing is lost or
duplicated. Ctrl-C and SIGTERM while it waits lift the fence themselves and say when."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from replication_helpers import STREAMREP_EXE, clean_env, produce, wait_until

pytestmark = pytest.mark.slow

SF = "/mapr/sanfrancisco/activity"
NY = "/mapr/newyork/activity"

# The CLI, killed with SIGKILL when the failover calls the step named in argv[1] ("" for none).
KILLED_AT = textwrap.dedent("""
    import os, signal, sys
    from streamrep.replication.failover import promote as failover
    if sys.argv[1]:
        setattr(failover, sys.argv[1], lambda *a, **k: os.kill(os.getpid(), signal.SIGKILL))
    from streamrep.cli.main import main
    sys.argv = ["streamrep", *sys.argv[2:]]
    main()
""")
FAILOVER = ("stream", "replica", "failover", "-path", SF, "-replica", NY)
BEFORE_PROMOTING = ["stop_flow", "place_cursors"]  # the failover's steps, in order, before PROMOTED
AFTER_PROMOTING = ["_withdraw", "demote_source"]


@pytest.fixture
def linked(cli, api):
    for name in ("sanfrancisco", "newyork"):
        assert cli("cluster", "add", "-name", name)[0] == 0
    api.create_stream(SF)
    api.create_topic(SF, "t", 2)
    api.create_stream(NY, copymetafrom=SF)
    api.add_replica(SF, NY)
    api.add_upstream(NY, SF)
    return api


def info(cli) -> dict:
    status, out, err = cli("stream", "info", "-path", SF, "-json")
    assert status == 0, err
    return json.loads(out)["data"][0]


def replica_row(cli) -> dict:
    status, out, err = cli("stream", "replica", "list", "-path", SF, "-json")
    assert status == 0, err
    (row,) = json.loads(out)["data"]
    return row


def drain(cli) -> None:
    status, _, err = cli("gateway", "run", "-cluster", "newyork", "-engine", "local", "-once", "true")
    assert status == 0, err


def values(api, path) -> list[str]:
    from replication_helpers import all_values

    return sorted(all_values(api, path))


def killed_failover(streamrep_home, step: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", KILLED_AT, step, *FAILOVER, "-timeout", "60"],
        capture_output=True,
        text=True,
        env=clean_env(streamrep_home),
        timeout=120,
    )


def start_failover(streamrep_home) -> subprocess.Popen:
    """The real CLI's failover with nothing to drain it: it fences the source and waits."""
    return subprocess.Popen(
        [str(STREAMREP_EXE), *FAILOVER, "-timeout", "300"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=clean_env(streamrep_home),
    )


def fenced(cli) -> bool:
    return info(cli)["failoverState"] == "FENCED"


@pytest.mark.parametrize("recovery", ["abort", "rerun"])
@pytest.mark.parametrize("step", ["wait", *BEFORE_PROMOTING])
def test_a_failover_killed_before_promoting_shows_its_fence_and_is_undone_or_finished(
    linked, cli, streamrep_home, step, recovery
):
    api = linked
    sent = produce(api, f"{SF}:t", [f"a{i}" for i in range(20)])
    if step == "wait":  # no gateway: it fences the source and waits; killed there
        proc = start_failover(streamrep_home)
        wait_until(lambda: fenced(cli), 60, "the failover never fenced the source")
        proc.kill()
        proc.communicate(timeout=30)
    else:
        drain(cli)
        assert killed_failover(streamrep_home, step).returncode == -signal.SIGKILL
    # the fence shows, and producers are refused
    assert fenced(cli) and "writes paused" in info(cli)["failover"] and "-abort true" in info(cli)["failover"]
    assert "failing over to " + NY in replica_row(cli)["failover"]
    status, _, err = cli("produce", "-path", f"{SF}:t", stdin="refused\n", timeout=120)
    assert status == 1 and "retry in a moment" in err
    if recovery == "abort":
        status, out, err = cli(*FAILOVER, "-abort", "true", "-json")
        assert status == 0, err
        (row,) = json.loads(out)["data"]
        assert row["aborted"] is True and f"lifted the fence on {SF}" in row["result"]
        assert ("stop marks" in row["result"]) == (step == "place_cursors")
        assert info(cli)["failoverState"] is None and replica_row(cli)["failover"] is None
        again = cli(*FAILOVER, "-abort", "true")
        assert again[0] == 0 and "nothing to abort" in again[1]
        # replication goes on where it was: nothing lost, nothing twice
        sent += produce(api, f"{SF}:t", [f"b{i}" for i in range(5)])
        drain(cli)
        assert values(api, NY) == sorted(sent)
    else:
        if step == "wait":
            drain(cli)
        status, out, err = cli(*FAILOVER, "-timeout", "60", "-json")
        assert status == 0, err
        assert info(cli)["failoverState"] == "FAILED_OVER"
        assert values(api, NY) == sorted(sent)


@pytest.mark.parametrize("step", AFTER_PROMOTING)
def test_a_failover_killed_after_promoting_refuses_abort_and_a_rerun_finishes_it(linked, cli, streamrep_home, step):
    api = linked
    sent = produce(api, f"{SF}:t", [f"a{i}" for i in range(20)])
    drain(cli)
    assert killed_failover(streamrep_home, step).returncode == -signal.SIGKILL
    status, _, err = cli(*FAILOVER, "-abort", "true")
    assert status == 1 and err.count("\n") == 1 and "failback" in err and "PROMOTED" not in err
    status, out, err = cli(*FAILOVER, "-json")
    assert status == 0, err
    (row,) = json.loads(out)["data"]
    assert row["alreadyDone"] is True
    assert info(cli)["failoverState"] == "FAILED_OVER"
    assert replica_row(cli)["replicaState"] == "REPLICA_STATE_FAILED_OVER"
    assert values(api, NY) == sorted(sent)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_sigterm_or_ctrl_c_while_waiting_lifts_the_fence_and_says_when(linked, cli, streamrep_home, sig):
    produce(linked, f"{SF}:t", ["a", "b"])
    started = time.monotonic()
    proc = start_failover(streamrep_home)
    wait_until(lambda: fenced(cli), 60, "the failover never fenced the source")
    time.sleep(1)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    elapsed = time.monotonic() - started
    assert proc.returncode == 1, (out, err)
    assert err.count("\n") == 1 and "interrupted after " in err and f"lifted the fence on {SF}" in err
    said = float(err.split("interrupted after ")[1].split(" s")[0])
    assert 1 <= said <= elapsed  # the time that passed, not the timeout
    assert info(cli)["failoverState"] is None


FAILBACK = ("stream", "replica", "failback", "-path", SF, "-replica", NY)


def failover_state(cli, path: str) -> str | None:
    status, out, err = cli("stream", "info", "-path", path, "-json")
    assert status == 0, err
    return json.loads(out)["data"][0]["failoverState"]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_sigterm_or_ctrl_c_while_failing_back_lets_producers_write_to_the_promoted_stream_again(
    linked, cli, streamrep_home, sig
):
    """The switch back refuses producers on the promoted stream while the source catches up; a
    failback stopped then must not leave them refused on both streams."""
    api = linked
    sent = produce(api, f"{SF}:t", ["a", "b"])
    drain(cli)
    status, _, err = cli(*FAILOVER, "-timeout", "60")
    assert status == 0, err
    sent += produce(api, f"{NY}:t", ["c", "d"])  # no gateway copies them back while the failback waits
    proc = subprocess.Popen(
        [str(STREAMREP_EXE), *FAILBACK, "-timeout", "300"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=clean_env(streamrep_home),
    )
    wait_until(lambda: failover_state(cli, NY) == "RETURNING", 60, "the failback never began its switch back")
    time.sleep(1)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 1, (out, err)
    assert err.count("\n") == 1 and "interrupted after " in err and f"producers write to {NY} again" in err, err
    assert (failover_state(cli, NY), failover_state(cli, SF)) == ("PROMOTED", "FAILING_BACK")
    sent += produce(api, f"{NY}:t", ["e"])  # taken at once: the promoted stream is no longer refused

    status, _, err = cli("gateway", "run", "-cluster", "sanfrancisco", "-engine", "local", "-once", "true")
    assert status == 0, err
    status, out, err = cli(*FAILBACK, "-timeout", "60", "-json")  # the same failback finishes it
    assert status == 0, err
    assert (failover_state(cli, NY), failover_state(cli, SF)) == (None, None)
    assert values(api, SF) == sorted(sent)


# The CLI, killed with SIGKILL at the n-th call (argv[2]) of the failback's step named in argv[1].
FAILBACK_KILLED_AT = textwrap.dedent("""
    import importlib, os, signal, sys
    module = importlib.import_module("streamrep.replication.failover.failback")
    name, at, calls = sys.argv[1], int(sys.argv[2]), []
    real = getattr(module, name)
    def step(*args, **kwargs):
        calls.append(name)
        if len(calls) == at:
            os.kill(os.getpid(), signal.SIGKILL)
        return real(*args, **kwargs)
    setattr(module, name, step)
    from streamrep.cli.main import main
    sys.argv = ["streamrep", *sys.argv[3:]]
    main()
""")
NEVER_APPLIED = [("t", 1), ("u", 0), ("u", 1)]  # partitions the source never wrote before the failover


@pytest.mark.parametrize(
    "step, at",
    [("write_mark", 1), ("write_mark", 2), ("clear_stops", 1), ("ensure_upstream", 1)],
    ids=["before-the-own-writes-marks", "between-them", "after-them", "with-the-flow-stopped-no-more"],
)
def test_a_failback_killed_while_it_marks_the_replicas_own_writes_is_finished_by_a_rerun(
    linked, cli, streamrep_home, step, at
):
    """The return marks where the promoted stream's own writes end in every partition nothing was
    applied to (so the lost-data check takes them for no planted topic), then restores the flow:
    killed at any point of it, the same failback finishes it, and the replica replicates every
    partition, up to date, holding every message once, as the source does."""
    api = linked
    api.create_topic(SF, "u", 2)
    sent = produce(api, f"{SF}:t", [f"a{i}" for i in range(5)], partition=0)
    drain(cli)
    status, _, err = cli(*FAILOVER, "-timeout", "60")
    assert status == 0, err
    for topic, partition in [("t", 0), *NEVER_APPLIED]:
        sent += produce(api, f"{NY}:{topic}", [f"ny-{topic}{partition}-{i}" for i in range(3)], partition=partition)
    status, _, err = cli(*FAILBACK, "-phase", "reverse")
    assert status == 0, err
    status, _, err = cli("gateway", "run", "-cluster", "sanfrancisco", "-engine", "local", "-once", "true")
    assert status == 0, err
    killed = subprocess.run(
        [sys.executable, "-c", FAILBACK_KILLED_AT, step, str(at), *FAILBACK, "-phase", "return", "-timeout", "60"],
        capture_output=True,
        text=True,
        env=clean_env(streamrep_home),
        timeout=120,
    )
    assert killed.returncode == -signal.SIGKILL, (killed.stdout, killed.stderr)
    status, out, err = cli(*FAILBACK, "-timeout", "60", "-json")  # the same failback finishes it
    assert status == 0, err
    assert (failover_state(cli, NY), failover_state(cli, SF)) == (None, None)
    for topic, partition in [("t", 0), *NEVER_APPLIED]:
        sent += produce(api, f"{SF}:{topic}", [f"b-{topic}{partition}"], partition=partition)
    drain(cli)  # exit 0: no partition was left out of the pass (a planted topic would be)
    row = replica_row(cli)  # no gateway runs now: waiting for one, and up to date
    assert row["replicaState"] == "REPLICA_STATE_WAITING_FOR_GATEWAY" and row["isUptodate"] is True, row
    assert "planted" not in row["errors"] and row["pendingMessages"] == 0, row
    assert values(api, SF) == sorted(sent)  # nothing lost, nothing twice, on both sides
    assert values(api, NY) == sorted(sent)
