"""A replica's network options, as MapR's ``stream replica add``/``autosetup`` take them:
``-networkencryption``, ``-networkcompression`` and ``-throttle``, and streamrep's own
``-maxbytespersec``. The value rules, the MapR-to-Kafka codec mapping and which cluster
connections encryption needs are here, once.

- **networkcompression** ``off|lz4|lzf|zlib`` (MapR) or Kafka's own ``gzip|snappy|zstd``; the
  gateway writes the replica's records with the Kafka codec it maps to. MapR's default is the
  stream's compression setting; streamrep's streams have none, so it is MapR's default, lz4.
  ``lzf`` is refused: Kafka has no LZF codec, and no other codec reads or writes LZF.
- **networkencryption**: the gateway moves the replica's data over TLS only. It reads the
  source cluster and writes the replica's cluster; every one of those connections that is a
  network connection (a Kafka cluster) must use ``security.protocol`` SSL or SASL_SSL. An
  embedded cluster is a file the gateway opens on its own machine: no network, nothing to encrypt.
- **throttle**: MapR's "throttle replication operations under load": the gateways back off while
  the replica's cluster is under load (``replication/throttle.py`` defines the load signal).
- **maxbytespersec**: streamrep's hard limit on the bytes a second replicated into the replica,
  shared by all its gateways and partitions; 0 (the default) is no limit.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from decimal import Decimal, InvalidOperation
from typing import Any

from streamrep.errors import InvalidArgument

DEFAULT_NETWORK_COMPRESSION = "lz4"  # MapR's default compression of a stream (its parent volume's)
# What each accepted value is written with on Kafka (librdkafka's ``compression.type``).
KAFKA_CODECS = {
    "off": "none",
    "lz4": "lz4",
    "zlib": "gzip",  # zlib and gzip wrap the same DEFLATE stream; Kafka's DEFLATE codec is gzip
    "gzip": "gzip",
    "snappy": "snappy",
    "zstd": "zstd",
}
NETWORK_COMPRESSIONS = ("off", "lz4", "lzf", "zlib", "gzip", "snappy", "zstd")  # as MapR lists them, then Kafka's
TLS_PROTOCOLS = ("SSL", "SASL_SSL")
SECURITY_PROTOCOL = "security.protocol"
# A link recorded before these options existed: its gateway wrote uncompressed and unchecked.
LEGACY_NETWORK_COMPRESSION = "off"
NO_BYTE_LIMIT = 0
MIN_BYTES_PER_SEC = 1_000  # below this one message could hold a gateway for minutes
MAX_BYTES_PER_SEC = 100_000_000_000  # 100 GB/s: beyond any link; a larger figure is a typo
# Decimal units, as network rates are quoted: 10M is 10,000,000 bytes a second.
BYTE_UNITS = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9}


@dataclass(frozen=True)
class NetworkOptions:
    """A replica link's network options, validated (``StreamAdmin.network_options``)."""

    throttle: bool
    networkencryption: bool
    networkcompression: str
    maxbytespersec: int = NO_BYTE_LIMIT

    def to_dict(self) -> dict[str, Any]:
        """The options by name: the fields of a replica link they set (``ReplicaLink``)."""
        return asdict(self)


def link_option_names() -> tuple[str, ...]:
    """The names of a replica link's network options: what ``replica add`` sets and ``replica
    edit`` changes (one list, so an option added here is editable with no other code)."""
    return tuple(f.name for f in fields(NetworkOptions))


def parse_network_compression(value: Any) -> str:
    """The canonical ``-networkcompression`` value (lower case); None means the default.

    :raises InvalidArgument: an unknown value, or ``lzf`` (Kafka has no LZF codec).
    """
    if value is None:
        return DEFAULT_NETWORK_COMPRESSION
    word = value.strip().lower() if isinstance(value, str) else None
    if word == "lzf":
        raise InvalidArgument(
            "networkcompression lzf is not available: Kafka has no LZF codec; use lz4 (as fast) or zlib"
        )
    if word not in KAFKA_CODECS:
        raise InvalidArgument(f"invalid networkcompression {value!r}: off, lz4, zlib, gzip, snappy or zstd")
    return word


