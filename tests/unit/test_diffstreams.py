"""diffstreams and diffstreamswithcrc (issue 32, step 1): every planted difference is found by both
variants, alike; in-flight messages and interleaved origins are not differences; bad input is one
line and writes nothing. Real embedded clusters, the in-process gateway, the real CLI entry point.

The planted replicas are written through the store interface (``Store.append`` with origin
headers, as a gateway writes them), so the Kafka backend can run the same cases later: the tests
take the ``backend`` fixture: every case runs on embedded clusters, those marked ``ON_BOTH`` on a
Kafka broker too.
"""

from __future__ import annotations

import base64
import io
import json
import sys
import time
from pathlib import Path

import pytest

from streamrep.cli.main import main, run
from streamrep.client.producer import Producer
from streamrep.model.message import ORIGIN_HEADER, Message
from streamrep.model.replication import stop_key
from streamrep.replication.diff import Kind, diff_streams, diff_streams_crc
from streamrep.replication.diff import scan as diffmod
from streamrep.replication.gateway import Gateway
from streamrep.replication.ops import FORMAT, MANIFEST, OPS_FOR_DST, OPS_FOR_SRC, read_manifest
from streamrep.replication.setup import autosetup
from streamrep.replication.status import acknowledge_loss

# Every case on embedded clusters; those marked ON_BOTH on Kafka too (all pass there: the rest are
# left to the step of issue 32 that runs each case on both backends and across them).
pytestmark = pytest.mark.backends("embedded")
ON_BOTH = pytest.mark.backends("embedded", "kafka")

SF = "/mapr/sanfrancisco/activity"
NY = "/mapr/newyork/activity"
HOUR_MS = 3600 * 1000
VARIANTS = pytest.mark.parametrize("compare", [diff_streams, diff_streams_crc], ids=["full", "crc"])


def cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    status = run(list(argv), out, err, io.StringIO())
    return status, out.getvalue(), err.getvalue()


def produce(admin, path: str, count: int, topic: str = "t", start: int = 0, timestamp: int | None = None) -> None:
    with Producer(admin) as producer:
        for i in range(start, start + count):
            producer.send(
                f"{path}:{topic}", f"value-{i}", key=f"k{i}", headers=[("trace", str(i))], timestamp=timestamp
            )


def write_directly(admin, path: str, count: int, topic: str = "t", partition: int = 0) -> None:
    """Messages of its own in ``path``, written as a plain client of its cluster would (a one-way
    replica refuses streamrep's producers)."""
    sp = admin.path(path)
    batch = [Message(f"own-{i}".encode(), b"own") for i in range(count)]
    admin.store(sp).append(admin.entry(sp).uuid, topic, {partition: batch})


def replicate(admin, cluster: str = "newyork") -> None:
    gateway = Gateway(admin, cluster, "gw1")
    try:
        gateway.run_once(whole=True)
    finally:
        gateway.stop()


@pytest.fixture(autouse=True)
def as_alice(home, monkeypatch):
    """The CLI acts as alice, who creates everything through the ``admin`` fixture."""
    monkeypatch.setenv("STREAMREP_USER", "alice")
    monkeypatch.setenv("STREAMREP_GROUPS", "eng")


@pytest.fixture
def source(admin, backend):
    """SF with topic ``t`` (2 partitions) holding 20 messages."""
    admin.create_stream(SF, defaultpartitions=2, ttl=0)
    admin.create_topic(SF, "t", 2)
    produce(admin, SF, 20)
    return admin


@pytest.fixture
def replica(source):
    """SF and its replica NY, linked both ways, replicated."""
    admin = source
    admin.create_stream(NY, copymetafrom=SF)
    admin.add_replica(SF, NY)
    admin.add_upstream(NY, SF)
    replicate(admin)
    return admin


def plant(admin, change=lambda topic, partition, copies: copies) -> None:
    """NY, not linked to SF, holds SF's messages as a gateway writes them (origin headers), after
    ``change(topic, partition, copies)``."""
    admin.create_stream(NY, copymetafrom=SF)
    sp, np_ = admin.path(SF), admin.path(NY)
    sf, ny = admin.entry(sp), admin.entry(np_)
    src, dst = admin.store(sp), admin.store(np_)
    for topic, count in src.topics(sf.uuid).items():
        admin.create_topic(NY, topic, count)
        for partition in range(count):
            held = src.read(sf.uuid, topic, partition, 0, 10_000)
            copies = [
                Message(
                    m.value,
                    m.key,
                    (*m.headers, (ORIGIN_HEADER, f"{sf.uuid}/{partition}/{m.offset}".encode())),
                    m.timestamp,
                )
                for m in held
            ]
            copies = change(topic, partition, copies)
            if copies:
                dst.append(ny.uuid, topic, {partition: copies})


