"""importstream (issue 32): every planted difference is found by diffstreams and diffstreamswithcrc
alike, and importstream repairs what appending can repair (the next diff is clean), reports what it
cannot (the diff keeps reporting it), and writes each message once however often it runs. Each case
on embedded->embedded, kafka->kafka, and across (embedded->kafka, kafka->embedded). Then bad input:
one line, and nothing written.

Differences are planted as in ``test_diffstreams.py``: a replica written through the store
interface (``Store.append`` with origin headers, as a gateway writes), or a live replica changed
behind streamrep's back (as a cluster's own tools could).
"""

from __future__ import annotations

import io
import json
import threading
import time
import uuid
from pathlib import Path

import pytest

from streamrep.cli.main import run
from streamrep.client import StreamAdmin
from streamrep.client.producer import Producer
from streamrep.model.ace import Identity
from streamrep.model.message import IMPORTED_HEADER, ORIGIN_HEADER, Message
from streamrep.replication import importstream as importmod
from streamrep.replication.diff import Kind, diff_streams, diff_streams_crc
from streamrep.replication.gateway import Gateway
from streamrep.replication.importstream import ImportSummary, import_stream
from streamrep.replication.ops import MANIFEST, OPS_FOR_DST, OPS_FOR_SRC, check_outdir, write_ops

SF = "/mapr/sanfrancisco/activity"
NY = "/mapr/newyork/activity"
HOUR_MS = 3600 * 1000
ALICE = Identity(user="alice", groups=frozenset({"eng"}))

PAIRS = [
    pytest.param(("embedded", "embedded"), id="embedded-embedded"),
    pytest.param(("kafka", "kafka"), id="kafka-kafka", marks=pytest.mark.kafka),
    pytest.param(("embedded", "kafka"), id="embedded-kafka", marks=pytest.mark.kafka),
    pytest.param(("kafka", "embedded"), id="kafka-embedded", marks=pytest.mark.kafka),
]
ON_EVERY_PAIR = pytest.mark.parametrize("pair", PAIRS, indirect=True)


@pytest.fixture
def pair(request) -> tuple[str, str]:
    """The backends of sanfrancisco (the source) and newyork; embedded both unless parametrized."""
    return getattr(request, "param", ("embedded", "embedded"))


@pytest.fixture
def home(empty_home, pair, request):
    """sanfrancisco and newyork on the pair's backends (a Kafka one: a namespace of the session's broker)."""
    for name, backend in zip(("sanfrancisco", "newyork"), pair, strict=True):
        if backend == "embedded":
            empty_home.add(name)
        else:
            new_namespace = request.getfixturevalue("kafka_namespace")
            bootstrap = request.getfixturevalue("kafka_broker")
            empty_home.add(name, url=f"kafka://{bootstrap}", settings={"streamrep.namespace": new_namespace()})
    return empty_home


@pytest.fixture(autouse=True)
def as_alice(home, monkeypatch):
    """The CLI acts as alice, who creates everything through the ``admin`` fixture."""
    monkeypatch.setenv("STREAMREP_USER", "alice")
    monkeypatch.setenv("STREAMREP_GROUPS", "eng")


def produce(admin, path: str, count: int, start: int = 0, timestamp: int | None = None) -> None:
    with Producer(admin) as producer:
        for i in range(start, start + count):
            producer.send(f"{path}:t", f"value-{i}", key=f"k{i}", headers=[("trace", str(i))], timestamp=timestamp)


def replicate(admin) -> int:
    gateway = Gateway(admin, "newyork", "gw1")
    try:
        return gateway.run_once(whole=True)
    finally:
        gateway.stop()


def held(admin, path: str) -> list[Message]:
    sp = admin.path(path)
    store, uuid_ = admin.store(sp), admin.entry(sp).uuid
    found = []
    for partition, _ in enumerate(range(store.topics(uuid_).get("t", 0))):
        start, end = store.offsets(uuid_, "t", partition)
        found += store.read(uuid_, "t", partition, start, end - start + 10)
    return found


def source(admin) -> None:
    """SF with topic ``t`` (2 partitions) holding 20 messages."""
    admin.create_stream(SF, defaultpartitions=2, ttl=0)
    admin.create_topic(SF, "t", 2)
    produce(admin, SF, 20)


