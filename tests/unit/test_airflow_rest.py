"""maprcli's REST form (issue 21 item 2): ``/streamrep/rest/<command words>?<option>=<value>``
served by Airflow's real API app (the simple auth manager with login on, real JWTs, the plugin
loaded from the package's entry points) over real embedded clusters, answering with the CLI's
``-json`` envelope."""

from __future__ import annotations

import io
import json

import pytest
import test_airflow_hardening as hardening
from airflow_support import DST, SRC
from test_airflow_hardening import as_user

from streamrep.cli.main import run
from streamrep.client import StreamAdmin
from streamrep.model.ace import Identity

pytestmark = pytest.mark.slow
REST = "/streamrep/rest"
airflow_api = hardening.airflow_api  # Airflow's real API app with login on, built once for this module
running, broken_cluster = hardening.running, hardening.broken_cluster


def call(client, tokens, user: str | None, words: str, method: str = "GET", **params):
    headers = as_user(tokens[user]) if user else {}
    if method == "POST":
        return client.post(f"{REST}/{words}", data=params, headers=headers)
    return client.get(f"{REST}/{words}", params=params, headers=headers)


def ok(answer) -> list[dict]:
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["status"] == "OK" and body["total"] == len(body["data"]) and body["timestamp"] > 0
    return body["data"]


def refused(answer, status: int) -> str:
    """The one line of an ERROR envelope answered with ``status``."""
    assert answer.status_code == status, answer.text
    body = answer.json()
    assert body["status"] == "ERROR" and set(body) == {"timestamp", "timeofday", "status", "errors"}
    [error] = body["errors"]
    assert "\n" not in error["desc"]
    return error["desc"]


def cli_json(argv: list[str]) -> dict:
    out = io.StringIO()
    assert run([*argv, "-json"], out, io.StringIO()) == 0, out.getvalue()
    return json.loads(out.getvalue())


def test_no_login_is_401_and_a_bad_token_403_in_the_error_envelope(airflow_api, home):
    client, _ = airflow_api
    assert refused(client.get(f"{REST}/stream/list"), 401) == "Not authenticated"
    refused(client.get(f"{REST}/stream/create", params={"path": SRC}), 401)
    refused(client.get(f"{REST}/stream/list", headers=as_user("not-a-jwt")), 403)
    assert StreamAdmin(home, Identity("ada")).list_streams("sanfrancisco") == []


def test_a_replica_made_over_rest_lists_as_the_cli_lists_it(airflow_api, home, monkeypatch):
    client, tokens = airflow_api
    [created] = ok(call(client, tokens, "ada", "stream/create", "POST", path=SRC, defaultpartitions="2"))
    assert (created["path"], created["creator"], created["adminperm"]) == (SRC, "ada", "u:ada")
    ok(call(client, tokens, "ada", "stream/topic/create", "POST", path=SRC, topic="clicks"))
    ok(call(client, tokens, "ada", "stream/create", "POST", path=DST, copymetafrom=SRC))
    ok(call(client, tokens, "ada", "stream/replica/add", "POST", path=SRC, replica=DST, paused=""))  # bare: true
    ok(call(client, tokens, "ada", "stream/upstream/add", "POST", path=DST, upstream=SRC))
    listed = ok(call(client, tokens, "ada", "stream/replica/list", path=SRC))
    monkeypatch.setenv("STREAMREP_USER", "ada")  # the CLI as the same user
    assert listed == cli_json(["stream", "replica", "list", "-path", SRC])["data"]
    assert [row["replicaPath"] for row in listed] == [DST] and listed[0]["paused"] is True
    entry = StreamAdmin(home, Identity("ada")).entry(SRC)
    assert entry.meta.adminperm == "u:ada"  # created as the Airflow user, who owns it
    assert [link.path for link in entry.replicas] == [DST]


def test_the_commands_the_issue_names_all_run(airflow_api, home):
    client, tokens = airflow_api
    other = "/mapr/newyork/other"

    def do(words: str, **params) -> list[dict]:
        return ok(call(client, tokens, "ada", words, "POST", **params))

    do("stream/create", path=SRC)
    do("stream/edit", path=SRC, ttl="3600")
    assert do("stream/info", path=SRC)[0]["ttl"] == 3600
    assert [r["path"] for r in do("stream/list", cluster="sanfrancisco")] == [SRC]
    do("stream/topic/create", path=SRC, topic="clicks", partitions="3")
    assert [r["partitionid"] for r in do("stream/topic/info", path=SRC, topic="clicks")] == [0, 1, 2]
    assert [r["topic"] for r in do("stream/topic/list", path=SRC)] == ["clicks"]
    do("stream/replica/autosetup", path=SRC, replica=DST, engine="local")
    do("stream/replica/pause", path=SRC, replica=DST)
    assert do("stream/replica/list", path=SRC)[0]["paused"] is True
    do("stream/replica/resume", path=SRC, replica=DST)
    do("stream/replica/edit", path=SRC, replica=DST, synchronous="true")
    assert do("stream/replica/list", path=SRC)[0]["synchronous"] is True
    assert [r["upstreamPath"] for r in do("stream/upstream/list", path=DST)] == [SRC]
    do("stream/create", path=other)
    do("stream/upstream/add", path=other, upstream=SRC)
    assert [r["upstreamPath"] for r in do("stream/upstream/list", path=other)] == [SRC]
    do("stream/upstream/remove", path=other, upstream=SRC)
    assert do("stream/upstream/list", path=other) == []
    do("stream/replica/remove", path=SRC, replica=DST)
    assert do("stream/replica/list", path=SRC) == []
    do("cluster/gateway/set", dstcluster="newyork", gateways="gw1 gw2", cluster="sanfrancisco")
    assert do("cluster/gateway/list", cluster="sanfrancisco") == [{"dstcluster": "newyork", "gateways": ["gw1", "gw2"]}]
    do("stream/delete", path=other)
    assert [e.path for e in StreamAdmin(home, Identity("ada")).list_streams("newyork")] == ["/activity"]


