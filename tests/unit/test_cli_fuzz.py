"""Fuzzing the command line (issue 7, item 8): thousands of command lines drawn from the CLI
grammar (the ``COMMANDS`` table: real command words, known and unknown options, valid and
invalid values, option names as values, odd numbers and paths, duplicated options, bare
booleans), each run in-process against a real embedded home, as three users.

Whatever the line, ``run`` must return 0, 1 or 2 (never 3, never an exception), a failure must
print exactly one line on stderr, and a command refused for a missing permission must leave the
stream it was refused on exactly as it was (catalog entry and every topic's offsets). After a
success, every stored stream's settings still pass validation (no bad value got stored) and the
default cluster has not silently changed.

Left out, to keep each example fast: lines that would start Spark (``-engine spark``, ``gateway
run`` without ``-engine local -once``) and consumers that would wait (a ``-timeout`` above 0.05 s;
``consume`` without one gets ``-timeout 0``). Each example starts from a fresh copy of the home.
``STREAMREP_FUZZ_EXAMPLES`` and ``STREAMREP_FUZZ_RANDOM=1`` widen a local bug hunt; CI runs the
fixed, derandomized set.
"""

from __future__ import annotations

import io
import json
import math
import os
import re
import shutil
import traceback

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamrep.cli.main import COMMANDS, run
from streamrep.client import Clusters, Producer, StreamAdmin
from streamrep.errors import InvalidArgument
from streamrep.model.ace import Identity
from streamrep.model.catalog import CLUSTER_KIND, GATEWAYS_KIND, STREAM_KIND, StreamEntry

SF, NY = "/mapr/sanfrancisco/activity", "/mapr/newyork/activity"
BOBS = "/mapr/sanfrancisco/bobs"
PUBLIC = "/mapr/newyork/public"
USERS = ("alice", "bob", "eve")  # eve owns nothing
MAX_EXAMPLES = int(os.environ.get("STREAMREP_FUZZ_EXAMPLES", "1000"))

STREAM_PATHS = [
    SF,
    NY,
    BOBS,
    PUBLIC,
    "activity",
    "/activity",
    "mapr/sanfrancisco/activity",
    "/mapr/atlantis/x",
    "/mapr/sanfrancisco/new",
    "/mapr/newyork/new2",
    "/mapr/sanfrancisco/a/b",
    "/mapr/sanfrancisco/../x",
    "/mapr//x",
    "/mapr/sanfrancisco",
    "",
    " ",
    "/mapr/sanfrancisco/with space",
    f"{SF}:clicks",
    "/mapr/Bad Cluster/x",
    "/" + "x" * 1100,
]
TOPIC_PATHS = [
    f"{SF}:clicks",
    f"{SF}:orders",
    f"{NY}:clicks",
    f"{BOBS}:clicks",
    f"{PUBLIC}:t",
    "activity:clicks",
    f"{SF}:nope",
    f"{SF}:",
    f"{SF}:a:b",
    SF,
    ":clicks",
    "/mapr/atlantis/x:t",
    f"{SF}:bad topic",
]
CLUSTERS = ["sanfrancisco", "newyork", "atlantis", "bad name", "", "-x", "x" * 200, "new1"]
NUMBERS = [
    "0",
    "1",
    "2",
    "3",
    "-1",
    "nan",
    "inf",
    "-inf",
    "1e308",
    "9223372036854775807",
    "9223372036854775808",
    "99999999999999999999999",
    "0x10",
    "1.5",
    "",
    "abc",
    " 2 ",
    "1_0",
    "4097",
    "-0",
]
SECONDS = ["0", "0.01", "-1", "nan", "inf", "-inf", "1e308", "86401", "3601", "abc", "", "0x1"]
BOOLS = ["true", "false", "yes", "no", "1", "0", "on", "off", "TRUE", "maybe", ""]
ACES = [
    "p",
    "u:alice",
    "u:bob",
    "u:alice | g:eng",
    "g:eng & !u:bob",
    "u:john smith",
    'u:"john smith"',
    "(",
    ")",
    "!!!",
    "u:",
    "",
    "u:alice |",
    "x:y",
    "(u:a" * 60,
    "u:alice\n",
]
ODD = ["-json", "-path", "-help", "-", "--", "ü", "a\nb", "' OR 1=1", "%s", "{}", "\t", "x" * 500]
BY_NAME = {
    "path": STREAM_PATHS,
    "replica": STREAM_PATHS,
    "upstream": STREAM_PATHS,
    "src": STREAM_PATHS,
    "dst": STREAM_PATHS,
    "copymetafrom": STREAM_PATHS,
    "topic": ["clicks", "orders", "t", "new", "bad topic", "", "x" * 300, "..", "a:b"],
    "name": CLUSTERS,
    "cluster": CLUSTERS,
    "dstcluster": CLUSTERS,
    "gateways": ["gw1", "gw1 gw2", "gw1 gw1", "", "bad/name", "gw1,gw2"],
    "keysep": ["=", "", ":", "-path", "\t"],
    "group": ["g1", "g2", "", " ", "x" * 300],
    "engine": ["local", "auto", "bogus", "LOCAL", ""],
    "id": ["gw1", "", "x y"],
    "url": [
        "embedded:{work}/clusters/sanfrancisco.db",
        "embedded:{tmp}/new.db",
        "embedded:rel.db",
        "kafka://h",
        "http://x/y.db",
        "embedded:",
        "/abs/x.db",
        "embedded:{tmp}",
        "embedded:{work}/clusters.json",
    ],
    **{perm: ACES for perm in ("produceperm", "consumeperm", "topicperm", "copyperm", "adminperm")},
}
STDINS = [b"", b"a\nb\n", b"k=v\nk2=v2\n", b"\xff\xfe\x00\n", b"no separator\n"]
ALL_WORDS = sorted({w for cmd in COMMANDS for w in cmd.words} | {"help", "bogus"})