def kinds(result) -> dict[str, int]:
    return {k.value: result.count(k) for k in Kind if result.count(k)}


def drop_one(topic, partition, copies):
    return copies[:3] + copies[4:] if partition == 0 else copies


def flip_a_byte(topic, partition, copies):
    if partition == 1:
        m = copies[2]
        value = bytes([m.value[0] ^ 1]) + m.value[1:]
        copies[2] = m._replace(value=value)
    return copies


def change_a_header(topic, partition, copies):
    if partition == 0:
        m = copies[5]
        copies[5] = m._replace(headers=tuple((k, b"changed" if k == "trace" else v) for k, v in m.headers))
    return copies


def swap_two(topic, partition, copies):
    if partition == 1:
        copies[3], copies[4] = copies[4], copies[3]
    return copies


def change_a_timestamp(topic, partition, copies):
    if partition == 0:
        copies[1] = copies[1]._replace(timestamp=copies[1].timestamp + 1)
    return copies


def duplicate_one(topic, partition, copies):
    return copies + [copies[0]] if partition == 0 else copies


def add_one_of_its_own(topic, partition, copies):
    return copies + [Message(b"planted", b"x")] if partition == 1 else copies


def many(topic, partition, copies):
    """Three differences: one missing, one changed, one swapped pair."""
    return swap_two(topic, partition, flip_a_byte(topic, partition, drop_one(topic, partition, copies)))


PLANTED = {
    "missing": (drop_one, {"missing in dst": 1}),
    "extra": (add_one_of_its_own, {"extra in dst": 1}),
    "value byte": (flip_a_byte, {"changed": 1}),
    "header": (change_a_header, {"changed": 1}),
    "timestamp": (change_a_timestamp, {"changed": 1}),
    "swapped": (swap_two, {"out of order": 1}),
    "duplicated": (duplicate_one, {"duplicated": 1}),
    "three": (many, {"missing in dst": 1, "changed": 1, "out of order": 1}),
}


@pytest.mark.parametrize("case", sorted(PLANTED))
@VARIANTS
def test_a_planted_difference_is_found(source, compare, case):
    change, expected = PLANTED[case]
    plant(source, change)
    result = compare(source, SF, NY)
    assert kinds(result) == expected
    assert not result.dst_replicates_src and result.dst_behind == 0
    assert result.summary().startswith("differ: ")


@pytest.mark.parametrize("case", sorted(PLANTED))
@pytest.mark.parametrize("run", [1, 3, 1000], ids=lambda n: f"run{n}")
def test_the_crc_variant_finds_exactly_what_the_full_compare_finds(source, monkeypatch, case, run):
    """Runs of 1 and 3 identities put planted differences on run boundaries (a swap across two
    runs changes both runs' CRCs: each message's CRC input holds its predecessor)."""
    monkeypatch.setattr(diffmod, "CRC_RUN", run)
    plant(source, PLANTED[case][0])
    full, crc = diff_streams(source, SF, NY), diff_streams_crc(source, SF, NY)
    assert crc.differences == full.differences
    assert (crc.dst_behind, crc.src_behind, crc.compared) == (full.dst_behind, full.src_behind, full.compared)
    assert 0 < crc.runs_differing < crc.runs or run == 1000  # only some runs are compared in detail


def test_the_same_differences_on_a_swap_across_a_run_boundary(source, monkeypatch):
    monkeypatch.setattr(diffmod, "CRC_RUN", 4)

    def across(topic, partition, copies):  # origin offsets 3 and 4: the last of one run, the first of the next
        if partition == 0:
            copies[3], copies[4] = copies[4], copies[3]
        return copies

    plant(source, across)
    full, crc = diff_streams(source, SF, NY), diff_streams_crc(source, SF, NY)
    assert kinds(full) == {"out of order": 1} and crc.differences == full.differences


@VARIANTS
def test_identical_streams_are_the_same(replica, compare):
    result = compare(replica, SF, NY)
    assert result.same and result.dst_replicates_src and result.compared == 40
    assert result.summary() == "same: 40 messages compared (dst 0 behind, not counted)"
    if compare is diff_streams_crc:
        assert result.runs_differing == 0 and result.read_messages == 40  # nothing read twice


