"""The streamrep hook: cluster names resolved through Airflow connections, with the CLI's
registry (``STREAMREP_HOME``) as the fallback.

A cluster ``newyork`` is looked up as the connection ``streamrep_newyork`` (connection type
``streamrep``) whose ``host``, or ``extra.url``, is the cluster URL: ``embedded:<file>`` or
``kafka://host:port[,host:port...]``. A Kafka cluster's client settings are the object
``extra.kafka``, passed to confluent-kafka unchanged (``streamrep.namespace`` among them is
streamrep's own), as ``streamrep cluster add -configfile`` takes them::

    AIRFLOW_CONN_STREAMREP_NEWYORK='{"conn_type": "streamrep", "host": "embedded:/data/newyork.db"}'
    AIRFLOW_CONN_STREAMREP_BOSTON='{"conn_type": "streamrep", "host": "kafka://kafka1:9092,kafka2:9092",
        "extra": {"kafka": {"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN",
                            "sasl.username": "streamrep", "sasl.password": "...", "streamrep.namespace": "prod"}}}'

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
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from functools import cached_property
from typing import Any

from airflow.sdk import BaseHook, Connection
from airflow.sdk.exceptions import AirflowException, AirflowFailException, AirflowNotFoundException

from streamrep.airflow.provider import CONN_TYPE, HOOK_NAME, UI_FIELD_BEHAVIOUR
from streamrep.client.admin import StreamAdmin
from streamrep.client.config import (
    EMBEDDED_SCHEME,
    KAFKA_SCHEME,
    ClusterInfo,
    Clusters,
    default_home,
    kafka_bootstrap,
    open_store,
)
from streamrep.client.identity import current_identity
from streamrep.errors import InvalidArgument, StreamrepError, Unavailable
from streamrep.model.ace import Identity
from streamrep.model.catalog import STREAM_KIND
from streamrep.model.paths import validate_cluster_name
from streamrep.store.embedded import EmbeddedStore

CLUSTER_CONN_PREFIX = "streamrep_"
# The connection the Spark operators define when no Spark connection is (operators/spark_submit.py):
# named like a cluster's, but not one.
LOCAL_SPARK_CONN_ID = "streamrep_spark_local"
KAFKA_SETTINGS_EXTRA = "kafka"  # extra.kafka: a Kafka cluster's client settings


def cluster_conn_id(cluster: str) -> str:
    """The Airflow connection id that defines ``cluster``: ``streamrep_<cluster>``."""
    return f"{CLUSTER_CONN_PREFIX}{cluster}"


def url_of(conn: Any) -> str:
    """The cluster URL a streamrep connection carries: ``extra.url``, else ``host``."""
    url = ((conn.extra_dejson or {}).get("url") or conn.host or "").strip()
    if url.startswith(KAFKA_SCHEME):
        try:
            return KAFKA_SCHEME + kafka_bootstrap(url)
        except InvalidArgument as err:
            raise InvalidArgument(f"connection {conn.conn_id}: {err}") from None
    if not url.startswith(EMBEDDED_SCHEME) or len(url) == len(EMBEDDED_SCHEME):
        raise InvalidArgument(
            f"connection {conn.conn_id}: cluster url {url!r} is not supported; "
            f"set host or extra.url to {EMBEDDED_SCHEME}<file path> or {KAFKA_SCHEME}host:port[,host:port...]"
        )
    return url


def cluster_of(conn: Any, name: str) -> ClusterInfo:
    """The cluster a streamrep connection defines: its URL and, for Kafka, the client settings
    of ``extra.kafka`` (an object of setting names to strings, numbers or booleans)."""
    url = url_of(conn)
    settings = (conn.extra_dejson or {}).get(KAFKA_SETTINGS_EXTRA)
    if settings is None:
        return ClusterInfo(name, url)
    if not url.startswith(KAFKA_SCHEME):
        raise InvalidArgument(
            f"connection {conn.conn_id}: extra.{KAFKA_SETTINGS_EXTRA} applies only to {KAFKA_SCHEME} clusters"
        )
    if not isinstance(settings, dict) or not all(
        isinstance(value, (str, int, float, bool)) for value in settings.values()
    ):
        raise InvalidArgument(
            f"connection {conn.conn_id}: extra.{KAFKA_SETTINGS_EXTRA} must be an object of "
            'Kafka client settings, e.g. {"security.protocol": "SASL_SSL"}'
        )
    return ClusterInfo(name, url, dict(settings))


def validated_conn_ids(conn_ids: Any) -> dict[str, str]:
    """``cluster_conn_ids`` as given to a hook or operator: cluster names to connection ids."""
    if not conn_ids:
        return {}
    if not isinstance(conn_ids, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) and v for k, v in conn_ids.items()
    ):
        raise InvalidArgument(
            f'cluster_conn_ids must map cluster names to connection ids, e.g. {{"newyork": "ny_prod"}}, not {conn_ids!r}'
        )
    return {validate_cluster_name(k): v for k, v in conn_ids.items()}


def registry_entry(info: ClusterInfo) -> dict[str, Any]:
    """A cluster as the registry (``clusters.json``) holds it."""
    return {"url": info.url, **({"settings": dict(info.settings)} if info.settings else {})}


class ConnectionClusters(Clusters):
    """The cluster registry with Airflow connections in front of it.

    :param home: the registry folder used for clusters with no connection.
    :param lookup: returns a cluster as its connection defines it, or None if it has none.
    """

    def __init__(self, home: str | None, lookup: Callable[[str], ClusterInfo | None]):
        super().__init__(home)
        self._lookup = lookup
        self._from_connections: dict[str, ClusterInfo] = {}
        self._without_connection: set[str] = set()  # looked up once, not found

    def get(self, name: str) -> ClusterInfo:
        info = self._from_connections.get(name)
        if info is None and name not in self._without_connection:
            info = self._lookup(validate_cluster_name(name))
            if info is None:
                self._without_connection.add(name)
            else:
                self._from_connections[name] = info
        if info is not None:
            return info
        return super().get(name)

    def list(self) -> list[ClusterInfo]:
        """Registered clusters, and those resolved through connections so far."""
        found = {c.name: c for c in super().list()}
        found.update(self._from_connections)
        return [found[n] for n in sorted(found)]

    @property
    def overridden(self) -> dict[str, dict[str, Any]]:
        """Clusters that came from a connection, by name, as registry entries (JSON-ready)."""
        return {name: registry_entry(info) for name, info in self._from_connections.items()}

    @staticmethod
    def lookup_in(entries: dict[str, Any]) -> Callable[[str], ClusterInfo | None]:
        """A lookup over registry entries such as :attr:`overridden` (a trigger's serialized clusters)."""

        def lookup(name: str) -> ClusterInfo | None:
            entry = entries.get(name)
            if entry is None:
                return None
            if isinstance(entry, str):  # serialized by an older version: the URL only
                return ClusterInfo(name, entry)
            return ClusterInfo(name, entry["url"], entry.get("settings") or {})

        return lookup


class StreamrepHook(BaseHook):
    """Interact with streamrep clusters: the admin API and the cluster registry.

    :param streamrep_conn_id: the connection with settings common to all clusters (optional;
        when it is not defined the environment is used, as the ``streamrep`` CLI does).
    :param home: the registry folder for clusters without a connection (default:
        the connection's ``extra.home``, else ``STREAMREP_HOME``, else ``~/.streamrep``).
    :param cluster_conn_ids: the connection of a cluster, by cluster name, where it is not
        ``streamrep_<cluster>`` (``{"newyork": "ny_prod"}``); other clusters keep the convention.
    """

    conn_name_attr = "streamrep_conn_id"
    default_conn_name = "streamrep_default"
    conn_type = CONN_TYPE
    hook_name = HOOK_NAME

    def __init__(
        self,
        streamrep_conn_id: str = default_conn_name,
        home: str | None = None,
        cluster_conn_ids: Mapping[str, str] | None = None,
        **kwargs: Any,
    ):
        super().__init__(**kwargs)
        self.streamrep_conn_id = streamrep_conn_id
        self._home = home
        self.cluster_conn_ids = validated_conn_ids(cluster_conn_ids)

    # -- connections ---------------------------------------------------------------
    def _connection(self, conn_id: str) -> Connection | None:
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

    def cluster_from_connection(self, cluster: str) -> ClusterInfo | None:
        """``cluster`` as its connection defines it (``cluster_conn_ids``, else
        ``streamrep_<cluster>``), or None. A connection named in ``cluster_conn_ids`` must exist."""
        conn_id = self.cluster_conn_ids.get(cluster) or cluster_conn_id(cluster)
        conn = self._connection(conn_id)
        if conn is None:
            if cluster in self.cluster_conn_ids:  # named on purpose: falling back would pick another cluster
                raise InvalidArgument(f"cluster {cluster}: connection {conn_id} is not defined")
            return None
        if conn.conn_type != self.conn_type:
            if cluster in self.cluster_conn_ids:
                raise InvalidArgument(
                    f"cluster {cluster}: connection {conn_id} is of type {conn.conn_type}, not {self.conn_type}"
                )
            self.log.warning(
                "connection %s is of type %s, not %s: cluster %s is taken from the registry",
                conn_id,
                conn.conn_type,
                self.conn_type,
                cluster,
            )
            return None
        if conn_id == self.streamrep_conn_id and not ((conn.extra_dejson or {}).get("url") or conn.host):
            return None  # the common-settings connection, not a cluster (a cluster named "default")
        return cluster_of(conn, cluster)

    # -- the core objects ------------------------------------------------------------
    @cached_property
    def clusters(self) -> ConnectionClusters:
        return ConnectionClusters(self.settings["home"], self.cluster_from_connection)

    @cached_property
    def identity(self) -> Identity:
        """Who the operators act as: the connection's login, else the CLI's identity."""
        if self.settings["user"]:
            return Identity(user=self.settings["user"], groups=frozenset(self.settings["groups"] or ()))
        return current_identity()

    def get_conn(self) -> StreamAdmin:
        """The admin API over the clusters this hook resolves."""
        # Only a connection's user names an identity; else the admin decides as the CLI does.
        return StreamAdmin(self.clusters, self.identity if self.settings["user"] else None)

    @cached_property
    def admin(self) -> StreamAdmin:
        return self.get_conn()

    def close(self) -> None:
        if "clusters" in self.__dict__:
            self.clusters.close()

    def discover_clusters(self) -> None:
        """Resolve every cluster a ``streamrep_<cluster>`` connection defines, so that
        ``clusters.list()`` names them too (``discover_connection_clusters``)."""
        discover_connection_clusters(self.clusters)

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
        folder holding the registry with the connections' clusters applied (named by a hash of its
        content, so the same configuration always yields the same folder). The file is readable by
        its owner only: a Kafka cluster's settings may hold credentials.
        """
        home = self.clusters.home
        overridden = self.clusters.overridden
        if not overridden:
            return home
        data = self.clusters._read()
        data["clusters"].update(overridden)
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
        """Airflow's "Test" button: whether this connection's cluster can be read, changing nothing.
        An embedded cluster: its store file opens read-only and its catalog reads (a missing file is
        reported, never created). A Kafka cluster: the brokers answer and its catalog reads (under the
        connection's namespace). A connection without a cluster URL: whether its registry reads.
        Never raises.

        Airflow tests a connection under a throwaway id (a random string, not the id being edited),
        so a connection not named ``streamrep_<cluster>`` is named by its URL, never by that id.

        :return: ``(True, what was found)`` or ``(False, one-line reason)``.
        """
        conn = None
        try:
            conn = self.get_connection(self.streamrep_conn_id)
            if not ((conn.extra_dejson or {}).get("url") or conn.host):
                clusters = Clusters(self.settings["home"])
                names = [c.name for c in clusters.list()]
                return True, f"registry {clusters.registry_path} lists {len(names)} clusters: {' '.join(names) or '-'}"
            named = conn.conn_id.startswith(CLUSTER_CONN_PREFIX)
            # unnamed, the URL stands for the name in the stores' messages too ("cluster kafka://...: ...")
            info = cluster_of(conn, conn.conn_id.removeprefix(CLUSTER_CONN_PREFIX) if named else url_of(conn))
            where = f"cluster {info.name} at {info.url}" if named else f"cluster at {info.url}"
            if info.kind == "kafka":
                return True, f"{where}{self._test_kafka(info)}"
            path = Clusters(self.settings["home"]).embedded_file(info.name, info.url)  # as the tasks resolve it
            if not os.path.isfile(path):
                return False, f"no cluster store at {path}; create it with 'streamrep cluster add -url {info.url}'"
            store = EmbeddedStore(info.name, path, read_only=True)
            try:
                streams = store.catalog_list(STREAM_KIND)
            finally:
                store.close()
            return True, f"{where}: store opened, {len(streams)} streams"
        except StreamrepError as err:
            message = str(err)
            if conn is not None and not conn.conn_id.startswith(CLUSTER_CONN_PREFIX):
                message = message.removeprefix(f"connection {conn.conn_id}: ")  # the throwaway id says nothing
            return False, message
        except Exception as err:  # noqa: BLE001 - the test button reports, it never raises
            first = (str(err).strip().splitlines() or [""])[0]
            return False, f"{type(err).__name__}: {first}" if first else type(err).__name__

    @staticmethod
    def _test_kafka(info: ClusterInfo) -> str:
        """What the test button found in a Kafka cluster (after its name and URL); a cluster that
        cannot be reached raises ``Unavailable`` within the store's timeout."""
        from streamrep.store.kafka import NAMESPACE_SETTING  # confluent-kafka only where Kafka is used

        store = open_store(info, "", read_only=True)  # a cluster streamrep has not used stays untouched
        try:
            streams = store.catalog_list(STREAM_KIND)
        finally:
            store.close()
        namespace = info.settings.get(NAMESPACE_SETTING)
        return f"{f' (namespace {namespace})' if namespace else ''}: Kafka reached, {len(streams)} streams"


# Connections named like a cluster's (``streamrep_*``) that define none.
NOT_CLUSTER_CONNS = {StreamrepHook.default_conn_name, LOCAL_SPARK_CONN_ID}


def discover_connection_clusters(clusters: ConnectionClusters) -> None:
    """Resolve the clusters defined by ``streamrep_<cluster>`` connections (environment and,
    in the API server, the metadata database), so that ``clusters.list()`` names them too
    (``clusters``: a hook's ``clusters``)."""
    names: set[str] = set()
    for key in os.environ:
        if key.startswith("AIRFLOW_CONN_" + CLUSTER_CONN_PREFIX.upper()):
            names.add(key[len("AIRFLOW_CONN_") :].lower())
    try:
        from airflow.models.connection import Connection
        from airflow.utils.session import create_session

        with create_session() as session:
            names.update(
                cid
                for (cid,) in session.query(Connection.conn_id).filter(Connection.conn_type == StreamrepHook.conn_type)
            )
    except Exception:  # noqa: BLE001 - no metadata database here: the environment is enough
        pass
    for conn_id in sorted(names - NOT_CLUSTER_CONNS):
        if conn_id.startswith(CLUSTER_CONN_PREFIX):
            try:
                clusters.get(conn_id[len(CLUSTER_CONN_PREFIX) :])
            except (StreamrepError, ValueError):
                continue


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
