"""The real ``streamrep`` executable, run in subprocesses, against embedded clusters.

Setup a test does not exercise (many streams, links) goes through the Python API on the
same ``STREAMREP_HOME``; whatever the test is about goes through the command line.
"""

from __future__ import annotations

import json
import re
import sqlite3
import time
from pathlib import Path

import pytest

from streamrep.client import Producer
from streamrep.model.replication import MAX_REPLICAS, ReplicaState

SF = "/mapr/sanfrancisco/activity"
NY = "/mapr/newyork/activity"


# -- helpers -----------------------------------------------------------------------------
def ok(result) -> str:
    """stdout of a command that must succeed quietly."""
    code, out, err = result
    assert code == 0, f"exit {code}, stderr: {err!r}"
    assert err == "", err
    return out


def ok_json(result) -> list[dict]:
    """The ``data`` of a command run with ``-json``, after checking maprcli's envelope."""
    doc = json.loads(ok(result))
    assert doc["status"] == "OK"
    assert isinstance(doc["timestamp"], int) and abs(doc["timestamp"] / 1000 - time.time()) < 120
    assert isinstance(doc["timeofday"], str) and doc["timeofday"]
    assert doc["total"] == len(doc["data"])
    return doc["data"]


def table(out: str) -> list[dict[str, str]]:
    """The rows of the plain table output, by column name (a column starts where its header does)."""
    header, *lines = out.splitlines()
    found = [(m.group(), m.start()) for m in re.finditer(r"\S+", header)]
    bounds = [(name, start, found[i + 1][1] if i + 1 < len(found) else None) for i, (name, start) in enumerate(found)]
    return [{name: line[a:b].strip() for name, a, b in bounds} for line in lines]


def messages(result) -> list[dict]:
    """The JSON lines ``consume -json`` prints."""
    return [json.loads(line) for line in ok(result).splitlines()]


def fails(result, code: int, *fragments: str) -> str:
    """Check a failure: exit ``code``, exactly one ``streamrep: error:`` line, no traceback."""
    rc, out, err = result
    assert rc == code, f"expected exit {code}, got {rc}; stderr: {err!r}"
    assert "Traceback" not in err and "Traceback" not in out
    assert err.startswith("streamrep: error: "), err
    assert err.endswith("\n") and err.count("\n") == 1, f"not one line: {err!r}"
    for fragment in fragments:
        assert fragment.lower() in err.lower(), f"{fragment!r} not in {err!r}"
    return err


@pytest.fixture
def sf_ny(api):
    """Two embedded clusters, sanfrancisco (the default) and newyork, registered by the API."""
    api.clusters.add("sanfrancisco")
    api.clusters.add("newyork")
    return api


@pytest.fixture
def streams(sf_ny):
    """``SF`` with topic clicks (2 partitions) and an empty ``NY``."""
    sf_ny.create_stream(SF)
    sf_ny.create_topic(SF, "clicks", 2)
    sf_ny.create_stream(NY)
    return sf_ny


# -- help and clusters -------------------------------------------------------------------
def test_help_exits_zero_and_lists_commands(cli):
    out = ok(cli("help"))
    assert "usage: streamrep" in out
    for words in ("cluster add", "stream replica add", "stream upstream add", "cluster gateway set", "consume"):
        assert words in out
    out = ok(cli("help", "stream", "replica"))
    assert "stream replica pause" in out and "cluster add" not in out


