"""The cost of a Kafka replica partition changing process between gateway passes.

Spark hands a pass's tasks to whichever pooled Python worker is idle, so a replica partition may be
applied by another worker than in the last pass; its transactional id must then be initialised
there, which fences the first worker's producer. This benchmark applies one partition's passes
(50 new 100 B messages each) with two stores, as two workers would: **same** (one store every pass,
the baseline) against **alternate** (the two in turn), interleaved, and prints the medians and
their ratio. It starts its own single-node broker (``scripts/kafka_local.py``).

Run: ``.venv/bin/python bench/kafka_fencing.py [--passes 12] [--repeats 3]``. Always exits 0.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import benchlib  # noqa: E402

from streamrep.client import Clusters, StreamAdmin  # noqa: E402
from streamrep.model.message import Message  # noqa: E402
from streamrep.replication.gateway import Gateway  # noqa: E402


def passes(gateways: list[Gateway], admin: StreamAdmin, count: int) -> list[float]:
    """``count`` passes, each after 50 new messages, by the gateways in turn; ms per pass."""
    store = admin.store(admin.path("/mapr/sf/s"))
    uuid = admin.entry("/mapr/sf/s").uuid
    times = []
    for i in range(count):
        store.append(uuid, benchlib.TOPIC, {0: [Message(b"x" * 100, None, (), int(time.time() * 1000), 0)] * 50})
        started = time.perf_counter()
        gateways[i % len(gateways)].run_once()
        times.append((time.perf_counter() - started) * 1000)
    return times[1:]  # the first pass of a round may also take over from the other round's store


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passes", type=int, default=12)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    broker = benchlib.start_broker()
    try:
        home, admin = benchlib.kafka_home(f"127.0.0.1:{broker.port}")
        benchlib.new_stream(admin, "/mapr/sf/s", 1)
        benchlib.link(admin, "/mapr/sf/s", "/mapr/ny/s")
        stores = [Gateway(StreamAdmin(Clusters(home), benchlib.IDENTITY), "ny", "g") for _ in range(2)]
        same, alternate = [], []
        for _ in range(args.repeats):
            same.append(statistics.median(passes(stores[:1], admin, args.passes)))
            alternate.append(statistics.median(passes(stores, admin, args.passes)))
        s, a = statistics.median(same), statistics.median(alternate)
        print(
            f"load average {os.getloadavg()[0]:.2f}; ms per pass, median of {args.repeats} runs of {args.passes} passes"
        )
        print(f"same process: {s:.0f} ms   alternating processes: {a:.0f} ms   ratio {a / s:.2f}x")
    except Exception as err:  # noqa: BLE001 - a benchmark reports, it does not gate
        print(f"benchmark error: {type(err).__name__}: {err}", file=sys.stderr)
    finally:
        benchlib.stop_broker(broker)
    return 0


if __name__ == "__main__":
    sys.exit(main())
