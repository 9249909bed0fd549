"""The gateways' catalog documents as typed values (``model/gateways.py``, ``replication/samples.py``):
a document written by today's code reads back equal, and one from an older streamrep still reads."""

from __future__ import annotations

import json

from streamrep.model.gateways import DesiredState, GatewayStop, HeartbeatDoc, LaunchRecord, ServiceDoc, StopCause
from streamrep.replication import lag, service
from streamrep.replication.gateway import HEARTBEAT_KIND, Gateway
from streamrep.replication.samples import LagHistory, LagSample

SF = "/mapr/sanfrancisco/activity"
NY = "/mapr/newyork/activity"


def stored(store, kind: str, key: str) -> dict:
    """A document as the store holds it: through JSON, as every backend keeps it."""
    return json.loads(json.dumps(store.catalog_get(kind, key)))


def test_documents_written_today_read_back_equal(admin):
    admin.create_stream(SF)
    admin.create_topic(SF, "t", 2)
    admin.create_stream(NY, copymetafrom=SF)
    admin.add_replica(SF, NY)
    admin.add_upstream(NY, SF)
    store = admin.clusters.store("newyork")
    gateway = Gateway(admin, "newyork", "g1")
    gateway.announce(service.placement("spark", "spark://h:7077", "app-1", env={"AIRFLOW_CTX_DAG_ID": "d"}))
    gateway.run_once()  # beats, writes its share and samples the lag
    gateway.lag.sample(final=True)
    service.request(admin, "newyork", DesiredState.RUNNING)
    service.record_launch(store, service.desired(store), LaunchRecord("run-1", 1.5, 1, 1))
    beat = stored(store, HEARTBEAT_KIND, "g1")
    assert beat["engine"] == "spark" and beat["appId"] == "app-1" and beat["share"]
    desired = stored(store, service.SERVICE_KIND, service.SERVICE_KEY)
    assert desired["launch"]["runId"] == "run-1"
    [key] = store.catalog_list(lag.LAG_KIND)
    history = stored(store, lag.LAG_KIND, key)
    assert HeartbeatDoc.from_doc(beat).to_doc() == beat
    assert ServiceDoc.from_doc(desired).to_doc() == desired
    assert LagHistory.from_doc(history).to_doc() == history


def test_documents_of_an_older_streamrep_still_read():
    # No ``since`` or ``launch`` (before the supervisor), a heartbeat from before placements
    # and shares, a lag history row list without its paths.
    old = ServiceDoc.from_doc({"state": "stopped", "by": "alice", "at": 12.0})
    assert old == ServiceDoc(DesiredState.STOPPED, "alice", 12.0) and old.stopped
    assert ServiceDoc.from_doc({"state": "running", "launch": {"at": 3}}).launch == LaunchRecord(None, 3.0, 0, 0)
    beat = HeartbeatDoc.from_doc({"ts": 5, "host": "h", "pid": 7})
    assert beat == HeartbeatDoc(5.0, "h", 7) and beat.to_doc() == {"ts": 5.0, "host": "h", "pid": 7}
    history = LagHistory.from_doc({"samples": [[1, 2, 3, 4]]})
    assert history.samples == (LagSample(1, 2, 3, 4),) and history.newest == 1
    assert LagHistory.from_doc(None) == LagHistory()


def test_a_gateway_stop_reads_as_the_line_the_front_ends_print():
    why = "the gateways of cluster newyork are stopped"
    assert str(GatewayStop("g1", StopCause.NOT_STARTED, why)) == f"gateway g1 not started: {why}"
    assert str(GatewayStop("g1", StopCause.SERVICE_STOPPED, why)) == f"gateway g1 stopped: {why}"
    assert str(GatewayStop("g1", StopCause.REQUESTED, "stopped by SIGTERM")) == "gateway g1 stopped by SIGTERM"
