"""Airflow finds this module in its plugins folder: the streamrep plugin (the "Stream
replication" page). The code is in the ``streamrep`` package (``streamrep.airflow``)."""

from streamrep.airflow.plugin import StreamrepPlugin

__all__ = ["StreamrepPlugin"]
