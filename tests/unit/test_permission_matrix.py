"""The permission matrix: every command that reads or writes a stream or a cluster, run through
the real CLI (in-process, identity from ``STREAMREP_USER``) by the owner, by a user holding one
single right, and by a user with none. Each is allowed or refused as the "Permissions" table of
docs/user-guide.md says, and this file checks that the guide's table is this table.

One world (two clusters, streams linked both ways, messages, a consumer group, a gateway list) is
built once and copied for every case, so each command runs against the same fresh state. On Kafka
clusters a representative part of the matrix runs (``KAFKA_CASES``).
"""

from __future__ import annotations

import io
import json
import re
import shutil
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from streamrep.cli.main import run
from streamrep.client import Clusters, Consumer, Producer, StreamAdmin
from streamrep.model.ace import Identity
from streamrep.model.stream import PERMISSIONS
from streamrep.replication.diff import diff_streams
from streamrep.replication.gateway import Gateway
from streamrep.replication.ops import check_outdir, write_ops

USER_GUIDE = Path(__file__).resolve().parents[2] / "docs" / "user-guide.md"
SF = "/mapr/sanfrancisco/activity"
NY = "/mapr/newyork/activity"  # SF's agreed replica
SPARE = "/mapr/newyork/spare"  # a stream with the same ACEs, linked to nothing

# The identities, by the right each holds (on every stream, or on both clusters).
USERS = {
    "owner": "alice",  # created everything: every right
    "produceperm": "pat",
    "consumeperm": "cole",
    "topicperm": "tess",
    "copyperm": "cody",
    "adminperm": "ada",
    "cluster admin": "cal",
    "none": "nobody",
}
ROLES = tuple(USERS)

