"""How a stream's topics are named in a Kafka cluster: one policy object per stream, as MirrorMaker 2
keeps its naming behind ``ReplicationPolicy``.

A Kafka cluster has one flat namespace of topic names, so each stream owns a set of Kafka topics
given by its naming, and the mapping is reversible: ``kafka_topic`` and ``topic_of`` are inverses.
Three forms (the ``-topicnaming`` option of ``stream create``):

- ``streamrep`` (the default): ``<path, '/' as '.'>__<topic>``, e.g. ``/apps/clicks:home`` is
  ``apps.clicks__home``. Kafka refuses ':' and '/', so MapR's own form cannot be used on Apache Kafka.
- ``prefix:<P>``: every Kafka topic whose name starts with ``P`` belongs to the stream, under the
  rest of its name. This adopts topics that already exist, without renaming them: ``prefix:orders.``
  is a stream over ``orders.*``; ``prefix:`` (or ``cluster``) is a stream over the whole cluster.
- ``hpe``: HPE Data Fabric's Kafka API form, ``<stream path>:<topic>`` (only HPE's brokers accept it).

Two streams of one cluster may not claim the same Kafka topic: ``overlaps`` says whether they could.
Streams of different installations on the same brokers may overlap in the ways ``store/kafka.py``
allows: ``rank`` and ``within`` say which of them holds a Kafka topic both could name.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from dataclasses import dataclass

from streamrep.errors import InvalidArgument
from streamrep.model.paths import TOPIC_NAME

DEFAULT_NAMING = "streamrep"
INTERNAL_PREFIX = "_streamrep"  # streamrep's own topics (catalog, marks, offset syncs)
STREAMREP_SEPARATOR = "__"
KAFKA_TOPIC_NAME = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
NAMING_HELP = "streamrep, prefix:<kafka topic prefix>, cluster or hpe"


def is_internal(kafka_topic: str) -> bool:
    """Kafka's own topics (``__consumer_offsets``, ...) and streamrep's: never a stream's topic."""
    return kafka_topic.startswith("__") or kafka_topic.startswith(INTERNAL_PREFIX)


class TopicNaming(ABC):
    """The Kafka topic names of one stream's topics."""

    spec: str

    @property
    def adopts(self) -> bool:
        """Whether the stream adopted Kafka topics that exist without it (``prefix:``, ``cluster``):
        deleting such a stream forgets them but leaves them in Kafka."""
        return False

    @abstractmethod
    def kafka_topic(self, topic: str) -> str:
        """The Kafka topic that holds the stream's ``topic``."""

    @abstractmethod
    def topic_of(self, kafka_topic: str) -> str | None:
        """The stream's topic held in ``kafka_topic``, or None if that Kafka topic is not the stream's."""

    @abstractmethod
    def overlaps(self, other: TopicNaming) -> bool:
        """Whether one Kafka topic could belong to both namings."""

    @abstractmethod
    def within(self, other: TopicNaming) -> bool:
        """Whether every Kafka topic of this naming could belong to ``other`` too."""

    @property
    @abstractmethod
    def rank(self) -> tuple[int, int]:
        """Which of two overlapping namings holds a Kafka topic both name: the higher. A naming that
        creates its topics outranks one that adopts existing topics; of two adopting namings, the
        narrower (longer prefix) outranks the wider."""


@dataclass(frozen=True)
class PrefixNaming(TopicNaming):
    """Every Kafka topic starting with ``prefix`` is a topic of the stream, named by the rest."""

    prefix: str
    spec: str

    @property
    def adopts(self) -> bool:
        return self.spec != DEFAULT_NAMING

    def kafka_topic(self, topic: str) -> str:
        return self.prefix + topic

    def topic_of(self, kafka_topic: str) -> str | None:
        if not kafka_topic.startswith(self.prefix) or is_internal(kafka_topic):
            return None
        topic = kafka_topic[len(self.prefix) :]
        return topic if TOPIC_NAME.fullmatch(topic) and topic not in (".", "..") else None

    def overlaps(self, other: TopicNaming) -> bool:
        if isinstance(other, PrefixNaming):
            return self.prefix.startswith(other.prefix) or other.prefix.startswith(self.prefix)
        return False  # hpe names hold ':' and '/', which no prefix form produces

    def within(self, other: TopicNaming) -> bool:
        return isinstance(other, PrefixNaming) and self.prefix.startswith(other.prefix)

    @property
    def rank(self) -> tuple[int, int]:
        return (0 if self.adopts else 1, len(self.prefix))


@dataclass(frozen=True)
class HpeNaming(TopicNaming):
    """HPE Data Fabric's form: ``<stream path>:<topic>``."""

    path: str
    spec: str = "hpe"

    def kafka_topic(self, topic: str) -> str:
        return f"{self.path}:{topic}"

    def topic_of(self, kafka_topic: str) -> str | None:
        stream, sep, topic = kafka_topic.rpartition(":")
        return topic if sep and stream == self.path and TOPIC_NAME.fullmatch(topic) else None

    def overlaps(self, other: TopicNaming) -> bool:
        return isinstance(other, HpeNaming) and other.path == self.path

    def within(self, other: TopicNaming) -> bool:
        return self.overlaps(other)

    @property
    def rank(self) -> tuple[int, int]:
        return (1, 1 << 16)  # one path names its topics exactly: longer than any prefix


def naming_for(spec: str | None, path: str, namespace: str = "") -> TopicNaming:
    """The naming of the stream at ``path`` (inside its cluster) from its ``-topicnaming`` spec.

    :param namespace: the cluster's ``streamrep.namespace`` setting: it prefixes the default form,
        so several streamrep installations (or test runs) can share one Kafka cluster.
    """
    spec = DEFAULT_NAMING if spec in (None, "") else spec
    if spec == DEFAULT_NAMING:
        prefix = (f"{namespace}." if namespace else "") + path.strip("/").replace("/", ".") + STREAMREP_SEPARATOR
        if not KAFKA_TOPIC_NAME.fullmatch(prefix + "x"):
            raise InvalidArgument(
                f"stream path {path!r} cannot name Kafka topics (Kafka allows letters, digits, '.', '_' and '-'); "
                "choose another path or -topicnaming prefix:<kafka topic prefix>"
            )
        return PrefixNaming(prefix, spec)
    if spec == "cluster":
        return PrefixNaming("", spec)
    if spec.startswith("prefix:"):
        prefix = spec[len("prefix:") :]
        if prefix and not KAFKA_TOPIC_NAME.fullmatch(prefix):
            raise InvalidArgument(
                f"invalid -topicnaming {spec!r}: a Kafka topic prefix uses letters, digits, '.', '_' and '-'"
            )
        if prefix and is_internal(prefix):
            raise InvalidArgument(
                f"invalid -topicnaming {spec!r}: topics starting with '__' or '{INTERNAL_PREFIX}' are internal"
            )
        return PrefixNaming(prefix, spec)
    if spec == "hpe":
        return HpeNaming(path)
    raise InvalidArgument(f"invalid -topicnaming {spec!r}: use {NAMING_HELP}")