def test_cluster_add_list_remove(cli, streamrep_home):
    [added] = ok_json(cli("cluster", "add", "-name", "sanfrancisco", "-json"))
    assert added["name"] == "sanfrancisco" and added["kind"] == "embedded" and added["default"] is True
    assert added["url"] == f"embedded:{streamrep_home / 'clusters' / 'sanfrancisco.db'}"
    assert (streamrep_home / "clusters" / "sanfrancisco.db").exists()  # created at add time

    [row] = table(ok(cli("cluster", "add", "-name", "newyork")))  # table output
    assert row == {
        "name": "newyork",
        "kind": "embedded",
        "default": "false",
        "url": f"embedded:{streamrep_home / 'clusters' / 'newyork.db'}",
    }

    listed = ok_json(cli("cluster", "list", "-json"))
    assert [(c["name"], c["default"]) for c in listed] == [("newyork", False), ("sanfrancisco", True)]

    [removed] = ok_json(cli("cluster", "remove", "-name", "newyork", "-json"))
    assert removed["name"] == "newyork" and removed["removed"] is True
    assert [c["name"] for c in ok_json(cli("cluster", "list", "-json"))] == ["sanfrancisco"]
    assert (streamrep_home / "clusters" / "newyork.db").exists()  # the data file is kept

    fails(cli("cluster", "remove", "-name", "newyork"), 1, "newyork")
    fails(cli("cluster", "add", "-name", "sanfrancisco"), 1, "already exists")


def test_cluster_add_at_a_bad_location_registers_nothing(cli, streamrep_home):
    garbage = streamrep_home / "garbage.db"
    garbage.write_bytes(b"this is not a database" * 100)
    fails(cli("cluster", "add", "-name", "broken", "-url", f"embedded:{garbage}"), 1, "broken")
    fails(cli("cluster", "add", "-name", "k", "-url", "kafka://localhost"), 1, "kafka")
    assert ok_json(cli("cluster", "list", "-json")) == []


# -- streams -----------------------------------------------------------------------------
def test_stream_create_edit_info_list_delete(cli, sf_ny):
    [info] = ok_json(
        cli(
            "stream",
            "create",
            "-path",
            SF,
            "-defaultpartitions",
            "3",
            "-ttl",
            "0",
            "-autocreate",
            "false",
            "-produceperm",
            "u:alice|u:bob",
            "-json",
        )
    )
    assert info["path"] == SF and info["cluster"] == "sanfrancisco" and info["creator"] == "alice"
    assert (info["defaultpartitions"], info["ttl"], info["autocreate"]) == (3, 0, False)
    assert info["produceperm"].replace(" ", "") == "u:alice|u:bob" and info["adminperm"] == "u:alice"
    assert (info["topics"], info["replicas"], info["upstreams"]) == (0, 0, 0)

    [edited] = ok_json(cli("stream", "edit", "-path", SF, "-ttl", "3600", "-consumeperm", "p", "-json"))
    assert edited["ttl"] == 3600 and edited["consumeperm"] == "p"
    assert edited["uuid"] == info["uuid"] and edited["defaultpartitions"] == 3  # the rest unchanged

    ok(cli("stream", "topic", "create", "-path", SF, "-topic", "clicks"))  # partitions from the stream
    [row] = table(ok(cli("stream", "info", "-path", SF)))
    assert (row["partitions"], row["topics"], row["autocreate"], row["path"]) == ("3", "1", "false", SF)

    [listed] = ok_json(cli("stream", "list", "-json"))  # the default cluster
    assert listed["path"] == SF and listed["uuid"] == info["uuid"]
    assert ok_json(cli("stream", "list", "-cluster", "newyork", "-json")) == []

    fails(cli("stream", "create", "-path", SF), 1, "already exists")
    fails(cli("stream", "edit", "-path", SF), 1, "at least one setting")
    assert ok_json(cli("stream", "delete", "-path", SF, "-json")) == []
    fails(cli("stream", "info", "-path", SF), 1, "does not exist")
    fails(cli("stream", "delete", "-path", SF), 1, "does not exist")


def test_stream_create_copymetafrom_another_cluster(cli, sf_ny):
    [src] = ok_json(
        cli(
            "stream",
            "create",
            "-path",
            SF,
            "-defaultpartitions",
            "4",
            "-ttl",
            "100",
            "-produceperm",
            "u:alice|g:writers",
            "-json",
        )
    )
    [dst] = ok_json(cli("stream", "create", "-path", NY, "-copymetafrom", SF, "-ttl", "55", "-json"))
    assert dst["cluster"] == "newyork" and dst["uuid"] != src["uuid"]
    assert dst["ttl"] == 55  # an explicit setting wins over the copied one
    for field in (
        "defaultpartitions",
        "autocreate",
        "produceperm",
        "consumeperm",
        "topicperm",
        "copyperm",
        "adminperm",
    ):
        assert dst[field] == src[field], field
    fails(
        cli("stream", "create", "-path", "/mapr/newyork/other", "-copymetafrom", "/mapr/sanfrancisco/none"),
        1,
        "does not exist",
    )


