"""How long ``streamrep cluster add`` takes to say that a Kafka cluster cannot be used (issue 29, item 8).

The whole command, through the installed executable (process start, imports and the version probe),
against three stand-ins on this machine that need no broker: a port nothing listens on, a server that
accepts connections and never answers (a hung broker), and a server that answers as HTTP does (a wrong
port). Goal: every run's one-line error within 15 s. The script always exits 0: it reports, it does not
gate (the load average is printed; a loaded machine's process start counts too).

    .venv/bin/python bench/bench_unreachable.py             # a table, about a minute
    .venv/bin/python bench/bench_unreachable.py --json
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

GOAL_SECONDS = 15.0
STREAMREP = Path(sys.executable).parent / "streamrep"


def _serve(server: socket.socket, reply: bytes | None) -> None:
    """Accept connections on ``server``: answer ``reply`` to the first bytes, or hold them unanswered."""
    held = []
    while True:
        try:
            conn, _ = server.accept()
        except OSError:
            return
        if reply is None:
            held.append(conn)  # open and silent, as a hung broker
            continue
        with conn:
            conn.recv(1024)
            conn.sendall(reply)


def stand_ins() -> dict[str, int]:
    """``{case: port}``: a closed port, a silent server and an HTTP server, the servers on daemon threads."""
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        ports = {"a closed port": closed.getsockname()[1]}
    for case, reply in (("a hung broker", None), ("an HTTP server", b"HTTP/1.1 400 Bad Request\r\n\r\n")):
        server = socket.create_server(("127.0.0.1", 0))
        ports[case] = server.getsockname()[1]
        threading.Thread(target=_serve, args=(server, reply), daemon=True).start()
    return ports


def cluster_add(port: int) -> tuple[float, int, str]:
    """Seconds, exit status and stderr of ``streamrep cluster add`` to ``127.0.0.1:<port>``, in a fresh home."""
    with tempfile.TemporaryDirectory() as home:
        began = time.monotonic()
        result = subprocess.run(
            [str(STREAMREP), "cluster", "add", "-name", "c", "-url", f"kafka://127.0.0.1:{port}"],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "STREAMREP_HOME": home},
        )
        return time.monotonic() - began, result.returncode, result.stderr.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    load = os.getloadavg()[0]
    measures = []
    for case, port in stand_ins().items():
        runs = [cluster_add(port) for _ in range(args.repeats)]
        seconds = [run[0] for run in runs]
        measures.append(
            {
                "name": case,
                "unit": "s",
                "median": round(statistics.median(seconds), 2),
                "max": round(max(seconds), 2),
                "goal": f"every run within {GOAL_SECONDS:g} s, one line, exit 1",
                "met": max(seconds) < GOAL_SECONDS and all(run[1] == 1 and "\n" not in run[2] for run in runs),
                "line": runs[-1][2],
            }
        )
    if args.json:
        print(json.dumps({"load": load, "measures": measures}))
        return
    print(f"load average {load:.1f}")
    for m in measures:
        print(f"{m['name']:16} median {m['median']:5.1f} s  max {m['max']:5.1f} s  {'met' if m['met'] else 'NOT met'}")
        print(f"  {m['line']}")


if __name__ == "__main__":
    main()
