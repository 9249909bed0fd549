"""Scale benchmarks: how replication grows with executors and gateways, and where it stops growing.

Every figure is the median of ``--repeats`` runs, the runs of all points of a case interleaved (so
a change in machine load hits every point alike), and is printed with its ratio to the case's
first point, measured in the same run: 2 executors / 1 executor, 2 gateways / 1 gateway,
64 partitions / 1 partition, and so on.

Cases (``--only`` picks some):

* ``spark``: copystream (``spark.submit.submit_copystream``) and the Spark gateway
  (``spark.submit.submit_gateway`` with ``once``) moving ``--spark-messages`` from a stream of
  ``--spark-partitions`` partitions, on ``local[1]`` and ``local[2]``, and with ``--masters
  standalone`` on a Spark standalone cluster started here (pyspark's ``bin/spark-class``: a master, and a
  worker restarted with 1 and with 2 cores). Two times per run: the wall time (spark-submit to
  exit, Spark's start included) and the moving time (first to last message at the destination,
  polled every 50 ms), whose rate is what more executors can change.
* ``gateways``: 1, 2, 3 gateway processes (in-process ``Gateway`` objects, one per process)
  sharing one destination cluster drain a backlog of ``--messages`` in ``--gateway-partitions``
  source partitions; embedded clusters, and with ``--kafka`` also Kafka clusters (one broker
  started here with ``scripts/kafka_local.py``). Time from the moment all have heartbeated to
  the moment the last one has drained its share.
* ``partitions``: one gateway pass over a stream of 1..N partitions (``--partitions``): a pass
  that moves ``--per-partition`` new messages from each partition, and an idle pass (nothing new).
* ``fanout``: one stream replicated to 1, 8, 64 replicas (``--replicas``) on one cluster; the cost
  of a gateway's drain per source message.
* ``catalog``: a cluster of 10 / 100 / 1000 streams (``--streams``), each with a replica on a
  second cluster: ``stream info``, ``stream replica list`` and ``stream list`` through the CLI
  (in-process: ``cli.main.run``, no interpreter start), and a gateway's assignment and idle pass.

Run: ``.venv/bin/python bench/scale.py [--only spark gateways ...] [--masters local standalone] [--kafka] [--json]``.
Always exits 0: it reports, it does not gate.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import multiprocessing as mp
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

from benchlib import (
    IDENTITY,
    Watch,
    drain,
    fresh_home,
    held,
    interleaved,
    link,
    load_kafka_local,
    median,
    new_stream,
)
from benchlib import produce as _produce

from streamrep.cli.main import run as cli_run
from streamrep.client import Clusters, StreamAdmin
from streamrep.replication.gateway import Gateway
from streamrep.spark.command import submit_env
from streamrep.spark.lifetime import stop_job, tether
from streamrep.spark.submit import submit_copystream, submit_gateway

REPO = Path(__file__).resolve().parents[1]
SIZE = 100  # value bytes of every message


def produce(admin: StreamAdmin, path: str, count: int) -> None:
    _produce(admin, path, count, SIZE)


class Standalone:
    """A Spark standalone cluster on loopback from pyspark's own ``bin/spark-class`` (no
    download): one master, and one worker at a time, each tethered to this process."""

    def __init__(self):
        import pyspark

        self.spark_class = os.path.join(os.path.dirname(pyspark.__file__), "bin", "spark-class")
        self.dir = tempfile.mkdtemp(prefix="streamrep-scale-spark-")
        self.env = {**submit_env(), "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_LOG_DIR": self.dir}
        self.master = self.worker = None
        self.port = self.ui = 0

    def _start(self, name: str, *args: str) -> subprocess.Popen:
        log = open(os.path.join(self.dir, f"{name}.log"), "ab")
        return subprocess.Popen(
            [self.spark_class, *args],
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            **tether(),
        )

    def state(self) -> dict:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.ui}/json/", timeout=5) as answer:
            return json.load(answer)

    def _wait(self, ready: Callable[[dict], bool], what: str, timeout: float = 120) -> None:
        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                if ready(self.state()):
                    return
            except OSError:
                pass
            time.sleep(0.5)
        raise RuntimeError(f"Spark standalone {what} not up after {timeout:.0f} s (logs in {self.dir})")

    @property
    def url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def start_master(self) -> None:
        kafka_local = load_kafka_local()
        self.port, self.ui = kafka_local.free_ports(2)
        self.master = self._start(
            "master",
            "org.apache.spark.deploy.master.Master",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--webui-port",
            str(self.ui),
        )
        self._wait(lambda s: s.get("status") == "ALIVE", "master")

    def start_worker(self, cores: int) -> None:
        [ui] = load_kafka_local().free_ports(1)
        self.worker = self._start(
            f"worker{cores}",
            "org.apache.spark.deploy.worker.Worker",
            "--host",
            "127.0.0.1",
            "--cores",
            str(cores),
            "--memory",
            "2g",
            "--webui-port",
            str(ui),
            "--work-dir",
            os.path.join(self.dir, "work"),
            self.url,
        )
        self._wait(
            lambda s: any(
                w["state"] == "ALIVE" and w["cores"] == cores and w["webuiaddress"].endswith(f":{ui}")
                for w in s.get("workers", [])
            ),
            f"worker ({cores} cores)",
        )

    def stop_worker(self) -> None:
        if self.worker is not None:
            stop_job(self.worker, grace=20)
            self.worker = None

    def stop(self) -> None:
        self.stop_worker()
        if self.master is not None:
            stop_job(self.master, grace=20)
            self.master = None
        shutil.rmtree(self.dir, ignore_errors=True)


def spark_run(home: str, admin: StreamAdmin, app: str, master: str, n: int, count: int) -> tuple[float, float | None]:
    """One copystream or one Spark gateway drain on ``master``: (wall s, moving s)."""
    os.environ["STREAMREP_SPARK_MASTER"] = master  # what spark-submit's --master is, for both apps
    if app == "copystream":
        dst = f"/mapr/ny/c{n}"
    else:
        dst = f"/mapr/ny/g{n}"
        link(admin, "/mapr/sf/s", dst, alone=True)
    watch = Watch(home, dst, count)
    watch.start()
    t = time.perf_counter()
    try:
        if app == "copystream":
            result = submit_copystream("/mapr/sf/s", dst, home=home)
            assert result.messages == count, result
        else:
            # A gateway id per run: its checkpoint (a cache of positions) is its own.
            with contextlib.redirect_stderr(io.StringIO()):
                submit_gateway("ny", f"spark{n}", once=True, home=home)
    finally:
        wall = time.perf_counter() - t
        watch.join(timeout=5)
        watch.halt.set()
    assert held(admin, dst) == count, (app, master, held(admin, dst), count)
    moving = watch.moving()
    # Each run as it ends (a Spark run takes minutes on a busy machine): partial figures survive.
    print(
        f"  run: {app} on {master}: wall {wall:.1f} s, moving {moving or float('nan'):.2f} s",
        file=sys.stderr,
        flush=True,
    )
    return wall, moving


def bench_spark(count: int, partitions: int, repeats: int, kinds: list[str]) -> list[dict]:
    """:param kinds: ``local`` (local[1] and local[2]) and/or ``standalone`` (1 and 2 worker cores)."""
    home, admin = fresh_home(("sf", "ny"))
    new_stream(admin, "/mapr/sf/s", partitions)
    produce(admin, "/mapr/sf/s", count)
    masters = ["local[1]", "local[2]"] if "local" in kinds else []
    cluster = None
    counter = [0]
    times: dict = {(app, m): [] for app in ("copystream", "gateway") for m in masters}
    try:
        if "standalone" in kinds:
            cluster = Standalone()
            cluster.start_master()
            times.update(
                {
                    (app, f"standalone {c} core{'s' if c > 1 else ''}"): []
                    for app in ("copystream", "gateway")
                    for c in (1, 2)
                }
            )

        def point(app: str, label: str, master: str) -> None:
            counter[0] += 1
            times[(app, label)].append(spark_run(home, admin, app, master, counter[0], count))

        for _ in range(repeats):  # interleaved: each repeat runs every point once
            for m in masters:
                for app in ("copystream", "gateway"):
                    point(app, m, m)
            if cluster is not None:
                for cores in (1, 2):
                    cluster.start_worker(cores)
                    try:
                        for app in ("copystream", "gateway"):
                            point(app, f"standalone {cores} core{'s' if cores > 1 else ''}", cluster.url)
                    finally:
                        cluster.stop_worker()
    finally:
        os.environ.pop("STREAMREP_SPARK_MASTER", None)
        if cluster is not None:
            cluster.stop()
        shutil.rmtree(home, ignore_errors=True)
    results = []
    for (app, label), runs in times.items():
        if not runs:
            continue
        wall = median([w for w, _ in runs])
        moving = [m for _, m in runs if m is not None]
        results.append(
            {
                "case": "spark",
                "app": app,
                "master": label,
                "messages": count,
                "partitions": partitions,
                "runs": len(runs),
                "wall_s": wall,
                "moving_s": median(moving) if moving else None,
                "moving_rate": count / median(moving) if moving else None,
            }
        )
    for r in results:  # ratios: 2 executors over 1, per app and kind of master
        one = next(
            (
                b
                for b in results
                if b["app"] == r["app"]
                and b["master"] in ("local[1]", "standalone 1 core")
                and b["master"].split("[")[0].split(" ")[0] == r["master"].split("[")[0].split(" ")[0]
            ),
            None,
        )
        if one is not None and r["moving_s"] and one["moving_s"]:
            r["moving_ratio"] = one["moving_s"] / r["moving_s"]
            r["wall_ratio"] = one["wall_s"] / r["wall_s"]
    return results


# -- gateways per cluster ------------------------------------------------------------------------
def _gateway_worker(home: str, gateway_id: str, barrier, results) -> None:
    """One gateway process: heartbeat, wait until every gateway has, drain its share, withdraw."""
    admin = StreamAdmin(Clusters(home), IDENTITY)
    gateway = Gateway(admin, "ny", gateway_id)
    gateway.heartbeat()
    barrier.wait()
    start = time.time()
    try:
        moved = drain(gateway)
    finally:
        gateway.stop()
    results.put((gateway_id, start, time.time(), moved))


def gateways_run(home: str, admin: StreamAdmin, k: int, n: int, count: int, backend: str) -> float:
    """``k`` gateway processes drain ``count`` messages into a fresh replica; seconds."""
    replica = f"/mapr/ny/r{n}"
    link(admin, "/mapr/sf/s", replica, alone=True)
    ctx = mp.get_context("spawn")
    barrier, results = ctx.Barrier(k), ctx.Queue()
    procs = [ctx.Process(target=_gateway_worker, args=(home, f"g{n}-{i}", barrier, results)) for i in range(k)]
    for p in procs:
        p.start()
    rows = [results.get(timeout=600) for _ in procs]
    for p in procs:
        p.join()
    moved = sum(r[3] for r in rows)
    assert moved >= count, (backend, k, moved, count)  # a brief overlap may read twice; applies once
    if backend == "embedded":
        assert held(admin, replica) == count, (k, held(admin, replica), count)
    return max(r[2] for r in rows) - min(r[1] for r in rows)


def bench_gateways(
    count: int, partitions: int, counts: list[int], repeats: int, backend: str, bootstrap: str | None = None
) -> list[dict]:
    if backend == "kafka":
        from benchlib import drop, kafka_home

        home, admin = kafka_home(bootstrap)
    else:
        home, admin = fresh_home(("sf", "ny"))
    new_stream(admin, "/mapr/sf/s", partitions)
    produce(admin, "/mapr/sf/s", count)
    admin.clusters.close()  # the gateway processes open their own
    counter = [0]

    def run(k: int) -> float:
        counter[0] += 1
        return gateways_run(home, admin, k, counter[0], count, backend)

    try:
        times = interleaved(counts, run, repeats)
    finally:
        if backend == "kafka":
            drop(admin, home)
        else:
            shutil.rmtree(home, ignore_errors=True)
    base = median(times[counts[0]])
    return [
        {
            "case": "gateways",
            "backend": backend,
            "gateways": k,
            "messages": count,
            "partitions": partitions,
            "runs": len(times[k]),
            "seconds": median(times[k]),
            "rate": count / median(times[k]),
            "ratio": base / median(times[k]),
        }
        for k in counts
    ]


# -- partitions per gateway ----------------------------------------------------------------------
def bench_partitions(counts: list[int], per_partition: int, repeats: int) -> list[dict]:
    """For each partition count: its own home (a gateway serves every flow of its cluster)."""
    homes = {}
    for p in counts:
        home, admin = fresh_home(("sf", "ny"))
        new_stream(admin, "/mapr/sf/s", p)
        link(admin, "/mapr/sf/s", "/mapr/ny/s")
        gateway = Gateway(admin, "ny", "bench")
        drain(gateway)  # topics created at the replica, flows recorded: the steady state
        homes[p] = (home, admin, gateway)

    def run(p: int) -> tuple[float, float]:
        _, admin, gateway = homes[p]
        produce(admin, "/mapr/sf/s", per_partition * p)
        t = time.perf_counter()
        moved = gateway.run_once(max_messages=10_000)
        loaded = time.perf_counter() - t
        assert moved == per_partition * p, (p, moved)
        t = time.perf_counter()
        assert gateway.run_once() == 0
        return loaded, time.perf_counter() - t

    try:
        times = interleaved(counts, run, repeats)
    finally:
        for home, _admin, gateway in homes.values():
            gateway.stop()
            shutil.rmtree(home, ignore_errors=True)
    results = []
    for p in counts:
        loaded, idle = median([t[0] for t in times[p]]), median([t[1] for t in times[p]])
        results.append(
            {
                "case": "partitions",
                "partitions": p,
                "per_partition": per_partition,
                "runs": len(times[p]),
                "loaded_pass_s": loaded,
                "idle_pass_s": idle,
                "idle_ms_per_partition": idle * 1000 / p,
                "loaded_us_per_message": loaded * 1e6 / (per_partition * p),
            }
        )
    for r in results:
        r["idle_ratio"] = r["idle_pass_s"] / results[0]["idle_pass_s"]
        r["per_message_ratio"] = r["loaded_us_per_message"] / results[0]["loaded_us_per_message"]
    return results


# -- fan-out -------------------------------------------------------------------------------------
def bench_fanout(counts: list[int], messages: int, partitions: int, repeats: int) -> list[dict]:
    homes = {}
    for r in counts:
        home, admin = fresh_home(("sf", "ny"))
        new_stream(admin, "/mapr/sf/s", partitions)
        for i in range(r):
            link(admin, "/mapr/sf/s", f"/mapr/ny/r{i}")
        gateway = Gateway(admin, "ny", "bench")
        # Steady state before the clock: a message in every partition makes every replica's topic.
        produce(admin, "/mapr/sf/s", partitions)
        drain(gateway)
        homes[r] = (home, admin, gateway)

    def run(r: int) -> float:
        _, admin, gateway = homes[r]
        produce(admin, "/mapr/sf/s", messages)
        t = time.perf_counter()
        assert drain(gateway) == messages
        return time.perf_counter() - t

    try:
        times = interleaved(counts, run, repeats)
    finally:
        for home, _admin, gateway in homes.values():
            gateway.stop()
            shutil.rmtree(home, ignore_errors=True)
    base = median(times[counts[0]]) / counts[0]
    return [
        {
            "case": "fanout",
            "replicas": r,
            "messages": messages,
            "runs": len(times[r]),
            "seconds": median(times[r]),
            "us_per_source_message": median(times[r]) * 1e6 / messages,
            "us_per_replica_message": median(times[r]) * 1e6 / (messages * r),
            "ratio_per_source_message": median(times[r]) / median(times[counts[0]]),
            "saving_vs_separate": base * r / median(times[r]),
        }
        for r in counts
    ]


# -- catalog size --------------------------------------------------------------------------------
CATALOG_COMMANDS = {
    "stream info": ["stream", "info", "-path", "/mapr/sf/s0", "-json"],
    "replica list": ["stream", "replica", "list", "-path", "/mapr/sf/s0", "-json"],
    "stream list": ["stream", "list", "-cluster", "sf", "-json"],
}


def cli_seconds(argv: list[str]) -> float:
    """One CLI command in-process, as the ``streamrep`` executable runs it (a fresh admin)."""
    out, err = io.StringIO(), io.StringIO()
    t = time.perf_counter()
    status = cli_run(argv, out=out, err=err)
    elapsed = time.perf_counter() - t
    assert status == 0, (argv, err.getvalue())
    return elapsed


def bench_catalog(counts: list[int], repeats: int) -> list[dict]:
    homes = {}
    created = {}
    for s in counts:
        home, admin = fresh_home(("sf", "ny"))
        t = time.perf_counter()
        for i in range(s):
            new_stream(admin, f"/mapr/sf/s{i}", 1)
            link(admin, f"/mapr/sf/s{i}", f"/mapr/ny/s{i}")
        created[s] = (time.perf_counter() - t) / s
        gateway = Gateway(admin, "ny", "bench")
        drain(gateway)
        homes[s] = (home, admin, gateway)

    def run(s: int) -> dict:
        home, admin, gateway = homes[s]
        os.environ["STREAMREP_HOME"] = home
        row = {name: cli_seconds(argv) for name, argv in CATALOG_COMMANDS.items()}
        t = time.perf_counter()
        units = len(gateway.assignment().units)
        row["gateway assignment"] = time.perf_counter() - t
        assert units == s, (s, units)
        t = time.perf_counter()
        gateway.run_once()
        row["gateway idle pass"] = time.perf_counter() - t
        return row

    try:
        times = interleaved(counts, run, repeats, warmup=True)
    finally:
        for home, _admin, gateway in homes.values():
            gateway.stop()
            shutil.rmtree(home, ignore_errors=True)
    results = []
    for s in counts:
        row = {"case": "catalog", "streams": s, "runs": len(times[s]), "create_s_per_stream": created[s]}
        for name in times[s][0]:
            row[f"{name}_ms"] = median([t[name] for t in times[s]]) * 1000
        results.append(row)
    for r in results:
        for name in times[counts[0]][0]:
            r[f"{name}_ratio"] = r[f"{name}_ms"] / results[0][f"{name}_ms"]
    return results


# -- report --------------------------------------------------------------------------------------
def report(results: list[dict]) -> None:
    print(
        f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores; medians; ratios against the first "
        "point of each case, measured in the same run"
    )
    for r in results:
        case = r["case"]
        if case == "spark":
            moving = f"moving {r['moving_s']:.2f} s = {r['moving_rate']:,.0f} msg/s" if r["moving_s"] else "moving ?"
            ratio = f"  x{r['moving_ratio']:.2f} moving, x{r['wall_ratio']:.2f} wall" if "moving_ratio" in r else ""
            print(
                f"spark      {r['app']:10} {r['master']:19} {r['messages']:,} msgs/{r['partitions']} partitions: "
                f"wall {r['wall_s']:.1f} s, {moving}{ratio}"
            )
        elif case == "gateways":
            print(
                f"gateways   {r['backend']:8} {r['gateways']} gateway(s): {r['messages']:,} msgs/{r['partitions']} "
                f"partitions in {r['seconds']:.2f} s = {r['rate']:,.0f} msg/s  x{r['ratio']:.2f}"
            )
        elif case == "partitions":
            print(
                f"partitions {r['partitions']:4}: pass moving {r['per_partition']}/partition {r['loaded_pass_s'] * 1000:.0f} ms "
                f"({r['loaded_us_per_message']:.1f} us/msg, x{r['per_message_ratio']:.2f}); idle pass "
                f"{r['idle_pass_s'] * 1000:.1f} ms ({r['idle_ms_per_partition']:.2f} ms/partition, x{r['idle_ratio']:.1f})"
            )
        elif case == "fanout":
            print(
                f"fanout     {r['replicas']:3} replicas: {r['messages']:,} msgs in {r['seconds']:.2f} s, "
                f"{r['us_per_source_message']:.0f} us/source msg (x{r['ratio_per_source_message']:.1f}), "
                f"{r['us_per_replica_message']:.1f} us/replica msg; {r['saving_vs_separate']:.1f}x cheaper than "
                "separate streams"
            )
        elif case == "catalog":
            cells = ", ".join(
                f"{name} {r[f'{name}_ms']:.1f} ms (x{r[f'{name}_ratio']:.1f})"
                for name in (*CATALOG_COMMANDS, "gateway assignment", "gateway idle pass")
            )
            print(
                f"catalog    {r['streams']:5} streams: create {r['create_s_per_stream'] * 1000:.0f} ms/stream; {cells}"
            )


CASES = ("spark", "gateways", "partitions", "fanout", "catalog")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", choices=CASES, help="run only these cases")
    parser.add_argument("--repeats", type=int, default=3, help="runs per point (the median is reported)")
    parser.add_argument("--spark-messages", type=int, default=50_000)
    parser.add_argument("--spark-partitions", type=int, default=4)
    parser.add_argument(
        "--masters",
        nargs="+",
        choices=("local", "standalone"),
        default=["local"],
        help="local: local[1] and local[2]; standalone: a cluster started here, 1 and 2 worker cores",
    )
    parser.add_argument("--messages", type=int, default=240_000, help="backlog the gateways drain")
    parser.add_argument("--gateway-partitions", type=int, default=12)
    parser.add_argument("--gateways", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--kafka", action="store_true", help="also gateways on Kafka (a broker started here)")
    parser.add_argument("--bootstrap", help="with --kafka: use this Kafka cluster instead of starting one")
    parser.add_argument("--partitions", type=int, nargs="+", default=[1, 4, 16, 64])
    parser.add_argument("--per-partition", type=int, default=1000, help="new messages per partition per pass")
    parser.add_argument("--replicas", type=int, nargs="+", default=[1, 8, 64])
    parser.add_argument("--fanout-messages", type=int, default=10_000)
    parser.add_argument("--streams", type=int, nargs="+", default=[10, 100, 1000])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    # The CLI and the Spark apps (driver and executors) act as the identity that owns the streams.
    os.environ["STREAMREP_USER"] = IDENTITY.user
    cases = args.only or CASES
    results: list[dict] = []
    broker = None
    steps = {
        "partitions": lambda: bench_partitions(args.partitions, args.per_partition, args.repeats),
        "fanout": lambda: bench_fanout(args.replicas, args.fanout_messages, 4, args.repeats),
        "catalog": lambda: bench_catalog(args.streams, args.repeats),
        "gateways": lambda: bench_gateways(
            args.messages, args.gateway_partitions, args.gateways, args.repeats, "embedded"
        ),
        "spark": lambda: bench_spark(args.spark_messages, args.spark_partitions, args.repeats, args.masters),
    }
    for case in CASES:
        if case not in cases:
            continue
        try:
            results.extend(steps[case]())
            if case == "gateways" and args.kafka:
                bootstrap = args.bootstrap
                if bootstrap is None:
                    kafka_local = load_kafka_local()
                    broker = kafka_local.Broker(
                        "scale", *kafka_local.free_ports(2), Path(tempfile.mkdtemp(prefix="streamrep-scale-kafka-"))
                    )
                    kafka_local.start(broker, die_with_parent=True)
                    bootstrap = broker.bootstrap
                results.extend(
                    bench_gateways(
                        args.messages, args.gateway_partitions, args.gateways, args.repeats, "kafka", bootstrap
                    )
                )
        except Exception as err:  # noqa: BLE001 - a benchmark reports, it does not gate
            print(f"benchmark error in {case}: {type(err).__name__}: {err}", file=sys.stderr)
        finally:
            if broker is not None:
                load_kafka_local().stop(broker, timeout=30)
                shutil.rmtree(broker.home, ignore_errors=True)
                broker = None
        if not args.json:  # as each case ends: a long run shows its figures as it goes
            report([r for r in results if r["case"] == case])
            sys.stdout.flush()
    if args.json:
        print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
