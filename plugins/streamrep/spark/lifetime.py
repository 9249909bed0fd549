"""A Spark job's lifetime: it never outlives the process that launched it.

``tether()`` gives the ``subprocess.Popen`` options every launch uses (the CLI's, the tests' and
the Airflow operators'), ``Tether`` the same for a launcher that does not hold the job's ``Popen``,
``start_tethered`` and ``foreground_job`` start a job with them, and ``stop_job`` / ``stop_tree``
stop a job with everything it started. Why these mechanisms: the comment below.
"""

from __future__ import annotations

import ctypes
import functools
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any, TypedDict

from streamrep.errors import Misinstalled, StreamrepError
from streamrep.spark.command import NO_SPARK_SUBMIT


class Terminated(StreamrepError):
    """The launcher was asked to stop (SIGTERM, SIGHUP) while its Spark job ran; the job was
    stopped first."""


# -- the job's lifetime: it never outlives its launcher -----------------------------------
# A job is spark-submit's JVM. In local mode the JVM starts the Python driver (the app), and
# pyspark's daemon, which forks the Python workers and makes its own process group. Why these
# mechanisms (all set by ``tether()``, used by every launcher: the CLI, the tests, the operators):
# * The kernel ends the job when its launcher dies: PR_SET_PDEATHSIG on the JVM. Unlike a
#   watchdog polling a pid, it fires on every death, SIGKILL included, at once, with no pid
#   reuse race and no code in the job. The rest follows the JVM: the driver's next py4j call
#   fails (it exits through its ``finally``, withdrawing the gateway's heartbeat), and the
#   daemon exits and kills its workers when its stdin, a pipe from the JVM, closes.
#   The signal is SIGTERM, so the JVM's shutdown hooks stop the SparkContext and delete its
#   temporary folders. It fires when the *thread* that started the job ends: each launcher
#   waits for its job in that thread.
# * The job is a session of its own: a terminal's Ctrl-C reaches the launcher alone, which stops
#   the job in order (``stop_job``: SIGTERM to the JVM and the driver, which stops its query),
#   and escalates to SIGKILL for the whole tree if that takes too long.
# Positions are committed with the messages, so wherever a stop lands, a restart is exact.
PR_SET_PDEATHSIG = 1
STOP_GRACE_SECONDS = 15.0  # for the driver to stop its query and the JVM its SparkContext
_prctl = getattr(ctypes.CDLL(None, use_errno=True), "prctl", None)  # looked up before any fork


def _die_with(launcher: int, report: int | None = None) -> None:
    """Runs in the job's process between fork and exec: SIGTERM when ``launcher`` dies, and
    no start at all if it died before this. With ``report`` (a pipe's write end), writes the
    job's pid there."""
    if _prctl is not None:
        _prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
    if os.getppid() != launcher:
        os._exit(1)
    if report is not None:
        os.write(report, b"%d\n" % os.getpid())


class PopenTether(TypedDict):
    """The ``subprocess.Popen`` options that tether a job (``tether()``, ``Tether.popen_options``)."""

    start_new_session: bool
    preexec_fn: Callable[[], None]


def tether() -> PopenTether:
    """``subprocess.Popen`` options that tie a job to this process (see above)."""
    return {"start_new_session": True, "preexec_fn": functools.partial(_die_with, os.getpid())}


def start_tethered(argv: Sequence[str], env: Mapping[str, str], **popen: Any) -> subprocess.Popen[Any]:
    """Start spark-submit's ``argv`` tethered to this process (``tether()`` over ``popen``, the
    other ``subprocess.Popen`` options); Misinstalled if spark-submit is not there."""
    try:
        return subprocess.Popen(argv, env=env, **{**popen, **tether()})
    except FileNotFoundError:
        raise Misinstalled(NO_SPARK_SUBMIT) from None


class Tether:
    """``tether()`` for a launcher that does not hold the job's ``Popen`` (the Spark provider's
    hook starts and reaps it): each job started with ``popen_options()`` reports its pid, so
    that ``stop()`` can stop it with everything it started, as ``stop_job`` does."""

    def __init__(self) -> None:
        self._read, self._write = os.pipe()
        os.set_blocking(self._read, False)
        self._pids: list[int] = []

    def popen_options(self) -> PopenTether:
        return {"start_new_session": True, "preexec_fn": functools.partial(_die_with, os.getpid(), self._write)}

    def pids(self) -> list[int]:
        """The jobs started so far (live or not)."""
        if self._read < 0:
            return list(self._pids)  # closed: what was reported before
        try:
            while chunk := os.read(self._read, 4096):
                self._pids += [int(pid) for pid in chunk.split()]
        except (BlockingIOError, OSError):
            pass
        return list(self._pids)

    def running(self) -> list[int]:
        return [pid for pid in self.pids() if _running(pid)]

    def stop(self, grace: float = STOP_GRACE_SECONDS) -> list[int]:
        """Stop every running job with everything it started (``stop_tree``): it returns when
        they are all gone, within ``grace`` + ``KILL_WAIT_SECONDS``. Returns the jobs it stopped.
        (Their exit status is their launcher's to collect.)"""
        jobs = self.running()
        stop_tree(jobs, grace)
        return jobs

    def close(self) -> None:
        """Close the pipe (the pids reported so far are kept)."""
        self.pids()
        for fd in (self._read, self._write):
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self._read = self._write = -1


