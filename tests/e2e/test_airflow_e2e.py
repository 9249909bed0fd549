"""End to end through Airflow on embedded clusters, with real Spark:

1. ``airflow dags test stream_replica_manual_setup`` (the seeds' seven steps; copystream on Spark);
2. ``airflow dags test stream_replica_autosetup`` with multi-master (copystream on Spark, the
   reverse link);
3. new messages on both sides, then ``airflow dags test stream_gateways`` for each cluster (Spark
   gateways of batch passes, ``once``): every replica then holds every message exactly once;
4. ``scripts/airflow-ui.sh`` (docs/airflow.md): a DAG triggered through the REST API runs to success,
   a malformed path or a missing replica is refused, the page's login check lets every visitor
   in with login off, and the "Stream replication" page renders in headless Chromium.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from streamrep.client import Clusters, Consumer, StreamAdmin
from streamrep.model.ace import Identity
from streamrep.replication.status import replica_status

REPO = Path(__file__).resolve().parents[2]
USER = "alice"  # STREAMREP_USER of every process (conftest.Session)
pytestmark = pytest.mark.slow

SF_ACTIVITY, NY_ACTIVITY = "/mapr/sanfrancisco/activity", "/mapr/newyork/activity"
SF_METRICS, NY_METRICS = "/mapr/sanfrancisco/metrics", "/mapr/newyork/metrics"
SUCCESS = re.compile(r"DagRun Finished: dag_id=(\w+).*?state=(\w+)")


def admin_of(e2e) -> StreamAdmin:
    return StreamAdmin(Clusters(str(e2e.streamrep_home)), Identity(USER))


def produce(e2e, topic_path: str, values: list[str]) -> None:
    e2e.streamrep(
        "produce", "-path", topic_path, "-keysep", "=", stdin="".join(f"{v.split('-')[-1]}={v}\n" for v in values)
    )


def contents(admin: StreamAdmin, stream: str) -> Counter:
    """Every message a stream holds, as (topic, key, value), counted."""
    held: Counter = Counter()
    for row in admin.list_topics(stream):
        consumer = Consumer(f"{stream}:{row.topic}", from_start=True, admin=admin)
        while batch := consumer.poll(5000, timeout=0.2):
            held.update((row.topic, m.key.decode(), m.value.decode()) for m in batch)
    return held


def expect(values_by_topic: dict[str, list[str]]) -> Counter:
    return Counter((topic, v.split("-")[-1], v) for topic, values in values_by_topic.items() for v in values)


def succeeded(run, dag_id: str) -> None:
    states = SUCCESS.findall(run.output)
    assert run.returncode == 0 and (dag_id, "success") in states, run.output[-6000:]


@pytest.fixture(scope="module")
def world(e2e, airflow_ui_started) -> dict:
    """Two clusters set up through Airflow: activity (manual, primary-secondary) and metrics
    (autosetup, multi-master), then replicated by the gateway DAG on both clusters. Airflow's UI
    is starting meanwhile (``airflow_ui_started``), for the tests that need it."""
    s = e2e
    s.streamrep("cluster", "add", "-name", "sanfrancisco")
    s.streamrep("cluster", "add", "-name", "newyork")
    s.streamrep("stream", "create", "-path", SF_ACTIVITY, "-defaultpartitions", "3")
    s.streamrep("stream", "topic", "create", "-path", SF_ACTIVITY, "-topic", "clicks")
    s.streamrep("stream", "topic", "create", "-path", SF_ACTIVITY, "-topic", "orders", "-partitions", "2")
    s.streamrep("stream", "create", "-path", SF_METRICS, "-defaultpartitions", "2")
    s.streamrep("stream", "topic", "create", "-path", SF_METRICS, "-topic", "cpu")
    sent = {
        "activity": {"clicks": [f"click-{i}" for i in range(300)], "orders": [f"order-{i}" for i in range(40)]},
        "metrics": {"cpu": [f"sf-{i}" for i in range(50)]},
    }
    produce(s, f"{SF_ACTIVITY}:clicks", sent["activity"]["clicks"])
    produce(s, f"{SF_ACTIVITY}:orders", sent["activity"]["orders"])
    produce(s, f"{SF_METRICS}:cpu", sent["metrics"]["cpu"])

    # Two Airflow homes (copies of one migrated database), so two DAG runs can go side by side.
    other_home = s.copy_airflow_home("airflow-home-2")
    manual = s.dags_test(
        "stream_replica_manual_setup",
        {"path": SF_ACTIVITY, "replica": NY_ACTIVITY},
        label="dags test stream_replica_manual_setup",
    )
    auto = s.dags_test(
        "stream_replica_autosetup",
        {"path": SF_METRICS, "replica": NY_METRICS, "multimaster": True, "synchronous": False},
        label="dags test stream_replica_autosetup (multimaster)",
        airflow_home=other_home,
    )
    runs = {"manual": manual.wait(), "autosetup": auto.wait()}
    admin = admin_of(s)
    runs["copied_activity"] = contents(admin, NY_ACTIVITY)
    runs["copied_metrics"] = contents(admin, NY_METRICS)

    # While nothing replicates, both sides take new messages.
    later = {"clicks": [f"late-click-{i}" for i in range(60)], "orders": [f"late-order-{i}" for i in range(7)]}
    produce(s, f"{SF_ACTIVITY}:clicks", later["clicks"])
    produce(s, f"{SF_ACTIVITY}:orders", later["orders"])
    sent["activity"]["clicks"] += later["clicks"]
    sent["activity"]["orders"] += later["orders"]
    sf_more, ny_more = [f"sf-late-{i}" for i in range(20)], [f"ny-{i}" for i in range(30)]
    produce(s, f"{SF_METRICS}:cpu", sf_more)
    produce(s, f"{NY_METRICS}:cpu", ny_more)
    sent["metrics"]["cpu"] += sf_more + ny_more

    # The gateways of both clusters, side by side (each applies exactly once whatever the other does).
    s.streamrep(
        "cluster", "gateway", "set", "-dstcluster", "newyork", "-gateways", "gw1 gw2", "-cluster", "sanfrancisco"
    )
    ny = s.dags_test(
        "stream_gateways",
        {"cluster": "newyork", "once": True, "gateways": "gw1"},
        label="dags test stream_gateways newyork (once)",
    )
    sf = s.dags_test(
        "stream_gateways",
        {"cluster": "sanfrancisco", "once": True},
        label="dags test stream_gateways sanfrancisco (once)",
        airflow_home=other_home,
    )
    runs["gateways_newyork"], runs["gateways_sanfrancisco"] = ny.wait(), sf.wait()
    runs["sent"] = sent
    yield runs
    admin.clusters.close()


def test_manual_setup_runs_the_seven_steps_and_copies_on_spark(world, e2e):
    run = world["manual"]
    succeeded(run, "stream_replica_manual_setup")
    for task in (
        "create_replica",
        "add_replica_paused",
        "verify_replica",
        "add_upstream",
        "verify_upstream",
        "copystream",
        "resume_replica",
    ):
        assert f"[DAG TEST] end task task_id={task} " in run.output, task
    assert "Spark-Submit cmd: spark-submit --master local[2]" in run.output
    assert world["copied_activity"] == expect(
        {"clicks": [f"click-{i}" for i in range(300)], "orders": [f"order-{i}" for i in range(40)]}
    )
    admin = admin_of(e2e)
    assert admin.entry(NY_ACTIVITY).meta == admin.entry(SF_ACTIVITY).meta  # -copymetafrom
    (row,) = admin.list_replicas(SF_ACTIVITY)
    assert row.replica_path == NY_ACTIVITY and row.paused is False


def test_autosetup_with_multimaster_adds_the_reverse_link(world, e2e):
    run = world["autosetup"]
    succeeded(run, "stream_replica_autosetup")
    assert "[DAG TEST] end task task_id=add_reverse_replica " in run.output
    assert world["copied_metrics"] == expect({"cpu": [f"sf-{i}" for i in range(50)]})
    admin = admin_of(e2e)
    assert [r.replica_path for r in admin.list_replicas(SF_METRICS)] == [NY_METRICS]
    assert [r.replica_path for r in admin.list_replicas(NY_METRICS)] == [SF_METRICS]
    assert [u.path for u in admin.upstream_links(SF_METRICS)] == [NY_METRICS]


def test_gateways_replicate_every_message_exactly_once(world, e2e):
    succeeded(world["gateways_newyork"], "stream_gateways")
    succeeded(world["gateways_sanfrancisco"], "stream_gateways")
    assert "Spark-Submit cmd: spark-submit" in world["gateways_newyork"].output
    admin = admin_of(e2e)
    sent = world["sent"]
    assert contents(admin, NY_ACTIVITY) == contents(admin, SF_ACTIVITY) == expect(sent["activity"])
    # multi-master: each side holds its own messages and the other's, each exactly once
    assert contents(admin, NY_METRICS) == contents(admin, SF_METRICS) == expect(sent["metrics"])
    # the `once` gateways have finished: up to date, and waiting for a gateway to come back
    (row,) = replica_status(admin, SF_ACTIVITY)
    assert row.is_uptodate and row.pending_messages == 0
    assert row.state == "REPLICA_STATE_WAITING_FOR_GATEWAY" and "ErrAllGatewaysUnreachable" in row.errors
    for source in (SF_METRICS, NY_METRICS):
        assert [(r.state, r.is_uptodate) for r in replica_status(admin, source)] == [
            ("REPLICA_STATE_WAITING_FOR_GATEWAY", True)
        ]


def test_autosetup_fails_clearly_when_the_replica_exists(world, e2e):
    run = e2e.dags_test(
        "stream_replica_autosetup",
        {"path": SF_ACTIVITY, "replica": NY_ACTIVITY},
        label="dags test stream_replica_autosetup (replica exists, fails)",
    ).wait()
    assert ("stream_replica_autosetup", "failed") in SUCCESS.findall(run.output), run.output[-4000:]
    assert f"streamrep: replica stream {NY_ACTIVITY} already exists; autosetup creates it" in run.output
    assert "[DAG TEST] end task task_id=create_replica" not in run.output


def _wait_for_run(ui, dag_id: str, run_id: str, timeout: float = 180) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        run = ui.get(f"/api/v2/dags/{dag_id}/dagRuns/{run_id}")
        if run["state"] in ("success", "failed") or time.monotonic() > deadline:
            return run
        time.sleep(1)


def test_a_dag_triggered_through_rest_succeeds(world, e2e, airflow_ui):
    ui = airflow_ui
    dags = {d["dag_id"] for d in ui.get("/api/v2/dags")["dags"]}
    assert {
        "stream_replica_manual_setup",
        "stream_replica_autosetup",
        "stream_gateways",
        "stream_replica_control",
    } <= dags
    assert ui.get("/api/v2/importErrors")["total_entries"] == 0
    ui.request("PATCH", "/api/v2/dags/stream_replica_control", {"is_paused": False})
    admin = admin_of(e2e)
    for action, paused in (("pause", True), ("resume", False)):
        start = time.monotonic()
        status, run = ui.request(
            "POST",
            "/api/v2/dags/stream_replica_control/dagRuns",
            {"logical_date": None, "conf": {"path": SF_ACTIVITY, "replica": NY_ACTIVITY, "action": action}},
        )
        assert status == 200, run
        finished = _wait_for_run(ui, "stream_replica_control", run["dag_run_id"])
        e2e.timings[f"REST-triggered stream_replica_control {action}"] = round(time.monotonic() - start, 1)
        assert finished["state"] == "success", finished
        (row,) = admin.list_replicas(SF_ACTIVITY)
        assert row.paused is paused
        tis = {
            t["task_id"]: t["state"]
            for t in ui.get(f"/api/v2/dags/stream_replica_control/dagRuns/{run['dag_run_id']}/taskInstances")[
                "task_instances"
            ]
        }
        assert tis[action] == "success" and tis["replica_list"] == "success"
        assert {a: s for a, s in tis.items() if a in ("pause", "resume", "remove") and a != action} == {
            a: "skipped" for a in ("pause", "resume", "remove") if a != action
        }


def test_rest_refuses_a_malformed_path_with_a_readable_message(airflow_ui):
    status, body = airflow_ui.request(
        "POST",
        "/api/v2/dags/stream_replica_control/dagRuns",
        {"logical_date": None, "conf": {"path": "/mapr/sanfrancisco/activity:clicks", "action": "pause"}},
    )
    assert status == 400
    assert body["detail"] == (
        "Invalid input for param path: '/mapr/sanfrancisco/activity:clicks' is not a stream path: "
        "/mapr/<cluster>/<stream>, with no ':topic'"
    )


def test_rest_refuses_a_control_trigger_without_a_replica(airflow_ui):
    """The replica has no default: a trigger that forgets it acts on nothing."""
    status, body = airflow_ui.request(
        "POST",
        "/api/v2/dags/stream_replica_control/dagRuns",
        {"logical_date": None, "conf": {"path": SF_ACTIVITY, "action": "pause"}},
    )
    assert status == 400
    assert body["detail"].startswith("Invalid input for param replica: No value passed")


def test_the_page_with_login_off_shows_everything_to_everyone(world, e2e, airflow_ui):
    """scripts/airflow-ui.sh turns login off: every visitor is an admin, who may see where the
    clusters are, and acts as the user the CLI acts as (STREAMREP_USER)."""
    listing = airflow_ui.get("/streamrep/api/clusters")
    assert listing["user"] == USER and listing["mayControl"] and listing["seesLocations"]
    urls = {c["name"]: c["url"] for c in listing["clusters"]}
    assert urls == {c.name: c.url for c in admin_of(e2e).clusters.list()}
    assert all(url.startswith("embedded:") for url in urls.values())
    newyork = airflow_ui.get("/streamrep/api/clusters/newyork")
    assert NY_ACTIVITY in [s["path"] for s in newyork["streams"]]
    # docs/airflow.md's REST example, as written there for login off: no token, and alice's right
    listed = airflow_ui.get(f"/streamrep/rest/stream/replica/list?path={SF_ACTIVITY}")
    assert listed["status"] == "OK" and [row["replicaPath"] for row in listed["data"]] == [NY_ACTIVITY]


def open_page(browser, airflow_ui, height: int = 1000):
    """The page inside Airflow's UI, once every cluster is drawn."""
    page = browser.new_context(viewport={"width": 1400, "height": height}).new_page()
    page.goto(f"{airflow_ui.base}/plugin/stream-replication")
    page.wait_for_selector(
        '[data-testid=replication-page][data-layout=done][data-clusters-loaded="2"]', timeout=120_000
    )
    return page


