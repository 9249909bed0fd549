"""The Airflow plugin: the "Stream replication" page in the Airflow 3 UI, one-line errors for a
bad param of a streamrep DAG, and the connections list's Test button for streamrep connections
(``connection_test``).

The page is a React app plugin (``react_apps``): Airflow's UI loads its bundle and renders it in
its own page at ``/plugin/stream-replication``, with Airflow's React, Chakra UI and theme, under
a "Replication" entry of the navigation bar. The bundle and the data it reads are served by a
FastAPI app that the API server mounts at ``/streamrep`` (``streamrep.airflow.page``).
"""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path
from typing import Any

from airflow.plugins_manager import AirflowPlugin

from streamrep.airflow.connection_test import MIDDLEWARE as CONNECTION_TEST
from streamrep.airflow.page import BUNDLE, create_app
from streamrep.airflow.params import PARAM_ERROR_PREFIX, names_a_streamrep_pattern, one_line_param_error

URL_PREFIX = "/streamrep"
URL_ROUTE = "stream-replication"


def static_url(name: str) -> str:
    """An absolute path to one of the page's static files, under the API server's [api] base_url
    path. Absolute, because Airflow 3.2's UI imports ``bundle_url`` as it is (a relative one is
    a bare module specifier there), while 3.3's resolves it against the page's <base>."""
    from urllib.parse import urlsplit

    from airflow.configuration import conf

    base = urlsplit(conf.get("api", "base_url", fallback="") or "").path.rstrip("/")
    return f"{base}{URL_PREFIX}/static/{name}"


def package_dag_ids() -> frozenset[str]:
    """The package's DAGs: each module of ``streamrep.dags`` holds one, named after the module.
    Found without importing them (the API server does not parse DAGs)."""
    spec = importlib.util.find_spec("streamrep.dags")
    folders = (spec.submodule_search_locations or []) if spec else []
    return frozenset(path.stem for folder in folders for path in Path(folder).glob("stream_*.py"))


DAG_IDS = package_dag_ids()
TRIGGER_PATH = re.compile(r"^/api/v2/dags/(?P<dag_id>[^/]+)/dagRuns/?$")  # the REST trigger and the UI's form


class OneLineParamErrors:
    """ASGI middleware of the API server: the 400 that a trigger with a bad param gets
    (``Invalid input for param path: ...`` followed by jsonschema's dump of the schema) keeps only
    its first line, with a streamrep pattern said in words, for streamrep's DAGs and for any DAG
    whose param uses a streamrep pattern (``streamrep.airflow.params``). Other answers pass as
    they are. Airflow's Param schema has no field for an error message of its own."""

    def __init__(self, app: Any):
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        match = TRIGGER_PATH.match(scope.get("path", "")) if scope["type"] == "http" else None
        if match is None or scope.get("method") != "POST":
            await self.app(scope, receive, send)
            return
        dag_id = match.group("dag_id")
        held: dict[str, Any] = {}
        chunks: list[bytes] = []

        async def rewrite(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start" and message["status"] == 400:
                held["start"] = message  # sent with the body, whose length may change
                return
            if "start" not in held:
                await send(message)
                return
            chunks.append(message.get("body", b""))
            if message.get("more_body"):
                return
            body = shortened(dag_id, b"".join(chunks))
            headers = [(k, v) for k, v in held["start"]["headers"] if k.lower() != b"content-length"]
            await send({**held["start"], "headers": [*headers, (b"content-length", str(len(body)).encode())]})
            await send({"type": "http.response.body", "body": body})

        await self.app(scope, receive, rewrite)


def shortened(dag_id: str, body: bytes) -> bytes:
    """A 400 answer's JSON body with its param error in one line, where it is streamrep's."""
    try:
        answer = json.loads(body)
    except ValueError:
        return body
    detail = answer.get("detail") if isinstance(answer, dict) else None
    if not isinstance(detail, str) or not detail.startswith(PARAM_ERROR_PREFIX):
        return body
    if dag_id not in DAG_IDS and not names_a_streamrep_pattern(detail):
        return body
    return json.dumps({**answer, "detail": one_line_param_error(detail)}).encode()


class StreamrepPlugin(AirflowPlugin):
    """Serves the replication page, puts it in the UI's navigation, shortens param errors, and
    lets the UI's Test button test streamrep connections."""

    name = "streamrep"
    fastapi_apps = [{"app": create_app(), "url_prefix": URL_PREFIX, "name": "Stream replication"}]
    fastapi_root_middlewares = [
        {"middleware": OneLineParamErrors, "args": [], "kwargs": {}, "name": "streamrep one-line param errors"},
        CONNECTION_TEST,
    ]
    react_apps = [
        {
            # The navigation bar's label: its 56 px show "Replication" whole, not "Stream replication".
            # The UI finds the component as globalThis[name], else AirflowPlugin (which the bundle sets).
            "name": "Replication",
            "bundle_url": static_url(BUNDLE),
            "url_route": URL_ROUTE,
            "destination": "nav",
            "icon": static_url("icon.svg"),
        }
    ]