@ON_BOTH
@VARIANTS
def test_a_replica_that_is_behind_is_in_flight_not_different(replica, compare):
    produce(replica, SF, 12, start=20)
    result = compare(replica, SF, NY)
    assert result.same and result.dst_behind == 12
    assert "dst 12 behind, not counted" in result.summary()
    replica.pause_replica(SF, NY)  # paused: still pending, still in flight
    assert compare(replica, SF, NY).dst_behind == 12


@VARIANTS
def test_nothing_is_in_flight_from_a_flow_a_failover_stopped(replica, compare):
    produce(replica, SF, 12, start=20)
    sp, np_ = replica.path(SF), replica.path(NY)
    sf_uuid, ny_uuid = replica.entry(sp).uuid, replica.entry(np_).uuid
    for partition in (0, 1):  # the stop marks a failover writes: no more applies from SF
        stop = stop_key(sf_uuid, "t", partition)
        replica.store(np_).apply(ny_uuid, "t", partition, [], {stop: 1}, {stop: None})
    result = compare(replica, SF, NY)
    assert kinds(result) == {"missing in dst": 12} and result.dst_behind == 0


@VARIANTS
def test_an_extra_message_produced_into_the_replica(replica, compare):
    write_directly(replica, NY, 1)
    result = compare(replica, SF, NY)
    assert kinds(result) == {"extra in dst": 1}
    [difference] = result.differences
    assert difference.origin.uuid == replica.entry(NY).uuid and difference.src is None


@ON_BOTH
@VARIANTS
def test_a_deleted_replica_topic_is_every_message_missing(replica, compare):
    """The audit's replica: its topic deleted and re-created holds fewer messages, while its marks
    say it is up to date."""
    sp = replica.path(NY)
    store, uuid = replica.store(sp), replica.entry(sp).uuid
    store.delete_topic(uuid, "t")  # as the cluster's own tools would: the replica's catalog forbids it
    store.create_topic(uuid, "t", 2)
    write_directly(replica, NY, 3)  # the re-created topic's own messages
    result = compare(replica, SF, NY)
    assert kinds(result) == {"missing in dst": 20, "extra in dst": 3}
    assert result.dst_behind == 0  # the marks say applied: missing, not in flight


def linked(admin) -> None:
    """NY, SF's replica, linked both ways."""
    admin.create_stream(NY, copymetafrom=SF)
    admin.add_replica(SF, NY)
    admin.add_upstream(NY, SF)


def expire(admin, before: int) -> int:
    """The source's retention, now: SF's messages older than ``before`` (ms) are removed."""
    sp = admin.path(SF)
    return admin.store(sp).purge_before(admin.entry(sp).uuid, "t", before)


@ON_BOTH
@VARIANTS
def test_a_truncated_source_is_expired_not_extra(admin, compare):
    """The source's retention removed messages the replica still holds: they expired in the source,
    so they are counted, not differences to push back into it."""
    admin.create_stream(SF, ttl=0)
    admin.create_topic(SF, "t", 1)
    old = int(time.time() * 1000) - 2 * HOUR_MS
    produce(admin, SF, 5, timestamp=old)
    produce(admin, SF, 5, start=5)
    linked(admin)
    replicate(admin)
    assert expire(admin, old + HOUR_MS) == 5
    result = compare(admin, SF, NY)
    assert result.same and kinds(result) == {} and (result.expired_in_src, result.expired_in_dst) == (5, 0)
    assert result.losses == [] and result.compared == 15
    assert result.summary() == "same: 15 messages compared (dst 0 behind, not counted; 5 expired in src)"
    write_directly(admin, NY, 1)  # a message of its own is still extra
    assert kinds(compare(admin, SF, NY)) == {"extra in dst": 1}


