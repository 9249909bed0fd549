"""Issue 7 (hardening), in-process: every bad input the audit found gets one clear line and a
meaningful exit status (0 success, 1 user error, 2 malformed command line; never 3), on a real
embedded home. The process-level cases (closed pipes, full disk) are in
``tests/integration/test_cli_bad_input.py``."""

from __future__ import annotations

import errno
import io
import json
import os
import sqlite3
from importlib.metadata import version

import pytest

from streamrep.cli.main import run
from streamrep.client import Consumer, Producer, StreamAdmin
from streamrep.client.config import Clusters
from streamrep.errors import AlreadyExists, Unavailable
from streamrep.model.ace import Identity
from streamrep.model.stream import MAX_TTL_SECONDS

SF = "/mapr/sanfrancisco/activity"
TOPIC = f"{SF}:clicks"


class Result:
    def __init__(self, status: int, out: bytes, err: str):
        self.status, self.raw, self.err = status, out, err
        self.out = out.decode("utf-8", "replace")

    @property
    def line(self) -> str:
        """The one error line, checked to be exactly one."""
        assert self.err.count("\n") == 1 and self.err.startswith("streamrep: error: "), self.err
        assert "Traceback" not in self.err
        return self.err[len("streamrep: error: ") : -1]

    def json(self) -> dict:
        return json.loads(self.out)


@pytest.fixture
def cli(home, monkeypatch):
    """Run the CLI in-process as alice; ``stdin`` is bytes; returns a Result."""
    monkeypatch.setenv("STREAMREP_USER", "alice")
    monkeypatch.setenv("STREAMREP_GROUPS", "")

    def call(*argv: str, stdin: bytes = b"", out: io.TextIOBase | None = None) -> Result:
        buffer = io.BytesIO()
        out = out or io.TextIOWrapper(buffer, encoding="utf-8")
        err = io.StringIO()
        status = run(list(argv), out, err, io.TextIOWrapper(io.BytesIO(stdin), encoding="utf-8"))
        if not isinstance(out, FullDisk):
            out.flush()
        return Result(status, buffer.getvalue(), err.getvalue())

    return call


@pytest.fixture
def alice(home) -> StreamAdmin:
    return StreamAdmin(home, Identity("alice"))


@pytest.fixture
def stream(alice) -> StreamAdmin:
    alice.create_stream(SF)
    alice.create_topic(SF, "clicks")
    return alice


def offsets(admin: StreamAdmin, path: str = SF, topic: str = "clicks") -> tuple[int, int]:
    entry = admin.entry(path)
    return admin.store(admin.path(path)).offsets(entry.uuid, topic, 0)


# -- numbers: non-finite and beyond the documented bounds ------------------------------------
@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "1e308", "3601"])
def test_gateway_interval_must_be_finite_and_bounded(cli, stream, value):
    result = cli("gateway", "run", "-cluster", "newyork", "-engine", "local", "-once", "-interval", value)
    assert result.status == 2
    assert "-interval" in result.line and ("finite" in result.line or "at most 3600" in result.line)


@pytest.mark.parametrize("value", ["nan", "inf", "1e308", "86401"])
def test_consume_timeout_must_be_finite_and_bounded(cli, stream, value):
    result = cli("consume", "-path", TOPIC, "-timeout", value)
    assert result.status == 2 and "-timeout" in result.line


@pytest.mark.parametrize("value", ["0", "0.0", "-1", "nan", "-inf"])
def test_gateway_interval_must_be_more_than_0(cli, stream, value):
    result = cli("gateway", "run", "-cluster", "newyork", "-engine", "local", "-once", "-interval", value)
    assert result.status == 2 and result.line.startswith("option -interval "), result.line


@pytest.mark.parametrize("value", ["１", "٣", " 3", "3 ", "\t3", "3\n", "1_0", "+3", ""])
def test_numbers_are_ascii_digits_with_nothing_around_them(cli, stream, value):
    other = "/mapr/sanfrancisco/other"
    result = cli("stream", "create", "-path", other, "-defaultpartitions", value)
    assert result.status == 2 and result.line.startswith("option -defaultpartitions takes a whole number, not ")
    assert cli("stream", "info", "-path", other).status == 1  # nothing was created
    result = cli("consume", "-path", TOPIC, "-timeout", value)
    assert result.status == 2 and result.line.startswith("option -timeout takes a number of seconds, not ")
    if value:  # a number to Python: the line says what is wrong with it
        assert result.line.endswith(" (ASCII digits only, nothing around them)")


