"""Consumer-group cursors on Kafka: Kafka's own committed group offsets, through the admin client.

A streamrep group ``g`` is Kafka group ``<namespace>.g`` under a namespace, so installations
sharing brokers keep their groups apart; streamrep's own readers' groups are never listed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException, TopicPartition

from streamrep.errors import Conflict
from streamrep.model.naming import INTERNAL_PREFIX
from streamrep.store.kafka.client import GROUP_ACTIVE, TIMEOUT_SECONDS, kafka_error
from streamrep.store.kafka.core import KafkaCore


class KafkaCursors(KafkaCore):
    """The Store's cursor methods: commit, read, and the groups of a stream."""

    def _group(self, group: str) -> str:
        return f"{self.namespace}.{group}" if self.namespace else group

    def commit_cursors(self, group: str, stream: str, topic: str, cursors: Mapping[int, int]) -> None:
        name = self._kafka_name(stream, topic)
        request = ConsumerGroupTopicPartitions(
            self._group(group), [TopicPartition(name, p, o) for p, o in sorted(cursors.items())]
        )
        try:
            for future in (
                self._admin().alter_consumer_group_offsets([request], request_timeout=TIMEOUT_SECONDS).values()
            ):
                for tp in future.result().topic_partitions:  # Kafka answers per partition
                    if tp.error is not None:
                        raise KafkaException(tp.error)
        except KafkaException as exc:
            err = kafka_error(exc)
            if err is not None and err.code() in GROUP_ACTIVE:  # Kafka refuses to move a live group's offsets
                raise Conflict(
                    f"cluster {self.cluster}: group {group} is active (it has members); its cursors were not changed"
                ) from None
            raise self._translate(exc, f"cannot commit cursors of group {group} on topic {name}") from None

    def _namespaced_groups(self) -> list[str]:
        """This namespace's consumer group ids, without the namespace; never streamrep's own readers."""
        with self._errors("cannot list consumer groups"):
            listed = self._admin().list_consumer_groups(request_timeout=TIMEOUT_SECONDS).result()
        prefix = f"{self.namespace}." if self.namespace else ""
        return sorted(
            g.group_id[len(prefix) :]
            for g in listed.valid
            if g.group_id.startswith(prefix) and not g.group_id.startswith(INTERNAL_PREFIX)
        )

    def groups(self, stream: str) -> list[str]:
        held = self._held(self._naming(stream))
        candidates = self._namespaced_groups()
        if not candidates:
            return []
        admin = self._admin()
        # One request per group (the client's limit), all sent before any answer is awaited.
        with self._errors("cannot read consumer group offsets"):
            futures = {
                group: list(
                    admin.list_consumer_group_offsets(
                        [ConsumerGroupTopicPartitions(self._group(group))], request_timeout=TIMEOUT_SECONDS
                    ).values()
                )[0]
                for group in candidates
            }
            return [
                group
                for group, future in futures.items()
                if any(tp.offset >= 0 and tp.topic in held for tp in future.result().topic_partitions)
            ]

    def active_groups(self, groups: Sequence[str]) -> set[str]:
        if not groups:
            return set()
        ids = {self._group(g): g for g in groups}
        with self._errors("cannot describe consumer groups"):
            futures = self._admin().describe_consumer_groups(list(ids), request_timeout=TIMEOUT_SECONDS)
            return {ids[gid] for gid, future in futures.items() if future.result().members}

    def cursors(self, group: str, stream: str, topic: str) -> dict[int, int]:
        name = self._kafka_name(stream, topic)
        count = self._kafka_topics().get(name, 0)
        if not count:
            return {}
        request = ConsumerGroupTopicPartitions(self._group(group), [TopicPartition(name, p) for p in range(count)])
        with self._errors(f"cannot read cursors of group {group}"):
            result = list(
                self._admin().list_consumer_group_offsets([request], request_timeout=TIMEOUT_SECONDS).values()
            )[0].result()
        return {tp.partition: tp.offset for tp in result.topic_partitions if tp.offset >= 0}
