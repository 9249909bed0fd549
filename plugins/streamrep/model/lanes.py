"""Apply lanes: which partitions of a replica share one apply transaction.

A replica stream's partitions fall into ``APPLY_LANES`` lanes by topic and partition. The applies a
round makes to the partitions of one lane go in one transaction (on Kafka, under one transactional
id per replica stream and lane), so a round costs a transaction per lane, not per partition, and
the cost of a pass stays nearly flat in the number of partitions.

A partition's lane never changes (a fixed count and a stable hash), so every writer of a replica
partition, in any process, writes under the same transactional id, and a new writer's fence stops
every older one: the same argument as one id per partition (docs/internals.md, "Apply lanes").
Gateways deal source partitions by lane (``replication.assignment``) and a Spark gateway's tasks
take whole lanes, so that one process applies a lane at a time and no two fence each other in turn.
"""

from __future__ import annotations

import zlib

APPLY_LANES = 16


def apply_lane(topic: str, partition: int) -> int:
    """The lane of partition ``partition`` of ``topic`` (of any stream): consecutive partitions of a
    topic are in consecutive lanes, so a topic of up to ``APPLY_LANES`` partitions has one per lane."""
    return (zlib.crc32(topic.encode("utf-8")) + partition) % APPLY_LANES
