"""Where clusters are: the registry under ``STREAMREP_HOME`` that the CLI, Spark apps and
Airflow (as its fallback) all read.

``STREAMREP_HOME`` defaults to ``~/.streamrep``. It holds ``clusters.json`` and, for each
embedded cluster, ``clusters/<name>.db``.

A store has one identity (its store id), so it is registered under one name only.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import tempfile
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from streamrep.errors import AlreadyExists, CorruptStore, InvalidArgument, NotFound, Unavailable
from streamrep.model.paths import validate_cluster_name
from streamrep.store.base import Store
from streamrep.store.embedded import EmbeddedStore

EMBEDDED_SCHEME = "embedded:"
KAFKA_SCHEME = "kafka://"


def default_home() -> str:
    return os.environ.get("STREAMREP_HOME") or os.path.join(os.path.expanduser("~"), ".streamrep")


BOOTSTRAP_SERVER = re.compile(r"^[A-Za-z0-9._-]+:[0-9]{1,5}$")


@dataclass(frozen=True)
class ClusterInfo:
    """A registered cluster. ``url`` is ``embedded:<file>`` or ``kafka://host:port,...``;
    ``settings`` are a Kafka cluster's client settings (passed to confluent-kafka unchanged)."""

    name: str
    url: str
    settings: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False)

    @property
    def kind(self) -> str:
        return "kafka" if self.url.startswith(KAFKA_SCHEME) else "embedded"

    @property
    def principal(self) -> str | None:
        """The user the cluster's settings authenticate as (SASL with a user name: SCRAM or PLAIN),
        else None: then the cluster does not say who is calling."""
        protocol = str(self.settings.get("security.protocol", "")).upper()
        user = self.settings.get("sasl.username")
        return str(user) if protocol.startswith("SASL") and user else None


def kafka_bootstrap(url: str) -> str:
    """The bootstrap servers of a ``kafka://host:port[,host:port...]`` url."""
    servers = url[len(KAFKA_SCHEME) :].strip().rstrip("/")
    if not servers or not all(
        BOOTSTRAP_SERVER.fullmatch(s) and 0 < int(s.rsplit(":", 1)[1]) < 65536 for s in servers.split(",")
    ):
        raise InvalidArgument(f"invalid cluster url {url!r}: expected kafka://host:port[,host:port...]")
    return servers


def read_client_settings(path: str) -> dict[str, str]:
    """Kafka client settings from a properties file (``key=value`` lines, ``#`` comments), as
    Kafka's own tools take with ``--command-config``."""
    try:
        with open(os.path.expanduser(path), encoding="utf-8") as f:
            lines = f.read().splitlines()
    except (OSError, UnicodeDecodeError) as err:
        raise InvalidArgument(f"cannot read client settings {path}: {getattr(err, 'strerror', None) or err}") from None
    settings = {}
    for number, line in enumerate(lines, 1):
        line = line.strip()
        if not line or line.startswith(("#", "!")):
            continue
        key, sep, value = line.partition("=")
        if not sep or not key.strip():
            raise InvalidArgument(f"{path} line {number}: expected key=value")
        settings[key.strip()] = value.strip()
    return settings


def open_store(info: ClusterInfo, embedded_file: str, create: bool = True, read_only: bool = False) -> Store:
    """The store of a cluster, by its url's scheme. ``read_only``: for a reader that must change
    nothing (the page): a missing store, or a Kafka cluster's missing internal topics, is an error."""
    if info.kind == "kafka":
        from streamrep.store.kafka import KafkaStore  # confluent-kafka only where a Kafka cluster is used

        return KafkaStore(info.name, kafka_bootstrap(info.url), info.settings, create_internal=not read_only)
    return EmbeddedStore(info.name, embedded_file, create=create, read_only=read_only)


