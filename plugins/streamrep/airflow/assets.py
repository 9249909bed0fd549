"""Airflow Assets for streamrep: every stream (a replica among them) and every topic is an
Asset whose URI is ``streamrep://<cluster>/<stream path>[:<topic>]``, the stream path of
``/mapr/<cluster>/<stream path>`` with its cluster moved to the URI's host::

    /mapr/newyork/activity         ->  streamrep://newyork/activity
    /mapr/sanfrancisco/a/b:clicks  ->  streamrep://sanfrancisco/a/b:clicks

A task that sees a replica catch up (``ReplicaUpToDateSensor`` with ``REPLICAS_ALIAS`` in its
outlets) emits an asset event for that replica through the alias, since which replica it is
is only known when the task runs (a DAG param). A DAG scheduled on ``replica_asset(path)``
then runs each time that replica is up to date after a copy or a failover.

The scheme is declared in the provider info (``asset-uris``) with :func:`normalize_uri` as its
handler, so Airflow writes every streamrep URI one way and refuses a malformed one.
"""

from __future__ import annotations

import time
import urllib.parse
from collections.abc import Mapping
from typing import Any

from airflow.sdk import Asset, AssetAlias

from streamrep.airflow.provider import ASSET_SCHEME
from streamrep.errors import InvalidArgument, NotFound
from streamrep.model.paths import StreamPath, TopicPath, parse_stream_or_topic

SCHEME = ASSET_SCHEME
REPLICAS_ALIAS = AssetAlias(name="streamrep-replicas", group="streamrep")
ASSET_GROUP = "streamrep"
# Characters a stream path component may hold that need no quoting in a URI path; the rest
# (space, '%') are percent-encoded. ':' stays: it separates the topic, as in streamrep paths.
_SAFE = "/:@+=,~"


def _parse(path: str | StreamPath | TopicPath) -> tuple[StreamPath, str | None]:
    if isinstance(path, TopicPath):
        return path.stream, path.topic
    if isinstance(path, StreamPath):
        return path, None
    stream, topic = parse_stream_or_topic(path, None)  # no default cluster: an asset names its own
    return stream, topic


def asset_uri(path: str | StreamPath | TopicPath) -> str:
    """The asset URI of a stream or topic path given as ``/mapr/<cluster>/<stream>[:<topic>]``.

    :param path: a stream or topic path that names its cluster.
    """
    stream, topic = _parse(path)
    tail = stream.path + (f":{topic}" if topic else "")
    return f"{SCHEME}://{stream.cluster}{urllib.parse.quote(tail, safe=_SAFE)}"


def path_of(uri: str) -> str:
    """The streamrep path (``/mapr/<cluster>/<stream>[:<topic>]``) of an asset URI.

    :param uri: a ``streamrep://`` URI.
    """
    parts = urllib.parse.urlsplit(uri)
    if parts.scheme.lower() != SCHEME:
        raise InvalidArgument(f"not a {SCHEME}:// URI: {uri!r}")
    if not parts.hostname or parts.port is not None or parts.username or parts.password:
        raise InvalidArgument(f"{uri!r}: the host of a {SCHEME}:// URI is a cluster name, with no port or user")
    if parts.query or parts.fragment:
        raise InvalidArgument(f"{uri!r}: a {SCHEME}:// URI has no query or fragment")
    cluster = parts.netloc  # not .hostname: cluster names keep their case
    stream, topic = parse_stream_or_topic(f"/mapr/{cluster}{urllib.parse.unquote(parts.path)}", None)
    return f"{stream}:{topic}" if topic else str(stream)


def normalize_uri(parts: urllib.parse.SplitResult) -> urllib.parse.SplitResult:
    """The provider's ``asset-uris`` handler: one spelling for each stream or topic (quoting,
    a trailing ``/``), and ValueError (what Airflow expects) for a URI that names none."""
    try:
        canonical = asset_uri(path_of(urllib.parse.urlunsplit(parts)))
    except InvalidArgument as err:
        raise ValueError(str(err)) from None
    return urllib.parse.urlsplit(canonical)


def replica_asset(path: str) -> Asset:
    """The Asset of a replica (or any stream): named by its path, with its ``streamrep://`` URI.
    Schedule a DAG on it to run when the replica has caught up.

    :param path: ``/mapr/<cluster>/<stream>``.
    """
    stream, topic = _parse(path)
    if topic:
        raise InvalidArgument(f"a replica is a stream, not a topic: {path!r}")
    return Asset(name=str(stream), uri=asset_uri(stream), group=ASSET_GROUP)