def values_for(name: str, kind: type, produce_or_consume: bool) -> st.SearchStrategy[str]:
    if kind is bool:
        known = BOOLS
    elif kind is int:
        known = NUMBERS
    elif kind is float:
        known = SECONDS
    elif name == "path" and produce_or_consume:
        known = TOPIC_PATHS
    else:
        known = BY_NAME.get(name, ["x"])
    odd = st.one_of(st.sampled_from(ODD), st.text(max_size=12).filter(lambda t: "\0" not in t))
    # Mostly values a user would type, so lines get past the parser and reach the library.
    return st.integers(0, 9).flatmap(lambda roll: odd if roll == 0 else st.sampled_from(known))


@st.composite
def command_lines(draw) -> tuple[list[str], bytes, str]:
    """``(argv, stdin, user)``: a command of the grammar (sometimes made-up words) and options."""
    if draw(st.integers(0, 19)) == 0:
        words = draw(st.lists(st.sampled_from(ALL_WORDS), min_size=0, max_size=3))
        options = {}
    else:
        cmd = draw(st.sampled_from(COMMANDS))
        words = list(cmd.words)
        options = {opt.name: opt for opt in cmd.options}
    data_command = words in (["produce"], ["consume"])
    tokens: list[str] = []
    for opt in options.values():  # required options usually present, others sometimes
        if draw(st.integers(0, 19)) < (19 if opt.required else 7):
            tokens += [f"-{opt.name}", draw(values_for(opt.name, opt.kind, data_command))]
    extras = draw(st.lists(st.sampled_from(["unknown", "dup", "bare", "json", "help", "stray", "case"]), max_size=2))
    if draw(st.booleans()):
        extras = [e for e in extras if e in ("json", "case", "bare")]  # half the lines: well-formed ones
    for extra in extras:
        if extra == "unknown":
            tokens += [draw(st.sampled_from(["-color", "-x", "--path", "-", "-JSONX"])), "red"]
        elif extra == "dup" and options:
            opt = draw(st.sampled_from(list(options.values())))
            tokens += [f"-{opt.name}", draw(values_for(opt.name, opt.kind, data_command))]
        elif extra == "bare" and options:
            tokens.append(f"-{draw(st.sampled_from(list(options)))}")  # bool: true; others: a missing value
        elif extra == "json":
            tokens += draw(st.sampled_from([["-json"], ["-json", "false"], ["-json", "true"], ["-JSON"]]))
        elif extra == "help" and draw(st.integers(0, 4)) == 0:
            tokens.append("-help")
        elif extra == "stray":
            tokens.append(draw(st.sampled_from(["extra", "true", "1"])))
        elif extra == "case" and options:
            opt = draw(st.sampled_from(list(options.values())))
            tokens += [f"-{opt.name.upper()}", draw(values_for(opt.name, opt.kind, data_command))]
    shuffled = draw(st.permutations(range(0, len(tokens), 2))) if draw(st.booleans()) else None
    if shuffled is not None:  # options in another order (pairs kept together)
        tokens = [t for i in shuffled for t in tokens[i : i + 2]]
    stdin = draw(st.sampled_from(STDINS))
    user = draw(st.sampled_from(USERS))
    return words + tokens, stdin, user