# command -> (its arguments, the roles allowed). The owner holds every right.
ALL = set(ROLES)
MATRIX: dict[str, tuple[list[str], set[str]]] = {
    "stream create": (["-path", "/mapr/sanfrancisco/new"], ALL),
    "stream edit": (["-path", SF, "-ttl", "100"], {"owner", "adminperm"}),
    "stream delete": (["-path", SPARE], {"owner", "adminperm"}),
    "stream info": (["-path", SF], ALL),
    "stream list": (["-cluster", "sanfrancisco"], ALL),
    "stream topic create": (["-path", SF, "-topic", "views"], {"owner", "topicperm"}),
    "stream topic edit": (["-path", SF, "-topic", "clicks", "-partitions", "3"], {"owner", "topicperm"}),
    "stream topic delete": (["-path", SF, "-topic", "clicks"], {"owner", "topicperm"}),
    "stream topic list": (["-path", SF], {"owner", "produceperm", "consumeperm", "topicperm"}),
    "stream topic info": (["-path", SF, "-topic", "clicks"], {"owner", "produceperm", "consumeperm", "topicperm"}),
    "stream replica add": (["-path", SF, "-replica", SPARE], {"owner"}),
    "stream replica edit": (["-path", SF, "-replica", NY, "-throttle", "true"], {"owner"}),
    "stream replica list": (["-path", SF], {"owner", "adminperm"}),
    "stream replica pause": (["-path", SF, "-replica", NY], {"owner", "adminperm"}),
    "stream replica resume": (["-path", SF, "-replica", NY], {"owner", "adminperm"}),
    "stream replica remove": (["-path", SF, "-replica", NY], {"owner", "adminperm"}),
    "stream replica acknowledge": (["-path", SF, "-replica", NY], {"owner", "adminperm"}),
    "stream replica alert": (["-path", SF, "-replica", NY, "-maxlagms", "60000"], {"owner", "adminperm"}),
    "stream replica lag": (["-path", SF, "-replica", NY], ALL),
    "stream replica autosetup": (["-path", SF, "-replica", "/mapr/newyork/auto", "-engine", "local"], {"owner"}),
    "stream replica failover": (["-path", SF, "-replica", NY, "-timeout", "10"], {"owner", "adminperm"}),
    "stream replica failback": (["-path", SF, "-replica", NY], {"owner", "adminperm"}),
    "stream upstream add": (["-path", SPARE, "-upstream", SF], {"owner", "adminperm"}),
    "stream upstream list": (["-path", NY], {"owner", "adminperm"}),
    "stream upstream remove": (["-path", NY, "-upstream", SF], {"owner", "adminperm"}),
    "copystream": (["-src", SF, "-dst", SPARE, "-engine", "local"], {"owner", "copyperm"}),
    "copystream (new destination)": (["-src", SF, "-dst", "/mapr/newyork/fresh", "-engine", "local"], {"owner"}),
    "diffstreams": (["-src", SF, "-dst", NY, "-outdir", "{home}/diff"], {"owner", "consumeperm", "copyperm"}),
    "diffstreamswithcrc": (["-src", SF, "-dst", NY, "-outdir", "{home}/diff"], {"owner", "consumeperm", "copyperm"}),
    "importstream": (["-src", "{home}/ops/opsForSrc", "-dst", SF], {"owner", "produceperm"}),
    "importstream (one-way replica)": (["-src", "{home}/ops/opsForDst", "-dst", NY], {"owner", "cluster admin"}),
    "produce": (["-path", f"{SF}:clicks"], {"owner", "produceperm"}),
    "consume": (["-path", f"{SF}:clicks", "-fromstart", "true", "-max", "1", "-group", "g2"], {"owner", "consumeperm"}),
    "stream cursor translate": (
        ["-path", SF, "-replica", NY, "-group", "g1", "-commit", "true"],
        {"owner", "consumeperm"},
    ),
    "stream cursor list": (["-path", SF], {"owner", "consumeperm"}),
    "stream cursor sync": (["-path", SF, "-replica", NY], {"owner", "consumeperm"}),
    "cluster gateway set": (
        ["-dstcluster", "newyork", "-gateways", "gw1 gw2", "-cluster", "sanfrancisco"],
        {"owner", "cluster admin"},
    ),
    "cluster gateway get": (["-dstcluster", "newyork", "-cluster", "sanfrancisco"], ALL),
    "cluster gateway list": (["-cluster", "sanfrancisco"], ALL),
    "cluster gateway delete": (["-dstcluster", "newyork", "-cluster", "sanfrancisco"], {"owner", "cluster admin"}),
    "cluster ace get": (["-cluster", "sanfrancisco"], ALL),
    "cluster ace set": (
        ["-cluster", "sanfrancisco", "-adminperm", "u:alice | u:cal | u:ada"],
        {"owner", "cluster admin"},
    ),
    "gateway run": (
        ["-cluster", "newyork", "-id", "gw1", "-engine", "local", "-once", "true"],
        {"owner", "cluster admin"},
    ),
    "gateway start": (["-cluster", "newyork"], {"owner", "cluster admin"}),
    "gateway stop": (["-cluster", "newyork"], {"owner", "cluster admin"}),
    "gateway list": (["-cluster", "newyork"], ALL),
}


def build_world(home: Path, add: Callable[[Clusters, str], object] | None = None, owner: str = "alice") -> None:
    """Build the world in ``home`` as ``owner``, on embedded clusters or on those ``add(clusters, name)``
    registers (the ``add_cluster`` fixture)."""
    alice = StreamAdmin(Clusters(str(home)), Identity(owner))
    for cluster in ("sanfrancisco", "newyork"):
        if add is None:
            alice.add_cluster(cluster)
        else:
            add(alice.clusters, cluster)  # with no cluster ACE yet: the owner may set one
        alice.set_cluster_ace(f"u:{owner} | u:{USERS['cluster admin']}", cluster)
    acls = {perm: f"u:{owner} | u:{USERS[perm]}" for perm in PERMISSIONS}
    alice.create_stream(SF, defaultpartitions=2, ttl=0, **acls)
    alice.create_topic(SF, "clicks")
    with Producer(alice) as producer:
        for i in range(6):
            producer.send(f"{SF}:clicks", f"m{i}".encode())
    consumer = Consumer(f"{SF}:clicks", group="g1", from_start=True, admin=alice)
    consumer.poll(3, timeout=0.2)
    consumer.commit()
    alice.create_stream(NY, copymetafrom=SF)
    alice.create_stream(SPARE, copymetafrom=SF)
    alice.add_replica(SF, NY)
    alice.add_upstream(NY, SF)
    gateway = Gateway(alice, "newyork", "gw1")
    gateway.run_once(whole=True)
    gateway.stop()
    alice.set_gateways("newyork", "gw1", cluster="sanfrancisco")
    # importstream's ops directories (the streams are the same: the rights are checked all the same)
    write_ops(alice, diff_streams(alice, SF, NY), check_outdir(str(home / "ops")))
    alice.clusters.close()


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> Path:
    """The STREAMREP_HOME every case starts from (built once, as alice)."""
    home = tmp_path_factory.mktemp("world")
    build_world(home)
    return home


