"""The fan-in topic rule: two upstreams of one replica must not share a topic name, since their
offsets would collide in the replica (seeds: primary-secondary and multi-master restrictions), and
two unrelated topics would merge into one. Upstreams of one replication group (one feeds the other,
or a third stream feeds both, as in a mesh of three masters) carry the same topics by design: a name
they share through a common source is not a conflict (``related``). The rule holds at ``stream
upstream add`` (``model.replication.check_upstream_add``), at a topic's creation
(``check_new_topic``), and in every gateway pass (``topic_conflicts``): a topic that appeared by
another path is not replicated from the later upstream, which is reported in error; it never merges.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from streamrep.errors import Conflict
from streamrep.model.paths import StreamPath

# A stream's lineage: itself and every stream that feeds it (through upstream links,
# transitively), each by UUID with its topic names.
Lineage = Mapping[str, set[str]]


def related(a: Lineage, b: Lineage, topic: str) -> bool:
    """Whether two streams with lineages ``a`` and ``b`` hold ``topic`` from a common source: one
    feeds the other, or a third stream feeds both, and that source has the topic."""
    return any(topic in a[uuid] or topic in b[uuid] for uuid in a.keys() & b.keys())


def topic_conflict_line(
    replica: StreamPath | str, topic: str, first: StreamPath | str, second: StreamPath | str
) -> str:
    return (
        f"topic name conflict: upstreams {first} and {second} of {replica} both have topic {topic}; "
        f"topic names must be unique across upstreams"
    )


@dataclass(frozen=True)
class TopicConflict:
    """A topic a replica does not take from one upstream (``stopped``) because another upstream
    (``kept``) has an unrelated topic of that name."""

    replica: str
    topic: str
    kept: str
    stopped: str

    def line(self) -> str:
        return (
            f"{topic_conflict_line(self.replica, self.topic, self.kept, self.stopped)}: "
            f"{self.stopped}:{self.topic} is not replicated"
        )


def topic_conflicts(
    replica: StreamPath | str,
    upstreams: Sequence[tuple[str, set[str]]],
    lineages: Mapping[str, Lineage],
    holds: Mapping[str, set[str]],
) -> list[TopicConflict]:
    """The topics a replica must not take from some of its upstreams.

    :param upstreams: each upstream's path and topic names, in the replica's upstream order.
    :param lineages: each upstream's lineage, by path (only those sharing a name are needed).
    :param holds: the topics the replica already holds messages of, by upstream path.

    Of the upstreams that share a topic name, related ones (``related``) form a group. The group
    the replica already holds that topic from keeps it (the first such group, in upstream order;
    else the group of the first upstream); every other upstream's topic of that name is stopped.
    """
    conflicts: list[TopicConflict] = []
    names = [name for _, topics in upstreams for name in topics]
    for topic in sorted({name for name in names if names.count(name) > 1}):
        members = [path for path, topics in upstreams if topic in topics]
        groups: list[list[str]] = []
        for path in members:
            joined = [g for g in groups if any(related(lineages[path], lineages[o], topic) for o in g)]
            merged = [path] + [o for g in joined for o in g]
            groups = [g for g in groups if g not in joined] + [sorted(merged, key=members.index)]
        groups.sort(key=lambda g: members.index(g[0]))
        kept = next((g for g in groups if any(topic in holds.get(p, set()) for p in g)), groups[0])
        conflicts += [TopicConflict(str(replica), topic, kept[0], path) for path in members if path not in kept]
    return conflicts


def check_new_topic(
    stream: StreamPath,
    topic: str,
    lineage: Lineage,
    replica: StreamPath,
    others: Mapping[str, tuple[set[str], Lineage]],
) -> None:
    """Refuse creating ``topic`` on ``stream``, an upstream of ``replica``, when another upstream of
    ``replica`` (``others``: path -> its topics and lineage) has an unrelated topic of that name."""
    for other, (topics, other_lineage) in sorted(others.items()):
        if topic in topics and not related(lineage, other_lineage, topic):
            raise Conflict(f"{topic_conflict_line(replica, topic, other, stream)}: topic {stream}:{topic} not created")