def value_after(argv: list[str], name: str) -> str | None:
    lowered = [t.lower() for t in argv]
    flag = f"-{name}"
    if flag in lowered and lowered.index(flag) + 1 < len(argv):
        return argv[lowered.index(flag) + 1]
    return "" if flag in lowered else None


def tamed(argv: list[str]) -> list[str] | None:
    """The line made fast, or None to skip it: no Spark, nothing that runs until stopped."""
    words = [t.lower() for t in argv if not t.startswith("-")][:2]
    lowered = [t.lower() for t in argv]
    engine = value_after(argv, "engine")
    if engine is not None and engine.strip().lower() == "spark":
        return None
    if words[:2] == ["gateway", "run"]:
        once = value_after(argv, "once")
        if (
            engine is None
            or engine.strip().lower() != "local"
            or once is None
            or once.lower() in ("false", "no", "0", "off")
        ):
            return None
    if words[:1] == ["consume"]:
        if "-timeout" not in lowered:
            return argv + ["-timeout", "0"]
        try:
            seconds = float(value_after(argv, "timeout") or "x")
        except ValueError:
            return argv
        if math.isfinite(seconds) and seconds > 0.05:
            return None
    return argv


@pytest.fixture(scope="module")
def fuzz_home(tmp_path_factory):
    """A pristine home (built once) and the folder each example runs in, reset from it."""
    root = tmp_path_factory.mktemp("fuzz")
    work, pristine, scratch = root / "home", root / "pristine", root / "scratch"
    scratch.mkdir()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("STREAMREP_HOME", str(work))
        mp.setenv("STREAMREP_GROUPS", "")
        for name in ("STREAMREP_DEFAULT_CLUSTER", "STREAMREP_DEBUG", "STREAMREP_SYNC"):
            mp.delenv(name, raising=False)
        mp.chdir(scratch)  # relative embedded: urls land here, never in the repository
        clusters = Clusters()
        alice = StreamAdmin(clusters, Identity("alice"))
        for name in ("sanfrancisco", "newyork"):  # as 'cluster add' does: alice administers both
            alice.add_cluster(name)
        bob = StreamAdmin(clusters, Identity("bob"))
        alice.create_stream(SF, defaultpartitions=2)
        alice.create_topic(SF, "clicks")
        alice.create_topic(SF, "orders")
        alice.create_stream(NY)
        alice.add_replica(SF, NY)
        alice.add_upstream(NY, SF)
        alice.set_gateways("newyork", "gw1 gw2")
        alice.create_stream(PUBLIC, produceperm="p", consumeperm="p")
        alice.create_topic(PUBLIC, "t")
        bob.create_stream(BOBS)
        bob.create_topic(BOBS, "clicks")
        for admin, topic in ((alice, f"{SF}:clicks"), (bob, f"{BOBS}:clicks")):
            with Producer(admin) as producer:
                for i in range(5):
                    producer.send(topic, b"v%d" % i, key=b"k%d" % i)
        clusters.close()
        shutil.copytree(work, pristine)
        yield work, pristine, scratch