def test_path_without_leading_slash(cli, sf_ny):
    ok(cli("stream", "create", "-path", "mapr/sanfrancisco/activity"))
    [info] = ok_json(cli("stream", "info", "-path", SF, "-json"))
    assert info["path"] == SF
    [info2] = ok_json(cli("stream", "info", "-path", "activity", "-json"))  # the default cluster
    assert info2["uuid"] == info["uuid"]
    ok(cli("stream", "create", "-path", "mapr/newyork/activity"))

    ok(cli("produce", "-path", "mapr/sanfrancisco/activity:clicks", stdin="hello\n"))  # autocreated topic
    [m] = messages(
        cli("consume", "-path", "mapr/sanfrancisco/activity:clicks", "-fromstart", "true", "-json", "-timeout", "0.1")
    )
    assert m["value"] == "hello"

    ok(cli("stream", "replica", "add", "-path", "mapr/sanfrancisco/activity", "-replica", "mapr/newyork/activity"))
    [replica] = ok_json(cli("stream", "replica", "list", "-path", SF, "-json"))
    assert replica["replicaPath"] == NY and replica["cluster"] == "newyork"


# -- topics ------------------------------------------------------------------------------
def test_topic_create_list_info_edit_delete(cli, sf_ny):
    sf_ny.create_stream(SF)
    [created] = ok_json(cli("stream", "topic", "create", "-path", SF, "-topic", "clicks", "-partitions", "2", "-json"))
    assert created == {"path": SF, "topic": "clicks", "partitions": 2}
    ok(cli("stream", "topic", "create", "-path", SF, "-topic", "views"))
    fails(cli("stream", "topic", "create", "-path", SF, "-topic", "clicks"), 1, "already exists")
    fails(cli("stream", "topic", "create", "-path", SF, "-topic", "bad/name"), 1, "invalid topic name")

    Producer(sf_ny).send(f"{SF}:clicks", "m", partition=1, flush=True)
    listed = ok_json(cli("stream", "topic", "list", "-path", SF, "-json"))
    assert sorted((t["topic"], t["partitions"], t["messages"]) for t in listed) == [("clicks", 2, 1), ("views", 1, 0)]

    info = ok_json(cli("stream", "topic", "info", "-path", SF, "-topic", "clicks", "-json"))
    assert [(p["partitionid"], p["minoffset"], p["maxoffset"], p["messages"]) for p in info] == [
        (0, 0, -1, 0),
        (1, 0, 0, 1),
    ]

    ok(cli("stream", "topic", "edit", "-path", SF, "-topic", "clicks", "-partitions", "5"))
    info = ok_json(cli("stream", "topic", "info", "-path", SF, "-topic", "clicks", "-json"))
    assert [p["partitionid"] for p in info] == [0, 1, 2, 3, 4] and info[1]["messages"] == 1
    fails(cli("stream", "topic", "edit", "-path", SF, "-topic", "clicks", "-partitions", "2"), 1, "partitions")

    ok(cli("stream", "topic", "delete", "-path", SF, "-topic", "clicks"))
    assert [t["topic"] for t in ok_json(cli("stream", "topic", "list", "-path", SF, "-json"))] == ["views"]
    fails(cli("stream", "topic", "delete", "-path", SF, "-topic", "clicks"), 1, "does not exist")
    fails(cli("stream", "topic", "info", "-path", SF, "-topic", "clicks"), 1, "does not exist")


