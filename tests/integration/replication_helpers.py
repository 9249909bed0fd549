"""Helpers for the replication tests: produce unique values, read back everything a stream
holds, check that a replica holds every expected message exactly once, and run gateways and
copystream in child processes that a test kills."""

from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from streamrep.client import Producer, StreamAdmin
from streamrep.errors import Unavailable
from streamrep.model.message import Message
from streamrep.replication.apply import ORIGIN_HEADER
from streamrep.replication.flows import Flow
from streamrep.replication.gateway import Gateway
from streamrep.replication.gateway_passes import DEFAULT_BATCH
from streamrep.replication.reads import SourceRead, read_source
from streamrep.replication.transfer import SourcePartition

# The streamrep executable of this venv, for tests that run the real CLI in a subprocess.
STREAMREP_EXE = Path(sys.executable).parent / "streamrep"

Contents = dict[tuple[str, int], list[Message]]


def produce(admin: StreamAdmin, topic: str, values: Iterable[str], **send) -> list[str]:
    """Send ``values`` to ``topic`` (``<stream>:<topic>``) and flush; returns the values sent."""
    values = list(values)
    with Producer(admin, batch_size=1 << 30) as producer:
        for value in values:
            producer.send(topic, value, **send)
    return values


def read_next(
    gateway: Gateway, unit: SourcePartition, flows: Sequence[Flow], max_messages: int = DEFAULT_BATCH
) -> SourceRead:
    """The next batch of ``unit`` for ``flows``, from their lowest stored position, read as a Spark task
    reads it (``Gateway.progress``, then ``reads.read_source``): with ``Gateway.apply_reads`` it steps a
    gateway one batch of one partition at a time, which a test needs to interleave gateways and a pass
    (``run_once``) does not offer."""
    position = gateway.progress({unit: flows})[unit].position
    return read_source(gateway.admin.clusters.store(unit.source.cluster), unit, position, max_messages)


def contents(admin: StreamAdmin, stream: str) -> Contents:
    """Every message of every topic and partition of ``stream``, by ``(topic, partition)``,
    read from its store; checks that the offsets held are gap-free (on Kafka, where transaction
    markers take offsets, that they increase within the partition's bounds)."""
    sp = admin.path(stream)
    entry = admin.entry(sp)
    store = admin.store(sp)
    on_kafka = admin.clusters.get(sp.cluster).kind == "kafka"
    result: Contents = {}
    for topic, count in store.topics(entry.uuid).items():
        for partition in range(count):
            start, end = store.offsets(entry.uuid, topic, partition)
            # up to the end read first: a gateway applying meanwhile adds messages past it
            held = [m for m in store.read(entry.uuid, topic, partition, start, end - start + 1) if m.offset < end]
            offsets = [m.offset for m in held]
            if on_kafka:
                assert offsets == sorted(set(offsets)) and all(start <= o < end for o in offsets), (
                    f"{stream}:{topic}/{partition} holds offsets out of order or bounds"
                )
            else:
                assert offsets == list(range(start, end)), f"{stream}:{topic}/{partition} has a gap"
            result[(topic, partition)] = held
    return result


def all_values(admin: StreamAdmin, stream: str) -> list[str]:
    return [m.value.decode() for held in contents(admin, stream).values() for m in held]


def count(admin: StreamAdmin, stream: str) -> int:
    """How many messages ``stream`` holds, from the partition bounds only (cheap); on Kafka, where
    transaction markers take offsets too, by counting the messages."""
    sp = admin.path(stream)
    entry = admin.entry(sp)
    store = admin.store(sp)
    on_kafka = admin.clusters.get(sp.cluster).kind == "kafka"
    total = 0
    for topic, partitions in store.topics(entry.uuid).items():
        for p in range(partitions):
            start, end = store.offsets(entry.uuid, topic, p)
            total += store.range_stats(entry.uuid, topic, p, start)[0] if on_kafka else end - start
    return total


