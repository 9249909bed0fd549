"""Stream metadata: what ``stream create`` sets, ``stream edit`` changes and ``-copymetafrom`` copies."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from streamrep.errors import InvalidArgument
from streamrep.model.ace import validate_ace

PERMISSIONS = ("produceperm", "consumeperm", "topicperm", "copyperm", "adminperm")
DEFAULT_PARTITIONS = 1  # MapR's default for -defaultpartitions
DEFAULT_TTL_SECONDS = 604800  # MapR's default: 7 days; 0 keeps messages forever
# 100 years: far beyond any retention, and ttl * 1000 stays a 64-bit millisecond count.
MAX_TTL_SECONDS = 100 * 365 * 86400
MAX_PARTITIONS = 4096


@dataclass(frozen=True)
class StreamMeta:
    """The copyable metadata of a stream. Defaults are MapR's: permissions go to the creator."""

    defaultpartitions: int = DEFAULT_PARTITIONS
    ttl: int = DEFAULT_TTL_SECONDS
    autocreate: bool = True
    produceperm: str = ""
    consumeperm: str = ""
    topicperm: str = ""
    copyperm: str = ""
    adminperm: str = ""

    @classmethod
    def for_creator(cls, user: str, **changes: Any) -> StreamMeta:
        """Defaults for a stream ``user`` creates, with ``changes`` applied and validated."""
        owner = f"u:{user}"
        owners: dict[str, Any] = {perm: owner for perm in PERMISSIONS}
        base = cls(**owners)
        return base.edited(**changes)

    def edited(self, **changes: Any) -> StreamMeta:
        """A copy with ``changes`` (None values ignored), validated."""
        known = {f.name for f in fields(self)}
        unknown = sorted(set(changes) - known)
        if unknown:
            raise InvalidArgument(f"unknown stream setting(s): {', '.join(unknown)}")
        clean = {k: v for k, v in changes.items() if v is not None}
        meta = replace(self, **clean).validated()
        for perm, act in (("produceperm", "produce to"), ("consumeperm", "consume from")):
            # Set empty here, not merely kept empty: a stream stored so before this rule can still be edited.
            if perm in clean and not getattr(meta, perm):
                raise InvalidArgument(f"an empty {perm} would let no one {act} the stream (u:alice names one user)")
        return meta

    def validated(self) -> StreamMeta:
        if (
            isinstance(self.defaultpartitions, bool)
            or not isinstance(self.defaultpartitions, int)
            or not (1 <= self.defaultpartitions <= MAX_PARTITIONS)
        ):
            raise InvalidArgument(
                f"invalid defaultpartitions {self.defaultpartitions!r}: must be 1 to {MAX_PARTITIONS}"
            )
        if isinstance(self.ttl, bool) or not isinstance(self.ttl, int) or not 0 <= self.ttl <= MAX_TTL_SECONDS:
            raise InvalidArgument(
                f"invalid ttl {self.ttl!r}: seconds from 0 to {MAX_TTL_SECONDS} (100 years); 0 keeps messages forever"
            )
        if not isinstance(self.autocreate, bool):
            raise InvalidArgument(f"invalid autocreate {self.autocreate!r}: true or false")
        canonical: dict[str, Any] = {perm: validate_ace(getattr(self, perm)) for perm in PERMISSIONS}
        if not canonical["adminperm"]:
            raise InvalidArgument(
                "a stream needs an adminperm: an empty ACE would lock everyone out of it for good (u:alice names one user)"
            )
        return replace(self, **canonical)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StreamMeta:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


def validate_partition_count(count: Any) -> int:
    """Return ``count`` if it is a usable partition count."""
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_PARTITIONS:
        raise InvalidArgument(f"invalid partition count {count!r}: must be 1 to {MAX_PARTITIONS}")
    return count