def test_a_viewer_reads_but_may_not_change(airflow_api, home):
    client, tokens = airflow_api
    ok(call(client, tokens, "ada", "stream/create", "POST", path=SRC, produceperm="p", consumeperm="p", adminperm="p"))
    assert ok(call(client, tokens, "vic", "stream/info", path=SRC))[0]["path"] == SRC
    why = refused(call(client, tokens, "vic", "stream/delete", "POST", path=SRC), 403)
    assert (
        why
        == "'stream delete' changes streams or clusters: it needs the right to trigger the stream_gateway_service DAG"
    )
    assert StreamAdmin(home, Identity("ada")).entry(SRC)


def test_a_streams_ace_refuses_another_airflow_user_with_403(airflow_api, home):
    """uma may change streams as far as Airflow goes; ada's stream's adminperm refuses her."""
    client, tokens = airflow_api
    ok(call(client, tokens, "ada", "stream/create", "POST", path=SRC))
    why = refused(call(client, tokens, "uma", "stream/edit", "POST", path=SRC, ttl="5"), 403)
    assert why.startswith(f"user uma does not have adminperm on stream {SRC}")
    assert StreamAdmin(home, Identity("ada")).entry(SRC).meta.ttl != 5


def test_unknown_commands_bad_options_and_long_running_commands(airflow_api, home):
    client, tokens = airflow_api
    assert refused(call(client, tokens, "ada", "stream/frobnicate", path=SRC), 404).startswith(
        "unknown command 'stream frobnicate'"
    )
    assert refused(call(client, tokens, "ada", "stream/replica"), 404).startswith("'stream replica' needs a subcommand")
    assert refused(call(client, tokens, "ada", "stream/create", "POST"), 400).startswith(
        "missing required option(s) -path"
    )
    assert refused(call(client, tokens, "ada", "stream/create", "POST", path=SRC, colour="red"), 400).startswith(
        "unknown option -colour for 'stream create'"
    )
    assert refused(call(client, tokens, "ada", "stream/create", "POST", path=SRC, ttl="soon"), 400) == (
        "option -ttl takes a whole number, not 'soon'"
    )
    assert refused(call(client, tokens, "ada", "stream/info", path=SRC), 404) == f"stream {SRC} does not exist"
    why = refused(call(client, tokens, "ada", "copystream", "POST", src=SRC, dst=DST), 400)
    assert why.startswith("'copystream' is not served over REST: it runs a Spark job")
    why = refused(call(client, tokens, "ada", "gateway/run", "POST", cluster="newyork"), 400)
    assert why.startswith("'gateway run' is not served over REST: a gateway runs until stopped")
    assert StreamAdmin(home, Identity("ada")).list_streams("sanfrancisco") == []


def test_a_cluster_that_authenticates_another_principal_refuses_the_airflow_user(airflow_api, home, monkeypatch):
    """The Airflow user names the identity: a SASL cluster authenticating alice refuses ada, as the
    CLI refuses STREAMREP_USER=ada (no broker is needed to decide)."""
    hardening.tokyo_authenticating_alice(monkeypatch)
    client, tokens = airflow_api
    why = refused(call(client, tokens, "ada", "stream/create", "POST", path="/mapr/tokyo/activity"), 403)
    assert why.startswith("cluster tokyo authenticates this client as alice; acting as ada is refused")


def test_cluster_locations_in_errors_are_hidden_as_on_the_page(airflow_api, broken_cluster):
    """A store file that is not a database: its error names the file for who may read connections
    (op), and ``(hidden)`` for who may not (user), as the page shows it."""
    client, tokens = airflow_api
    _, tokyo_file = broken_cluster
    shown = refused(call(client, tokens, "olga", "stream/list", cluster="tokyo"), 400)
    assert shown.startswith(f"cluster tokyo: cannot open store {tokyo_file}")
    hidden = refused(call(client, tokens, "uma", "stream/list", cluster="tokyo"), 400)
    assert hidden.startswith("cluster tokyo: cannot open store (hidden)") and str(tokyo_file) not in hidden


def test_a_change_sent_as_a_get_is_refused_even_with_the_session_cookie(airflow_api, home):
    """A link on another site is followed with the UI's cookie (SameSite=Lax sends it on a GET):
    a command that changes anything must be a POST; reading is a GET too."""
    client, tokens = airflow_api
    client.cookies.set("_token", tokens["ada"])
    try:
        why = refused(client.get(f"{REST}/stream/create", params={"path": SRC}), 405)
        assert why == "'stream create' changes streams or clusters: send it as a POST"
        assert StreamAdmin(home, Identity("ada")).list_streams("sanfrancisco") == []
        ok(client.post(f"{REST}/stream/create", data={"path": SRC}))
        assert ok(client.get(f"{REST}/stream/info", params={"path": SRC}))[0]["creator"] == "ada"
    finally:
        client.cookies.clear()


def test_a_connection_that_defines_no_cluster_is_one_line(airflow_api, home, monkeypatch):
    from airflow.models.connection import Connection

    bad = Connection(conn_id="streamrep_tokyo", conn_type="streamrep", host="kafka://broker")
    monkeypatch.setenv("AIRFLOW_CONN_STREAMREP_TOKYO", bad.as_json())
    client, tokens = airflow_api
    why = refused(call(client, tokens, "olga", "stream/list", cluster="tokyo"), 400)
    assert (
        why
        == "connection streamrep_tokyo: invalid cluster url 'kafka://broker': expected kafka://host:port[,host:port...]"
    )
