"""Per-process state of the Spark code (drivers and Python workers alike), never pickled: the
admin API over a STREAMREP_HOME and the gateways, each opened once per process.

Nothing open (store, connection, lock) is kept on the objects Spark pickles: stores are opened
inside ``read``/``write``/``latestOffset`` and the tasks, through these.
"""

from __future__ import annotations

import os

from streamrep.client.admin import StreamAdmin
from streamrep.client.config import Clusters, default_home
from streamrep.replication.gateway import Gateway

_ADMINS: dict[str, StreamAdmin] = {}
_GATEWAYS: dict[tuple[str, str, str], Gateway] = {}


def resolve_home(home: str | None) -> str:
    return os.path.abspath(home) if home else default_home()


def admin_for(home: str | None) -> StreamAdmin:
    """This process's admin API over ``home`` (STREAMREP_HOME if None), opened once."""
    key = resolve_home(home)
    admin = _ADMINS.get(key)
    if admin is None:
        admin = _ADMINS[key] = StreamAdmin(Clusters(key))
    return admin


def gateway_for(home: str | None, cluster: str, gateway_id: str) -> Gateway:
    key = (resolve_home(home), cluster, gateway_id)
    gateway = _GATEWAYS.get(key)
    if gateway is None:
        gateway = _GATEWAYS[key] = Gateway(admin_for(home), cluster, gateway_id)
    return gateway