# -- produce and consume -----------------------------------------------------------------
def test_produce_with_keysep_and_consume_json(cli, streams):
    before = int(time.time() * 1000)
    acked = ok_json(
        cli(
            "produce",
            "-path",
            f"{SF}:clicks",
            "-keysep",
            "::",
            "-partition",
            "1",
            "-json",
            stdin="user1::a::b\nuser2::second\n",
        )
    )
    assert acked == [{"topic": f"{SF}:clicks", "partition": 1, "firstoffset": 0, "lastoffset": 1, "messages": 2}]

    got = messages(cli("consume", "-path", f"{SF}:clicks", "-fromstart", "yes", "-json", "-timeout", "0.1"))
    assert [(m["key"], m["value"], m["partition"], m["offset"]) for m in got] == [
        ("user1", "a::b", 1, 0),
        ("user2", "second", 1, 1),
    ]  # only the first separator splits
    for m in got:
        assert set(m) == {"topic", "partition", "offset", "key", "value", "headers", "timestamp"}
        assert m["topic"] == "clicks" and m["headers"] == {}
        assert before - 5000 <= m["timestamp"] <= int(time.time() * 1000) + 5000


def test_produce_without_keysep_and_headers_in_json(cli, streams):
    ok(cli("produce", "-path", f"{SF}:clicks", "-partition", "0", stdin="k:v\nplain\n"))
    Producer(streams).send(f"{SF}:clicks", b"\xff\xfe", key="kb", headers=[("origin", "x1")], partition=0, flush=True)
    got = messages(cli("consume", "-path", f"{SF}:clicks", "-fromstart", "1", "-json", "-timeout", "0.1"))
    assert [(m["offset"], m["key"], m["value"]) for m in got[:2]] == [(0, None, "k:v"), (1, None, "plain")]
    assert got[2]["headers"] == {"origin": "x1"} and got[2]["key"] == "kb"
    assert got[2]["base64"] == ["value"] and got[2]["value"] == "//4="

    out = ok(cli("consume", "-path", f"{SF}:clicks", "-fromstart", "true", "-timeout", "0.1"))
    assert out.splitlines()[:2] == ["k:v", "plain"]  # plain output: one value a line

    # A line without the separator fails the whole produce: nothing of it is acknowledged.
    fails(cli("produce", "-path", f"{SF}:clicks", "-keysep", ":", stdin="a:1\nno separator\n"), 1, "separator")
    assert sum(t.messages for t in streams.list_topics(SF)) == 3


def test_produce_input_that_is_not_utf8(cli, streams):
    ok(
        cli(
            "produce",
            "-path",
            f"{SF}:clicks",
            "-keysep",
            "|",
            "-partition",
            "0",
            stdin=b"k\xe9y|\xff\xfebin\r\nplain|caf\xc3\xa9\n",
        )
    )
    got = messages(cli("consume", "-path", f"{SF}:clicks", "-fromstart", "true", "-json", "-timeout", "0.1"))
    assert [(m["key"], m["value"], m.get("base64")) for m in got] == [
        ("a+l5", "//5iaW4=", ["key", "value"]),  # the bytes as they came, base64 in JSON
        ("plain", "caf\u00e9", None),
    ]


def test_produce_reports_every_commit_of_a_long_input(cli, streams):
    lines = 25_003  # more than one commit's worth of lines
    acked = ok_json(cli("produce", "-path", f"{SF}:clicks", "-json", stdin="".join(f"{i}\n" for i in range(lines))))
    assert sum(a["messages"] for a in acked) == lines
    assert [(a["partition"], a["firstoffset"], a["lastoffset"] - a["firstoffset"] + 1) for a in acked] == [
        (0, 0, a0 := acked[0]["messages"]),
        (1, 0, lines - a0),
    ]
    assert sum(t.messages for t in streams.list_topics(SF)) == lines
    # Nothing to produce still checks the stream exists.
    fails(cli("produce", "-path", "/mapr/sanfrancisco/nope:t"), 1, "does not exist")