def world(work) -> dict:
    """Everything a refused command must leave as it was: in every cluster, the stream entries,
    gateway lists and cluster ACE, and every topic's (start, end) offsets."""
    clusters = Clusters(str(work))
    state = {}
    try:
        for info in clusters.list():
            store = clusters.store(info.name)
            streams = store.catalog_list(STREAM_KIND)
            offsets = {
                doc["uuid"]: {
                    t: [store.offsets(doc["uuid"], t, p) for p in range(n)]
                    for t, n in store.topics(doc["uuid"]).items()
                }
                for doc in streams.values()
            }
            state[info.name] = (streams, store.catalog_list(GATEWAYS_KIND), store.catalog_list(CLUSTER_KIND), offsets)
    finally:
        clusters.close()
    return state


def default_cluster(work) -> str | None:
    return json.loads((work / "clusters.json").read_text()).get("default")


def invalid_metadata(work) -> list[str]:
    """Streams whose stored settings the current rules would refuse: bad input that got stored."""
    clusters = Clusters(str(work))
    bad = []
    try:
        for info in clusters.list():
            for doc in clusters.store(info.name).catalog_list(STREAM_KIND).values():
                meta = StreamEntry.from_dict(doc).meta
                try:
                    if meta.validated() != meta:
                        bad.append(f"{info.name}:{doc['path']} {meta}")
                except InvalidArgument as error:
                    bad.append(f"{info.name}:{doc['path']} {error}")
    finally:
        clusters.close()
    return bad


def test_no_command_line_breaks_the_cli(fuzz_home):
    work, pristine, scratch = fuzz_home
    seen = {"ran": 0, "ok": 0, "user": 0, "usage": 0, "refused": 0, "refused on a cluster": 0}
    before_world = world(work)  # every example starts from this
    assert sum(len(streams) for streams, *_ in before_world.values()) == 4

    @settings(
        max_examples=MAX_EXAMPLES,
        derandomize=not os.environ.get("STREAMREP_FUZZ_RANDOM"),
        database=None,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )
    @given(command_lines())
    def check(line):
        argv, stdin_bytes, user = line
        argv = tamed(argv)
        if argv is None:
            return
        argv = [t.replace("{work}", str(work)).replace("{tmp}", str(scratch)) for t in argv]
        shutil.rmtree(work)
        shutil.copytree(pristine, work)
        out = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="surrogateescape")
        err = io.StringIO()
        stdin = io.TextIOWrapper(io.BytesIO(stdin_bytes), encoding="utf-8")
        os.environ["STREAMREP_USER"] = user
        try:
            status = run(argv, out, err, stdin)  # as main() calls it: anything escaping is a bug
        except BaseException:  # noqa: BLE001 - the point is that nothing escapes
            pytest.fail(f"{argv!r} as {user} raised:\n{traceback.format_exc()}")
        finally:
            os.environ.pop("STREAMREP_USER", None)
        message = err.getvalue()
        assert status in (0, 1, 2), f"{argv!r} as {user}: exit {status}, stderr {message!r}"
        seen["ran"] += 1
        seen[{0: "ok", 1: "user", 2: "usage"}[status]] += 1
        if status != 0:
            assert message.startswith("streamrep: error: ") and message.count("\n") == 1, (argv, user, message)
            assert "Traceback" not in message
        refused = re.search(r"user \S+ (does not have|has none of|would not have) .* on (stream|cluster) ", message)
        if status == 1 and refused:
            seen["refused"] += 1
            seen["refused on a cluster"] += refused.group(2) == "cluster"
            assert world(work) == before_world, (argv, user, message)
        if status == 0:
            assert invalid_metadata(work) == [], argv
            sets_default = argv[:2] == ["cluster", "default"] or argv[:2] == ["cluster", "add"]
            # Removing the default cluster never silently makes another one the default.
            assert sets_default or default_cluster(work) in ("sanfrancisco", None), argv

    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(scratch)
        check()
    # The grammar-driven lines reach every outcome, permission refusals included.
    print(seen)
    assert seen["ran"] > MAX_EXAMPLES // 2 and all(seen[k] > 20 for k in ("ok", "user", "usage", "refused")), seen
    assert seen["refused on a cluster"] > 0, seen
