"""The "Stream replication" page: a React app plugin of Airflow 3's UI (built from ``ui/`` into
``static/replication.js``, shipped in the wheel) and the FastAPI app it reads, mounted by the
Airflow plugin at ``/streamrep``:

- ``GET /api/clusters``: who the caller is, what they may do, whether the gateway supervisor DAG
  is paused, and the clusters' names (no cluster is opened);
- ``GET /api/clusters/<name>``: one cluster (``page_data.cluster_view``), read in a thread of its
  own and answered within ``VIEW_SECONDS``; a cluster that is down answers with its error;
- ``POST /api/gateways/<cluster>/start|stop``: ``gateway start|stop`` as the caller, with what
  happens next in words;
- ``GET /static/<file>``: the bundle and its icon.

Who may do what: ``page_access``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path
from typing import TYPE_CHECKING, Any

from streamrep.airflow import rows as presented
from streamrep.airflow.hook import StreamrepHook
from streamrep.airflow.page_access import (
    SERVICE_DAG_ID,
    PageAccess,
    airflow_access,
    airflow_control,
    hide_locations,
    location_scrubber,
)
from streamrep.airflow.page_data import ClusterHealth, blank_view, cluster_list, cluster_view
from streamrep.airflow.supervisor import ServiceAction
from streamrep.client.admin import StreamAdmin
from streamrep.errors import NotFound, StreamrepError, http_status
from streamrep.replication import service

if TYPE_CHECKING:
    from fastapi import FastAPI

STATIC = Path(__file__).parent / "static"
BUNDLE = "replication.js"
UI_ROUTE = "plugin/stream-replication"  # where Airflow's UI shows the page (the plugin's url_route)
VIEW_SECONDS = 5.0  # one cluster's answer: a slower cluster answers with this as its error
READERS = 8  # clusters read at once; more wait for a free reader, within their bound


class ClusterReads:
    """Reads clusters in threads of their own, each answer bounded by ``VIEW_SECONDS``. A read
    still running (of a cluster that hangs) is shared by the requests that come meanwhile, so a
    page refreshed every few seconds never piles up reads of the same cluster."""

    def __init__(self, workers: int = READERS):
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="streamrep-page")
        self._lock = threading.Lock()
        self._running: dict[str, Future[dict[str, Any]]] = {}

    def read(self, name: str, view: Callable[[], dict[str, Any]], seconds: float = VIEW_SECONDS) -> dict[str, Any]:
        with self._lock:
            future = self._running.get(name)
            if future is None or future.done():
                future = self._running[name] = self._pool.submit(view)
        try:
            return future.result(timeout=seconds)
        except FutureTimeout:
            raise StreamrepError(f"cluster {name} did not answer within {seconds:g} s") from None


def service_dag_paused() -> bool | None:
    """Whether the gateway supervisor DAG is paused; None when Airflow does not know it."""
    from airflow.models.dag import DagModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    try:
        with create_session() as session:
            return session.scalar(select(DagModel.is_paused).where(DagModel.dag_id == SERVICE_DAG_ID))
    except Exception:  # noqa: BLE001 - a database the API server cannot read: the page says "unknown"
        return None


def supervisor_note(paused: bool | None) -> str:
    """What the supervisor DAG will do about a start, as the page's hint says it."""
    if paused is None:
        return f"the {SERVICE_DAG_ID} DAG is not deployed here, so nothing starts them by itself"
    if paused:
        return f"the {SERVICE_DAG_ID} DAG is paused, so nothing starts them yet: unpause it"
    return f"the {SERVICE_DAG_ID} DAG starts them within a minute"