def fresh_copy(world: Path, tmp_path: Path) -> Path:
    home = tmp_path / "home"
    shutil.copytree(world, home)
    registry = home / "clusters.json"
    registry.write_text(registry.read_text().replace(str(world), str(home)))
    return home


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("command", sorted(MATRIX))
def test_command_allowed_or_refused(world, tmp_path, monkeypatch, command, role):
    check_case(fresh_copy(world, tmp_path), monkeypatch, command, role)


def run_as(home: Path, monkeypatch, command: str, user: str | None) -> tuple[int, str]:
    """Run ``command`` with MATRIX's arguments through the CLI in ``home``, as ``user`` (None: as
    whoever the clusters' settings authenticate); its status and stderr."""
    monkeypatch.setenv("STREAMREP_HOME", str(home))
    if user is None:
        monkeypatch.delenv("STREAMREP_USER", raising=False)
    else:
        monkeypatch.setenv("STREAMREP_USER", user)
    monkeypatch.setenv("STREAMREP_GROUPS", "")
    monkeypatch.delenv("STREAMREP_DEFAULT_CLUSTER", raising=False)
    words = command.split(" (")[0].split()
    out, err = io.StringIO(), io.StringIO()
    args = [arg.replace("{home}", str(home)) for arg in MATRIX[command][0]]  # a place of the case's own
    status = run([*words, *args], out=out, err=err, stdin=io.StringIO("hello\n"))
    return status, err.getvalue()


def assert_ace_refusal(status: int, err: str, command: str, user: str) -> None:
    assert status == 1, f"{command} as {user} was not refused"
    assert re.fullmatch(
        rf"streamrep: error: user {user} (does not have|has none of|would not have|needs) "
        r"\w+perm(,? (or )?\w+perm| and \w+perm)*,? on (stream|cluster) .+\n",
        err,
    ), err


def check_case(home: Path, monkeypatch, command: str, role: str) -> None:
    """Run ``command`` as ``role`` on the world in ``home``: it succeeds or is refused as MATRIX says."""
    status, err = run_as(home, monkeypatch, command, USERS[role])
    if role in MATRIX[command][1]:
        assert status == 0, f"{command} as {role}: {err}"
    else:
        assert_ace_refusal(status, err, command, USERS[role])


# On Kafka clusters, a representative part of the matrix: for each command family, roles allowed
# and refused that between them exercise every right. A Kafka world cannot be copied, so the cases
# that change nothing (refusals and reads) share one world; each allowed change gets its own.
KAFKA_CASES = [
    ("stream edit", "adminperm"),
    ("stream edit", "produceperm"),
    ("stream delete", "topicperm"),
    ("stream info", "none"),
    ("stream topic create", "topicperm"),
    ("stream topic delete", "adminperm"),
    ("stream topic info", "consumeperm"),
    ("stream topic list", "none"),
    ("stream replica add", "copyperm"),
    ("stream replica pause", "topicperm"),
    ("stream replica edit", "adminperm"),
    ("stream replica remove", "copyperm"),
    ("stream replica acknowledge", "cluster admin"),
    ("stream replica list", "none"),
    ("stream replica autosetup", "adminperm"),
    ("stream replica alert", "adminperm"),
    ("stream replica alert", "topicperm"),
    ("stream replica lag", "none"),
    ("stream upstream remove", "topicperm"),
    ("stream upstream list", "none"),
    ("copystream", "owner"),
    ("copystream", "copyperm"),
    ("copystream (new destination)", "copyperm"),
    ("produce", "produceperm"),
    ("produce", "consumeperm"),
    ("consume", "consumeperm"),
    ("consume", "produceperm"),
    ("stream cursor translate", "produceperm"),
    ("diffstreams", "copyperm"),
    ("diffstreams", "topicperm"),
    ("diffstreamswithcrc", "consumeperm"),
    ("importstream", "consumeperm"),
    ("importstream (one-way replica)", "cluster admin"),
    ("importstream (one-way replica)", "produceperm"),
    ("cluster gateway set", "adminperm"),
    ("cluster gateway get", "none"),
    ("cluster gateway delete", "none"),
    ("cluster ace set", "adminperm"),
    ("cluster ace get", "none"),
    ("gateway run", "cluster admin"),
    ("gateway run", "none"),
]
READ_ONLY = {
    "stream info",
    "stream list",
    "stream topic list",
    "stream topic info",
    "stream replica list",
    "stream replica lag",
    "stream upstream list",
    "cluster gateway get",
    "cluster gateway list",
    "cluster ace get",
}


