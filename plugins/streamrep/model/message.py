"""A message as producers send it and consumers receive it."""

from __future__ import annotations

from typing import NamedTuple

Headers = tuple[tuple[str, bytes], ...]


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