def test_every_number_option_of_the_grammar_takes_only_ascii_digits():
    from streamrep.cli.main import COMMANDS
    from streamrep.errors import InvalidArgument

    numbers = [(cmd, opt) for cmd in COMMANDS for opt in cmd.options if opt.kind in (int, float)]
    assert len(numbers) >= 10
    for cmd, opt in numbers:
        for bad in ("１", "٣", " 3", "3 ", "1_0"):
            with pytest.raises(InvalidArgument, match="ASCII digits"):
                opt.convert(bad)
        assert opt.convert("3") == 3, (cmd.words, opt.name)


@pytest.mark.parametrize("perm", ["produceperm", "consumeperm"])
def test_an_empty_produceperm_or_consumeperm_is_refused_on_create_and_edit(cli, stream, perm):
    other = "/mapr/sanfrancisco/other"
    created = cli("stream", "create", "-path", other, f"-{perm}", "")
    assert created.status == 1 and created.line.startswith(f"an empty {perm} would let no one ")
    assert cli("stream", "info", "-path", other).status == 1  # nothing was created
    edited = cli("stream", "edit", "-path", SF, f"-{perm}", "  ")
    assert edited.status == 1 and edited.line.startswith(f"an empty {perm} would let no one ")
    assert getattr(stream.entry(SF).meta, perm) == "u:alice"
    assert cli("stream", "edit", "-path", SF, f"-{perm}", "u:alice | u:bob").status == 0


def test_cluster_add_refuses_an_embedded_file_in_a_missing_folder(cli, home, tmp_path):
    target = tmp_path / "nonexistent" / "dir" / "x.db"
    result = cli("cluster", "add", "-name", "tokyo", "-url", f"embedded:{target}")
    assert result.status == 1 and result.line.startswith(f"cannot add cluster tokyo: folder {target.parent} does not")
    assert not (tmp_path / "nonexistent").exists()
    target.parent.mkdir(parents=True)
    assert cli("cluster", "add", "-name", "tokyo", "-url", f"embedded:{target}").status == 0


def test_whole_numbers_beyond_64_bits_are_refused(cli, stream):
    result = cli("stream", "topic", "create", "-path", SF, "-topic", "t", "-partitions", "9" * 30)
    assert result.status == 2 and "-partitions" in result.line and "9223372036854775807" in result.line


@pytest.mark.parametrize("command", ["create", "edit"])
def test_ttl_beyond_the_bound_is_refused_and_says_the_bound(cli, stream, command):
    path = SF if command == "edit" else "/mapr/sanfrancisco/other"
    result = cli("stream", command, "-path", path, "-ttl", "9223372036854775807")
    assert result.status == 1
    assert str(MAX_TTL_SECONDS) in result.line and "100 years" in result.line
    if command == "edit":
        assert stream.entry(SF).meta.ttl == 604800
    else:
        assert cli("stream", "info", "-path", path).status == 1  # nothing was created
    assert cli("stream", command, "-path", path, "-ttl", str(MAX_TTL_SECONDS)).status == 0


# -- the command line ------------------------------------------------------------------------
def test_an_option_name_is_not_a_value(cli, home):
    result = cli("stream", "create", "-path", "-json")
    assert result.status == 2 and result.line.startswith("option -path needs a value")
    assert StreamAdmin(home, Identity("alice")).list_streams("sanfrancisco") == []
    # A value that merely starts with '-' is still a value (refused by its own rule).
    assert cli("stream", "create", "-path", SF, "-ttl", "-5").line.startswith("invalid ttl -5")


def test_bare_boolean_means_true(cli, stream, home):
    stream.create_stream("/mapr/newyork/activity")
    result = cli("stream", "replica", "add", "-path", SF, "-replica", "/mapr/newyork/activity", "-paused", "-json")
    assert result.status == 0, result.err
    assert stream.replica_links(SF)[0].paused is True
    # Last on the line, and followed by another option.
    with Producer(stream) as producer:
        producer.send(TOPIC, b"x")
    stream.resume_replica(SF, "/mapr/newyork/activity")
    stream.add_upstream("/mapr/newyork/activity", SF)
    for argv in (("-engine", "local", "-once"), ("-once", "-engine", "local")):
        result = cli("gateway", "run", "-cluster", "newyork", *argv, "-json")
        assert result.status == 0, result.err
        assert result.json()["data"][0]["cluster"] == "newyork"
    assert offsets(stream, "/mapr/newyork/activity") == (0, 1)  # -once replicated and returned
    # An explicit false still means false.
    assert cli("stream", "edit", "-path", SF, "-autocreate", "false").status == 0
    assert stream.entry(SF).meta.autocreate is False
    assert cli("stream", "edit", "-path", SF, "-autocreate").status == 0
    assert stream.entry(SF).meta.autocreate is True