@pytest.fixture(scope="module")
def kafka_world(tmp_path_factory, kafka_broker) -> Path:
    """The world on Kafka clusters, shared by the cases that change nothing. Its namespaces stay
    on the session's broker, which is discarded at the end of the session."""
    home = tmp_path_factory.mktemp("kafka-world")
    prefix = f"t{uuid.uuid4().hex[:10]}"
    build_world(
        home,
        lambda clusters, name: clusters.add(
            name, url=f"kafka://{kafka_broker}", settings={"streamrep.namespace": f"{prefix}-{name}"}
        ),
    )
    return home


@pytest.mark.backends("kafka")
@pytest.mark.parametrize("command, role", KAFKA_CASES)
def test_command_allowed_or_refused_on_kafka(request, add_cluster, tmp_path, monkeypatch, command, role):
    if role not in MATRIX[command][1] or command in READ_ONLY:
        check_case(request.getfixturevalue("kafka_world"), monkeypatch, command, role)
        return
    home = tmp_path / "home"
    build_world(home, add_cluster)  # namespaces of this test's own
    check_case(home, monkeypatch, command, role)


def family(command: str) -> str:
    """``stream``, ``stream topic``, ``cluster gateway``, ``produce``, ...: a command's noun."""
    words = command.split(" (")[0].split()
    two = words[0] == "cluster" or (words[0] == "stream" and words[1] in ("topic", "replica", "upstream", "cursor"))
    return " ".join(words[:2]) if two else words[0]


def test_the_kafka_cases_cover_every_family_and_right():
    """Every command family is on Kafka, and every role is both allowed and refused somewhere
    (the owner is refused none)."""
    assert {family(command) for command, _ in KAFKA_CASES} == {family(command) for command in MATRIX}
    allowed = {role for command, role in KAFKA_CASES if role in MATRIX[command][1]}
    refused = {role for command, role in KAFKA_CASES if role not in MATRIX[command][1]}
    assert allowed == set(ROLES) and refused == set(ROLES) - {"owner"}


def test_a_refused_command_changes_nothing(world, tmp_path, monkeypatch):
    home = fresh_copy(world, tmp_path)
    monkeypatch.setenv("STREAMREP_HOME", str(home))
    monkeypatch.setenv("STREAMREP_USER", USERS["adminperm"])
    monkeypatch.setenv("STREAMREP_GROUPS", "")
    before = StreamAdmin(Clusters(str(home)), Identity("alice"))
    spare_uuid = before.entry(SPARE).uuid
    assert run(["copystream", "-src", SF, "-dst", SPARE, "-engine", "local"], io.StringIO(), io.StringIO()) == 1
    assert (
        run(["copystream", "-src", SF, "-dst", "/mapr/newyork/fresh", "-engine", "local"], io.StringIO(), io.StringIO())
        == 1
    )
    assert before.entry(SPARE).uuid == spare_uuid and before.list_topics(SPARE) == []
    assert [e.path for e in before.list_streams("newyork")] == ["/activity", "/spare"]