def create_app(
    hook_factory: Callable[[], StreamrepHook] = StreamrepHook,
    access: Callable[..., Awaitable[PageAccess]] = airflow_access,
    control: Callable[..., Awaitable[PageAccess]] = airflow_control,
    paused: Callable[[], bool | None] = service_dag_paused,
) -> FastAPI:
    """The FastAPI app of the page.

    :param hook_factory: makes the hook that resolves the clusters.
    :param access: the FastAPI dependency that authenticates and authorizes the caller.
    :param control: the same for starting and stopping gateways.
    :param paused: whether the gateway supervisor DAG is paused (None: not deployed).
    """
    from fastapi import Depends, FastAPI
    from fastapi.responses import JSONResponse, RedirectResponse
    from fastapi.staticfiles import StaticFiles

    app = FastAPI(title="streamrep: stream replication", docs_url=None, redoc_url=None, openapi_url=None)
    reads = ClusterReads()
    health = ClusterHealth()

    def reading_hook() -> StreamrepHook:
        hook = hook_factory()
        hook.clusters.read_only = True
        hook.clusters.before_open = health
        hook.discover_clusters()
        return hook

    def scrubbed(caller: PageAccess, hook: StreamrepHook, view: dict[str, Any]) -> dict[str, Any]:
        if caller.sees_locations:
            return view
        urls = [info.url for info in hook.clusters.list()]
        return hide_locations(view, location_scrubber(urls, hook.clusters.home))

    def error(status: int, message: str) -> JSONResponse:
        return JSONResponse({"error": message}, status_code=status)

    @app.get("/", include_in_schema=False)
    @app.get("/replication", include_in_schema=False)
    def to_the_ui() -> RedirectResponse:
        """The page lives in Airflow's UI; its old address leads there."""
        return RedirectResponse(f"../{UI_ROUTE}")

    @app.get("/api/clusters")
    def clusters(caller: PageAccess = Depends(access)) -> JSONResponse:
        hook = hook_factory()
        try:
            hook.discover_clusters()
            found = cluster_list(hook.clusters.list())
        except StreamrepError as err:
            return error(503, str(err))
        finally:
            hook.close()
        if not caller.sees_locations:
            found = [{**c, "url": None} for c in found]
        return JSONResponse(
            {
                "user": caller.user,
                "mayControl": caller.may_control,
                "seesLocations": caller.sees_locations,
                "service": {"dagId": SERVICE_DAG_ID, "paused": paused()},
                "clusters": found,
            }
        )

    @app.get("/api/clusters/{name}")
    def cluster(name: str, caller: PageAccess = Depends(access)) -> JSONResponse:
        hook = reading_hook()
        try:
            try:
                info = hook.clusters.get(name)
            except NotFound as err:
                return error(404, str(err))
            except StreamrepError as err:
                return error(400, str(err))

            def view() -> dict[str, Any]:
                start = time.monotonic()
                own = reading_hook()  # the read may outlive this request: it closes its own hook
                try:
                    return {**cluster_view(own.admin, info), "elapsedMs": round((time.monotonic() - start) * 1000)}
                finally:
                    own.close()

            try:
                answer = reads.read(name, view)
            except StreamrepError as err:
                answer = {**blank_view(info), "error": str(err)}
            return JSONResponse(scrubbed(caller, hook, answer))
        finally:
            hook.close()

    @app.post("/api/gateways/{cluster}/{action}")
    def gateway_control(cluster: str, action: str, caller: PageAccess = Depends(control)) -> JSONResponse:
        if action not in ("start", "stop"):
            return error(404, f"unknown action {action!r}: start or stop")
        hook = hook_factory()
        try:
            hook.discover_clusters()
            admin = StreamAdmin(hook.clusters, caller.identity)
            req = service.request(admin, cluster, ServiceAction(action).desired)
        except StreamrepError as err:
            return error(http_status(err), str(err))
        finally:
            hook.close()
        hint = service.next_step(req, supervisor_note(paused()))
        return JSONResponse({**presented.service_request_row(req), "requestedBy": caller.user, "hint": hint})

    app.mount("/static", StaticFiles(directory=STATIC, check_dir=False), name="static")
    return app