def test_json_errors_are_an_envelope_on_stdout_too(cli, stream):
    user_error = cli("stream", "info", "-path", "/mapr/sanfrancisco/nope", "-json")
    usage_error = cli("stream", "info", "-json", "-color", "red")
    for result, status in ((user_error, 1), (usage_error, 2)):
        assert result.status == status
        doc = result.json()
        assert doc["status"] == "ERROR" and doc["errors"] == [{"desc": result.line}]
        assert isinstance(doc["timestamp"], int) and doc["timeofday"]
    assert "does not exist" in user_error.line and "unknown option -color" in usage_error.line
    plain = cli("stream", "info", "-path", "/mapr/sanfrancisco/nope", "-json", "false")
    assert plain.status == 1 and plain.out == "" and "does not exist" in plain.line


def test_help_for_one_command(cli):
    for argv in (("help", "stream", "create"), ("stream", "create", "-help")):
        result = cli(*argv)
        assert result.status == 0 and result.err == ""
        assert result.out.startswith("usage: streamrep stream create -path")
        assert "-path" in result.out and "required" in result.out and "-ttl" in result.out
        assert "seconds a message is kept" in result.out  # the option's help text
    gateway = cli("gateway", "run", "-help").out
    assert "at most 3600" in gateway and "bare -once means true" in gateway
    listing = cli("help", "stream", "replica").out
    assert "stream replica pause" in listing and "cluster add" not in listing
    unknown = cli("help", "frobnicate")
    assert unknown.status == 2 and "unknown command 'frobnicate'" in unknown.line


@pytest.mark.parametrize("flag", ["--version", "-version"])
def test_version(cli, flag):
    result = cli(flag)
    assert result.status == 0 and result.out == f"streamrep {version('streamrep')}\n"


# -- access control expressions: MapR has no quoting, so names with spaces are refused ---------
@pytest.mark.parametrize("ace", ["u:john smith", 'u:"john smith"', "u:alice | u:'john smith'"])
def test_ace_user_names_with_spaces_are_refused(cli, stream, ace):
    result = cli("stream", "edit", "-path", SF, "-produceperm", ace)
    assert result.status == 1 and "cannot contain spaces" in result.line
    assert stream.entry(SF).meta.produceperm == "u:alice"


# -- data: binary values, empty input, stdout that cannot be written -------------------------
def test_plain_consume_prints_binary_values_unchanged(cli, stream):
    values = [b"\xff\xfe\x00binary", "caf\u00e9".encode(), b"plain"]
    with Producer(stream) as producer:
        for value in values:
            producer.send(TOPIC, value)
    result = cli("consume", "-path", TOPIC, "-fromstart", "-timeout", "0")
    assert result.status == 0
    assert result.raw == b"".join(v + b"\n" for v in values)


def test_produce_of_empty_input_reports_nothing_produced(cli, stream):
    result = cli("produce", "-path", TOPIC, "-json", stdin=b"")
    assert result.status == 0
    assert result.json()["data"] == [
        {"topic": TOPIC, "partition": None, "firstoffset": None, "lastoffset": None, "messages": 0}
    ]
    assert offsets(stream) == (0, 0)


class FullDisk(io.TextIOWrapper):
    """stdout on a full disk: every flush fails."""

    def __init__(self):
        super().__init__(io.BytesIO(), encoding="utf-8")

    def flush(self):
        raise OSError(errno.ENOSPC, "No space left on device")


def test_produce_whose_report_cannot_be_written_says_it_committed(cli, stream):
    result = cli("produce", "-path", TOPIC, stdin=b"a\nb\nc\n", out=FullDisk())
    assert result.status == 1
    assert "No space left on device" in result.line and "3 messages are committed" in result.line
    assert offsets(stream) == (0, 3)


def test_consume_to_a_full_disk_commits_nothing_it_could_not_print(cli, stream):
    with Producer(stream) as producer:
        producer.send(TOPIC, b"x")
    result = cli("consume", "-path", TOPIC, "-fromstart", "-group", "g1", "-timeout", "0", out=FullDisk())
    assert result.status == 1 and "No space left on device" in result.line and "not committed" in result.line
    assert Consumer(TOPIC, group="g1", from_start=True, admin=stream).poll(10)[0].value == b"x"