def linked(admin) -> None:
    """SF and its one-way replica NY, replicated by a gateway."""
    source(admin)
    admin.create_stream(NY, copymetafrom=SF)
    admin.add_replica(SF, NY)
    admin.add_upstream(NY, SF)
    replicate(admin)


def plant(admin, change) -> None:
    """NY, not linked to SF, holds SF's messages as a gateway writes them, after ``change``."""
    source(admin)
    admin.create_stream(NY, copymetafrom=SF)
    admin.create_topic(NY, "t", 2)
    sp, np_ = admin.path(SF), admin.path(NY)
    sf = admin.entry(sp).uuid
    for partition in range(2):
        copies = [
            m._replace(headers=(*m.headers, (ORIGIN_HEADER, f"{sf}/{partition}/{m.offset}".encode())), offset=-1)
            for m in admin.store(sp).read(sf, "t", partition, 0, 100)
        ]
        admin.store(np_).append(admin.entry(np_).uuid, "t", {partition: change(partition, copies)})


def kinds(result) -> dict[str, int]:
    return {k.value: result.count(k) for k in Kind if result.count(k)}


def compare(admin) -> dict[str, int]:
    """Both variants' differences, which must be the same; their kinds."""
    full, crc = diff_streams(admin, SF, NY), diff_streams_crc(admin, SF, NY)
    assert crc.differences == full.differences
    return kinds(full)


def diff_and_import(admin, tmp_path: Path) -> tuple[dict[str, int], ImportSummary, ImportSummary]:
    """Diff, write the ops, import opsForDst into NY and opsForSrc into SF, then both again (the
    second time nothing is written). Returns the differences found and the first two imports."""
    result = diff_streams(admin, SF, NY)
    found = compare(admin)
    outdir = tmp_path / f"ops-{uuid.uuid4().hex[:6]}"
    write_ops(admin, result, check_outdir(str(outdir)))
    into_dst = import_stream(admin, outdir / OPS_FOR_DST, NY)
    into_src = import_stream(admin, outdir / OPS_FOR_SRC, SF)
    for again in (import_stream(admin, outdir / OPS_FOR_DST, NY), import_stream(admin, outdir / OPS_FOR_SRC, SF)):
        assert again.applied == 0  # exactly once: a second run writes nothing
    return found, into_dst, into_src


# -- every planted difference, on every pair of backends -----------------------------------------


@ON_EVERY_PAIR
def test_a_missing_message_is_imported_and_the_next_diff_is_clean(admin, tmp_path):
    plant(admin, lambda partition, copies: copies[:3] + copies[4:] if partition == 0 else copies)
    found, into_dst, into_src = diff_and_import(admin, tmp_path)
    assert found == {"missing in dst": 1}
    assert (into_dst.applied, into_dst.present, into_dst.left, into_src.applied) == (1, 0, 0, 0)
    assert compare(admin) == {}  # appended last, marked imported: not out of order
    [imported] = [m for m in held(admin, NY) if m.header(IMPORTED_HEADER) is not None]
    sp = admin.path(SF)
    [original] = admin.store(sp).read(admin.entry(sp).uuid, "t", 0, 3, 1)
    assert (imported.value, imported.key, imported.timestamp) == (original.value, original.key, original.timestamp)
    assert imported.header("trace") == original.header("trace")
    assert imported.header(ORIGIN_HEADER) == f"{admin.entry(SF).uuid}/0/3".encode()


@ON_EVERY_PAIR
def test_an_extra_message_goes_to_the_source_and_the_gateway_does_not_send_it_back(admin, tmp_path):
    """opsForSrc on a live one-way link: the replica's own message, imported into its source, keeps
    its origin (the replica), so a gateway pass never applies it to the replica a second time."""
    linked(admin)
    np_ = admin.path(NY)
    planted = Message(b"planted", b"x", timestamp=int(time.time() * 1000))  # Kafka writes no timestamp 0
    admin.store(np_).append(admin.entry(np_).uuid, "t", {1: [planted]})
    found, into_dst, into_src = diff_and_import(admin, tmp_path)
    assert found == {"extra in dst": 1}
    assert (into_src.applied, into_dst.applied) == (1, 0)
    assert replicate(admin) == 1  # read, and not applied: its origin is the replica
    assert len(held(admin, NY)) == 21 and len(held(admin, SF)) == 21
    assert compare(admin) == {}