def test_consume_group_continues_where_it_stopped(cli, streams):
    ok(cli("produce", "-path", f"{SF}:clicks", "-partition", "0", stdin="".join(f"m{i}\n" for i in range(10))))
    topic = f"{SF}:clicks"
    # Without -fromstart and without a group, a consumer starts at the end: nothing to read.
    assert ok(cli("consume", "-path", topic, "-timeout", "0.1")) == ""

    first = messages(cli("consume", "-path", topic, "-group", "g1", "-fromstart", "true", "-max", "4", "-json"))
    assert [m["value"] for m in first] == ["m0", "m1", "m2", "m3"]
    second = messages(cli("consume", "-path", topic, "-group", "g1", "-max", "4", "-json"))
    assert [m["value"] for m in second] == ["m4", "m5", "m6", "m7"]
    rest = messages(cli("consume", "-path", topic, "-group", "g1", "-timeout", "0.1", "-json"))
    assert [m["value"] for m in rest] == ["m8", "m9"]
    assert ok(cli("consume", "-path", topic, "-group", "g1", "-fromstart", "true", "-timeout", "0.1")) == ""

    other = messages(cli("consume", "-path", topic, "-group", "g2", "-fromstart", "true", "-max", "2", "-json"))
    assert [m["value"] for m in other] == ["m0", "m1"]  # groups are independent

    fails(cli("consume", "-path", f"{SF}:nosuch", "-timeout", "0"), 1, "does not exist")


# -- replicas, upstreams, gateways -------------------------------------------------------
def test_replica_and_upstream_registry(cli, streams):
    streams.create_stream("/mapr/newyork/second")
    ok(cli("stream", "replica", "add", "-path", SF, "-replica", NY, "-paused", "true"))
    [r] = ok_json(cli("stream", "replica", "list", "-path", SF, "-json"))
    assert r["replicaPath"] == NY and r["cluster"] == "newyork"
    assert (r["paused"], r["synchronous"]) == (True, False)
    assert r["replicaState"] == ReplicaState.WAITING_FOR_UPSTREAM.value  # no agreement yet
    fails(cli("stream", "replica", "add", "-path", SF, "-replica", NY), 1, "already a replica")

    ok(cli("stream", "upstream", "add", "-path", NY, "-upstream", SF))
    [u] = ok_json(cli("stream", "upstream", "list", "-path", NY, "-json"))
    assert (u["cluster"], u["stream"], u["upstreamPath"], u["idx"]) == ("sanfrancisco", "/activity", SF, 1)
    assert len(u["uuid"]) == 36
    fails(cli("stream", "upstream", "add", "-path", NY, "-upstream", SF), 1, "already an upstream")
    [r] = ok_json(cli("stream", "replica", "list", "-path", SF, "-json"))
    assert r["replicaState"] == ReplicaState.PAUSED.value  # agreed on both sides, still paused

    ok(cli("stream", "replica", "resume", "-path", SF, "-replica", NY))
    [r] = ok_json(cli("stream", "replica", "list", "-path", SF, "-refreshnow", "true", "-json"))
    assert r["paused"] is False and r["replicaState"] == ReplicaState.WAITING_FOR_GATEWAY.value  # no gateway runs
    ok(cli("stream", "replica", "pause", "-path", SF, "-replica", NY))
    assert ok_json(cli("stream", "replica", "list", "-path", SF, "-json"))[0]["paused"] is True

    ok(
        cli(
            "stream",
            "replica",
            "add",
            "-path",
            SF,
            "-replica",
            "/mapr/newyork/second",
            "-synchronous",
            "yes",
            "-paused",
            "no",
        )
    )
    replicas = {r["replicaPath"]: r for r in ok_json(cli("stream", "replica", "list", "-path", SF, "-json"))}
    assert (replicas["/mapr/newyork/second"]["synchronous"], replicas["/mapr/newyork/second"]["paused"]) == (
        True,
        False,
    )
    assert replicas[NY]["synchronous"] is False

    ok(cli("stream", "replica", "remove", "-path", SF, "-replica", "/mapr/newyork/second"))
    assert [r["replicaPath"] for r in ok_json(cli("stream", "replica", "list", "-path", SF, "-json"))] == [NY]
    fails(cli("stream", "replica", "remove", "-path", SF, "-replica", "/mapr/newyork/second"), 1, "not a replica")
    fails(cli("stream", "replica", "add", "-path", SF, "-replica", "/mapr/newyork/none"), 1, "does not exist")
    fails(cli("stream", "replica", "add", "-path", SF, "-replica", SF), 1, "itself")

    ok(cli("stream", "upstream", "remove", "-path", NY, "-upstream", SF))
    assert ok_json(cli("stream", "upstream", "list", "-path", NY, "-json")) == []
    fails(cli("stream", "upstream", "remove", "-path", NY, "-upstream", SF), 1, "not an upstream")

    streams.delete_stream(NY)  # a replica deleted under the source's feet shows as unexpected
    [r] = ok_json(cli("stream", "replica", "list", "-path", SF, "-json"))
    assert r["replicaState"] == ReplicaState.UNEXPECTED.value and "does not exist" in r["errors"]


