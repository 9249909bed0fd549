"""Issue 7 (hardening), process level: the real ``streamrep`` executable with closed pipes,
closed standard streams, a full disk, a corrupt store and a store deleted under a running
consumer. Each ends with one line on stderr or a clean exit, never a traceback or exit 3,
and loses nothing."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from replication_helpers import STREAMREP_EXE

SF = "/mapr/sanfrancisco/activity"
TOPIC = f"{SF}:clicks"


@pytest.fixture
def shell(child_env):
    """``shell(script, stdin)`` runs ``script`` under bash with ``$S`` = the streamrep executable,
    in the test's STREAMREP_HOME as alice; returns ``(status, stdout bytes, stderr text)``."""

    def call(script: str, stdin: bytes = b"") -> tuple[int, bytes, str]:
        proc = subprocess.run(
            ["bash", "-c", script],
            input=stdin,
            capture_output=True,
            timeout=120,
            env={**child_env, "S": str(STREAMREP_EXE)},
        )
        return proc.returncode, proc.stdout, proc.stderr.decode("utf-8", "replace")

    return call


def one_line(err: str, *fragments: str) -> None:
    assert "Traceback" not in err and "internal error" not in err, err
    assert err.startswith("streamrep: error: ") and err.count("\n") == 1, err
    for fragment in fragments:
        assert fragment in err, (fragment, err)


@pytest.fixture
def topic(api):
    """``SF`` with topic clicks (1 partition) holding 3 messages."""
    api.clusters.add("sanfrancisco")
    api.create_stream(SF)
    api.create_topic(SF, "clicks")
    from streamrep.client import Producer

    with Producer(api) as producer:
        for value in (b"one", b"two", b"three"):
            producer.send(TOPIC, value)
    api.clusters.close()
    return api


def end_offset(api) -> int:
    entry = api.entry(SF)
    try:
        return api.store(api.path(SF)).offsets(entry.uuid, "clicks", 0)[1]
    finally:
        api.clusters.close()


def test_consume_into_a_pipe_closed_early(streamrep_home, topic, shell):
    status_file = streamrep_home / "status"
    code, out, err = shell(
        f'"$S" consume -path {TOPIC} -fromstart -group g -timeout 0 | head -1; '
        f'echo "${{PIPESTATUS[0]}}" > {status_file}'
    )
    assert out == b"one\n"
    assert status_file.read_text().strip() == "0" and err == ""


@pytest.mark.parametrize("redirect", ["> /dev/full", ">&-"], ids=["full-disk", "closed"])
def test_produce_whose_report_cannot_be_written_has_committed(streamrep_home, topic, shell, redirect):
    code, out, err = shell(f'"$S" produce -path {TOPIC} {redirect}', stdin=b"a\nb\n")
    assert code == 1
    one_line(err, "cannot write the result to stdout", "2 messages are committed")
    assert end_offset(topic) == 5


@pytest.mark.parametrize("redirect", ["> /dev/full", ">&-"], ids=["full-disk", "closed"])
def test_reading_commands_with_stdout_unwritable(streamrep_home, topic, shell, redirect):
    code, _, err = shell(f'"$S" stream info -path {SF} {redirect}')
    assert code == 1
    one_line(err, "cannot write the result to stdout")
    code, _, err = shell(f'"$S" consume -path {TOPIC} -fromstart -group g -timeout 0 {redirect}')
    assert code == 1
    one_line(err, "cannot write messages to stdout", "not committed for group g")
    # The group's cursor did not move: every message is still there for it.
    code, out, err = shell(f'"$S" consume -path {TOPIC} -fromstart -group g -timeout 0')
    assert (code, out, err) == (0, b"one\ntwo\nthree\n", "")


def test_produce_with_stdin_closed_or_empty(streamrep_home, topic, shell):
    code, _, err = shell(f'"$S" produce -path {TOPIC} <&-')
    assert code == 1
    one_line(err, "cannot read stdin", "nothing was produced")
    code, out, err = shell(f'"$S" produce -path {TOPIC} -json < /dev/null')
    assert code == 0 and err == "" and b'"messages": 0' in out
    assert end_offset(topic) == 3


def test_corrupt_store_on_produce(streamrep_home, topic, shell):
    db = streamrep_home / "clusters" / "sanfrancisco.db"
    for extra in (Path(f"{db}-wal"), Path(f"{db}-shm")):
        extra.unlink(missing_ok=True)
    db.write_bytes(b"\x00garbage, not SQLite\xff" * 512)
    code, _, err = shell(f'"$S" produce -path {TOPIC}', stdin=b"x\n")
    assert code == 1
    one_line(err, "cluster sanfrancisco", str(db))