@ON_EVERY_PAIR
def test_a_changed_byte_is_left_for_a_person_and_stays_reported(admin, tmp_path):
    def flip(partition, copies):
        if partition == 1:
            copies[2] = copies[2]._replace(value=bytes([copies[2].value[0] ^ 1]) + copies[2].value[1:])
        return copies

    plant(admin, flip)
    found, into_dst, into_src = diff_and_import(admin, tmp_path)
    assert found == {"changed": 1}
    assert (into_dst.applied, into_dst.differs, into_src.differs) == (0, (("changed", 1),), (("changed", 1),))
    assert "NOT APPLIED: 1 differences left for a person (1 changed)" in into_dst.summary()
    assert compare(admin) == {"changed": 1}


@ON_EVERY_PAIR
def test_a_changed_header_is_left_for_a_person_and_stays_reported(admin, tmp_path):
    def change(partition, copies):
        if partition == 0:
            m = copies[5]
            copies[5] = m._replace(headers=tuple((k, b"changed" if k == "trace" else v) for k, v in m.headers))
        return copies

    plant(admin, change)
    found, into_dst, _ = diff_and_import(admin, tmp_path)
    assert found == {"changed": 1} and into_dst.left == 1 and into_dst.applied == 0
    assert compare(admin) == {"changed": 1}


@ON_EVERY_PAIR
def test_two_swapped_messages_are_left_for_a_person_and_stay_reported(admin, tmp_path):
    def swap(partition, copies):
        if partition == 1:
            copies[3], copies[4] = copies[4], copies[3]
        return copies

    plant(admin, swap)
    found, into_dst, _ = diff_and_import(admin, tmp_path)
    assert found == {"out of order": 1} and into_dst.differs == (("out of order", 1),)
    assert compare(admin) == {"out of order": 1}


@ON_EVERY_PAIR
def test_a_deleted_replica_topic_is_created_again_and_filled(admin, tmp_path):
    """The gateway does not re-create a deleted replica topic (issue 29); importstream does, with the
    source's partition count, under the gateway's right, and the content compares clean again."""
    linked(admin)
    np_ = admin.path(NY)
    admin.store(np_).delete_topic(admin.entry(np_).uuid, "t")
    found, into_dst, _ = diff_and_import(admin, tmp_path)
    assert found == {"missing in dst": 20}
    assert (into_dst.applied, into_dst.created) == (20, ("t",))
    assert admin.store(np_).topics(admin.entry(np_).uuid) == {"t": 2}
    assert compare(admin) == {}


@ON_EVERY_PAIR
def test_a_truncated_source_is_repaired_as_the_diff_reports_it(admin, tmp_path):
    """The source's retention removed messages its replica holds: importstream applies what the
    diff reports (nothing more), and the next diff is clean."""
    admin.create_stream(SF, ttl=0)
    admin.create_topic(SF, "t", 1)
    old = int(time.time() * 1000) - 2 * HOUR_MS
    produce(admin, SF, 5, timestamp=old)
    produce(admin, SF, 5, start=5)
    admin.create_stream(NY, copymetafrom=SF)
    admin.add_replica(SF, NY)
    admin.add_upstream(NY, SF)
    replicate(admin)
    sp = admin.path(SF)
    assert admin.store(sp).purge_before(admin.entry(sp).uuid, "t", old + HOUR_MS) == 5
    found, into_dst, into_src = diff_and_import(admin, tmp_path)
    assert into_dst.applied + into_src.applied == found.get("extra in dst", 0) + found.get("missing in dst", 0)
    replicate(admin)
    after = diff_streams(admin, SF, NY)
    assert after.same, after.summary()


# -- exactly once under concurrent writers -------------------------------------------------------


