"""Why two goals of the embedded store are out of reach on one SQLite file (issue 20, part 6).

Two profiles, each against a floor measured in the same run (median of ``--repeats``):

* ``scaling``: an in-process copystream of ``--messages`` (500k x 100 B, 4 partitions), with the
  time spent inside ``EmbeddedStore.apply_many`` (the destination's write transaction, which holds
  the file's one write lock) and inside ``read`` measured apart. The write share ``w`` bounds what
  a second core can give (Amdahl): ``1 / (w + (1 - w) / 2)``, whatever Spark does.
* ``fanout``: one gateway pass of ``--fanout-messages`` (20k) to 64 replicas against 64 x a pass to
  one, and the floor: SQLite copying the same rows 63 times inside one transaction
  (``INSERT ... SELECT``, what the store does for every replica after the first), with nothing else.
  ``(one pass + 63 copies) / (64 x one pass)`` is the best fan-out ratio one SQLite file allows.

Run: ``.venv/bin/python bench/profile_embedded_limits.py [--json] [--repeats N]``. Always exits 0.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

from benchlib import IDENTITY, drain, fresh_home, link, median
from scale import new_stream, produce

from streamrep.replication.copy import copy_stream
from streamrep.replication.gateway import Gateway
from streamrep.store import embedded

SOURCE = "/mapr/sf/s"
PARTITIONS = 4


class Spent:
    """Seconds spent inside chosen methods of ``EmbeddedStore``, wrapped in place for this process."""

    def __init__(self, *names: str):
        self.seconds = dict.fromkeys(names, 0.0)
        for name in names:
            setattr(embedded.EmbeddedStore, name, self._timed(name, getattr(embedded.EmbeddedStore, name)))

    def _timed(self, name: str, method: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return method(*args, **kwargs)
            finally:
                self.seconds[name] += time.perf_counter() - start

        return timed

    def reset(self) -> None:
        self.seconds = dict.fromkeys(self.seconds, 0.0)


def profile_scaling(messages: int, repeats: int) -> dict:
    spent = Spent("apply_many", "read")
    home, admin = fresh_home(("sf", "ny"))
    runs = []
    try:
        new_stream(admin, SOURCE, PARTITIONS)
        produce(admin, SOURCE, messages)
        for n in range(repeats):
            spent.reset()
            start = time.perf_counter()
            assert copy_stream(admin, SOURCE, f"/mapr/ny/c{n}").messages == messages
            total = time.perf_counter() - start
            write = spent.seconds["apply_many"] / total
            runs.append({"total_s": total, "write_share": write, "read_s": spent.seconds["read"]})
            log(f"  scaling run {n}: {runs[-1]}")
    finally:
        shutil.rmtree(home, ignore_errors=True)
    write = median([r["write_share"] for r in runs])
    return {
        "case": "scaling",
        "messages": messages,
        "write_share": write,
        "two_core_bound": 1 / (write + (1 - write) / 2),
        "runs": runs,
    }


def copy_floor(rows: int, copies: int) -> float:
    """Seconds SQLite takes to copy ``rows`` message rows ``copies`` times in one transaction, with the
    embedded store's journal mode and table layout and nothing else."""
    folder = tempfile.mkdtemp(prefix="streamrep-floor-")
    try:
        con = sqlite3.connect(os.path.join(folder, "floor.db"), isolation_level=None)
        con.execute("PRAGMA journal_mode=WAL")
        con.execute("PRAGMA synchronous=NORMAL")
        con.execute(
            "CREATE TABLE messages(id INTEGER PRIMARY KEY, ts INTEGER NOT NULL, key BLOB, value BLOB, headers BLOB)"
        )
        con.execute("BEGIN")
        con.executemany(
            "INSERT INTO messages VALUES (?, ?, NULL, ?, NULL)", ((i, 0, os.urandom(100)) for i in range(rows))
        )
        con.execute("COMMIT")
        start = time.perf_counter()
        con.execute("BEGIN IMMEDIATE")
        for n in range(1, copies + 1):
            con.execute(
                "INSERT INTO messages SELECT id + ?, ts, key, value, headers FROM messages WHERE id >= 0 AND id < ?",
                (n << 32, rows),
            )
        con.execute("COMMIT")
        elapsed = time.perf_counter() - start
        con.close()
        return elapsed
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def profile_fanout(messages: int, repeats: int, replicas: int = 64) -> dict:
    setups = {}
    runs: dict[str, list[float]] = {"one": [], "fan": [], "floor": []}
    try:
        for count in (1, replicas):
            home, admin = fresh_home(("sf", "ny"))
            new_stream(admin, SOURCE, PARTITIONS)
            for i in range(count):
                link(admin, SOURCE, f"/mapr/ny/r{i}")
            gateway = Gateway(admin, "ny", "bench")
            produce(admin, SOURCE, PARTITIONS)  # every replica's topic made before the clock
            drain(gateway)
            setups[count] = (home, admin, gateway)
        for n in range(repeats):  # interleaved
            for label, count in (("one", 1), ("fan", replicas)):
                _, admin, gateway = setups[count]
                produce(admin, SOURCE, messages)
                start = time.perf_counter()
                assert drain(gateway) == messages
                runs[label].append(time.perf_counter() - start)
            runs["floor"].append(copy_floor(messages, replicas - 1))
            log(
                f"  fanout run {n}: one {runs['one'][-1]:.3f} s, 64 {runs['fan'][-1]:.3f} s, floor {runs['floor'][-1]:.3f} s"
            )
    finally:
        for home, _, gateway in setups.values():
            gateway.stop()
            shutil.rmtree(home, ignore_errors=True)
    one, fan, floor = (median(runs[k]) for k in ("one", "fan", "floor"))
    return {
        "case": "fanout",
        "messages": messages,
        "replicas": replicas,
        "one_pass_s": one,
        "fanout_pass_s": fan,
        "copies_floor_s": floor,
        "ratio": fan / (replicas * one),
        "floor_ratio": (one + floor) / (replicas * one),
        "runs": runs,
    }


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=500_000, help="the copystream's messages")
    parser.add_argument("--fanout-messages", type=int, default=20_000, help="new messages per fan-out pass")
    parser.add_argument("--repeats", type=int, default=3, help="runs per figure (the median is kept)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    os.environ["STREAMREP_USER"] = IDENTITY.user
    load = os.getloadavg()
    result = {
        "load_start": load,
        "results": [profile_scaling(args.messages, args.repeats), profile_fanout(args.fanout_messages, args.repeats)],
        "load_end": os.getloadavg(),
    }
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        scaling, fanout = result["results"]
        print(f"load average {load[0]:.1f} -> {result['load_end'][0]:.1f}")
        print(
            f"scaling: the destination's write transaction is {scaling['write_share']:.0%} of a copy; "
            f"two cores can give at most {scaling['two_core_bound']:.2f}x (goal 1.6x)"
        )
        print(
            f"fan-out: 64 replicas {fanout['fanout_pass_s']:.3f} s / 64 x {fanout['one_pass_s']:.3f} s = "
            f"{fanout['ratio']:.2f}x; SQLite's own copies alone give {fanout['floor_ratio']:.2f}x (goal 0.25x)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