def assert_exactly_once(admin: StreamAdmin, stream: str, expected: Iterable[str]) -> None:
    """``stream`` holds every value of ``expected`` once and nothing else."""
    expected = list(expected)
    assert len(set(expected)) == len(expected), "the test's expected values must be unique"
    held = Counter(all_values(admin, stream))
    duplicated = sorted(v for v, n in held.items() if n > 1)
    missing = sorted(set(expected) - set(held))
    extra = sorted(set(held) - set(expected))
    assert not (duplicated or missing or extra), (
        f"{stream}: {len(duplicated)} duplicated {duplicated[:5]}, {len(missing)} missing {missing[:5]}, "
        f"{len(extra)} unexpected {extra[:5]} (holds {sum(held.values())}, expected {len(expected)})"
    )


def origin(message: Message) -> tuple[str, int, int] | None:
    """``(uuid, partition, offset)`` of the stream where ``message`` was first produced."""
    raw = message.header(ORIGIN_HEADER)
    if raw is None:
        return None
    uuid, partition, offset = raw.decode("ascii").rsplit("/", 2)
    return uuid, int(partition), int(offset)


def user_view(message: Message) -> tuple:
    """What a consumer sees of a message, without the replication header and the offset."""
    headers = tuple(h for h in message.headers if h[0] != ORIGIN_HEADER)
    return message.value, message.key, headers, message.timestamp


def drain(*gateways: Gateway, max_messages: int | None = None) -> int:
    """Run every gateway once, again and again, until a full round moves nothing."""
    total = 0
    for _ in range(100):
        moved = sum(g.run_once() if max_messages is None else g.run_once(max_messages) for g in gateways)
        total += moved
        if moved == 0:
            return total
    raise AssertionError("gateways never went idle")


def json_rows(result) -> list[dict]:
    """The ``data`` of a successful CLI call made with ``-json``."""
    code, out, err = result
    assert code == 0, f"exit {code}, stderr: {err!r}"
    doc = json.loads(out)
    assert doc["status"] == "OK"
    return doc["data"]


def one_line_error(result, *fragments: str, code: int = 1) -> str:
    """A CLI failure: exit ``code``, one ``streamrep: error:`` line naming every fragment."""
    rc, out, err = result
    assert rc == code, f"expected exit {code}, got {rc}; stdout {out!r} stderr {err!r}"
    assert "Traceback" not in err
    assert err.startswith("streamrep: error: ") and err.count("\n") == 1, f"not one line: {err!r}"
    for fragment in fragments:
        assert fragment.lower() in err.lower(), f"{fragment!r} not in {err!r}"
    return err


USER = "alice"
# Variables of the caller's shell that would change what the CLI does.
SCRUBBED = ("STREAMREP_DEFAULT_CLUSTER", "STREAMREP_GROUPS", "STREAMREP_DEBUG", "STREAMREP_SYNC", "STREAMREP_USER")


def clean_env(home: Path | str, user: str = USER, **extra: str) -> dict[str, str]:
    """The environment of a child process: ``STREAMREP_HOME=home`` and ``STREAMREP_USER=user``."""
    env = {k: v for k, v in os.environ.items() if k not in SCRUBBED}
    env["STREAMREP_HOME"] = str(home)
    env["STREAMREP_USER"] = user
    env["STREAMREP_GROUPS"] = ""  # no OS groups: permissions depend on the user alone
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


# The in-process gateway, pass after pass, in small batches (many transactions to die in); a pass
# that meets a cluster down or restarting is retried as the gateway service does (Outage).
GATEWAY_CHILD = textwrap.dedent("""
    import faulthandler, logging, signal, sys, time
    from streamrep.client import StreamAdmin
    from streamrep.errors import Unavailable
    from streamrep.replication.gateway import Gateway, Outage

    faulthandler.register(signal.SIGUSR1)  # a test that finds it stuck asks where it is
    faulthandler.enable()  # and one that dies of a native crash (SIGSEGV) says where
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(message)s")
    logging.getLogger("streamrep.replication.gateway").setLevel(logging.INFO)  # why a replica waits
    cluster, gid, batch, expiry = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
    gateway = Gateway(StreamAdmin(), cluster, gid, expiry=expiry)
    outage = Outage(gid, 0.005)
    print("READY", flush=True)
    while True:
        try:
            moved = gateway.run_once(max_messages=batch)
        except Unavailable as err:
            outage.failed(err)
            continue
        outage.ended()
        if moved == 0:
            time.sleep(0.005)
""")