# -- clusters and stores ---------------------------------------------------------------------
def test_corrupt_store_on_produce_names_the_cluster_and_file(cli, stream, home):
    path = home.get("sanfrancisco").url[len("embedded:") :]
    home.close()
    for extra in (f"{path}-wal", f"{path}-shm"):
        if os.path.exists(extra):
            os.remove(extra)
    with open(path, "wb") as f:
        f.write(b"\x00garbage, not SQLite\xff" * 512)
    result = cli("produce", "-path", TOPIC, stdin=b"x\n")
    assert result.status == 1 and "sanfrancisco" in result.line and path in result.line


def test_a_deleted_store_is_an_error_never_a_new_empty_store(cli, stream, home):
    path = home.get("sanfrancisco").url[len("embedded:") :]
    consumer = Consumer(TOPIC, from_start=True, admin=stream)
    for name in (path, f"{path}-wal", f"{path}-shm"):
        if os.path.exists(name):
            os.remove(name)
    with pytest.raises(Unavailable, match="deleted or replaced while in use"):
        consumer.poll(10, timeout=0)
    result = cli("produce", "-path", TOPIC, stdin=b"x\n")
    assert result.status == 1 and "sanfrancisco" in result.line and "missing" in result.line and path in result.line
    assert not os.path.exists(path)


@pytest.mark.parametrize("url", ["http://x/odd.db", "odd.db", "embedded:"])
def test_registry_urls_that_are_notembedded_files(cli, home, tmp_path, monkeypatch, url):
    monkeypatch.chdir(tmp_path)
    registry = json.loads(open(home.registry_path).read())
    registry["clusters"]["odd"] = {"url": url}
    with open(home.registry_path, "w") as f:
        json.dump(registry, f)
    before = sorted(p for p in os.listdir(tmp_path))
    result = cli("stream", "create", "-path", "/mapr/odd/x")
    assert result.status == 1 and home.registry_path in result.line and "cluster odd" in result.line
    assert sorted(os.listdir(tmp_path)) == before  # no stray file


def test_relative_embedded_path_is_stored_absolute(cli, home, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "rel").mkdir()  # an embedded cluster's folder must exist (issue 29)
    result = cli("cluster", "add", "-name", "rel", "-url", "embedded:rel/x.db", "-json")
    assert result.status == 0, result.err
    assert result.json()["data"][0]["url"] == f"embedded:{tmp_path / 'rel' / 'x.db'}"
    monkeypatch.chdir(home.home)
    assert cli("stream", "create", "-path", "/mapr/rel/s").status == 0
    assert (tmp_path / "rel" / "x.db").exists()


def test_removing_the_default_cluster_leaves_no_silent_default(cli, stream):
    assert cli("cluster", "remove", "-name", "sanfrancisco").status == 0
    result = cli("stream", "info", "-path", "activity")
    assert result.status == 1
    assert "no default cluster is set" in result.line and "cluster default -name" in result.line
    assert cli("cluster", "default", "-name", "nowhere").status == 1
    assert cli("cluster", "default", "-name", "newyork").status == 0
    assert "/mapr/newyork/activity does not exist" in cli("stream", "info", "-path", "activity").line


def test_a_store_is_registered_under_one_name_only(cli, home, tmp_path, monkeypatch):
    sf_file = home.get("sanfrancisco").url[len("embedded:") :]
    os.symlink(sf_file, tmp_path / "link.db")
    monkeypatch.chdir(os.path.dirname(sf_file))
    before = open(home.registry_path).read()
    for url in (
        f"embedded:{sf_file}",
        f"embedded:{tmp_path / 'link.db'}",
        "embedded:sanfrancisco.db",
        f"embedded:{os.path.dirname(sf_file)}/../clusters/sanfrancisco.db",
    ):
        result = cli("cluster", "add", "-name", "x", "-url", url)
        assert result.status == 1 and "already registered as cluster sanfrancisco" in result.line, url
    assert open(home.registry_path).read() == before
    # A copy of the file carries the same store identity: refused too.
    home.close()  # checkpoints the WAL, so the file alone is a whole copy
    copy = tmp_path / "copy.db"
    copy.write_bytes(open(sf_file, "rb").read())
    assert (
        "already registered as cluster sanfrancisco"
        in cli("cluster", "add", "-name", "x", "-url", f"embedded:{copy}").line
    )


