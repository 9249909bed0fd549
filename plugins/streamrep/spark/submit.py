"""Running the Spark apps (``copystream``, ``gateway``, ``diffstreams``) through spark-submit:
``run_app`` to completion, ``start_app`` in the background, and one function per app
(``submit_copystream``, ``submit_diff``, ``submit_gateway``) that passes its arguments and reads
its result. The command is built by ``command.py``; the job is tethered to this process by
``lifetime.py``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import IO, Any, cast

from streamrep.errors import StreamrepError
from streamrep.replication.copy import CopySummary
from streamrep.spark.command import (
    DEFAULT_INTERVAL,
    python_env,  # noqa: F401 - docs/spark-source.md names it here, for users' Spark jobs
    spark_submit_command,
)
from streamrep.spark.lifetime import foreground_job, start_tethered

JVM_NOISE = "WARNING: Using incubator modules"  # printed by every Java 17 start; says nothing


@dataclass
class AppResult:
    """How a Spark app run to completion ended: its exit status and its captured output."""

    returncode: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.returncode == 0


def run_app(
    app: str,
    args: Sequence[str] = (),
    master: str | None = None,
    conf: Mapping[str, str] | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float | None = None,
) -> AppResult:
    """Run ``app`` to completion with spark-submit, tethered to this process; its output is
    captured. A timeout stops the job and raises ``subprocess.TimeoutExpired``."""
    argv, run_env = spark_submit_command(app, args, master, conf, env)
    with foreground_job(argv, run_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
        stdout, stderr = proc.communicate(timeout=timeout)
    return AppResult(proc.returncode, stdout, stderr)


def start_app(
    app: str,
    args: Sequence[str] = (),
    master: str | None = None,
    conf: Mapping[str, str] | None = None,
    env: Mapping[str, str] | None = None,
    **popen: Any,
) -> subprocess.Popen[Any]:
    """Start ``app`` with spark-submit in the background, tethered to this process (it stops
    when this process dies; ``stop_job`` stops it); ``popen`` goes to subprocess.Popen."""
    argv, run_env = spark_submit_command(app, args, master, conf, env)
    return start_tethered(argv, run_env, **popen)


def _failure(app: str, result: AppResult) -> StreamrepError:
    """The app's own one-line error (``ERROR: ...``; spark-submit may pass the driver's stderr
    to stdout), or its exit status."""
    lines = [line for line in (result.stdout + "\n" + result.stderr).splitlines() if line.startswith("ERROR: ")]
    message = lines[-1][len("ERROR: ") :] if lines else f"exited with status {result.returncode}"
    return StreamrepError(f"{app} on Spark failed: {message}")


def submit_copystream(
    src: str, dst: str, home: str | None = None, numthreads: int | None = None, master: str | None = None
) -> CopySummary:
    """Run the copystream app through spark-submit; returns its summary.

    :param master: the Spark master (see ``spark_submit_command``)."""
    args = ["--src", src, "--dst", dst]
    args += ["--home", home] if home else []
    args += ["--numthreads", str(numthreads)] if numthreads else []
    return CopySummary.from_dict(_json_line("copystream", run_app("copystream", args, master)))


def submit_diff(
    src: str,
    dst: str,
    outdir: str,
    *,
    crc: bool = False,
    first_exit: bool = False,
    home: str | None = None,
    numthreads: int | None = None,
    master: str | None = None,
) -> dict[str, Any]:
    """Run the diffstreams app (diffstreamswithcrc with ``crc``) through spark-submit; it writes
    the ops directories into ``outdir``. Returns its JSON line (``DiffResult.to_dict``: ``same``,
    the counts, ``summary``), whether the streams are the same or not; raises on an error.

    :param master: the Spark master (see ``spark_submit_command``)."""
    args = ["--src", src, "--dst", dst, "--outdir", outdir]
    args += ["--crc"] if crc else []
    args += ["--first-exit"] if first_exit else []
    args += ["--home", home] if home else []
    args += ["--numthreads", str(numthreads)] if numthreads else []
    return _json_line("diffstreams", run_app("diffstreams", args, master))


def _json_line(app: str, result: AppResult) -> dict[str, Any]:
    """The last JSON line an app printed on stdout (its result), or its error."""
    if not result.ok:
        raise _failure(app, result)
    lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
    if not lines:
        raise StreamrepError(f"{app} on Spark printed no summary")
    printed: dict[str, Any] = json.loads(lines[-1])
    return printed


def submit_gateway(
    cluster: str,
    gateway_id: str | None = None,
    once: bool = False,
    home: str | None = None,
    interval: float = DEFAULT_INTERVAL,
    master: str | None = None,
    metrics_port: int | None = None,
) -> None:
    """Run the gateway app through spark-submit in the foreground, its output passed through.

    :param master: the Spark master (see ``spark_submit_command``).
    :param metrics_port: serve the gateway's Prometheus metrics from the Spark driver on this port."""
    args = ["--cluster", cluster, "--interval", str(interval)]
    args += ["--metrics-port", str(metrics_port)] if metrics_port else []
    args += ["--id", gateway_id] if gateway_id else []
    args += ["--home", home] if home else []
    args += ["--once"] if once else []
    argv, run_env = spark_submit_command("gateway", args, master)
    errors: list[str] = []
    with foreground_job(argv, run_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as proc:
        lines = cast("IO[str]", proc.stdout)  # stdout=PIPE
        for line in lines:  # passed through as it comes; the app's own error line is kept
            if not line.startswith(JVM_NOISE):
                sys.stderr.write(line)
            if line.startswith("ERROR: "):
                errors.append(line.rstrip("\n"))
        proc.wait()
    if proc.returncode != 0:
        raise _failure("gateway", AppResult(proc.returncode, "\n".join(errors), ""))