COPY_CHILD = textwrap.dedent("""
    import sys
    from streamrep.client import StreamAdmin
    from streamrep.replication.copy import copy_stream

    src, dst, batch = sys.argv[1], sys.argv[2], int(sys.argv[3])
    print("READY", flush=True)
    print("COPIED", copy_stream(StreamAdmin(), src, dst, batch_size=batch).messages, flush=True)
""")


def _killed_with_parent() -> None:
    """In a child, before it runs: the kernel SIGKILLs it when the test process dies (PR_SET_PDEATHSIG),
    so a test that fails, or a worker that crashes, leaves no gateway running on."""
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1: PR_SET_PDEATHSIG


class Child:
    """A child Python process (``python -c script args``); threads read its stdout and stderr
    so that neither pipe fills. It prints READY once it is set up. It dies with the test process."""

    def __init__(self, script: str, args: list, env: dict[str, str]):
        self.proc = subprocess.Popen(
            [sys.executable, "-c", script, *map(str, args)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            preexec_fn=_killed_with_parent,
        )
        self.lines: list[str] = []
        self.errors: list[str] = []
        self.ready = threading.Event()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.err_reader = threading.Thread(target=self._read_errors, daemon=True)
        self.reader.start()
        self.err_reader.start()
        self.code: int | None = None

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))
            if line.startswith("READY"):
                self.ready.set()
        self.ready.set()

    def _read_errors(self) -> None:
        for line in self.proc.stderr:
            self.errors.append(line)

    def stderr(self) -> str:
        return "".join(self.errors)[-2000:]

    def where(self) -> str:
        """What a stuck gateway child says: its log, and where every thread is (SIGUSR1, which
        GATEWAY_CHILD hands to faulthandler), if it still runs."""
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGUSR1)
            time.sleep(1)
        return self.stderr()

    def wait_ready(self, timeout: float = 30) -> None:
        assert self.ready.wait(timeout) and self.proc.poll() is None, f"child did not start: {self.stderr()}"

    def signal(self, sig: int) -> None:
        """Send ``sig`` (SIGSTOP, SIGCONT) to the running child."""
        assert self.proc.poll() is None, f"child exited with {self.proc.returncode}: {self.stderr()}"
        os.kill(self.proc.pid, sig)

    def kill9(self) -> int:
        """SIGKILL the child (if still running); its exit status, which must be the kill's or 0."""
        if self.code is not None:  # already reaped
            return self.code
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.code = self.proc.wait(timeout=30)
        self.reader.join(timeout=30)
        self.err_reader.join(timeout=30)
        self.proc.stdout.close()
        self.proc.stderr.close()
        assert self.code in (-signal.SIGKILL, 0), f"child failed with {self.code}: {self.stderr()}"
        return self.code


def kill_all(children: Iterable[Child]) -> None:
    """SIGKILL every one of ``children``, then fail if one had died of anything else (``Child.kill9``):
    one child's failure must not leave the others running."""
    failures = []
    for child in list(children):
        try:
            child.kill9()
        except AssertionError as failed:
            failures.append(str(failed))
    assert not failures, "; ".join(failures)


def wait_progressing(measure: Callable[[], int], goal: int, stall: float, what: str) -> None:
    """Poll ``measure`` until it reaches ``goal``; fail naming ``what`` only when it has not grown for
    ``stall`` seconds. A slow machine moves slowly but keeps moving; a stuck replication does not. A
    measure the cluster cannot answer yet (``Unavailable``: a broker just restarted) is no growth."""
    best, since, error = -1, time.monotonic(), None
    while True:
        try:
            now = measure()
        except Unavailable as err:
            now, error = best, err
        if now > best:
            best, since = now, time.monotonic()
        if best >= goal:
            return
        assert time.monotonic() - since < stall, (
            f"{what}: stuck at {max(best, 0)} of {goal} for {stall:.0f} s (last error: {error})"
        )
        time.sleep(0.05)


def wait_until(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    """Poll ``predicate`` until it holds; fail naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.005)


def alive(pids: Iterable[int]) -> list[int]:
    """The processes of ``pids`` still running (a zombie has ended: only its parent's wait is left)."""
    living = []
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            living.append(pid)
    return living


def command(pid: int) -> str:
    """``pid``'s command line ("" once it is gone)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""
