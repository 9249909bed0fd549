"""The streamrep hook: cluster names resolved through Airflow connections, with the CLI's
registry (``STREAMREP_HOME``) as the fallback.

A cluster ``newyork`` is looked up as the connection ``streamrep_newyork`` (connection type
``streamrep``) whose ``host``, or ``extra.url``, is the cluster URL, e.g.
``embedded:/data/streamrep/newyork.db``::

    AIRFLOW_CONN_STREAMREP_NEWYORK='{"conn_type": "streamrep", "host": "embedded:/data/newyork.db"}'

A cluster with no such connection is taken from the registry the ``streamrep`` CLI uses
(``$STREAMREP_HOME/clusters.json``), so DAGs run on embedded clusters with no set-up at all.

The optional connection ``streamrep_default`` carries what is common to every cluster:
``extra.home`` (the registry folder instead of ``STREAMREP_HOME``), and ``login`` plus
``extra.groups`` (the identity the operators act as instead of ``STREAMREP_USER`` or the OS user).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from contextlib import contextmanager
from functools import cached_property
from typing import Any, Callable, Iterator

from airflow.sdk import BaseHook
from airflow.sdk.exceptions import AirflowException, AirflowFailException, AirflowNotFoundException

from streamrep.airflow.provider import CONN_TYPE, HOOK_NAME, UI_FIELD_BEHAVIOUR
from streamrep.client.admin import StreamAdmin
from streamrep.client.config import EMBEDDED_SCHEME, ClusterInfo, Clusters, default_home
from streamrep.client.identity import current_identity
from streamrep.errors import InvalidArgument, StreamrepError, Unavailable
from streamrep.model.ace import Identity
from streamrep.model.catalog import STREAM_KIND
from streamrep.model.paths import validate_cluster_name
from streamrep.store.embedded import EmbeddedStore

CLUSTER_CONN_PREFIX = "streamrep_"


def cluster_conn_id(cluster: str) -> str:
    """The Airflow connection id that defines ``cluster``: ``streamrep_<cluster>``."""
    return f"{CLUSTER_CONN_PREFIX}{cluster}"


def url_of(conn: Any) -> str:
    """The cluster URL a streamrep connection carries: ``extra.url``, else ``host``."""
    url = (conn.extra_dejson or {}).get("url") or conn.host or ""
    if not url.startswith(EMBEDDED_SCHEME) or len(url) == len(EMBEDDED_SCHEME):
        raise InvalidArgument(
            f"connection {conn.conn_id}: cluster url {url!r} is not supported; "
            f"set host or extra.url to {EMBEDDED_SCHEME}<file path>"
        )
    return url


class ConnectionClusters(Clusters):
    """The cluster registry with Airflow connections in front of it.

    :param home: the registry folder used for clusters with no connection.
    :param lookup: returns the URL of a cluster from its connection, or None if it has none.
    """

    def __init__(self, home: str | None, lookup: Callable[[str], str | None]):
        super().__init__(home)
        self._lookup = lookup
        self._from_connections: dict[str, str] = {}
        self._without_connection: set[str] = set()  # looked up once, not found

    def get(self, name: str) -> ClusterInfo:
        url = self._from_connections.get(name)
        if url is None and name not in self._without_connection:
            url = self._lookup(validate_cluster_name(name))
            if url is None:
                self._without_connection.add(name)
            else:
                self._from_connections[name] = url
        if url is not None:
            return ClusterInfo(name, url)
        return super().get(name)

    def list(self) -> list[ClusterInfo]:
        """Registered clusters, and those resolved through connections so far."""
        found = {c.name: c for c in super().list()}
        found.update({n: ClusterInfo(n, u) for n, u in self._from_connections.items()})
        return [found[n] for n in sorted(found)]

    @property
    def overridden(self) -> dict[str, str]:
        """Clusters whose location came from a connection, by name."""
        return dict(self._from_connections)


class StreamrepHook(BaseHook):
    """Interact with streamrep clusters: the admin API and the cluster registry.

    :param streamrep_conn_id: the connection with settings common to all clusters (optional;
        when it is not defined the environment is used, as the ``streamrep`` CLI does).
    :param home: the registry folder for clusters without a connection (default:
        the connection's ``extra.home``, else ``STREAMREP_HOME``, else ``~/.streamrep``).
    """

    conn_name_attr = "streamrep_conn_id"
    default_conn_name = "streamrep_default"
    conn_type = CONN_TYPE
    hook_name = HOOK_NAME

    def __init__(self, streamrep_conn_id: str = default_conn_name, home: str | None = None, **kwargs: Any):
        super().__init__(**kwargs)
        self.streamrep_conn_id = streamrep_conn_id
        self._home = home

    # -- connections ---------------------------------------------------------------
    def _connection(self, conn_id: str):
        try:
            return self.get_connection(conn_id)
        except AirflowNotFoundException:
            return None

    @cached_property
    def settings(self) -> dict[str, Any]:
        """The common settings: ``home``, ``user`` and ``groups`` (None where not set)."""
        conn = self._connection(self.streamrep_conn_id)
        extra = (conn.extra_dejson or {}) if conn else {}
        groups = extra.get("groups")
        if isinstance(groups, str):
            groups = groups.replace(",", " ").split()
        return {
            "home": self._home or extra.get("home") or default_home(),
            "user": (conn.login if conn else None) or None,
            "groups": groups,
        }

    def cluster_url(self, cluster: str) -> str | None:
        """The URL of ``cluster`` from its ``streamrep_<cluster>`` connection, or None."""
        conn_id = cluster_conn_id(cluster)
        conn = self._connection(conn_id)
        if conn is None:
            return None
        if conn.conn_type != self.conn_type:
            self.log.warning("connection %s is of type %s, not %s: cluster %s is taken from the registry",
                             conn_id, conn.conn_type, self.conn_type, cluster)
            return None
        if conn_id == self.streamrep_conn_id and not ((conn.extra_dejson or {}).get("url") or conn.host):
            return None  # the common-settings connection, not a cluster (a cluster named "default")
        return url_of(conn)

    # -- the core objects ------------------------------------------------------------
    @cached_property
    def clusters(self) -> ConnectionClusters:
        return ConnectionClusters(self.settings["home"], self.cluster_url)

    @cached_property
    def identity(self) -> Identity:
        """Who the operators act as: the connection's login, else the CLI's identity."""
        if self.settings["user"]:
            return Identity(user=self.settings["user"], groups=frozenset(self.settings["groups"] or ()))
        return current_identity()

    def get_conn(self) -> StreamAdmin:
        """The admin API over the clusters this hook resolves."""
        return StreamAdmin(self.clusters, self.identity)

    @cached_property
    def admin(self) -> StreamAdmin:
        return self.get_conn()

    def close(self) -> None:
        if "clusters" in self.__dict__:
            self.clusters.close()

    # -- for processes outside Airflow (Spark apps) ----------------------------------
    def process_env(self) -> dict[str, str]:
        """Environment for a child process (spark-submit) so that it sees the same clusters
        and acts as the same identity: ``STREAMREP_HOME`` and, if set, ``STREAMREP_USER``."""
        env = {"STREAMREP_HOME": self.registry_home()}
        if self.settings["user"]:
            env["STREAMREP_USER"] = self.settings["user"]
            env["STREAMREP_GROUPS"] = " ".join(self.settings["groups"] or ())
        return env

    def registry_home(self) -> str:
        """A registry folder that resolves every cluster the way this hook does.

        That is the hook's home unless connections override clusters; then it is a derived
        folder holding the registry with the connection URLs applied (named by a hash of its
        content, so the same configuration always yields the same folder).
        """
        home = self.clusters.home
        overridden = self.clusters.overridden
        if not overridden:
            return home
        data = self.clusters._read()
        data["clusters"].update({n: {"url": u} for n, u in overridden.items()})
        text = json.dumps(data, indent=2, sort_keys=True)
        digest = hashlib.sha256(text.encode()).hexdigest()[:16]
        derived = os.path.join(tempfile.gettempdir(), "streamrep-airflow", digest)
        os.makedirs(derived, exist_ok=True)
        target = os.path.join(derived, "clusters.json")
        if not os.path.exists(target):
            fd, tmp = tempfile.mkstemp(dir=derived, prefix=".clusters.")
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
            os.replace(tmp, target)
        return derived

    # -- the connection form and its test -------------------------------------------
    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        """The connection form, as declared in the provider info (the place Airflow 3 reads it)."""
        return {
            "hidden_fields": list(UI_FIELD_BEHAVIOUR["hidden-fields"]),
            "relabeling": dict(UI_FIELD_BEHAVIOUR["relabeling"]),
            "placeholders": dict(UI_FIELD_BEHAVIOUR["placeholders"]),
        }

    def test_connection(self) -> tuple[bool, str]:
        """Airflow's "Test" button: whether this connection's cluster store opens and its catalog
        reads (a connection without a cluster URL: whether its registry reads). Never raises.

        :return: ``(True, what was found)`` or ``(False, one-line reason)``.
        """
        try:
            conn = self.get_connection(self.streamrep_conn_id)
            if not ((conn.extra_dejson or {}).get("url") or conn.host):
                clusters = Clusters(self.settings["home"])
                names = [c.name for c in clusters.list()]
                return True, f"registry {clusters.registry_path} lists {len(names)} clusters: {' '.join(names) or '-'}"
            url = url_of(conn)
            name = conn.conn_id.removeprefix(CLUSTER_CONN_PREFIX)
            path = Clusters(self.settings["home"]).embedded_file(name, url)  # as the tasks resolve it
            if not os.path.isfile(path):  # opening would create an empty store: say so instead
                return False, f"no cluster store at {path}; create it with 'streamrep cluster add -url {url}'"
            store = EmbeddedStore(name, path)
            try:
                streams = store.catalog_list(STREAM_KIND)
            finally:
                store.close()
            return True, f"cluster {name} at {url}: store opened, {len(streams)} streams"
        except StreamrepError as err:
            return False, str(err)
        except Exception as err:  # noqa: BLE001 - the test button reports, it never raises
            first = (str(err).strip().splitlines() or [""])[0]
            return False, f"{type(err).__name__}: {first}" if first else type(err).__name__


@contextmanager
def user_errors() -> Iterator[None]:
    """Turn a streamrep error into a task failure carrying its one-line message.

    ``Unavailable`` (a cluster that cannot be reached) may pass with time, so it is retried;
    every other streamrep error is the user's to fix, so the task fails without retrying.
    """
    try:
        yield
    except Unavailable as err:
        raise AirflowException(f"streamrep: {err}") from None
    except StreamrepError as err:
        raise AirflowFailException(f"streamrep: {err}") from None