class Clusters:
    """The cluster registry, and one store per cluster.

    :param home: the folder holding the registry; ``STREAMREP_HOME`` or ``~/.streamrep`` if None.
    """

    def __init__(self, home: str | None = None):
        self.home = os.path.abspath(home or default_home())
        self._stores: dict[str, Store] = {}
        # A reader that must change nothing (the page) sets these: stores are opened, never created,
        # and ``before_open`` may refuse a cluster (raising) before its store is opened.
        self.read_only = False
        self.before_open: Callable[[ClusterInfo], None] | None = None

    @property
    def registry_path(self) -> str:
        return os.path.join(self.home, "clusters.json")

    def _read(self) -> dict[str, Any]:
        try:
            with open(self.registry_path, encoding="utf-8") as f:
                data = json.load(f)
        except FileNotFoundError:
            return {"default": None, "clusters": {}}
        except (OSError, ValueError) as err:
            raise Unavailable(f"cannot read cluster registry {self.registry_path}: {err}") from None
        if not isinstance(data, dict) or not isinstance(data.get("clusters"), dict):
            raise Unavailable(f"cluster registry {self.registry_path} is corrupt: expected {{'clusters': {{...}}}}")
        for name, entry in data["clusters"].items():
            if not isinstance(entry, dict) or not isinstance(entry.get("url"), str):
                raise Unavailable(f"cluster registry {self.registry_path} is corrupt: cluster {name!r} has no url")
        if data.get("default") is not None and not isinstance(data["default"], str):
            raise Unavailable(f"cluster registry {self.registry_path} is corrupt: 'default' is not a cluster name")
        return data

    @contextmanager
    def _editing(self) -> Iterator[dict[str, Any]]:
        """Read-modify-write the registry under a file lock, replacing it atomically."""
        try:
            os.makedirs(self.home, mode=0o700, exist_ok=True)  # the registry may hold Kafka credentials
            lock = os.fdopen(os.open(os.path.join(self.home, ".clusters.lock"), os.O_CREAT | os.O_WRONLY, 0o600), "a")
        except OSError as err:
            raise Unavailable(f"cannot write to STREAMREP_HOME {self.home}: {err.strerror}") from None
        with lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            data = self._read()
            yield data
            fd, tmp = tempfile.mkstemp(dir=self.home, prefix=".clusters.")
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(data, f, indent=2, sort_keys=True)
            os.replace(tmp, self.registry_path)

    # -- registry ------------------------------------------------------------------
    def list(self) -> list[ClusterInfo]:
        data = self._read()
        return [ClusterInfo(n, c["url"], c.get("settings") or {}) for n, c in sorted(data["clusters"].items())]

    @property
    def default(self) -> str | None:
        """The cluster a path without ``/mapr/<cluster>`` refers to."""
        return os.environ.get("STREAMREP_DEFAULT_CLUSTER") or self._read().get("default")

    def get(self, name: str) -> ClusterInfo:
        entry = self._read()["clusters"].get(name)
        if entry is None:
            raise NotFound(f"cluster {name} is not known; add it with 'streamrep cluster add -name {name}'")
        return ClusterInfo(name, entry["url"], entry.get("settings") or {})

    def add(
        self, name: str, url: str | None = None, default: bool = False, settings: Mapping[str, Any] | None = None
    ) -> ClusterInfo:
        """Register a cluster; without ``url`` it is an embedded cluster under ``home``.
        A relative ``embedded:`` file is taken from the current directory and stored absolute.
        A ``kafka://`` cluster must be reachable; ``settings`` are its client settings. The first
        cluster added becomes the default. A store already registered under another name (by
        any path to it, or by its store id) is refused."""
        validate_cluster_name(name)
        given = bool(url)  # the default file's folder under home is made; a given one's must exist
        url = url or f"{EMBEDDED_SCHEME}{os.path.join(self.home, 'clusters', name + '.db')}"
        if url.startswith(KAFKA_SCHEME):
            url = KAFKA_SCHEME + kafka_bootstrap(url)
        elif settings:
            raise InvalidArgument("client settings apply only to kafka:// clusters")
        elif not url.startswith(EMBEDDED_SCHEME) or not url[len(EMBEDDED_SCHEME) :].strip():
            raise InvalidArgument(f"invalid cluster url {url!r}: expected embedded:<file path> or kafka://host:port")
        else:
            url = EMBEDDED_SCHEME + os.path.abspath(os.path.expanduser(url[len(EMBEDDED_SCHEME) :]))
            folder = os.path.dirname(url[len(EMBEDDED_SCHEME) :])
            if given and not os.path.isdir(folder):  # a typo must not make folders anywhere (as root: anywhere)
                raise InvalidArgument(
                    f"cannot add cluster {name}: folder {folder} does not exist (an embedded cluster is a file in "
                    "a folder you made)"
                )
        info = ClusterInfo(name, url, dict(settings or {}))
        with self._editing() as data:
            if name in data["clusters"]:
                raise AlreadyExists(f"cluster {name} already exists")
            # Open (creating) the store before registering, so a bad location or a Kafka cluster
            # that cannot be reached fails here and leaves nothing registered.
            store = open_store(info, url[len(EMBEDDED_SCHEME) :])
            try:
                store_id = store.store_id()
                self._refuse_registered(data, store, store_id)
            except (AlreadyExists, Unavailable, CorruptStore):
                store.close()
                raise
            data["clusters"][name] = {"url": url, **({"settings": info.settings} if info.settings else {})}
            if default or not data.get("default"):
                data["default"] = name
        self._stores[name] = store
        return info

    def _refuse_registered(self, data: dict[str, Any], store: Store, store_id: str) -> None:
        """AlreadyExists if ``store`` is the store of a registered cluster: the same file by
        another path, or the same store id."""
        real = os.path.realpath(store.path) if isinstance(store, EmbeddedStore) else None
        for other, entry in sorted(data["clusters"].items()):
            info = ClusterInfo(other, entry["url"], entry.get("settings") or {})
            if (info.kind == "kafka") != (real is None):
                continue  # a Kafka cluster and an embedded file are never the same store
            try:
                path = self.embedded_file(other, entry["url"]) if real else ""
                same = (real is not None and os.path.realpath(path) == real) or self._read_store_id(
                    info, path
                ) == store_id
            except (Unavailable, CorruptStore):
                same = False  # an unreadable cluster cannot be compared; its own commands say why
            if same:
                raise AlreadyExists(f"this store is already registered as cluster {other} (store id {store_id})")

    @staticmethod
    def _read_store_id(info: ClusterInfo, path: str) -> str:
        """The id kept in a registered store (the store is the one place it is kept)."""
        store = open_store(info, path, create=False)
        try:
            return store.store_id()
        finally:
            store.close()

    def set_default(self, name: str) -> None:
        """Make the registered cluster ``name`` the default."""
        with self._editing() as data:
            if name not in data["clusters"]:
                raise NotFound(f"cluster {name} is not known")
            data["default"] = name

    def remove(self, name: str) -> ClusterInfo:
        """Forget a cluster. Its data file is left in place, so nothing is lost. Removing the
        default cluster leaves no default: short paths then fail rather than switch cluster."""
        with self._editing() as data:
            entry = data["clusters"].pop(name, None)
            if entry is None:
                raise NotFound(f"cluster {name} is not known")
            if data.get("default") == name:
                data["default"] = None
        store = self._stores.pop(name, None)
        if store:
            store.close()
        return ClusterInfo(name, entry["url"])

    # -- stores --------------------------------------------------------------------
    def embedded_file(self, name: str, url: str) -> str:
        """The file of an ``embedded:`` url from the registry; a relative one is taken from
        the registry's folder (never the current directory)."""
        if not url.startswith(EMBEDDED_SCHEME) or not url[len(EMBEDDED_SCHEME) :].strip():
            raise Unavailable(
                f"cluster registry {self.registry_path}: cluster {name} has url {url!r}; "
                "only embedded:<file path> is supported"
            )
        return os.path.join(self.home, os.path.expanduser(url[len(EMBEDDED_SCHEME) :]))

    def store(self, name: str) -> Store:
        """The store of cluster ``name`` (opened once per Clusters object). A registered
        store must exist: it was created by ``cluster add``."""
        store = self._stores.get(name)
        if store is None:
            info = self.get(name)
            if self.before_open is not None:
                self.before_open(info)
            registered = self._read()["clusters"].get(name)
            create = not (registered and registered["url"] == info.url)  # e.g. an Airflow connection's
            path = self.embedded_file(name, info.url) if info.kind == "embedded" else ""
            store = open_store(info, path, create=create, read_only=self.read_only)
            self._stores[name] = store
        return store

    def close(self) -> None:
        for store in self._stores.values():
            store.close()
        self._stores.clear()
