"""The consumer: reads every partition of one topic, optionally as a consumer group whose
cursors are committed in the stream's cluster."""

from __future__ import annotations

import time

from streamrep.client.admin import StreamAdmin
from streamrep.errors import InvalidArgument, NotFound
from streamrep.model.message import Message
from streamrep.model.paths import TopicPath, parse_topic_path

POLL_INTERVAL_SECONDS = 0.05


class Consumer:
    """Read a topic from all its partitions.

    :param topic: ``<stream path>:<topic>``.
    :param group: a consumer group; its committed cursors are where reading starts.
    :param from_start: with no committed cursor, start at the oldest message held
        (else at the end, reading only new messages, like Kafka's ``auto.offset.reset=latest``).
    """

    def __init__(
        self,
        topic: str | TopicPath,
        group: str | None = None,
        from_start: bool = False,
        admin: StreamAdmin | None = None,
    ):
        self.admin = admin or StreamAdmin()
        self.topic = topic if isinstance(topic, TopicPath) else parse_topic_path(topic, self.admin.clusters.default)
        if group is not None and (not isinstance(group, str) or not group.strip()):
            raise InvalidArgument("a consumer group name must not be empty")
        self.group = group
        sp = self.topic.stream
        self.entry = self.admin.entry(sp)
        self.admin.require(self.entry, sp, "consumeperm")
        self.store = self.admin.store(sp)
        count = self.store.topics(self.entry.uuid).get(self.topic.topic)
        if count is None:
            raise NotFound(f"topic {self.topic} does not exist")
        # Retention first, so a new consumer starts where ``stream topic info`` says the topic starts.
        self.store.retain(self.entry.uuid, self.topic.topic, self.entry.meta.ttl, force=True)
        committed = self.store.cursors(group, self.entry.uuid, self.topic.topic) if group else {}
        self.positions: dict[int, int] = {}
        for p in range(count):
            start, end = self.store.offsets(self.entry.uuid, self.topic.topic, p)
            self.positions[p] = committed.get(p, start if from_start else end)
        self._next_partition = 0

    def seek(self, partition: int, offset: int) -> None:
        """Read ``partition`` from ``offset`` on."""
        if partition not in self.positions:
            raise InvalidArgument(f"topic {self.topic} has no partition {partition}")
        self.positions[partition] = offset

    def poll(self, max_messages: int = 1000, timeout: float = 0.0) -> list[Message]:
        """Up to ``max_messages`` messages, waiting at most ``timeout`` seconds for the first.

        Partitions are served in turn, so one busy partition cannot starve the others.
        Messages removed by retention (ttl) are not read: reading resumes at the oldest held.
        """
        deadline = time.monotonic() + timeout
        while True:
            self.store.retain(self.entry.uuid, self.topic.topic, self.entry.meta.ttl)
            out: list[Message] = []
            order = sorted(self.positions, key=lambda p: (p - self._next_partition) % len(self.positions))
            for p in order:
                if len(out) >= max_messages:
                    break
                # The next position comes from the store: offsets may hold no message (Kafka's
                # transaction markers), and a consumer must still reach the partition's end.
                batch, self.positions[p] = self.store.read_span(
                    self.entry.uuid, self.topic.topic, p, self.positions[p], max_messages - len(out)
                )
                out.extend(batch)
            self._next_partition = (self._next_partition + 1) % len(self.positions)
            if out or time.monotonic() >= deadline:
                return out
            time.sleep(POLL_INTERVAL_SECONDS)

    def commit(self) -> None:
        """Commit the current positions for the group (the next offsets to read)."""
        if self.group is None:
            raise InvalidArgument("commit needs a consumer group")
        self.store.commit_cursors(self.group, self.entry.uuid, self.topic.topic, self.positions)

    def lag(self) -> dict[int, int]:
        """Messages not yet read, per partition."""
        return {
            p: self.store.offsets(self.entry.uuid, self.topic.topic, p)[1] - pos for p, pos in self.positions.items()
        }