def test_store_deleted_while_a_consumer_runs(streamrep_home, topic, shell, child_env):
    """The consumer reads the 3 messages, the file is deleted, then it must stop with one line
    (not wait on a file no one can write, and not create an empty store in its place)."""
    db = streamrep_home / "clusters" / "sanfrancisco.db"
    consumer = subprocess.Popen(
        [str(STREAMREP_EXE), "consume", "-path", TOPIC, "-fromstart", "-timeout", "60"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=child_env,
    )
    try:
        lines = [consumer.stdout.readline() for _ in range(3)]  # it is running, the store open
        assert lines == [b"one\n", b"two\n", b"three\n"]
        for name in (db, Path(f"{db}-wal"), Path(f"{db}-shm")):
            name.unlink(missing_ok=True)
        _, err = consumer.communicate(timeout=60)
    finally:
        consumer.kill()
        consumer.wait()
    assert consumer.returncode == 1
    one_line(err.decode(), "cluster sanfrancisco", "deleted or replaced while in use")
    code, _, err = shell(f'"$S" produce -path {TOPIC}', stdin=b"x\n")
    assert code == 1
    one_line(err, "cluster sanfrancisco", "is missing")
    assert not db.exists()


def test_usage_errors_and_json_envelope_from_the_executable(streamrep_home, topic, shell):
    code, out, err = shell('"$S" stream create -path -json')
    assert code == 2
    one_line(err, "option -path needs a value")
    assert b'"status": "ERROR"' in out
    code, out, err = shell('"$S" --version')
    assert code == 0 and out.startswith(b"streamrep ") and err == ""


def test_no_internal_error_without_any_standard_stream(streamrep_home, topic, shell):
    code, _, err = shell(f'"$S" stream info -path {SF} <&- >&- 2>&-; echo $? >&2')
    assert err.strip() == "1"


def test_a_truncated_store_is_never_recreated_and_gives_no_one_its_administration(streamrep_home, topic, shell):
    """Audit hole (issue 18): a store file truncated to zero bytes was silently re-created, empty
    and with no cluster ACE, by produce, consume or replica list; a user with no rights then ran
    ``cluster ace set`` and became the cluster's administrator."""
    db = streamrep_home / "clusters" / "sanfrancisco.db"
    for extra in (Path(f"{db}-wal"), Path(f"{db}-shm")):
        extra.unlink(missing_ok=True)
    db.write_bytes(b"")
    commands = {
        "produce": (f'"$S" produce -path {TOPIC}', b"x\n"),
        "consume": (f'"$S" consume -path {TOPIC} -fromstart -timeout 0', b""),
        "replica list": (f'"$S" stream replica list -path {SF}', b""),
        "cluster ace set": (
            'STREAMREP_USER=mallory "$S" cluster ace set -cluster sanfrancisco -adminperm u:mallory',
            b"",
        ),
    }
    for name, (script, stdin) in commands.items():
        code, _, err = shell(script, stdin=stdin)
        assert code == 1, (name, err)
        one_line(err, "cluster sanfrancisco", str(db), "the file is empty, not the registered store")
        assert db.stat().st_size == 0, f"{name} wrote into the truncated store"


@pytest.mark.parametrize(
    "options, fragment",
    [
        ("-networkcompression foo", "invalid networkcompression 'foo'"),
        ("-networkcompression lzf", "Kafka has no LZF codec"),
        ("-networkencryption maybe", "option -networkencryption takes true/false"),
        ("-throttle 2", "option -throttle takes true/false"),
        ("-maxbytespersec nan", "invalid maxbytespersec 'nan'"),
        ("-maxbytespersec -5", "invalid maxbytespersec '-5'"),
        ("-maxbytespersec 1e30", "invalid maxbytespersec '1e30'"),
        ("-maxbytespersec fast", "invalid maxbytespersec 'fast'"),
    ],
)
def test_bad_network_options_from_the_executable(streamrep_home, topic, shell, options, fragment):
    existing, new = "/mapr/sanfrancisco/copy", "/mapr/sanfrancisco/new"
    assert shell(f'"$S" stream create -path {existing}')[0] == 0
    for command in (
        f"stream replica add -path {SF} -replica {existing}",
        f"stream replica autosetup -path {SF} -replica {new}",
    ):
        code, _, err = shell(f'"$S" {command} {options}')
        assert code in (1, 2)
        one_line(err, fragment)
    code, out, _ = shell(f'"$S" stream replica list -path {SF} -json')
    assert code == 0 and b'"total": 0' in out  # nothing registered
    assert shell(f'"$S" stream info -path {new}')[0] == 1  # and nothing created


def test_produce_into_a_one_way_replica_is_refused_in_one_line_and_writes_nothing(streamrep_home, topic, shell):
    """Issue 29 B4: alice holds produceperm on the replica, but only its gateways write a one-way
    replica; once it replicates back to its source (multi-master) its users write it again."""
    ny = "/mapr/newyork/activity"
    api = topic
    api.clusters.add("newyork")
    api.create_stream(ny)
    api.create_topic(ny, "clicks")
    api.add_replica(SF, ny)
    api.add_upstream(ny, SF)
    api.clusters.close()
    code, out, err = shell(f'"$S" produce -path {ny}:clicks', stdin=b"local\n")
    assert code == 1 and out == b""
    one_line(err, f"stream {ny} is a one-way replica of {SF}: only its gateways write it")
    entry = api.entry(ny)
    assert api.store(api.path(ny)).offsets(entry.uuid, "clicks", 0) == (0, 0)
    api.add_replica(ny, SF)
    api.add_upstream(SF, ny)
    api.clusters.close()
    code, out, err = shell(f'"$S" produce -path {ny}:clicks', stdin=b"local\n")
    assert code == 0, err