def documented_table() -> dict[str, dict[str, bool]]:
    """The "Permissions" table of docs/user-guide.md: command -> role -> allowed."""
    text = USER_GUIDE.read_text(encoding="utf-8")
    section = text.split("\n## Permissions\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    header = next(line for line in section.splitlines() if line.startswith("| command"))
    columns = [c.strip() for c in header.strip("|").split("|")]
    table = {}
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        table[cells[0].strip("`")] = {col: cells[i] == "yes" for i, col in enumerate(columns) if col in ROLES}
    return table


# Commands on this machine's cluster registry only (no stream or cluster data), and help.
REGISTRY_ONLY = {"cluster add", "cluster list", "cluster remove", "cluster default"}


def test_every_command_is_in_the_matrix():
    """A new command cannot slip past the matrix (and so past the user guide's table)."""
    from streamrep.cli.main import COMMANDS

    covered = {name.split(" (")[0] for name in MATRIX}
    assert {" ".join(cmd.words) for cmd in COMMANDS} - REGISTRY_ONLY == covered


def test_the_user_guides_table_is_this_table():
    table = documented_table()
    assert set(table) == set(MATRIX)
    for command, (_, allowed) in MATRIX.items():
        assert table[command] == {role: role in allowed for role in ROLES}, command


def test_the_cluster_creator_administers_it_and_may_hand_it_over(empty_home, monkeypatch):
    monkeypatch.setenv("STREAMREP_USER", "alice")
    assert run(["cluster", "add", "-name", "sanfrancisco"], io.StringIO(), io.StringIO()) == 0
    out = io.StringIO()
    assert run(["cluster", "ace", "get", "-cluster", "sanfrancisco", "-json"], out, io.StringIO()) == 0
    assert json.loads(out.getvalue())["data"] == [
        {"cluster": "sanfrancisco", "adminperm": "u:alice", "creator": "alice"}
    ]
    assert run(["cluster", "ace", "set", "-adminperm", "u:bob"], io.StringIO(), io.StringIO()) == 0
    err = io.StringIO()
    assert run(["cluster", "ace", "set", "-adminperm", "u:alice"], io.StringIO(), err) == 1
    assert err.getvalue() == (
        "streamrep: error: user alice does not have adminperm on cluster sanfrancisco (adminperm is 'u:bob')\n"
    )
    monkeypatch.setenv("STREAMREP_USER", "bob")
    err = io.StringIO()
    assert run(["cluster", "ace", "set", "-adminperm", ""], io.StringIO(), err) == 1
    assert "an empty ACE would lock everyone out" in err.getvalue()


def test_a_cluster_without_an_ace_document_is_open_until_one_is_set(home):
    # ``home`` registers its clusters with Clusters.add, as releases before cluster ACEs did
    bob = StreamAdmin(home, Identity("bob"))
    assert bob.get_cluster_ace("sanfrancisco").ace is None
    bob.set_gateways("newyork", "gw1", cluster="sanfrancisco")
    carol = StreamAdmin(home, Identity("carol"))
    carol.set_cluster_ace("u:carol", "sanfrancisco")
    with pytest.raises(Exception, match="user bob does not have adminperm on cluster sanfrancisco"):
        bob.delete_gateways("newyork", cluster="sanfrancisco")


def test_registering_an_existing_cluster_does_not_make_the_caller_its_admin(home, tmp_path):
    # sanfrancisco was made before cluster ACEs (no ACE document) and holds a stream
    StreamAdmin(home, Identity("alice")).create_stream(SF)
    url = home.get("sanfrancisco").url
    bob = StreamAdmin(Clusters(str(tmp_path / "bobs-home")), Identity("bob"))
    bob.add_cluster("sf", url)  # bob registers the same cluster in his own registry
    assert bob.get_cluster_ace("sf").ace is None
    carol = StreamAdmin(Clusters(str(tmp_path / "carols-home")), Identity("carol"))
    carol.add_cluster("fresh")  # a new, empty cluster is its creator's
    assert carol.get_cluster_ace("fresh").ace.adminperm == "u:carol"
    bob.add_cluster("fresh2", carol.clusters.get("fresh").url)
    assert bob.get_cluster_ace("fresh2").ace.adminperm == "u:carol"  # an existing ACE is kept
    bob.clusters.close()
    carol.clusters.close()
