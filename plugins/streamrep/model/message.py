"""A message as producers send it and consumers receive it."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import NamedTuple, overload

Headers = tuple[tuple[str, bytes], ...]

_new_tuple = tuple.__new__


class Message(NamedTuple):
    """One message. ``partition`` and ``offset`` are -1 until the store assigns them.

    A NamedTuple rather than a dataclass: the store builds millions of these, and tuple
    construction is several times cheaper.
    """

    value: bytes
    key: bytes | None = None
    headers: Headers = ()
    timestamp: int = 0  # ms since the epoch
    partition: int = -1
    offset: int = -1
    topic: str = ""

    def header(self, name: str) -> bytes | None:
        """The last value of header ``name``, or None."""
        for k, v in reversed(self.headers):
            if k == name:
                return v
        return None


ORIGIN_HEADER = "streamrep.origin"  # ``<uuid>/<partition>/<offset>`` of the stream a message was first produced in
# Set by importstream on a message it appended (when, ms): a log cannot insert, so its place is not its source's.
IMPORTED_HEADER = "streamrep.imported"


class OriginRun(Sequence[Message]):
    """Messages to replicate that were first produced in one source partition: consecutive
    source offsets, no headers. Each reads as the source message with the one header
    ``streamrep.origin`` = ``prefix`` + its source offset, and partition and offset unassigned.

    The headers are made only when a message is looked at: a store that can keep the origin
    beside the messages (the embedded store: one row per run) writes ``source`` and ``prefix``
    as they are, and a replicated message then costs no header of its own.

    :param source: the source messages (header-less, consecutive offsets), shared, never copied.
    :param prefix: ``<origin uuid>/<origin partition>/`` as ASCII bytes.
    """

    __slots__ = ("source", "prefix", "topic")

    def __init__(self, source: Sequence[Message], prefix: bytes, topic: str):
        self.source = source
        self.prefix = prefix
        self.topic = topic

    @property
    def origin_first(self) -> int:
        """The source (= origin) offset of the first message."""
        return self.source[0][5]

    def __len__(self) -> int:
        return len(self.source)

    def _message(self, m: Message) -> Message:
        value, key, _, timestamp, _, offset, _ = m
        return _new_tuple(
            Message, (value, key, ((ORIGIN_HEADER, self.prefix + b"%d" % offset),), timestamp, -1, -1, self.topic)
        )

    @overload
    def __getitem__(self, index: int) -> Message: ...

    @overload
    def __getitem__(self, index: slice) -> list[Message]: ...

    def __getitem__(self, index: int | slice) -> Message | list[Message]:
        if isinstance(index, slice):
            return [self._message(m) for m in self.source[index]]
        return self._message(self.source[index])

    def __iter__(self) -> Iterator[Message]:
        prefix, topic = self.prefix, self.topic
        for value, key, _, timestamp, _, offset, _ in self.source:
            yield _new_tuple(
                Message, (value, key, ((ORIGIN_HEADER, prefix + b"%d" % offset),), timestamp, -1, -1, topic)
            )

    def __eq__(self, other: object) -> bool:
        if isinstance(other, OriginRun) and other.source is self.source:
            return other.prefix == self.prefix and other.topic == self.topic
        if isinstance(other, (OriginRun, list, tuple)):
            return len(other) == len(self) and list(self) == list(other)
        return NotImplemented

    def __hash__(self) -> int:  # unhashable, like a list
        raise TypeError("unhashable type: 'OriginRun'")

    def __repr__(self) -> str:
        return f"OriginRun({len(self)} messages of {self.prefix.decode('ascii', 'replace')}{self.topic})"