@ON_BOTH
@VARIANTS
def test_a_loss_to_retention_before_replication_differs_until_acknowledged(admin, compare, tmp_path):
    """Messages the source's retention removed before the replica applied them are held by neither:
    reported from the replica's position (before a gateway records the loss) and from its loss
    record (after), exit 1 until an admin acknowledges the loss, then reported as acknowledged."""
    admin.create_stream(SF, ttl=0)
    admin.create_topic(SF, "t", 1)
    old = int(time.time() * 1000) - 2 * HOUR_MS
    produce(admin, SF, 3, timestamp=old)
    linked(admin)
    replicate(admin)  # NY holds SF's 0-2
    produce(admin, SF, 4, start=3, timestamp=old)  # 3-6: removed before NY gets them
    produce(admin, SF, 2, start=7)
    assert expire(admin, old + HOUR_MS) == 7
    for gateway_ran in (False, True):
        if gateway_ran:
            replicate(admin)  # records the loss, and applies 7-8
        result = compare(admin, SF, NY)
        assert [(x.source, x.topic, x.partition, x.first, x.last, x.acknowledged) for x in result.losses] == [
            ("src", "t", 0, 3, 6, False)
        ]
        assert not result.same and kinds(result) == {} and result.lost == 4
        assert (result.expired_in_src, result.dst_behind) == (3, 0 if gateway_ran else 2)
        assert result.summary() == (
            "differ: 0 missing in dst, 0 extra in dst, 0 changed, 0 out of order, 4 lost to retention before "
            f"replication, not acknowledged (dst {0 if gateway_ran else 2} behind, not counted; 3 expired in src)"
        )
    status, _, err = cli("diffstreams", "-src", SF, "-dst", NY, "-outdir", str(tmp_path / "lost"), "-json")
    manifest = read_manifest(tmp_path / "lost" / OPS_FOR_DST)
    assert status == 1 and "4 lost to retention before replication, not acknowledged" in err
    assert manifest["counts"]["lost"] == 4 and manifest["counts"]["expiredInSrc"] == 3
    assert manifest["losses"] == [
        {"source": "src", "topic": "t", "partition": 0, "first": 3, "last": 6, "acknowledged": False}
    ]
    assert manifest["files"] == {}  # neither holds them: nothing to import, nor the expired ones
    assert acknowledge_loss(admin, SF, NY).acknowledged == 4
    result = compare(admin, SF, NY)
    assert result.same and (result.lost, result.lost_acknowledged) == (0, 4)
    assert result.summary() == (
        "same: 7 messages compared (dst 0 behind, not counted; 3 expired in src; "
        "4 lost to retention before replication, acknowledged)"
    )
    status, out, _ = cli("diffstreamswithcrc", "-src", SF, "-dst", NY, "-outdir", str(tmp_path / "ok"), "-json")
    [row] = json.loads(out)["data"]
    assert status == 0 and (row["lost"], row["lostAcknowledged"], row["expiredInSrc"]) == (0, 4, 3)


def test_an_unrecorded_loss_acknowledged_is_acknowledged_too(admin):
    """Acknowledged before a gateway recorded it: the position moves past it, and a record stays."""
    admin.create_stream(SF, ttl=0)
    admin.create_topic(SF, "t", 1)
    old = int(time.time() * 1000) - 2 * HOUR_MS
    produce(admin, SF, 2, timestamp=old)
    linked(admin)
    replicate(admin)
    produce(admin, SF, 3, start=2, timestamp=old)
    produce(admin, SF, 1, start=5)
    assert expire(admin, old + HOUR_MS) == 5
    assert diff_streams(admin, SF, NY).lost == 3
    assert acknowledge_loss(admin, SF, NY).describe_ranges() == "t/0:2-4"
    result = diff_streams(admin, SF, NY)
    assert result.same and result.lost_acknowledged == 3 and (result.dst_behind, result.expired_in_src) == (1, 2)


@ON_BOTH
@VARIANTS
def test_a_multi_master_pair_is_the_same_though_origins_interleave(source, compare):
    autosetup(source, SF, NY, multimaster=True)
    produce(source, NY, 7, start=50)
    produce(source, SF, 4, start=20)
    replicate(source, "newyork")
    replicate(source, "sanfrancisco")
    result = compare(source, SF, NY)
    assert result.same and result.dst_replicates_src and result.src_replicates_dst
    assert result.compared == 2 * 31
    produce(source, NY, 2, start=60)  # not yet at SF: in flight the other way
    result = compare(source, SF, NY)
    assert result.same and (result.dst_behind, result.src_behind) == (0, 2)
    assert "dst 0 behind, src 2 behind, not counted" in result.summary()


def test_first_exit_stops_at_the_first_difference(source):
    plant(source, many)
    for compare in (diff_streams, diff_streams_crc):
        result = compare(source, SF, NY, first_exit=True)
        assert len(result.differences) == 1 and result.stopped_early
        assert result.differences == diff_streams(source, SF, NY).differences[:1]


