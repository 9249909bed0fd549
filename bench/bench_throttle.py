"""Issue 20 part 5: ``-maxbytespersec`` holds the replication rate within 10% of the limit (at 1 MB/s
and 10 MB/s, exactly once), and ``-throttle true`` yields to a competing writer of the destination.

    .venv/bin/python bench/bench_throttle.py            # about 3 minutes
    .venv/bin/python bench/bench_throttle.py --quick    # shorter windows
    .venv/bin/python bench/bench_throttle.py --json

Embedded clusters ``sf`` -> ``ny`` (one SQLite file each) and the in-process gateway; with ``--kafka``
also the byte-rate limit between two namespaces of a Kafka broker started here (the competing writer
is the embedded case's only). Every figure is the median of ``--repeats`` runs, the runs of the cases
interleaved (bench/README.md has the method and the numbers). Always exits 0: it reports, it does
not gate.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shutil
import sys
import threading
import time

from benchlib import (
    PARTITIONS,
    TOPIC,
    drop,
    fill,
    fresh_home,
    held,
    interleaved,
    kafka_count,
    kafka_home,
    kafka_topic,
    median,
    start_broker,
    stop_broker,
)

from streamrep.client import Clusters, StreamAdmin
from streamrep.model.message import Message
from streamrep.replication.flows import Flow
from streamrep.replication.gateway import Gateway
from streamrep.replication.reads import read_source
from streamrep.replication.transfer import SourcePartition

SIZE = 1000  # bytes a message of the throttle case (value only; no key: what -maxbytespersec counts)
LIMITS = (1_000_000, 10_000_000)  # 1 MB/s and 10 MB/s (decimal, as the option's units)
PER_SECOND = 1000  # messages a second at the limit: values of limit / 1000 bytes (1 KB, 10 KB)


def one_batch(gateway: Gateway, unit: SourcePartition, flows: list[Flow], max_messages: int) -> int:
    """Move one batch of one source partition into its replicas, as a gateway's pass does (read, then
    apply); returns how many source messages were read."""
    position = gateway.progress({unit: flows})[unit].position
    read = read_source(gateway.admin.clusters.store(unit.source.cluster), unit, position, max_messages)
    _, errors = gateway.apply_reads({unit: (flows, read.messages, read.source_start, read.span)})[unit]
    if errors:
        raise RuntimeError(next(iter(errors.values())))
    return len(read.messages)


def rate_run(point: tuple[int, bool], seconds: float, bootstrap: str | None = None) -> tuple[float, bool]:
    """Drain a backlog of ``limit * seconds`` bytes from sf into its replica on ny with one
    in-process gateway, with the limit or (``limited`` false) without it, as the baseline; the
    bytes a second, and whether the replica holds exactly the source's messages (none lost, none
    twice). ``bootstrap``: on two namespaces of that Kafka broker, else on embedded clusters."""
    limit, limited = point
    size = limit // PER_SECOND
    home, admin = fresh_home(("sf", "ny")) if bootstrap is None else kafka_home(bootstrap)
    try:
        count = int(PER_SECOND * seconds)
        count -= count % PARTITIONS
        fill(admin, "/mapr/sf/s", count, size)
        admin.create_stream("/mapr/ny/r", copymetafrom="/mapr/sf/s")
        admin.add_replica("/mapr/sf/s", "/mapr/ny/r", maxbytespersec=limit if limited else 0)
        admin.add_upstream("/mapr/ny/r", "/mapr/sf/s")
        gateway = Gateway(admin, "ny", "bench")
        units = gateway.assignment().units
        # The steady rate: from the end of the first batch (the bucket starts empty) to the end of
        # the last, batch by batch over the partitions, as the gateway's pass goes.
        moved, first, began, ended = 0, 0, 0.0, 0.0
        while moved < count:
            for unit, flows in units.items():
                step = one_batch(gateway, unit, flows, PER_SECOND // PARTITIONS)
                if step and not first:
                    first, began = step, time.monotonic()
                moved += step
                ended = time.monotonic()
        if bootstrap is None:
            replica = held(admin, "/mapr/ny/r")
        else:  # read_committed, record by record: offsets also count commit markers
            replica = kafka_count(bootstrap, kafka_topic(admin, "/mapr/ny/r"), count, timeout=60)
        return (moved - first) * size / (ended - began), replica == count == moved
    finally:
        if bootstrap is None:
            shutil.rmtree(home, ignore_errors=True)
        else:
            drop(admin, home)


def rate_measures(rates: dict, suffix: str) -> list[dict]:
    """The ``-maxbytespersec`` measures from ``rate_run``'s runs, by (limit, limited)."""
    measures = []
    for limit in LIMITS:
        runs = rates[(limit, True)]
        value = median([r for r, _ in runs])
        unlimited = median([r for r, _ in rates[(limit, False)]])
        exact = all(ok for _, ok in runs + rates[(limit, False)])
        measures.append(
            {
                "name": f"maxbytespersec_{limit // 1_000_000}MB_rate{suffix}",
                "unit": "B/s",
                "value": round(value),
                "baseline": limit,
                "ratio": round(value / limit, 3),
                "goal": "within 10% of the limit, exactly once",
                "met": abs(value / limit - 1) <= 0.10 and exact,
                "detail": {
                    "runs": [round(r) for r, _ in runs],
                    "exactly_once": exact,
                    "value_bytes": limit // PER_SECOND,
                    # the same drain without the limit: below the limit, the machine (not the limit) is the bound
                    "unlimited": round(unlimited),
                },
            }
        )
    return measures