def test_an_import_that_loses_a_race_to_another_import_writes_nothing_twice(admin, tmp_path, monkeypatch):
    """A second import commits between the first one's read of the stream and its write: the
    first one's write is refused (the import mark moved), it reads again and finds it all there."""
    plant(admin, lambda partition, copies: copies[:10:2] if partition == 0 else copies)
    outdir = tmp_path / "ops"
    result = diff_streams(admin, SF, NY)
    missing = result.count(Kind.MISSING_IN_DST)
    write_ops(admin, result, check_outdir(str(outdir)))
    identities = importmod._identities
    raced: list[ImportSummary] = []

    def meanwhile(*args):
        found = identities(*args)
        if not raced:
            raced.append(ImportSummary("", admin.path(NY), 0, 0, 0))  # once: the other import reads as usual
            raced[0] = import_stream(admin, outdir / OPS_FOR_DST, NY)  # commits first
        return found

    monkeypatch.setattr(importmod, "_identities", meanwhile)
    first = import_stream(admin, outdir / OPS_FOR_DST, NY)
    assert missing > 1 and (raced[0].applied, first.applied, first.present) == (missing, 0, missing)
    assert compare(admin) == {}


def test_an_import_racing_a_gateway_in_the_same_partition_reads_again(admin, tmp_path, monkeypatch):
    """A gateway applying into the partition between the import's read and its write moves the
    partition's position: the import's write is refused, and it reads again."""
    linked(admin)
    np_ = admin.path(NY)
    admin.store(np_).delete_topic(admin.entry(np_).uuid, "t")
    outdir = tmp_path / "ops"
    write_ops(admin, diff_streams(admin, SF, NY), check_outdir(str(outdir)))
    admin.store(np_).create_topic(admin.entry(np_).uuid, "t", 2)
    produce(admin, SF, 4, start=100)
    identities, reads = importmod._identities, []

    def meanwhile(*args):
        reads.append(1)
        found = identities(*args)
        if len(reads) == 1:
            ny = admin.entry(np_).uuid
            for partition in range(2):  # as a gateway applies: the messages and the moved position
                key = f"p|{admin.entry(SF).uuid}|t|{partition}"
                position = admin.store(np_).marks(ny)[key]
                admin.store(np_).apply(ny, "t", partition, [Message(b"late")], {key: position + 2}, {key: position})
        return found

    monkeypatch.setattr(importmod, "_identities", meanwhile)
    done = import_stream(admin, outdir / OPS_FOR_DST, NY)
    assert done.applied == 20 and len(reads) == 2


