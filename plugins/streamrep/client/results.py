"""What the admin API answers, typed: a stream's information, its replica and upstream lists.

These are domain values (paths, enums, counts). The rows a user sees, with maprcli's field
names, are made from them in one place per front end: ``cli/rows.py`` for the command line and
``airflow/rows.py`` for XComs and the UI page.
"""

from __future__ import annotations

from dataclasses import dataclass

from streamrep.model.catalog import ClusterAce
from streamrep.model.failover import FailoverRecord
from streamrep.model.paths import StreamPath
from streamrep.model.replication import ReplicaState
from streamrep.model.stream import StreamMeta


@dataclass(frozen=True)
class StreamInfo:
    """``stream info``: a stream's identity, metadata and sizes."""

    path: StreamPath
    uuid: str
    creator: str
    created: int
    meta: StreamMeta
    topics: int
    partitions: int
    replicas: int
    upstreams: int
    failover: FailoverRecord | None = None


@dataclass(frozen=True)
class UpstreamRow:
    """One entry of ``stream upstream list``.

    :param path: the upstream stream.
    :param upstream_path: its path as the link records it.
    :param idx: its place in the list, from 1.
    :param uuid: the stream agreed to (None for a link written before links recorded UUIDs).
    """

    path: StreamPath
    upstream_path: str
    idx: int
    uuid: str | None


@dataclass(frozen=True)
class ReplicaRow:
    """One entry of ``stream replica list``, with the agreement checked live.

    :param path: the replica stream.
    :param replica_path: its path as the link records it.
    :param state: the state a user sees (``rules.effective_state``).
    :param uuid: the replica stream's UUID now (None if it cannot be read).
    :param errors: what is wrong, in one line (None when nothing is).
    """

    path: StreamPath
    replica_path: str
    state: ReplicaState
    paused: bool
    throttle: bool
    idx: int
    networkencryption: bool
    synchronous: bool
    networkcompression: str
    maxbytespersec: int
    uuid: str | None
    errors: str | None


@dataclass(frozen=True)
class TopicChange:
    """``stream topic create`` and ``stream topic edit``: the topic and its partition count."""

    path: StreamPath
    topic: str
    partitions: int


@dataclass(frozen=True)
class TopicSummary:
    """One entry of ``stream topic list``.

    :param messages: the messages a consumer can read (after retention).
    :param native_topic: the name the cluster keeps it under (the Kafka topic; None on the
        embedded store).
    """

    topic: str
    partitions: int
    messages: int
    native_topic: str | None = None


@dataclass(frozen=True)
class PartitionInfo:
    """One partition in ``stream topic info``: the first and last offsets held.

    :param last: the last offset held (``first - 1`` when the partition holds nothing).
    """

    topic: str
    partition: int
    first: int
    last: int
    messages: int
    native_topic: str | None = None


@dataclass(frozen=True)
class ClusterAceInfo:
    """``cluster ace get`` and ``set``: a cluster's ACE (None: it has no ACE document)."""

    cluster: str
    ace: ClusterAce | None