def kafka_codec(networkcompression: str) -> str:
    """The Kafka ``compression.type`` a replica with this ``networkcompression`` is written with."""
    return KAFKA_CODECS[parse_network_compression(networkcompression)]


def parse_flag(name: str, value: Any, default: bool = False) -> bool:
    """A true/false option (``-networkencryption``, ``-throttle``): a bool, or the words true
    and false in any case (as a rendered Airflow template gives them); None is ``default``.

    :raises InvalidArgument: anything else (``maybe``, ``2``).
    """
    if value is None:
        return default
    if isinstance(value, bool):
        return value
    word = value.strip().lower() if isinstance(value, str) else None
    if word in ("true", "false"):
        return word == "true"
    raise InvalidArgument(f"invalid {name} {value!r}: true or false")


def parse_max_bytes_per_sec(value: Any) -> int:
    """``-maxbytespersec`` in bytes a second: a whole or decimal number with an optional
    decimal unit ``K``, ``M`` or ``G`` (and ``B``, ``/s``: ``10MB/s``); 0 or None is no limit.

    :raises InvalidArgument: not a number, nan, infinite, negative, or outside
        MIN_BYTES_PER_SEC..MAX_BYTES_PER_SEC.
    """
    if value is None:
        return NO_BYTE_LIMIT
    problem = f"invalid maxbytespersec {value!r}: bytes a second, 0 (no limit) or {MIN_BYTES_PER_SEC:,} to 100G"
    if isinstance(value, bool):
        raise InvalidArgument(problem)
    if isinstance(value, (int, float)):
        text = repr(value)
    elif isinstance(value, str):
        text = value.strip().lower().removesuffix("/s").removesuffix("b")
    else:
        raise InvalidArgument(problem)
    unit = text[-1:] if text[-1:] in BYTE_UNITS else ""
    try:
        number = Decimal(text[: len(text) - len(unit)]) * BYTE_UNITS[unit]
    except (InvalidOperation, ValueError):
        raise InvalidArgument(problem) from None
    if not number.is_finite() or number < 0 or number > MAX_BYTES_PER_SEC:
        raise InvalidArgument(problem)
    rate = int(number.to_integral_value())
    if 0 < rate < MIN_BYTES_PER_SEC or (rate == 0 and number != 0):
        raise InvalidArgument(problem)
    return rate


def plaintext_connection(role: str, cluster: str, kind: str, settings: Mapping[str, Any]) -> str | None:
    """Why the gateway's connection to one cluster is not encrypted, or None if it is (or is
    no network connection: an embedded cluster).

    :param role: what the gateway does there (``reads the source``, ``writes the replica``).
    :param kind: ``kafka`` or ``embedded``.
    :param settings: the cluster's client settings.
    """
    if kind != "kafka":
        return None
    protocol = str(settings.get(SECURITY_PROTOCOL) or "PLAINTEXT")
    if protocol.upper() in TLS_PROTOCOLS:
        return None
    return (
        f"networkencryption needs TLS, but the gateway {role} on cluster {cluster} with "
        f"{SECURITY_PROTOCOL}={protocol}; set it to SSL or SASL_SSL"
    )


def check_encryption(source: Any, replica: Any) -> None:
    """Refuse encryption a gateway could not give: ``source`` and ``replica`` are the two
    clusters (with ``name``, ``kind`` and ``settings``), source first.

    :raises InvalidArgument: one of the gateway's connections would be plaintext.
    """
    reason = encryption_refusal(source, replica)
    if reason is not None:
        raise InvalidArgument(reason)


def encryption_refusal(source: Any, replica: Any) -> str | None:
    """``check_encryption``'s reason, or None when both of the gateway's connections are TLS
    (or local)."""
    for role, info in (("reads the source", source), ("writes the replica", replica)):
        reason = plaintext_connection(role, info.name, info.kind, info.settings)
        if reason is not None:
            return reason
    return None