def test_cluster_gateways(cli, sf_ny):
    [gw] = ok_json(cli("cluster", "gateway", "set", "-dstcluster", "newyork", "-gateways", "gw1 gw2:7660", "-json"))
    assert gw == {"dstcluster": "newyork", "gateways": ["gw1", "gw2:7660"]}
    ok(cli("cluster", "gateway", "set", "-dstcluster", "sanfrancisco", "-gateways", "gw9", "-cluster", "newyork"))

    listed = ok_json(cli("cluster", "gateway", "list", "-json"))
    assert listed == [{"dstcluster": "newyork", "gateways": ["gw1", "gw2:7660"]}]
    [got] = ok_json(cli("cluster", "gateway", "get", "-dstcluster", "sanfrancisco", "-cluster", "newyork", "-json"))
    assert got["gateways"] == ["gw9"]

    assert ok_json(cli("cluster", "gateway", "delete", "-dstcluster", "newyork", "-json")) == []
    assert ok_json(cli("cluster", "gateway", "list", "-json")) == []
    fails(cli("cluster", "gateway", "get", "-dstcluster", "newyork"), 1, "no gateways")
    fails(cli("cluster", "gateway", "delete", "-dstcluster", "newyork"), 1, "no gateways")
    fails(cli("cluster", "gateway", "set", "-dstcluster", "nowhere", "-gateways", "gw1"), 1, "nowhere")
    fails(cli("cluster", "gateway", "set", "-dstcluster", "newyork", "-gateways", "gw1 gw1"), 1, "twice")


def test_boolean_words(cli, sf_ny):
    sf_ny.create_stream(SF)
    for word, expected in (
        ("true", True),
        ("false", False),
        ("yes", True),
        ("no", False),
        ("1", True),
        ("0", False),
        ("TRUE", True),
        ("No", False),
    ):
        [info] = ok_json(cli("stream", "edit", "-path", SF, "-autocreate", word, "-json"))
        assert info["autocreate"] is expected, word


# -- errors ------------------------------------------------------------------------------
MALFORMED = {
    "unknown command": (["frobnicate"], "unknown command"),
    "unknown subcommand": (["stream", "explode", "-path", SF], "unknown command"),
    "missing subcommand": (["stream", "replica"], "needs a subcommand"),
    "unknown option": (["stream", "info", "-path", SF, "-color", "red"], "unknown option -color"),
    "missing value": (["stream", "info", "-path"], "needs a value"),
    "missing required option": (["stream", "replica", "add", "-path", SF], "missing required option"),
    "option twice": (["stream", "info", "-path", SF, "-path", SF], "twice"),
    "stray word": (["stream", "info", SF], "unknown command"),
    "stray argument": (["stream", "info", "-path", SF, "extra"], "unexpected argument"),
    "bad boolean": (["stream", "replica", "add", "-path", SF, "-replica", NY, "-paused", "maybe"], "-paused"),
    "bad int": (["stream", "topic", "create", "-path", SF, "-topic", "t", "-partitions", "many"], "-partitions"),
    "bad number": (["consume", "-path", f"{SF}:t", "-timeout", "soon"], "-timeout"),
}


@pytest.mark.parametrize("argv,fragment", MALFORMED.values(), ids=list(MALFORMED))
def test_malformed_command_line_exits_2(cli, argv, fragment):
    fails(cli(*argv), 2, fragment)