def test_two_imports_at_once_write_each_message_once(home, tmp_path):
    """Two processes' worth of imports (each its own registry and store connections), at once."""
    admin = StreamAdmin(home, ALICE)
    plant(admin, lambda partition, copies: copies[:1])
    outdir = tmp_path / "ops"
    write_ops(admin, diff_streams(admin, SF, NY), check_outdir(str(outdir)))
    done: list[ImportSummary] = []
    errors: list[Exception] = []

    def one() -> None:
        other = StreamAdmin(type(home)(str(home.home)), ALICE)
        try:
            done.append(import_stream(other, outdir / OPS_FOR_DST, NY))
        except Exception as err:  # noqa: BLE001 - reported below
            errors.append(err)
        finally:
            other.clusters.close()

    threads = [threading.Thread(target=one) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors and sum(d.applied for d in done) == 18 and sum(d.present for d in done) == 18
    assert compare(admin) == {} and len(held(admin, NY)) == 20


# -- the CLI -------------------------------------------------------------------------------------


def cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    status = run(list(argv), out, err, io.StringIO())
    return status, out.getvalue(), err.getvalue()


def many(partition, copies):
    """One missing (partition 0), one changed (partition 1)."""
    if partition == 0:
        return copies[:3] + copies[4:]
    copies[2] = copies[2]._replace(value=b"X" + copies[2].value[1:])
    return copies


@pytest.fixture
def ops(admin, tmp_path) -> Path:
    """The ops of SF and a planted NY (one missing, one changed)."""
    plant(admin, many)
    write_ops(admin, diff_streams(admin, SF, NY), check_outdir(str(tmp_path / "out")))
    return tmp_path / "out"


def test_the_cli_exits_0_and_says_what_it_did_not_apply(admin, ops):
    status, out, err = cli("importstream", "-src", str(ops / OPS_FOR_DST), "-dst", NY)
    assert (status, err) == (0, "")
    assert out == (
        f"imported 1 messages into {NY} (0 already present, 2 files); NOT APPLIED: 1 differences left for a "
        f"person (1 changed): the differs lines of {ops / OPS_FOR_DST}\n"
    )
    status, out, _ = cli("importstream", "-src", str(ops / OPS_FOR_DST), "-dst", NY, "-json")
    [row] = json.loads(out)["data"]
    assert status == 0 and (row["applied"], row["alreadyPresent"], row["leftForAPerson"]) == (0, 1, 1)
    assert row["differs"] == {"changed": 1} and row["dst"] == NY and row["summary"].startswith("imported 0 ")


def test_the_rest_form_refuses_it():
    from streamrep.cli.rest import REFUSED

    assert "ops directory on the API server's disk" in REFUSED[("importstream",)]


# -- bad input: one line, nothing written --------------------------------------------------------


def refused(admin, folder, dst: str = NY) -> str:
    """importstream through the CLI: exit 1, one line on stderr, and NY unchanged."""
    before = [m.value for m in held(admin, NY)]
    status, out, err = cli("importstream", "-src", str(folder), "-dst", dst)
    assert (status, out) == (1, "") and err.count("\n") == 1 and err.startswith("streamrep: error: "), err
    assert [m.value for m in held(admin, NY)] == before
    return err.removeprefix("streamrep: error: ").strip()


def corrupt(folder: Path, name: str, number: int, line: str) -> None:
    lines = (folder / name).read_text().splitlines()
    lines[number - 1] = line
    (folder / name).write_text("\n".join(lines) + "\n")


def test_a_folder_that_is_not_an_ops_directory(admin, ops, tmp_path):
    assert refused(admin, tmp_path / "nowhere") == f"ops directory {tmp_path / 'nowhere'} does not exist"
    assert refused(admin, ops) == f"{ops} holds opsForDst/ and opsForSrc/: give one of them as the ops directory"
    (ops / OPS_FOR_DST / MANIFEST).unlink()
    assert refused(admin, ops / OPS_FOR_DST) == (
        f"{ops / OPS_FOR_DST} is not a complete ops directory: it has no manifest.json"
    )


def test_a_manifest_of_another_format(admin, ops):
    manifest = ops / OPS_FOR_DST / MANIFEST
    manifest.write_text(manifest.read_text().replace('"streamrep-ops-1"', '"streamrep-ops-2"'))
    assert refused(admin, ops / OPS_FOR_DST) == (
        f"{manifest} is not an ops manifest of format streamrep-ops-1 (format 'streamrep-ops-2')"
    )


def test_a_listed_file_missing_an_unlisted_file_or_one_cut_short(admin, ops):
    folder = ops / OPS_FOR_DST
    (folder / "t.1.jsonl").rename(folder / "t.1.jsonl.bak")
    assert refused(admin, folder) == (
        f"{folder} is not a complete ops directory: t.1.jsonl, listed in its manifest, is missing"
    )
    (folder / "t.1.jsonl.bak").rename(folder / "t.1.jsonl")
    (folder / "notes.txt").write_text("mine\n")
    assert (
        refused(admin, folder)
        == f"{folder / 'notes.txt'} is not listed in the manifest of {folder}: not an ops file of it"
    )
    (folder / "notes.txt").unlink()
    (folder / "t.1.jsonl").write_text("")
    assert refused(admin, folder) == f"{folder / 't.1.jsonl'} has 0 lines, its manifest says 1: cut short or changed"


def test_a_directory_made_for_another_stream(admin, ops):
    sf, ny = admin.entry(SF).uuid, admin.entry(NY).uuid
    assert refused(admin, ops / OPS_FOR_SRC, NY) == (
        f"ops directory {ops / OPS_FOR_SRC} was made for stream {SF} (uuid {sf}), not {NY} (uuid {ny})"
    )
    admin.delete_stream(NY)  # the same path, another stream
    admin.create_stream(NY, copymetafrom=SF)
    admin.create_topic(NY, "t", 2)
    again = admin.entry(NY).uuid
    assert refused(admin, ops / OPS_FOR_DST) == (
        f"ops directory {ops / OPS_FOR_DST} was made for stream {NY} (uuid {ny}), not {NY} (uuid {again})"
    )


BAD_LINES = {
    "bad JSON": ('{"op": "put", ', "bad JSON (Expecting property name enclosed in double quotes)"),
    "unknown op": ('{"op": "delete", "topic": "t", "origin": "u/1/2"}', "unknown op 'delete' (put or differs)"),
    "bad origin": ('{"op": "differs", "kind": "changed", "topic": "t", "origin": "u/x"}', "origin 'u/x' is not"),
    "another topic": ('{"op": "differs", "topic": "u", "origin": "u/1/2"}', "topic 'u' in the file of topic 't'"),
}


@pytest.mark.parametrize("case", sorted(BAD_LINES))
def test_a_corrupt_line_names_its_file_and_line_and_nothing_is_written(admin, ops, case):
    """The corrupt file comes after a valid one with a put: it is refused before that put is written."""
    line, why = BAD_LINES[case]
    folder = ops / OPS_FOR_DST
    corrupt(folder, "t.1.jsonl", 1, line)
    assert refused(admin, folder).startswith(f"{folder / 't.1.jsonl'} line 1: {why}")


def put_line(folder: Path, **change) -> str:
    put = json.loads((folder / "t.0.jsonl").read_text().splitlines()[0])
    return json.dumps({**put, **change})


@pytest.mark.parametrize(
    "change, why",
    [
        ({"value": "not base64!"}, "bad base64 in value"),
        ({"headers": [["trace", "@@"]]}, "bad base64 in header trace"),
        (
            {"headers": [[ORIGIN_HEADER, "eA=="]]},
            "a header streamrep.origin or streamrep.imported: the identity belongs in origin",
        ),
        ({"timestamp": "soon"}, "timestamp 'soon' is not a time in ms"),
        ({"partition": 1}, "partition 1 in the file of partition 0"),
    ],
    ids=["value", "header", "origin header", "timestamp", "partition"],
)
def test_a_corrupt_put_is_refused(admin, ops, change, why):
    folder = ops / OPS_FOR_DST
    corrupt(folder, "t.0.jsonl", 1, put_line(folder, **change))
    assert refused(admin, folder) == f"{folder / 't.0.jsonl'} line 1: {why}"


def test_a_partition_or_a_topic_the_stream_does_not_have(admin, ops):
    folder = ops / OPS_FOR_DST
    lines = (folder / "t.0.jsonl").read_text()
    manifest = json.loads((folder / MANIFEST).read_text())
    (folder / "t.0.jsonl").rename(folder / "t.7.jsonl")
    (folder / "t.7.jsonl").write_text(lines.replace('"partition": 0', '"partition": 7'))
    manifest["files"] = {"t.7.jsonl": 1, "t.1.jsonl": 1}
    (folder / MANIFEST).write_text(json.dumps(manifest))
    assert refused(admin, folder) == (
        f"{folder / 't.7.jsonl'} line 1: partition 7 of topic t, which stream {NY} does not have (2 partitions)"
    )
    (folder / "t.7.jsonl").unlink()
    (folder / "u.0.jsonl").write_text(lines.replace('"topic": "t"', '"topic": "u"'))
    manifest["files"] = {"u.0.jsonl": 1, "t.1.jsonl": 1}
    (folder / MANIFEST).write_text(json.dumps(manifest))
    assert refused(admin, folder) == (
        f"{folder / 'u.0.jsonl'} line 1: topic u, which stream {NY} does not have (nor had {SF})"
    )


def test_without_produceperm_or_on_a_one_way_replica_without_the_gateways_right(admin, ops, monkeypatch):
    admin.edit_stream(SF, produceperm="u:alice")
    monkeypatch.setenv("STREAMREP_USER", "bob")
    monkeypatch.setenv("STREAMREP_GROUPS", "sales")
    assert refused(admin, ops / OPS_FOR_SRC, SF) == (
        f"user bob does not have produceperm on stream {SF} (produceperm is 'u:alice')"
    )
    admin.add_replica(SF, NY)  # NY becomes SF's one-way replica: only its gateways write it
    admin.add_upstream(NY, SF)
    admin.set_cluster_ace("u:alice", "newyork")
    assert refused(admin, ops / OPS_FOR_DST) == (
        "user bob does not have adminperm on cluster newyork (adminperm is 'u:alice'): stream "
        f"{NY} is a one-way replica of {SF}, written only by its gateways, so importing into it needs their "
        "right (the cluster's adminperm, or its gateway principal)"
    )