def compete(home: str, seconds: float, counted: multiprocessing.Queue) -> None:
    """A competing writer of ny's SQLite file (its own process): appends 100-message batches to
    its own stream as fast as it can for ``seconds``; puts the messages it wrote."""
    admin = StreamAdmin(Clusters(home))
    entry = admin.entry("/mapr/ny/other")
    store = admin.store(admin.path("/mapr/ny/other"))
    batch = [Message(b"c" * SIZE, None, (), 1, 0)] * 100
    written = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        store.append(entry.uuid, TOPIC, {0: batch})
        written += len(batch)
    counted.put(written)


def throttle_run(throttle: bool | None, seconds: float, backlog: int) -> tuple[float, float]:
    """The competing writer's messages a second on ny while a gateway replicates a backlog of
    ``backlog`` messages into ny (``throttle`` false or true; None: no gateway at all), and the
    gateway's messages a second meanwhile. The backlog outlasts the window (the unlimited rate's)."""
    home, admin = fresh_home(("sf", "ny"))
    try:
        admin.create_stream("/mapr/ny/other", ttl=0)
        admin.create_topic("/mapr/ny/other", TOPIC, 1)
        stop = threading.Event()
        moved = [0]
        if throttle is not None:
            fill(admin, "/mapr/sf/s", backlog, SIZE)
            admin.create_stream("/mapr/ny/r", copymetafrom="/mapr/sf/s")
            admin.add_replica("/mapr/sf/s", "/mapr/ny/r", throttle=throttle)
            admin.add_upstream("/mapr/ny/r", "/mapr/sf/s")
            gateway = Gateway(admin, "ny", "bench")

            units = gateway.assignment().units

            def replicate() -> None:  # batch by batch, so that it stops when the window ends
                while not stop.is_set():
                    for unit, flows in units.items():
                        moved[0] += one_batch(gateway, unit, flows, 1000)

            worker = threading.Thread(target=replicate, daemon=True)
            worker.start()
            time.sleep(2.0)  # the gateway's baseline, before the competing load starts
        counted: multiprocessing.Queue = multiprocessing.get_context("spawn").Queue()
        proc = multiprocessing.get_context("spawn").Process(target=compete, args=(home, seconds, counted))
        before = moved[0]
        proc.start()
        written = counted.get(timeout=seconds + 120)
        during = moved[0] - before
        proc.join(timeout=30)
        stop.set()
        if throttle is not None:
            worker.join(timeout=60)
        return written / seconds, during / seconds
    finally:
        shutil.rmtree(home, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="4 s windows instead of 10 s")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--kafka", action="store_true", help="also the byte-rate limit on Kafka (a broker started here)"
    )
    args = parser.parse_args()
    window = 4.0 if args.quick else 10.0
    load_start = os.getloadavg()
    measures = []

    points = [(limit, limited) for limit in LIMITS for limited in (False, True)]
    rates = interleaved({p: p for p in points}, lambda p: rate_run(p, window), max(3, args.repeats))
    measures += rate_measures(rates, "")
    if args.kafka:
        broker = start_broker()
        try:
            kafka_rates = interleaved(
                {p: p for p in points}, lambda p: rate_run(p, window, broker.bootstrap), max(3, args.repeats)
            )
        finally:
            stop_broker(broker)
        measures += rate_measures(kafka_rates, "_kafka")
    unlimited = median([r for r, _ in rates[(LIMITS[0], False)]]) / (LIMITS[0] // PER_SECOND) * SIZE
    print(f"unlimited at {SIZE} B: {unlimited / 1e6:.1f} MB/s", file=sys.stderr)

    backlog = int(unlimited / SIZE * (window + 6))
    contest = interleaved(
        {None: None, False: False, True: True}, lambda t: throttle_run(t, window, backlog), args.repeats
    )
    alone = median([c for c, _ in contest[None]])
    off, on = (median([c for c, _ in contest[t]]) for t in (False, True))
    gateway_off, gateway_on = (median([g for _, g in contest[t]]) for t in (False, True))
    measures.append(
        {
            "name": "throttle_competitor_rate",
            "unit": "msg/s",
            "value": round(on),
            "baseline": round(off),
            "ratio": round(on / off, 3) if off else None,
            "goal": "a competing writer of the destination gets more done with -throttle true than false",
            "met": on > off,
            "detail": {
                "competitor_alone": round(alone),
                "gateway_throttle_false": round(gateway_off),
                "gateway_throttle_true": round(gateway_on),
                "runs_true": [round(c) for c, _ in contest[True]],
                "runs_false": [round(c) for c, _ in contest[False]],
            },
        }
    )
    report = {"load_start": load_start, "load_end": os.getloadavg(), "measures": measures}
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(f"load average {load_start[0]:.1f} -> {report['load_end'][0]:.1f}")
        for m in measures:
            print(
                f"{m['name']:32} {m['value']:>12,} {m['unit']:6} baseline {m['baseline']:>12,} "
                f"ratio {m['ratio']}  met {m['met']}  {json.dumps(m['detail'])}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
