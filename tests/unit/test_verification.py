"""Each replica link's last verification (``replication/verification.py``): recorded from a real
compare, replaced by the next one, shown by ``stream replica list``, kept by stream identity (a
stream created again at the same path inherits nothing), and refused in one line to a caller who
may not write the replica's cluster's catalog. Real embedded and Kafka clusters, the in-process
gateway, the real CLI entry point."""

from __future__ import annotations

import io
import json

import pytest

from streamrep.cli.main import run
from streamrep.client.producer import Producer
from streamrep.errors import Conflict, InvalidArgument, NotFound, PermissionDenied
from streamrep.model.message import Message
from streamrep.replication import verification
from streamrep.replication.diff import diff_streams, diff_streams_crc
from streamrep.replication.gateway import Gateway
from streamrep.replication.status import replica_status
from streamrep.replication.verification import VERIFICATION_KIND, last, record

ON_BOTH = pytest.mark.backends("embedded", "kafka")
SF = "/mapr/sanfrancisco/activity"
NY = "/mapr/newyork/activity"


def cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = run(list(argv), out, err, io.StringIO())
    return code, out.getvalue(), err.getvalue()


def produce(admin, count: int, start: int = 0) -> None:
    with Producer(admin) as producer:
        for i in range(start, start + count):
            producer.send(SF + ":t", f"value-{i}", key=f"k{i}")


def replicate(admin) -> None:
    gateway = Gateway(admin, "newyork", "gw1")
    try:
        gateway.run_once(whole=True)
    finally:
        gateway.stop()


def compare(admin, crc: bool = False) -> dict:
    """A real compare of SF with NY, as the row the CLI prints and the operators record."""
    return (diff_streams_crc if crc else diff_streams)(admin, SF, NY).to_dict("")


def plant_extra(admin, count: int) -> None:
    """A topic of NY's own holding ``count`` messages, written as a plain client of its cluster
    would: extra in the replica (a one-way replica refuses streamrep's producers)."""
    sp = admin.path(NY)
    store, uuid = admin.store(sp), admin.entry(sp).uuid
    store.create_topic(uuid, "planted", 1)
    store.append(uuid, "planted", {0: [Message(f"own-{i}".encode(), b"own") for i in range(count)]})


def listed(admin) -> dict:
    """NY's row of ``stream replica list -json``."""
    code, out, err = cli("stream", "replica", "list", "-path", SF, "-json")
    assert code == 0, err
    (row,) = json.loads(out)["data"]
    return row


@pytest.fixture(autouse=True)
def as_alice(home, monkeypatch):
    monkeypatch.setenv("STREAMREP_USER", "alice")
    monkeypatch.setenv("STREAMREP_GROUPS", "eng")


@pytest.fixture
def linked(admin):
    """SF (topic t, one partition, 5 messages) and its replica NY, agreed both ways, replicated."""
    admin.create_stream(SF)
    admin.create_topic(SF, "t", 1)
    admin.create_stream(NY, copymetafrom=SF)
    admin.add_replica(SF, NY)
    admin.add_upstream(NY, SF)
    produce(admin, 5)
    replicate(admin)
    return admin


@ON_BOTH
def test_a_difference_is_recorded_shown_and_cleared_by_a_clean_verification(linked):
    admin = linked
    before = listed(admin)
    assert (before["verification"], before["lastVerified"]) == ("never", None)

    plant_extra(admin, 3)
    found = compare(admin)
    assert not found["same"] and found["extraInDst"] == 3
    done = record(admin, SF, NY, found, "local", "airflow")
    assert (done.result, done.counts["extraInDst"], done.by, done.command) == ("differs", 3, "airflow", "diffstreams")
    row = listed(admin)
    assert row["verification"] == "differs"
    assert "3 extra in dst" in row["verificationSummary"]
    assert row["lastVerified"].endswith("Z")
    # Information only: the link keeps its state, and replicates on.
    assert (row["replicaState"], row["errors"]) == (before["replicaState"], before["errors"])
    produce(admin, 2, start=5)
    assert listed(admin)["pendingMessages"] == 2
    replicate(admin)
    assert listed(admin)["pendingMessages"] == 0

    # The planted topic gone (a plain client deleted it), a CRC compare is clean: it replaces the record.
    sp = admin.path(NY)
    admin.store(sp).delete_topic(admin.entry(sp).uuid, "planted")
    clean = compare(admin, crc=True)
    assert clean["same"] and clean["compared"] == 14
    record(admin, SF, NY, clean, "spark", command="diffstreamswithcrc")
    (status,) = replica_status(admin, SF)
    assert status.verification is not None
    assert (status.verification.result, status.verification.engine) == ("same", "spark")
    assert status.verification.by == "alice"  # no ``by``: the caller on the replica's cluster
    assert listed(admin)["verification"] == "same"
    # One document per link: the last verification, not a history.
    assert len(admin.store(sp).catalog_list(VERIFICATION_KIND)) == 1
    assert set(last(admin, NY)) == {admin.entry(SF).uuid}


