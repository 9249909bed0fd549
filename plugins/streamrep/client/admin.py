"""The admin API: everything ``maprcli stream ...``, ``maprcli cluster gateway ...`` and
``cluster ace ...`` do, as one class users construct, ``StreamAdmin``.

Each method checks the stream's (or the cluster's) access control expression for the caller,
applies the rules from ``streamrep.model``, and changes one catalog document atomically, so
every call is safe to retry: it finds the state it wanted or fails with a clear error.

``StreamAdmin`` is assembled from one mixin per command group, each a module of its own:
``streams.py`` (streams and topics), ``links.py`` (replicas and upstreams, and what the engine
records about them), ``cluster_admin.py`` (cluster ACEs and gateway lists), all on
``permissions.py`` (the caller, the checks, and the private catalog they are made against).
Mixins rather than composition because every group needs the same caller, checks and catalog,
and calls the checks dozens of times: as methods of one object they need no delegating layer,
and ``admin.require(...)``, ``admin.create_stream(...)`` stay where users and the engine call them.
The unchecked catalog (``client/catalog.py``) is ``_catalog``: nothing outside ``client/`` reaches it.
"""

from __future__ import annotations

from streamrep.client.cluster_admin import ClusterCommands
from streamrep.client.links import LinkCommands
from streamrep.client.streams import StreamCommands

__all__ = ["StreamAdmin"]


class StreamAdmin(StreamCommands, LinkCommands, ClusterCommands):
    """Stream, topic, replica, upstream and gateway administration for one identity.

    :param clusters: the cluster registry (``Clusters()`` reads ``STREAMREP_HOME``).
    :param identity: who is calling; the configured or OS user if None.
    """
