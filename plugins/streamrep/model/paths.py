"""Stream and topic paths, MapR style.

A stream is addressed as ``/mapr/<cluster>/<path...>``; a path without the ``/mapr/``
prefix names a stream on the default cluster, as it does in MapR. A topic is
``<stream path>:<topic>``. The seeds themselves contain ``mapr/sanfrancisco/activity``
(no leading slash): it is taken as the same path as ``/mapr/sanfrancisco/activity``,
because that is what a MapR user means by it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from streamrep.errors import InvalidArgument

MAPR_ROOT = "mapr"
# MapR cluster names: letters, digits, '.', '_' and '-' (they are also host-like names).
CLUSTER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
# A stream path component is a file name in MapR-FS: any printable character but '/',
# and ':' is reserved here because it separates the topic.
PATH_COMPONENT = re.compile(r"^[A-Za-z0-9._@+=,%~-][A-Za-z0-9._@+=,%~ -]{0,254}$")
# MapR topic names follow Kafka's: letters, digits, '.', '_' and '-', at most 249 characters.
TOPIC_NAME = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
MAX_PATH_LENGTH = 1024
# The patterns are used with fullmatch(): with match(), '$' also accepts a trailing newline.


def validate_cluster_name(name: str) -> str:
    """Return ``name`` if it is a valid cluster name, else raise InvalidArgument."""
    if not isinstance(name, str) or not CLUSTER_NAME.fullmatch(name):
        raise InvalidArgument(
            f"invalid cluster name {name!r}: use 1-128 letters, digits, '.', '_' or '-', starting with a letter or digit"
        )
    return name


def validate_topic_name(name: str) -> str:
    """Return ``name`` if it is a valid topic name, else raise InvalidArgument."""
    if not isinstance(name, str) or not TOPIC_NAME.fullmatch(name) or name in (".", ".."):
        raise InvalidArgument(f"invalid topic name {name!r}: use 1-249 letters, digits, '.', '_' or '-'")
    return name


@dataclass(frozen=True, order=True)
class StreamPath:
    """A stream: the cluster it lives in and its path inside that cluster (``/a/b``)."""

    cluster: str
    path: str

    def __str__(self) -> str:
        return f"/{MAPR_ROOT}/{self.cluster}{self.path}"

    def topic(self, name: str) -> TopicPath:
        return TopicPath(self, validate_topic_name(name))


@dataclass(frozen=True, order=True)
class TopicPath:
    """A topic inside a stream: ``<stream path>:<topic>``."""

    stream: StreamPath
    topic: str

    def __str__(self) -> str:
        return f"{self.stream}:{self.topic}"


def parse_stream_path(text: str, default_cluster: str | None) -> StreamPath:
    """Parse a stream path.

    :param text: ``/mapr/<cluster>/<path>``, ``mapr/<cluster>/<path>``, or ``/<path>`` /
        ``<path>`` on the default cluster.
    :param default_cluster: the cluster a path without ``/mapr/`` refers to; None if there
        is none configured.
    """
    if not isinstance(text, str) or not text.strip():
        raise InvalidArgument("a stream path is required, for example /mapr/<cluster>/<stream>")
    original = text
    text = text.strip()
    if ":" in text:
        raise InvalidArgument(f"invalid stream path {original!r}: ':' separates a topic; a stream path has none")
    if len(text) > MAX_PATH_LENGTH:
        raise InvalidArgument(f"invalid stream path: longer than {MAX_PATH_LENGTH} characters")
    parts = text.strip("/").split("/")
    if any(p == "" for p in parts):
        raise InvalidArgument(f"invalid stream path {original!r}: empty path component ('//')")
    if parts[0] == MAPR_ROOT:
        if len(parts) < 3:
            raise InvalidArgument(f"invalid stream path {original!r}: expected /mapr/<cluster>/<stream>")
        cluster, rest = validate_cluster_name(parts[1]), parts[2:]
    else:
        if default_cluster is None:
            raise InvalidArgument(
                f"stream path {original!r} names no cluster and no default cluster is set; write "
                "/mapr/<cluster>/... or set one with 'streamrep cluster default -name <cluster>'"
            )
        cluster, rest = default_cluster, parts
    for part in rest:
        if part in (".", "..") or not PATH_COMPONENT.fullmatch(part):
            raise InvalidArgument(f"invalid stream path {original!r}: bad component {part!r}")
    return StreamPath(cluster, "/" + "/".join(rest))


def parse_topic_path(text: str, default_cluster: str | None) -> TopicPath:
    """Parse ``<stream path>:<topic>``."""
    if not isinstance(text, str) or text.count(":") != 1:
        raise InvalidArgument(
            f"invalid topic path {text!r}: expected <stream path>:<topic>, for example /mapr/sanfrancisco/activity:clicks"
        )
    stream, topic = text.split(":")
    return parse_stream_path(stream, default_cluster).topic(topic.strip())


def parse_stream_or_topic(text: str, default_cluster: str | None) -> tuple[StreamPath, str | None]:
    """Parse a path that may or may not name a topic (``P`` or ``P:T``)."""
    if isinstance(text, str) and ":" in text:
        tp = parse_topic_path(text, default_cluster)
        return tp.stream, tp.topic
    return parse_stream_path(text, default_cluster), None