@ON_BOTH
def test_a_stream_created_again_at_the_replica_path_inherits_no_verification(linked):
    admin = linked
    plant_extra(admin, 1)
    record(admin, SF, NY, compare(admin), "local", "airflow")
    old = admin.entry(NY).uuid

    before = compare(admin)  # a compare of the old stream, recorded only after it is made again
    admin.delete_stream(NY)
    admin.create_stream(NY, copymetafrom=SF)
    # The source's link still names the old stream: nothing is recorded against the new one.
    with pytest.raises(Conflict, match="deleted and recreated"):
        record(admin, SF, NY, compare(admin), "local")
    admin.remove_replica(SF, NY)
    admin.add_replica(SF, NY)
    admin.add_upstream(NY, SF)
    with pytest.raises(Conflict, match=f"is for stream {old} at {NY}, which is now "):
        record(admin, SF, NY, before, "local")  # the link holds again, but not for the stream compared
    assert last(admin, NY) == {}
    assert listed(admin)["verification"] == "never"

    replicate(admin)
    record(admin, SF, NY, compare(admin), "local")
    assert listed(admin)["verification"] == "same"
    # The old stream's document went with the next record.
    keys = admin.store(admin.path(NY)).catalog_list(VERIFICATION_KIND)
    assert list(keys) == [f"{admin.entry(SF).uuid}/{admin.entry(NY).uuid}"] and old not in next(iter(keys))


@ON_BOTH
def test_recording_needs_the_replica_clusters_adminperm(linked, bob):
    admin = linked
    admin.set_cluster_ace("u:alice", cluster="newyork")
    found = compare(admin)
    with pytest.raises(PermissionDenied) as refused:
        record(bob, SF, NY, found, "local")
    line = str(refused.value)
    assert "\n" not in line
    assert "user bob does not have adminperm on cluster newyork" in line
    assert line.startswith(f"recording the verification of replica {NY}")
    assert listed(admin)["verification"] == "never"  # nothing written
    record(admin, SF, NY, found, "local")
    assert listed(admin)["verification"] == "same"


def test_bad_input_is_one_line_and_records_nothing(linked):
    admin = linked
    good = compare(admin)
    cases = [
        ({**good, "src": NY, "dst": SF}, "local", NY, SF, NotFound, "is not a replica of"),
        (good, "local", SF, "/mapr/newyork/nothing", Conflict, "is for dst"),
        ({k: v for k, v in good.items() if k != "compared"}, "local", SF, NY, InvalidArgument, "no 'compared' field"),
        ({**good, "missingInDst": 2}, "local", SF, NY, InvalidArgument, "says same=True with missingInDst 2"),
        ({**good, "changed": -1}, "local", SF, NY, InvalidArgument, "changed -1, not a count"),
        ({**good, "same": "yes"}, "local", SF, NY, InvalidArgument, "true/false 'same'"),
        (good, "auto", SF, NY, InvalidArgument, "engine is local or spark, not 'auto'"),
    ]
    for result, engine, source, replica, error, words in cases:
        with pytest.raises(error, match=words) as refused:
            record(admin, source, replica, result, engine)
        assert "\n" not in str(refused.value)
    with pytest.raises(InvalidArgument, match="command is diffstreams or diffstreamswithcrc"):
        record(admin, SF, NY, good, "local", command="diff")
    with pytest.raises(NotFound, match="does not exist"):
        record(admin, SF, "/mapr/newyork/nothing", {**good, "dst": "/mapr/newyork/nothing"}, "local")
    assert admin.store(admin.path(NY)).catalog_list(VERIFICATION_KIND) == {}


def test_an_unacknowledged_loss_is_recorded_as_a_difference(linked):
    """``DiffResult.same`` is false for messages lost to the source's retention and not acknowledged,
    with no other difference: such a result is recorded as ``differs``, with its count."""
    admin = linked
    clean = compare(admin)
    assert clean["same"] and clean["lost"] == 0
    lost = {**clean, "same": False, "lost": 2, "summary": "differ: 0 missing in dst, ...; 2 lost"}
    done = record(admin, SF, NY, lost, "local")
    assert (done.result, done.counts["lost"]) == ("differs", 2)
    assert listed(admin)["verification"] == "differs"
    with pytest.raises(InvalidArgument, match="says same=True with .* lost 2"):
        record(admin, SF, NY, {**lost, "same": True}, "local")


def test_a_foreign_document_is_left_out_of_the_reads(linked):
    """A document of the kind written by someone else without a verification's fields (the
    catalog holds any JSON object) neither breaks ``replica list`` nor shows as a verification."""
    admin = linked
    store = admin.store(admin.path(NY))
    key = f"{admin.entry(SF).uuid}/{admin.entry(NY).uuid}"
    store.catalog_update(VERIFICATION_KIND, key, lambda _: {"note": "not a verification"})
    assert verification.verifications(store) == {}
    assert listed(admin)["verification"] == "never"


def test_replica_list_shows_the_verification_columns_in_its_table(linked):
    admin = linked
    plant_extra(admin, 2)
    record(admin, SF, NY, compare(admin), "local", "airflow")
    code, out, err = cli("stream", "replica", "list", "-path", SF)
    assert code == 0, err
    header, row = out.splitlines()
    assert header.split()[-3:] == ["verification", "lastVerified", "verificationSummary"]
    assert "differs" in row.split() and "differ: 0 missing in dst, 2 extra in dst" in row