def topic_asset(path: str, **kwargs: Any) -> Asset:
    """The Asset of a topic, ``streamrep://<cluster>/<stream>:<topic>``, for instance to be
    watched for new messages (``watchers=[AssetWatcher(..., StreamMessageTrigger(...))]``).

    :param path: ``/mapr/<cluster>/<stream>:<topic>``.
    :param kwargs: more ``Asset`` arguments (``watchers``, ``extra``).
    """
    stream, topic = _parse(path)
    if not topic:
        raise InvalidArgument(f"a topic path is <stream>:<topic>, not {path!r}")
    return Asset(name=f"{stream}:{topic}", uri=asset_uri(path), group=ASSET_GROUP, **kwargs)


def caught_up_extra(
    admin: Any, path: str, source: str | None = None, row: dict[str, Any] | None = None, uptodate: bool | None = None
) -> dict[str, Any]:
    """What a replica's caught-up event says: the replica, its source, and the lag at that moment
    (``pendingMessages``, ``replicationLagMillis``, ``replicaState`` of ``replica list``).

    :param admin: the admin API.
    :param path: the replica stream.
    :param source: the source it caught up with; default: its upstream (the one with the most
        messages pending, if several).
    :param row: the source's ``replica list`` row of the replica, if the caller has it.
    :param uptodate: ``isUptodate`` as the caller knows it, over the row's: after a failover the
        source's row shows the replica failed over, not whether it holds everything.
    """
    from streamrep.airflow.triggers import replica_row  # the trigger module's row lookup, not a copy

    replica = admin.path(path)
    if row is None:
        sources = [source] if source else [link.path for link in admin.upstream_links(str(replica))]
        rows = []
        for candidate in sources:
            try:
                rows.append({**replica_row(admin, candidate, str(replica)), "source": candidate})
            except NotFound:  # no longer linked (a failover unlinks it): no lag to report
                rows.append({"source": candidate})
        if rows:
            row = max(rows, key=lambda r: r.get("pendingMessages") or 0)
            source = row.get("source", source)
    row = row or {}
    src = source or row.get("source")
    return {
        "replica": str(replica),
        "source": str(admin.path(src)) if src else None,
        "pendingMessages": row.get("pendingMessages"),
        "replicationLagMillis": row.get("replicationLagMillis"),
        "replicaState": row.get("replicaState"),
        "isUptodate": uptodate if uptodate is not None else row.get("isUptodate"),
        "at": int(time.time() * 1000),
    }


def emits_caught_up(task: Any) -> bool:
    """Whether ``task``'s outlets ask for replica caught-up events (``REPLICAS_ALIAS`` is among them)."""
    return any(isinstance(o, AssetAlias) and o.name == REPLICAS_ALIAS.name for o in task.outlets or ())


def emit_replica_caught_up(
    context: Any,
    path: str,
    *,
    source: str | None = None,
    row: dict[str, Any] | None = None,
    admin: Any = None,
    streamrep_conn_id: str | None = None,
    cluster_conn_ids: Mapping[str, str] | None = None,
    uptodate: bool | None = None,
) -> dict[str, Any]:
    """Add an asset event for replica ``path`` through ``REPLICAS_ALIAS`` if it is up to date
    (``isUptodate`` true): the event means exactly that, so nothing is emitted otherwise. The
    task calling it must have ``REPLICAS_ALIAS`` in its outlets.

    :param context: the task's context (its ``outlet_events``).
    :param path: the replica stream.
    :param source: the source it caught up with (default: its upstream).
    :param row: the source's ``replica list`` row of the replica, if the caller has it.
    :param admin: the admin API to read the lag with (default: a ``StreamrepHook``'s).
    :param streamrep_conn_id: the hook's connection when ``admin`` is not given.
    :param cluster_conn_ids: the hook's cluster connections when ``admin`` is not given.
    :param uptodate: whether it is up to date, as the caller knows it (see ``caught_up_extra``).
    :return: the event's extra (emitted or not: see its ``isUptodate``).
    """
    if admin is None:
        from streamrep.airflow.hook import StreamrepHook, user_errors

        with user_errors():
            hook = StreamrepHook(
                streamrep_conn_id or StreamrepHook.default_conn_name, cluster_conn_ids=cluster_conn_ids
            )
        try:
            with user_errors():
                return emit_replica_caught_up(
                    context, path, source=source, row=row, admin=hook.admin, uptodate=uptodate
                )
        finally:
            hook.close()
    extra = caught_up_extra(admin, path, source, row, uptodate)
    if extra["isUptodate"] is True:
        context["outlet_events"][REPLICAS_ALIAS].add(replica_asset(extra["replica"]), extra=extra)
    return extra