# -- the CLI -------------------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["diffstreams", "diffstreamswithcrc"])
def test_the_cli_exits_0_when_the_same_and_writes_empty_ops(replica, tmp_path, command):
    status, out, err = cli(command, "-src", SF, "-dst", NY, "-outdir", str(tmp_path / "out"))
    assert (status, out, err) == (0, "same: 40 messages compared (dst 0 behind, not counted)\n", "")
    for direction in (OPS_FOR_DST, OPS_FOR_SRC):
        manifest = read_manifest(tmp_path / "out" / direction)
        assert manifest["same"] and manifest["files"] == {} and manifest["format"] == FORMAT
        assert sorted(p.name for p in (tmp_path / "out" / direction).iterdir()) == [MANIFEST]


@pytest.mark.parametrize("command", ["diffstreams", "diffstreamswithcrc"])
def test_the_cli_exits_1_with_a_one_line_summary_and_the_ops(source, tmp_path, command):
    plant(source, many)
    produce(source, NY, 1, start=300)  # and one extra in dst
    outdir = tmp_path / "out"
    status, out, err = cli(command, "-src", SF, "-dst", NY, "-outdir", str(outdir))
    assert (status, out) == (1, "")  # exit 1 is one line on stderr, as for every command
    assert err == (
        "streamrep: error: differ: 1 missing in dst, 1 extra in dst, 1 changed, 1 out of order "
        "(dst 0 behind, not counted)\n"
    )
    sf, ny = source.entry(SF), source.entry(NY)
    for_dst = read_manifest(outdir / OPS_FOR_DST)
    assert for_dst["target"] == {"path": NY, "uuid": ny.uuid} and for_dst["direction"] == OPS_FOR_DST
    assert for_dst["src"]["uuid"] == sf.uuid and for_dst["counts"]["missing in dst"] == 1
    assert {p["topic"] for p in for_dst["point"]} == {"t"} and len(for_dst["point"]) == 2
    lines = [json.loads(line) for name in for_dst["files"] for line in (outdir / OPS_FOR_DST / name).open()]
    puts = [op for op in lines if op["op"] == "put"]
    differs = sorted((op["kind"], op["fields"]) for op in lines if op["op"] == "differs")
    assert differs == [("changed", ["value"]), ("out of order", ["order"])]
    [put] = puts
    assert put["origin"] == f"{sf.uuid}/0/3" and put["partition"] == 0 and put["topic"] == "t"
    sp = source.path(SF)
    [held] = source.store(sp).read(sf.uuid, "t", 0, 3, 1)
    assert base64.b64decode(put["value"]) == held.value and base64.b64decode(put["key"]) == held.key
    assert put["headers"] == [["trace", base64.b64encode(held.header("trace")).decode()]]
    assert put["timestamp"] == held.timestamp and put["from"] == {"stream": SF, "offset": 3}
    for_src = read_manifest(outdir / OPS_FOR_SRC)
    assert for_src["target"]["uuid"] == sf.uuid
    src_lines = [json.loads(line) for name in for_src["files"] for line in (outdir / OPS_FOR_SRC / name).open()]
    [extra] = [op for op in src_lines if op["op"] == "put"]
    assert extra["origin"].startswith(ny.uuid + "/") and extra["from"]["stream"] == NY


def test_the_cli_json_and_first_exit(replica, tmp_path):
    status, out, _ = cli("diffstreamswithcrc", "-src", SF, "-dst", NY, "-outdir", str(tmp_path / "s"), "-json")
    [row] = json.loads(out)["data"]
    assert status == 0 and row["same"] and row["compared"] == 40 and row["summary"].startswith("same: ")
    write_directly(replica, NY, 3)
    status, out, err = cli(
        "diffstreams", "-src", SF, "-dst", NY, "-outdir", str(tmp_path / "o"), "-first_exit", "-json"
    )
    [error] = json.loads(out)["errors"]
    assert status == 1 and error["desc"] == err.removeprefix("streamrep: error: ").strip()
    assert error["desc"].startswith("differ: 0 missing in dst, 1 extra in dst, ")
    assert error["desc"].endswith("; stopped at the first difference")
    assert read_manifest(tmp_path / "o" / OPS_FOR_SRC)["counts"]["extra in dst"] == 1


