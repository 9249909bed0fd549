"""The Airflow plugin: the "Stream replication" page in the Airflow 3 UI.

The page is a FastAPI app mounted by the API server at ``/streamrep`` and shown inside the
UI as an external view at ``/plugin/stream-replication`` (a "Stream replication" entry in the
navigation bar).
"""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

from streamrep.airflow.page import create_app

URL_PREFIX = "/streamrep"
PAGE = f"{URL_PREFIX}/replication"
URL_ROUTE = "stream-replication"


class StreamrepPlugin(AirflowPlugin):
    """Serves the replication page and puts it in the UI's navigation."""

    name = "streamrep"
    fastapi_apps = [{"app": create_app(), "url_prefix": URL_PREFIX, "name": "Stream replication"}]
    external_views = [
        {
            "name": "Stream replication",
            "href": PAGE,
            "url_route": URL_ROUTE,
            "destination": "nav",
            "nav_top_level": True,
        }
    ]