def test_unknown_stream_and_cluster(cli, sf_ny):
    fails(cli("stream", "info", "-path", "/mapr/sanfrancisco/nope", "-json"), 1, "does not exist")
    fails(cli("stream", "info", "-path", "/mapr/atlantis/activity"), 1, "cluster atlantis is not known")
    fails(cli("produce", "-path", "/mapr/atlantis/activity:t", stdin="x\n"), 1, "atlantis")
    fails(cli("stream", "info", "-path", "/mapr/sanfrancisco/a:b"), 1, "invalid stream path")


def test_permission_denied_for_another_user(cli, streams):
    fails(cli("stream", "edit", "-path", SF, "-ttl", "5", user="eve"), 1, "eve", "adminperm")
    fails(cli("produce", "-path", f"{SF}:clicks", stdin="x\n", user="eve"), 1, "eve", "produceperm")
    fails(cli("consume", "-path", f"{SF}:clicks", "-timeout", "0", user="eve"), 1, "eve", "consumeperm")
    fails(cli("stream", "replica", "add", "-path", SF, "-replica", NY, user="eve"), 1, "eve", "adminperm")
    assert streams.entry(SF).meta.ttl != 5 and streams.replica_links(SF) == []


def test_65th_replica_is_refused(cli, sf_ny):
    sf_ny.create_stream(SF)
    for i in range(MAX_REPLICAS + 1):
        sf_ny.create_stream(f"/mapr/newyork/r{i}")
    for i in range(MAX_REPLICAS):
        sf_ny.add_replica(SF, f"/mapr/newyork/r{i}")
    fails(
        cli("stream", "replica", "add", "-path", SF, "-replica", f"/mapr/newyork/r{MAX_REPLICAS}"), 1, str(MAX_REPLICAS)
    )
    assert len(sf_ny.replica_links(SF)) == MAX_REPLICAS


def test_topic_name_conflict_between_upstreams(cli, sf_ny):
    for path in (SF, "/mapr/sanfrancisco/other", NY):
        sf_ny.create_stream(path)
    sf_ny.create_topic(SF, "clicks")
    sf_ny.create_topic("/mapr/sanfrancisco/other", "clicks")
    sf_ny.add_upstream(NY, SF)
    fails(
        cli("stream", "upstream", "add", "-path", NY, "-upstream", "/mapr/sanfrancisco/other"), 1, "conflict", "clicks"
    )
    assert [u.path for u in sf_ny.upstream_links(NY)] == [SF]


def test_corrupt_cluster_store(cli, sf_ny, streamrep_home):
    sf_ny.create_stream(SF)
    sf_ny.clusters.close()
    db = streamrep_home / "clusters" / "sanfrancisco.db"
    for extra in (Path(f"{db}-wal"), Path(f"{db}-shm")):
        extra.unlink(missing_ok=True)
    db.write_bytes(b"\x00garbage, not SQLite\xff" * 512)
    fails(cli("stream", "info", "-path", SF), 1, "sanfrancisco")
    fails(cli("produce", "-path", f"{SF}:t", stdin="x\n"), 1, "sanfrancisco")
    # Another cluster is unaffected.
    ok(cli("stream", "create", "-path", NY))

    # A SQLite file that is not a streamrep store is refused too.
    con = sqlite3.connect(db.with_name("newyork.db"))
    con.execute("DROP TABLE store_info")
    con.close()
    fails(cli("stream", "info", "-path", NY), 1, "newyork", "not a streamrep store")


@pytest.mark.parametrize(
    "content",
    [
        "{not json",
        "[]",
        '{"clusters": {"sanfrancisco": "embedded:/x.db"}}',
        '{"clusters": {"sanfrancisco": {}}, "default": "sanfrancisco"}',
        '{"clusters": {}, "default": 5}',
    ],
    ids=["not-json", "not-object", "entry-not-object", "entry-without-url", "bad-default"],
)
def test_corrupt_cluster_registry(cli, streamrep_home, content):
    (streamrep_home / "clusters.json").write_text(content)
    err = fails(cli("stream", "info", "-path", SF), 1, "registry")
    assert str(streamrep_home / "clusters.json") in err
    fails(cli("cluster", "list"), 1, "registry")