def keep_screenshot(page, name: str) -> Path:
    """In test-artifacts/, and in docs/ with STREAMREP_UPDATE_SCREENSHOT=1."""
    shot = Path(os.environ.get("STREAMREP_TEST_ARTIFACTS") or REPO / "test-artifacts") / name
    shot.parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(shot), full_page=True)
    if os.environ.get("STREAMREP_UPDATE_SCREENSHOT"):
        shutil.copy(shot, REPO / "docs" / name)
    return shot


def test_replication_page_renders_in_headless_chromium(world, e2e, airflow_ui, browser):
    # a live gateway of newyork (the CLI's in-process engine) while the page is rendered; gw2 is
    # listed for newyork but not running, so it shows as down
    gateway = subprocess.Popen(
        [str(Path(sys.executable).parent / "streamrep"), "gateway", "run", "-cluster", "newyork", "-id", "gw1"]
        + ["-engine", "local"],
        env=e2e.env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _until(
            "gw1's heartbeat",
            lambda: "gw1" in [g["id"] for g in airflow_ui.get("/streamrep/api/clusters/newyork")["gateways"]],
        )
        page = open_page(browser, airflow_ui)
        for path in (SF_ACTIVITY, NY_ACTIVITY, SF_METRICS, NY_METRICS):
            assert page.locator(f'[data-testid=stream-node][data-path="{path}"]').count() == 1, path
        edge = page.locator(f'[data-testid=link-edge][data-source="{SF_ACTIVITY}"][data-replica="{NY_ACTIVITY}"]')
        assert edge.get_attribute("data-state") == "REPLICATING"
        reverse = f'[data-testid=link-edge][data-source="{NY_METRICS}"][data-replica="{SF_METRICS}"]'
        assert page.locator(reverse).count() == 1  # the multi-master reverse link
        rows = page.locator('[data-testid=gateways-table][data-cluster="newyork"] [data-testid=gateway-row]')
        status = {row.get_attribute("data-gateway"): row.inner_text() for row in rows.all()}
        assert "live" in status["gw1"] and "down" in status["gw2"], status
        held = sum(contents(admin_of(e2e), NY_ACTIVITY).values())
        node = page.locator(f'[data-testid=stream-node][data-path="{NY_ACTIVITY}"]')
        assert f"{held:,} messages" in node.inner_text()
        keep_screenshot(page, "replication-page.png")
        page.context.close()
    finally:
        gateway.terminate()
        gateway.wait(timeout=30)


# --- failover ---
FO_SF, FO_NY = "/mapr/sanfrancisco/failover", "/mapr/newyork/failover"


def _hitl(ui, dag_id: str, run_id: str, task_id: str = "approve", timeout: float = 180) -> dict:
    """The task's human-in-the-loop request, once it waits for a response."""
    path = f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/-1/hitlDetails"
    deadline = time.monotonic() + timeout
    while True:
        status, body = ui.request("GET", path)
        if status == 200 and not body.get("response_received"):
            # Answer once the scheduler has taken in the executor event of the workload that paused
            # the task: Airflow 3.3 (LocalExecutor) marks a HITL task FAILED when that event arrives
            # after the answer has queued the task again ("reported that the task instance ... finished").
            paused = (
                f"state success for task instance TaskInstanceKey(dag_id='{dag_id}', task_id='{task_id}', "
                f"run_id='{run_id}'"
            )
            if paused in ui.log.read_text(errors="replace"):
                return body
        assert time.monotonic() < deadline, (status, body)
        time.sleep(1)


def _call(ui, method: str, path: str, body: Any = None, timeout: float = 120) -> Any:
    """A REST call that must succeed; retried while the DAG is not parsed yet (404) or standalone
    Airflow's SQLite is busy under load (500 "Database error")."""
    deadline = time.monotonic() + timeout
    while True:
        status, answer = ui.request(method, path, body)
        if status == 200:
            return answer
        assert status in (404, 500) and time.monotonic() < deadline, (method, path, status, answer)
        time.sleep(2)


def _respond(ui, dag_id: str, run_id: str, option: str) -> None:
    _call(
        ui,
        "PATCH",
        f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/approve/-1/hitlDetails",
        {"chosen_options": [option], "params_input": {}},
    )


def test_failover_dag_waits_for_a_persons_approval_and_a_rejection_changes_nothing(e2e, airflow_ui):
    s, ui, dag_id = e2e, airflow_ui, "stream_replica_failover"
    admin = admin_of(s)
    for name in ("sanfrancisco", "newyork"):
        if name not in {c.name for c in admin.clusters.list()}:
            s.streamrep("cluster", "add", "-name", name)
    s.streamrep("stream", "create", "-path", FO_SF)
    s.streamrep("stream", "topic", "create", "-path", FO_SF, "-topic", "events", "-partitions", "2")
    s.streamrep("stream", "create", "-path", FO_NY, "-copymetafrom", FO_SF)
    s.streamrep("stream", "replica", "add", "-path", FO_SF, "-replica", FO_NY)
    s.streamrep("stream", "upstream", "add", "-path", FO_NY, "-upstream", FO_SF)
    produce(s, f"{FO_SF}:events", [f"event-{i}" for i in range(25)])
    # gw1: the world's sanfrancisco sends to newyork's listed gateways only (gw1 gw2)
    s.streamrep("gateway", "run", "-cluster", "newyork", "-id", "gw1", "-once", "true", "-engine", "local")
    assert admin.entry(FO_NY).failover is None and contents(admin, FO_NY) == expect(
        {"events": [f"event-{i}" for i in range(25)]}
    )
    _call(ui, "PATCH", f"/api/v2/dags/{dag_id}", {"is_paused": False}, timeout=240)  # once it is parsed
    conf = {"path": FO_SF, "replica": FO_NY, "timeout": 60}
    outcomes = {}
    for option in ("Reject", "Approve"):
        start = time.monotonic()
        run = _call(ui, "POST", f"/api/v2/dags/{dag_id}/dagRuns", {"logical_date": None, "conf": conf})
        request = _hitl(ui, dag_id, run["dag_run_id"])
        # the person sees the plan: lag, pending messages, the groups affected, the steps
        assert request["subject"] == f"Fail over {FO_SF} to {FO_NY}?"
        assert "pending messages: **0**" in request["body"] and "consumer groups affected" in request["body"]
        assert "| events | 0 |" in request["body"] and "record /mapr/newyork/failover as PROMOTED" in request["body"]
        assert admin.entry(FO_NY).failover is None  # nothing happens before the answer
        _respond(ui, dag_id, run["dag_run_id"], option)
        finished = _wait_for_run(ui, dag_id, run["dag_run_id"])
        e2e.timings[f"REST-triggered {dag_id} ({option})"] = round(time.monotonic() - start, 1)
        assert finished["state"] == "success", finished
        outcomes[option] = {
            t["task_id"]: t["state"]
            for t in ui.get(f"/api/v2/dags/{dag_id}/dagRuns/{run['dag_run_id']}/taskInstances")["task_instances"]
        }
        if option == "Reject":  # skipped, and nothing changed
            assert outcomes[option]["failover"] == "skipped"
            assert admin.entry(FO_NY).failover is None and admin.entry(FO_SF).failover is None
            assert [u.path for u in admin.entry(FO_NY).upstreams] == [FO_SF]
    assert outcomes["Approve"] == {"plan": "success", "approve": "success", "failover": "success"}
    assert admin.entry(FO_NY).failover.state == "PROMOTED" and admin.entry(FO_SF).failover.state == "FAILED_OVER"
    assert admin.entry(FO_NY).upstreams == ()
    assert contents(admin, FO_NY) == expect({"events": [f"event-{i}" for i in range(25)]})


# --- lag ---
def test_the_lag_chart_renders_in_headless_chromium(world, e2e, airflow_ui, browser):
    """A real gateway (in-process engine, with its metrics endpoint) records the lag of
    sanfrancisco/activity -> newyork/activity while the replica is paused and messages arrive,
    then catches up; the page draws the history as a chart with the replica's thresholds, seen
    in headless Chromium (test-artifacts/lag-chart.png; docs/ too with STREAMREP_UPDATE_SCREENSHOT=1)."""
    import urllib.request

    import kafka_local  # loaded by tests/conftest.py from scripts/kafka_local.py

    from streamrep.replication.lag import lag_history

    e2e.streamrep(
        "stream",
        "replica",
        "alert",
        "-path",
        SF_ACTIVITY,
        "-replica",
        NY_ACTIVITY,
        "-maxlagmsgs",
        "150",
        "-maxlagms",
        "120000",
    )
    (port,) = kafka_local.free_ports(1)
    gateway = subprocess.Popen(
        [
            str(Path(sys.executable).parent / "streamrep"),
            "gateway",
            "run",
            "-cluster",
            "newyork",
            "-id",
            "gw1",
            "-engine",
            "local",
            "-metricsport",
            str(port),
        ],
        env=e2e.env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    admin = admin_of(e2e)
    before = len(lag_history(admin, SF_ACTIVITY, NY_ACTIVITY))
    try:
        e2e.streamrep("stream", "replica", "pause", "-path", SF_ACTIVITY, "-replica", NY_ACTIVITY)
        # The lag grows while paused: a sample of each size, taken whenever the gateway samples
        # (at most every SAMPLE_SECONDS, and later when sampling is slow: MAX_SAMPLING_SHARE).
        for batch in range(2):
            since = time.time() * 1000
            produce(e2e, f"{SF_ACTIVITY}:clicks", [f"lag-{batch}-{i}" for i in range(100)])
            behind = 100 * (batch + 1)
            _until(
                f"a sample of the lag with {behind} messages behind",
                lambda since=since, behind=behind: [
                    s for s in lag_history(admin, SF_ACTIVITY, NY_ACTIVITY) if s.t >= since and s.messages >= behind
                ],
            )
        e2e.streamrep("stream", "replica", "resume", "-path", SF_ACTIVITY, "-replica", NY_ACTIVITY)
        _until(
            "a sample of the lag with nothing behind",
            lambda: lag_history(admin, SF_ACTIVITY, NY_ACTIVITY)[-1].messages == 0,
        )
        history = lag_history(admin, SF_ACTIVITY, NY_ACTIVITY)
        assert len(history) >= before + 3 and max(s.messages for s in history) >= 200
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as response:
            metrics = response.read().decode()
        assert f'streamrep_replica_lag_messages{{replica="{NY_ACTIVITY}",source="{SF_ACTIVITY}"}} 0.0' in metrics
        assert re.search(
            r'streamrep_gateway_replicated_messages_total\{cluster="newyork",gateway="gw1"\} '
            r"([2-9]\d\d|\d{4,})\.0",
            metrics,
        )

        link = next(
            link
            for link in airflow_ui.get("/streamrep/api/clusters/sanfrancisco")["links"]
            if link["replica"] == NY_ACTIVITY
        )
        assert link["maxLagMessages"] == 150 and link["maxLagMillis"] == 120000
        page = open_page(browser, airflow_ui, height=1500)
        chart = page.locator(f'[data-testid=lag-chart][data-replica="{NY_ACTIVITY}"]')
        assert chart.get_attribute("data-source") == SF_ACTIVITY
        assert int(chart.get_attribute("data-samples")) >= len(history)  # the gateway samples on
        assert chart.locator("canvas").count() == 1
        keep_screenshot(page, "lag-chart.png")
        page.context.close()
    finally:
        e2e.streamrep("stream", "replica", "resume", "-path", SF_ACTIVITY, "-replica", NY_ACTIVITY)
        gateway.terminate()
        gateway.wait(timeout=30)


# --- assets ---
WATCHED_TOPIC, WATCHER_GROUP = "clicks", "airflow-asset-watcher"  # dags/stream_messages_example.py's


def _runs(ui, dag_id: str) -> list[dict]:
    return ui.get(f"/api/v2/dags/{dag_id}/dagRuns?limit=100")["dag_runs"]


def _upstream_events(ui, dag_id: str, run_id: str) -> list[dict]:
    return ui.get(f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/upstreamAssetEvents")["asset_events"]


def _answered(ui, path: str):
    """The body of a GET answered 200, else None. Airflow 3.3 answers 500 for asset events that a
    still-queued run consumed (its response model requires the run's start_date)."""
    status, body = ui.request("GET", path)
    return body if status == 200 else None


def _until(what: str, check, timeout: float = 180):
    """``check()``'s first truthy result, polled every second."""
    deadline = time.monotonic() + timeout
    while not (found := check()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(1)
    return found


def test_a_dag_scheduled_on_a_replica_runs_after_its_caught_up_event(world, e2e, airflow_ui):
    """The manual setup, triggered again through REST on the (up to date) demo replica, ends with
    wait_caught_up, whose event through the alias makes a run of the DAG scheduled on the replica."""
    ui, example = airflow_ui, "stream_replica_uptodate_example"
    for dag_id in (example, "stream_replica_manual_setup"):
        _until(f"{dag_id} parsed", lambda: dag_id in {d["dag_id"] for d in ui.get("/api/v2/dags")["dags"]})
        ui.request("PATCH", f"/api/v2/dags/{dag_id}", {"is_paused": False})
    before = {r["dag_run_id"] for r in _runs(ui, example)}
    start = time.monotonic()
    status, run = ui.request(
        "POST",
        "/api/v2/dags/stream_replica_manual_setup/dagRuns",
        {"logical_date": None, "conf": {"path": SF_ACTIVITY, "replica": NY_ACTIVITY}},
    )
    assert status == 200, run
    finished = _wait_for_run(ui, "stream_replica_manual_setup", run["dag_run_id"], timeout=420)
    e2e.timings["REST-triggered stream_replica_manual_setup (rerun, with wait_caught_up)"] = round(
        time.monotonic() - start, 1
    )
    assert finished["state"] == "success", finished
    new = _until(
        f"a run of {example}",
        lambda: [r for r in _runs(ui, example) if r["dag_run_id"] not in before and r["state"] == "success"],
    )
    e2e.timings["replica caught-up event -> example run succeeded"] = round(time.monotonic() - start, 1)
    assert len(new) == 1, new
    (event,) = _upstream_events(ui, example, new[0]["dag_run_id"])
    assert event["uri"] == "streamrep://newyork/activity"
    assert event["extra"]["replica"] == NY_ACTIVITY and event["extra"]["source"] == SF_ACTIVITY
    assert event["extra"]["pendingMessages"] == 0 and event["extra"]["isUptodate"] is True


def test_a_message_in_the_watched_topic_makes_one_run_of_the_example_dag(world, e2e, airflow_ui):
    """The AssetWatcher's MessageQueueTrigger(scheme="streamrep"), a StreamMessageTrigger once the
    dag-processor has serialized it, runs in standalone's triggerer: a produced message fires once
    (one asset event, one run), never again."""
    ui, example = airflow_ui, "stream_messages_example"
    _until(f"{example} parsed", lambda: example in {d["dag_id"] for d in ui.get("/api/v2/dags")["dags"]})
    ui.request("PATCH", f"/api/v2/dags/{example}", {"is_paused": False})
    admin = admin_of(e2e)
    sp = admin.path(SF_ACTIVITY)
    store, uuid = admin.store(sp), admin.entry(sp).uuid

    def watcher_at_end() -> bool:  # the trigger has committed its place, past every message so far
        ends = {p: store.offsets(uuid, WATCHED_TOPIC, p)[1] for p in range(store.topics(uuid)[WATCHED_TOPIC])}
        return store.cursors(WATCHER_GROUP, uuid, WATCHED_TOPIC) == ends

    start = time.monotonic()
    _until("the watcher to start in the triggerer", watcher_at_end)
    e2e.timings["AssetWatcher started in the triggerer (after the module's other tests)"] = round(
        time.monotonic() - start, 1
    )
    produce(e2e, f"{SF_ACTIVITY}:{WATCHED_TOPIC}", ["watched-1"])
    start = time.monotonic()

    def runs_with_the_message() -> list[tuple[dict, list]]:
        found = []
        for run in _runs(ui, example):
            if run["state"] not in ("success", "failed"):
                continue  # its events cannot be read yet (see _answered)
            events = _upstream_events(ui, example, run["dag_run_id"])
            values = [m["value"] for e in events for m in e["extra"]["payload"]["messages"]]
            if "watched-1" in values:
                found.append((run, values))
        return found

    _until(
        "a successful run for the message",
        lambda: [r for r, _ in runs_with_the_message() if r["state"] == "success"],
        timeout=180,
    )
    e2e.timings["message produced -> example run succeeded"] = round(time.monotonic() - start, 1)
    time.sleep(8)  # four of the watcher's polls: time enough to fire twice, if it would
    found = runs_with_the_message()
    assert len(found) == 1 and found[0][1].count("watched-1") == 1, found
    assert watcher_at_end()
    # every asset event of the topic, since the watcher started: each message at most once
    (asset,) = ui.get("/api/v2/assets?uri_pattern=streamrep://sanfrancisco/activity:clicks")["assets"]
    events = _until(
        "the topic's asset events",
        lambda: _answered(ui, f"/api/v2/assets/events?asset_id={asset['id']}&limit=100"),
        timeout=120,
    )["asset_events"]
    fired = [(m["partition"], m["offset"]) for e in events for m in e["extra"]["payload"]["messages"]]
    assert fired and len(fired) == len(set(fired))