def _stat(pid: int) -> tuple[str, int] | None:
    """``pid``'s state letter and start time (clock ticks after boot), or None when it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return fields[0], int(fields[19])
    except (OSError, IndexError, ValueError):
        return None


def _running(pid: int, start: int | None = None) -> bool:
    """Whether ``pid`` runs (a zombie has ended: only its launcher's wait is left); with
    ``start``, whether the process that started then does (not a later one given its pid)."""
    stat = _stat(pid)
    return stat is not None and stat[0] != "Z" and start in (None, stat[1])


def describe_process(pid: int) -> str:
    """``pid``, its command line and state, for a message about a process that should be gone."""
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        command = ""
    stat = _stat(pid)
    return f"pid {pid} ({command or '?'}, state {stat[0] if stat else 'gone'})"


def _parents() -> dict[int, list[int]]:
    """Each process's children, from /proc (plain reads: a stop polls this)."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as stat:
                ppid = int(stat.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(name))
    return children


def _below(pids: Sequence[int], children: Mapping[int, list[int]]) -> list[int]:
    found, todo = list(pids), list(pids)
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def job_processes(pid: int) -> list[int]:
    """``pid`` and every process below it: the JVM, the Python driver, pyspark's daemons
    and workers (read from /proc)."""
    return _below([pid], _parents())


def _signal(pids: Sequence[int], sig: int) -> None:
    """``sig`` to ``pids`` and to the process groups they lead (pyspark's daemons lead theirs)."""
    for pid in pids:
        for send in (os.killpg, os.kill):
            try:
                send(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass


KILL_WAIT_SECONDS = 2.0  # for SIGKILLed processes to exit: it takes CPU time, scarce on a loaded machine


def _live(tree: Mapping[int, int]) -> dict[int, int]:
    """The processes of ``tree`` (pid: start time) still running, with every process started
    below them since: a process started late is part of the job too."""
    live = {pid: start for pid, start in tree.items() if _running(pid, start)}
    for pid in _below(list(live), _parents()):
        if pid not in live and (stat := _stat(pid)) is not None and stat[0] != "Z":
            live[pid] = stat[1]
    return live


def _wait_gone(tree: Mapping[int, int], deadline: float) -> dict[int, int]:
    """Wait until no process of ``tree`` runs, or ``deadline``; the ones still running."""
    live = _live(tree)
    while live and time.monotonic() < deadline:
        time.sleep(0.05)
        live = _live(live)
    return live


def stop_tree(jobs: Sequence[int], grace: float = STOP_GRACE_SECONDS) -> None:
    """Stop tethered ``jobs`` (session leaders) and everything they started: SIGTERM to each
    job's session group (the JVM, and the driver, which stops its query and withdraws its
    heartbeat); SIGKILL to every process of their trees still running after ``grace`` seconds,
    the jobs' own and those a job left behind (a child that ignores SIGTERM, pyspark's daemons);
    then returns once every one has ended (a zombie has: only its parent's wait is left).
    Returns within ``grace`` + ``KILL_WAIT_SECONDS``, or raises StreamrepError naming the
    processes still running then."""
    # Taken before a job goes and its children are reparented; by start time, so that a pid
    # given to a later process is neither waited for nor killed.
    tree = {pid: stat[1] for pid in _below(list(jobs), _parents()) if (stat := _stat(pid))}
    for pid in jobs:
        try:
            os.killpg(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    live = _wait_gone(tree, time.monotonic() + grace)
    if live:
        _signal(list(live), signal.SIGKILL)
        # SIGKILL is delivered when the process next runs: until then it still runs.
        live = _wait_gone(live, time.monotonic() + KILL_WAIT_SECONDS)
    if live:
        raise StreamrepError(
            f"stopping a Spark job: {', '.join(map(describe_process, live))} still running "
            f"{KILL_WAIT_SECONDS:g} s after SIGKILL"
        )


def stop_job(proc: subprocess.Popen[Any], grace: float = STOP_GRACE_SECONDS) -> int:
    """Stop a tethered job and all it started (``stop_tree``), and reap it. Returns the job's
    exit status."""
    stop_tree([proc.pid], grace)
    return proc.wait()


_Handler = Callable[[int, FrameType | None], Any] | int | None  # what signal.signal takes and returns


class _TerminatedBySignal:
    """While a job runs in the foreground of the main thread, SIGTERM and SIGHUP raise
    ``Terminated`` (SIGINT already raises KeyboardInterrupt), so the launcher stops the job
    before it goes."""

    SIGNALS = (signal.SIGTERM, signal.SIGHUP)

    def __enter__(self) -> _TerminatedBySignal:
        self.saved: dict[signal.Signals, _Handler] = {}
        if threading.current_thread() is threading.main_thread():
            self.saved = {sig: signal.signal(sig, self._raise) for sig in self.SIGNALS}
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        for sig, handler in self.saved.items():
            signal.signal(sig, handler)

    @staticmethod
    def _raise(signum: int, frame: FrameType | None) -> None:
        raise Terminated(f"stopped by {signal.Signals(signum).name}")


@contextmanager
def foreground_job(argv: Sequence[str], env: Mapping[str, str], **popen: Any) -> Iterator[subprocess.Popen[Any]]:
    """Start a tethered job (``start_tethered``) and yield it; if the block ends with an exception
    (Ctrl-C, SIGTERM or SIGHUP of this process, a timeout) the job is stopped with ``stop_job`` first."""
    with _TerminatedBySignal(), start_tethered(argv, env, **popen) as proc:
        try:
            yield proc
        except BaseException:
            stop_job(proc)
            raise
