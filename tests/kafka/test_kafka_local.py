"""scripts/kafka_local.py, the one copy of the local broker logic behind ``./run kafka`` and the test fixture.

The install cases run the real script in a copy of the repository's layout, with a PATH that lacks
Maven or a Maven that cannot reach any repository, so the developer's own jar cache is never touched.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from kafka_local import Broker, KafkaLocalError, jars_missing_reason, launch, start, wait_ready

REPO = Path(__file__).resolve().parents[2]
WAIT_S = 60  # bound of every wait below; none is expected to come near it


@pytest.fixture
def repo_copy(tmp_path) -> Path:
    """The parts of the repository the install and the Kafka tests use, with an empty cache."""
    copy = tmp_path / "repo"
    for part in (
        "scripts/kafka_local.py",
        "scripts/wheel_envs.py",
        "kafka/pom.xml",
        "kafka/4.4.0/pom.xml",
        "kafka/3.9.2/pom.xml",
        "kafka/3.9.2/log4j.properties",
        "kafka/mm2/pom.xml",
        "kafka/log4j2.properties",
        "tests/conftest.py",
        "tests/kafka/test_broker.py",
    ):
        (copy / part).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / part, copy / part)
    return copy


def run_install(repo: Path, path: str, *what: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(repo / "scripts" / "kafka_local.py"), "install", *what],
        env={**os.environ, "PATH": path},
        capture_output=True,
        text=True,
        timeout=WAIT_S * 5,
    )


def offline_maven(tmp_path: Path) -> str:
    """A PATH whose mvn runs offline over an empty local repository: every artifact is out of reach, as
    without Maven Central."""
    if shutil.which("mvn") is None:
        pytest.skip("mvn is not on PATH")
    offline = tmp_path / "bin"
    offline.mkdir()
    (offline / "mvn").write_text(f'#!/bin/sh\nexec {shutil.which("mvn")} --offline "$@"\n')
    (offline / "mvn").chmod(0o755)
    return f"{offline}:{os.environ['PATH']}"


def skip_reasons(repo: Path) -> str:
    """Run the copied broker tests with pytest; return its report of skips."""
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-rs",
            "-p",
            "no:cacheprovider",
            "-c",
            os.devnull,
            "--rootdir",
            str(repo),
            str(repo / "tests" / "kafka" / "test_broker.py"),
        ],
        capture_output=True,
        text=True,
        timeout=WAIT_S * 2,
        cwd=repo,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def test_without_maven_the_install_says_why_in_one_line_and_kafka_tests_skip_with_that_reason(repo_copy, tmp_path):
    no_maven = tmp_path / "bin"
    no_maven.mkdir()
    result = run_install(repo_copy, str(no_maven))

    assert result.returncode == 0  # the rest of the suite still runs
    assert result.stderr.splitlines() == [  # one line for every release
        "run: Kafka jars not installed: mvn (Apache Maven) is not on PATH; Kafka tests will be skipped"
    ]
    assert not list((repo_copy / ".cache" / "kafka").glob("*/libs"))
    for release in ("4.3.1", "4.4.0", "3.9.2"):  # each release's tests skip with the reason
        assert (
            "mvn (Apache Maven) is not on PATH"
            in (repo_copy / ".cache" / "kafka" / release / "unavailable").read_text()
        )
    report = skip_reasons(repo_copy)
    assert "5 skipped" in report and "mvn (Apache Maven) is not on PATH" in report


def test_when_maven_cannot_reach_a_repository_the_install_says_so_and_keeps_no_jars(repo_copy, tmp_path):
    result = run_install(repo_copy, offline_maven(tmp_path))

    assert result.returncode == 0
    assert result.stderr.splitlines() == [
        "run: Kafka jars not installed: Maven could not resolve kafka/pom.xml (is Maven Central reachable?); "
        "see .cache/kafka/4.3.1/mvn.log; Kafka tests will be skipped",
        "run: Kafka 4.4.0 jars not installed: Maven could not resolve kafka/4.4.0/pom.xml (is Maven Central "
        "reachable?); see .cache/kafka/4.4.0/mvn.log; the Kafka 4.4.0 release tests will be skipped",
        "run: Kafka 3.9.2 jars not installed: Maven could not resolve kafka/3.9.2/pom.xml (is Maven Central "
        "reachable?); see .cache/kafka/3.9.2/mvn.log; the Kafka 3.9.2 release tests will be skipped",
    ]
    assert "[ERROR]" in (repo_copy / ".cache" / "kafka" / "4.3.1" / "mvn.log").read_text()  # Maven's own words
    assert not list((repo_copy / ".cache" / "kafka").glob("*/libs"))
    assert "Maven could not resolve kafka/pom.xml" in skip_reasons(repo_copy)


def test_the_install_resolves_each_release_into_its_own_folder_and_again_only_when_its_pom_changed(repo_copy, tmp_path):
    # A stand-in mvn (on PATH before the real one) that records which pom it resolved and writes one jar.
    calls = tmp_path / "calls"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "mvn").write_text(
        "#!/bin/sh\n"
        'for a in "$@"; do case "$a" in -DoutputDirectory=*) out="${a#-DoutputDirectory=}";; esac; done\n'
        'pom=$(echo "$@" | sed "s/.* -f \\([^ ]*\\) .*/\\1/")\n'
        f'echo "$pom" >> {calls}\n'
        'mkdir -p "$out" && touch "$out/kafka_2.13-0.jar"\n'
    )
    (bin_dir / "mvn").chmod(0o755)
    path = f"{bin_dir}:{os.environ['PATH']}"
    kafka = repo_copy / "kafka"

    assert run_install(repo_copy, path).stderr == ""
    assert sorted(calls.read_text().split()) == sorted(
        str(pom) for pom in (kafka / "pom.xml", kafka / "4.4.0" / "pom.xml", kafka / "3.9.2" / "pom.xml")
    )
    for release in ("4.3.1", "4.4.0", "3.9.2"):
        assert (repo_copy / ".cache" / "kafka" / release / "libs" / "kafka_2.13-0.jar").is_file()

    calls.unlink()
    assert run_install(repo_copy, path).stderr == ""
    assert not calls.exists()  # nothing missing, no pom changed: no Maven

    (kafka / "4.4.0" / "pom.xml").write_text((kafka / "4.4.0" / "pom.xml").read_text() + "<!-- changed -->\n")
    assert run_install(repo_copy, path).stderr == ""
    assert calls.read_text().split() == [str(kafka / "4.4.0" / "pom.xml")]


def test_mirrormaker_jars_have_their_own_install_that_fails_in_one_line(repo_copy, tmp_path):
    result = run_install(repo_copy, offline_maven(tmp_path), "mm2")

    assert result.returncode == 1  # the benchmark step that asked for them stops
    assert result.stderr.splitlines() == [
        "run: MirrorMaker 2 jars not installed: Maven could not resolve kafka/mm2/pom.xml (is Maven Central "
        "reachable?); see .cache/mm2/mvn.log; the benchmark's MirrorMaker 2 case will not run"
    ]
    assert not (repo_copy / ".cache" / "mm2" / "libs").exists()
    assert not (repo_copy / ".cache" / "kafka").exists()  # the broker's jars are not part of it


@pytest.fixture
def broker_home(tmp_path) -> Path:
    missing = jars_missing_reason()
    if missing:
        pytest.skip(missing)
    return tmp_path / "broker"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.kafka
def test_a_port_taken_by_another_process_is_refused_before_anything_starts(broker_home):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(KafkaLocalError, match=f"^kafka busy: port {port} is already in use by another process$"):
            start(Broker("busy", port, _free_port(), broker_home))
    assert not broker_home.exists()


@pytest.mark.kafka
def test_a_broker_that_exits_while_starting_is_reported_with_its_log_folder(broker_home):
    # Storage formatted for node 7, a broker configured as node 1: Kafka refuses to start.
    (broker_home / "data").mkdir(parents=True)
    (broker_home / "data" / "meta.properties").write_text(
        "version=1\nnode.id=7\ncluster.id=RQIvZEX9QRe3PhQABhyeAw\ndirectory.id=movhBjAFhieWJoHHEHIX2w\n"
    )
    broker = Broker("broken", _free_port(), _free_port(), broker_home)
    process = launch(broker)
    with pytest.raises(KafkaLocalError) as failure:
        wait_ready(broker, process, timeout=WAIT_S)
    message = str(failure.value)
    assert message.startswith("kafka broken: the broker exited while starting (status 1): ")
    assert "Stored node id 7 doesn't match previous node id 1" in message
    assert message.endswith(f"see {broker_home / 'logs'}/") and "\n" not in message
    assert process.poll() is not None and not broker.pid_file.exists()


@pytest.mark.kafka
def test_a_test_broker_dies_with_the_process_that_started_it(broker_home):
    # A session killed with SIGKILL runs no finalizer: the kernel must take its broker down.
    starter = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; sys.path.insert(0, sys.argv[1]); import kafka_local as k; from pathlib import Path;"
            "b = k.Broker('orphan', int(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4]));"
            "k.start(b, die_with_parent=True); print(k.running_pid(b), flush=True); time.sleep(600)",
            str(REPO / "scripts"),
            str(_free_port()),
            str(_free_port()),
            str(broker_home),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        broker_pid = int(starter.stdout.readline())
        assert Path(f"/proc/{broker_pid}").exists()
    finally:
        starter.kill()
        starter.wait()
    deadline = time.monotonic() + WAIT_S
    while Path(f"/proc/{broker_pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    if Path(f"/proc/{broker_pid}").exists():
        os.kill(broker_pid, signal.SIGKILL)
        pytest.fail(f"broker {broker_pid} outlived the process that started it")