def test_the_entry_point_exits_1_with_one_line(replica, tmp_path, monkeypatch, capsys):
    write_directly(replica, NY, 1)
    outdir = str(tmp_path / "o")
    monkeypatch.setattr(sys, "argv", ["streamrep", "diffstreamswithcrc", "-src", SF, "-dst", NY, "-outdir", outdir])
    with pytest.raises(SystemExit) as exited:
        main()
    captured = capsys.readouterr()
    assert exited.value.code == 1 and captured.out == ""
    assert captured.err == (
        "streamrep: error: differ: 0 missing in dst, 1 extra in dst, 0 changed, 0 out of order "
        "(dst 0 behind, not counted)\n"
    )


# -- bad input: one line, exit 1 or 2, nothing written -------------------------------------------


def refused(tmp_path, *argv: str, status: int = 1) -> str:
    outdir = tmp_path / "never"
    code, out, err = cli(*argv, "-outdir", str(outdir)) if "-outdir" not in argv else cli(*argv)
    assert code == status and out == "" and err.count("\n") == 1 and err.startswith("streamrep: error: "), err
    assert not outdir.exists()
    return err


@pytest.mark.parametrize("command", ["diffstreams", "diffstreamswithcrc"])
def test_bad_input_is_one_line_and_writes_nothing(replica, bob, tmp_path, command, monkeypatch):
    assert "stream" in refused(tmp_path, command, "-src", SF, "-dst", "/mapr/newyork/nothere")
    assert "itself" in refused(tmp_path, command, "-src", SF, "-dst", SF)
    assert "itself" in refused(tmp_path, command, "-src", SF, "-dst", "mapr/sanfrancisco/activity")
    assert "itself" in refused(tmp_path, command, "-src", "activity", "-dst", SF)  # the default cluster's
    assert "-numthreads" in refused(tmp_path, command, "-src", SF, "-dst", NY, "-engine", "spark", "-numthreads", "0")
    assert "bad Spark master" in refused(tmp_path, command, "-src", SF, "-dst", NY, "-master", "nowhere")
    refused(tmp_path, command, "-src", SF, "-dst", NY, "-engine", "mapreduce", status=2)
    refused(tmp_path, command, "-src", SF, "-dst", NY, "-first_exit", "maybe", status=2)
    full = tmp_path / "full"
    full.mkdir()
    (full / "keep").write_text("x")
    assert "not empty" in refused(tmp_path, command, "-src", SF, "-dst", NY, "-outdir", str(full))
    assert [p.name for p in full.iterdir()] == ["keep"]
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    assert "cannot be created" in refused(tmp_path, command, "-src", SF, "-dst", NY, "-outdir", str(a_file / "out"))
    assert "not a directory" in refused(tmp_path, command, "-src", SF, "-dst", NY, "-outdir", str(a_file))
    with monkeypatch.context() as patched:  # as for a user without write permission (tests run as root)
        patched.setattr("os.access", lambda path, mode: False)
        assert "cannot be written" in refused(tmp_path, command, "-src", SF, "-dst", NY)
    # MapR's rights: consumeperm or copyperm on each stream; no one is exempt.
    monkeypatch.setenv("STREAMREP_USER", "bob")
    monkeypatch.setenv("STREAMREP_GROUPS", "")
    err = refused(tmp_path, command, "-src", SF, "-dst", NY)
    assert "user bob has none of consumeperm, copyperm on stream /mapr/sanfrancisco/activity" in err
    replica.edit_stream(SF, consumeperm="u:alice | u:bob")
    err = refused(tmp_path, command, "-src", SF, "-dst", NY)
    assert "user bob has none of consumeperm, copyperm on stream /mapr/newyork/activity" in err
    replica.edit_stream(NY, copyperm="u:alice | u:bob")
    status, out, _ = cli(command, "-src", SF, "-dst", NY, "-outdir", str(tmp_path / "bob"))
    assert status == 0 and out.startswith("same: ")


def test_an_empty_existing_outdir_is_used(replica, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    assert cli("diffstreams", "-src", SF, "-dst", NY, "-outdir", str(empty))[0] == 0
    assert sorted(p.name for p in empty.iterdir()) == [OPS_FOR_DST, OPS_FOR_SRC]


def test_a_manifest_of_another_format_is_refused(tmp_path):
    folder = Path(tmp_path)
    (folder / MANIFEST).write_text(json.dumps({"format": "streamrep-ops-99"}))
    with pytest.raises(Exception, match="format"):
        read_manifest(folder)
    with pytest.raises(Exception, match="no manifest.json"):
        read_manifest(folder / "nothing")