def test_store_identity_is_written_once_into_the_store(home, tmp_path):
    sf, ny = home.store("sanfrancisco"), home.store("newyork")
    assert sf.store_id() != ny.store_id()
    first = sf.store_id()
    home.close()
    assert Clusters(home.home).store("sanfrancisco").store_id() == first
    # The same store under a new name is recognised by the id inside it, wherever the file is.
    copy = tmp_path / "copy.db"
    copy.write_bytes(open(home.get("sanfrancisco").url[len("embedded:") :], "rb").read())
    with pytest.raises(AlreadyExists, match="already registered as cluster sanfrancisco"):
        Clusters(home.home).add("x", f"embedded:{copy}")
    assert [c.name for c in Clusters(home.home).list()] == ["newyork", "sanfrancisco"]


def test_a_store_made_before_identities_gets_one_once(tmp_path):
    from streamrep.store.embedded import EmbeddedStore

    path = str(tmp_path / "old.db")
    store = EmbeddedStore("old", path)
    store.topics("")
    store.close()
    con = sqlite3.connect(path)
    con.execute("DELETE FROM store_info WHERE key='store_id'")
    con.commit()
    con.close()
    first = EmbeddedStore("old", path).store_id()
    assert first and EmbeddedStore("old", path).store_id() == first


@pytest.mark.parametrize(
    "argv",
    [
        ("copystream", "-src", SF, "-dst", "/mapr/newyork/x", "-engine", "bogus"),
        ("gateway", "run", "-cluster", "newyork", "-engine", "auto", "-once"),
    ],
)
def test_an_engine_outside_its_choices_is_a_usage_error(cli, stream, argv):
    result = cli(*argv)
    assert result.status == 2 and result.line.startswith("option -engine takes ")
    assert cli("stream", "info", "-path", "/mapr/newyork/x").status == 1  # nothing was copied


def test_a_value_with_a_newline_stays_on_the_error_line(cli, home):
    result = cli("cluster", "remove", "-name", "a\nb", "-json")
    assert result.status == 1 and "a\\nb" in result.line  # .line checks it is exactly one line
    assert result.json()["errors"] == [{"desc": result.line}]


# -- issue 21, item 6: bad cases the audit found -----------------------------------------------
@pytest.mark.parametrize("command", ["create", "edit"])
def test_an_empty_adminperm_is_refused_because_it_would_lock_everyone_out(cli, stream, command):
    path = SF if command == "edit" else "/mapr/sanfrancisco/other"
    result = cli("stream", command, "-path", path, "-adminperm", "")
    assert result.status == 1 and "adminperm" in result.line and "lock everyone out" in result.line
    if command == "edit":
        assert stream.entry(SF).meta.adminperm == "u:alice"  # unchanged: alice still administers it
        assert cli("stream", "edit", "-path", SF, "-ttl", "60").status == 0
    else:
        assert cli("stream", "info", "-path", path).status == 1  # nothing was created


@pytest.mark.parametrize("gateway_id", ["a/b", "a\nb", "a\x01b", "a b"])
def test_a_gateway_id_is_a_host_name(cli, stream, gateway_id):
    from streamrep.replication.service import heartbeats

    result = cli("gateway", "run", "-cluster", "newyork", "-id", gateway_id, "-engine", "local", "-once")
    assert result.status in (1, 2) and "gateway name" in result.line
    assert heartbeats(stream.clusters.store("newyork")) == {}  # it never started


def test_a_synchronous_produce_that_waited_out_its_timeout_says_so_in_one_warning(cli, stream, monkeypatch):
    """Issue 21, item 8: no gateway applies the synchronous replica, so the produce waits out
    STREAMREP_SYNC_TIMEOUT, succeeds, and says on stderr which replica fell back."""
    replica = "/mapr/newyork/activity"
    stream.create_stream(replica, copymetafrom=SF)
    stream.add_replica(SF, replica, synchronous=True)
    stream.add_upstream(replica, SF)
    monkeypatch.setenv("STREAMREP_SYNC_TIMEOUT", "0.2")
    result = cli("produce", "-path", TOPIC, stdin=b"a\nb\n")
    assert result.status == 0
    assert result.err.count("\n") == 1 and result.err.startswith("streamrep: warning: synchronous replica ")
    assert replica in result.err and "REPLICA_STATE_SYNC_FELL_BACK_TO_ASYNC" in result.err
    assert offsets(stream) == (0, 2)  # the messages are written
