"""The scheduled ``stream_replica_verify`` DAG end to end: ``airflow dags test`` (the real Airflow, its
metadata database), each link compared by the real Spark app (``spark_apps/diffstreams.py``) on
embedded clusters of their own. One run over two links: one faithful replica, one holding a message
of its own. The faithful one's task succeeds and emits its replica's asset event; the other fails
with the one-line summary, so the run fails; both results are recorded as the links' last
verifications, which ``replica list`` shows."""

from __future__ import annotations

import json
import re
import sqlite3

import pytest

from streamrep.client import Clusters, StreamAdmin
from streamrep.model.ace import Identity
from streamrep.model.message import Message
from streamrep.replication import verification

pytestmark = pytest.mark.slow

USER = "alice"  # STREAMREP_USER of every process (conftest.Session)
# clusters of this module only: the session's STREAMREP_HOME is shared with the other e2e modules
SRC_CLUSTER, DST_CLUSTER = "boston", "quebec"
GOOD_SRC, GOOD_DST = f"/mapr/{SRC_CLUSTER}/orders", f"/mapr/{DST_CLUSTER}/orders"
BAD_SRC, BAD_DST = f"/mapr/{SRC_CLUSTER}/audit", f"/mapr/{DST_CLUSTER}/audit"


def test_the_verify_dag_compares_each_link_on_spark_records_and_emits(e2e):
    s = e2e
    s.streamrep("cluster", "add", "-name", SRC_CLUSTER)
    s.streamrep("cluster", "add", "-name", DST_CLUSTER)
    for src, dst in ((GOOD_SRC, GOOD_DST), (BAD_SRC, BAD_DST)):
        s.streamrep("stream", "create", "-path", src, "-defaultpartitions", "2")
        s.streamrep("stream", "topic", "create", "-path", src, "-topic", "t")
        s.streamrep("produce", "-path", f"{src}:t", "-keysep", "=", stdin="".join(f"k{i}=v{i}\n" for i in range(30)))
        s.streamrep("stream", "replica", "autosetup", "-path", src, "-replica", dst)
    admin = StreamAdmin(Clusters(str(s.streamrep_home)), Identity(USER))
    try:
        bad = admin.path(BAD_DST)  # a message of its own, as a plain client of its cluster writes it
        admin.store(bad).append(admin.entry(bad).uuid, "t", {0: [Message(b"planted", b"own")]})

        run = s.dags_test("stream_replica_verify", {"cluster": SRC_CLUSTER}, label="dags test stream_replica_verify")
        done = run.wait()
        assert done.returncode != 0 or "state=failed" in done.output, done.output[-6000:]
        assert re.search(r"DagRun Finished: dag_id=stream_replica_verify.*?state=failed", done.output), done.output[
            -6000:
        ]
        line = f"streamrep diffstreamswithcrc: {BAD_SRC} and {BAD_DST} differ: 0 missing in dst, 1 extra in dst"
        assert line in done.output, done.output[-6000:]

        with sqlite3.connect(s.airflow_home / "airflow.db") as db:
            tasks = dict(
                db.execute(
                    "select rendered_map_index, state from task_instance "
                    "where dag_id = 'stream_replica_verify' and task_id = 'verify'"
                ).fetchall()
            )
            events = [
                json.loads(extra)
                for (extra,) in db.execute(
                    "select e.extra from asset_event e join asset a on a.id = e.asset_id where a.name = ?",
                    (GOOD_DST,),
                )
            ]
        assert tasks == {GOOD_DST: "success", BAD_DST: "failed"}, tasks
        (event,) = events
        assert event["replica"] == GOOD_DST and event["verification"]["same"] is True
        assert event["verification"]["engine"] == "spark" and event["verification"]["compared"] == 60

        good, bad_done = (next(iter(verification.last(admin, path).values())) for path in (GOOD_DST, BAD_DST))
        assert (good.same, good.engine, good.command) == (True, "spark", "diffstreamswithcrc")
        assert (bad_done.same, bad_done.counts["extraInDst"]) == (False, 1)
        listed = json.loads(s.streamrep("stream", "replica", "list", "-path", BAD_SRC, "-json").output)
        assert listed["data"][0]["verification"] == "differs", listed
    finally:
        admin.clusters.close()
