"""A replica's network options, as MapR's ``stream replica add``/``autosetup`` take them:
``-networkencryption``, ``-networkcompression`` and ``-throttle``. The value rules, the
MapR-to-Kafka codec mapping and which cluster connections encryption needs are here, once.

- **networkcompression** ``off|lz4|lzf|zlib`` (MapR) or Kafka's own ``gzip|snappy|zstd``; the
  gateway writes the replica's records with the Kafka codec it maps to. MapR's default is the
  stream's compression setting; streamrep's streams have none, so it is MapR's default, lz4.
  ``lzf`` is refused: Kafka has no LZF codec, and no other codec reads or writes LZF.
- **networkencryption**: the gateway moves the replica's data over TLS only. It reads the
  source cluster and writes the replica's cluster; every one of those connections that is a
  network connection (a Kafka cluster) must use ``security.protocol`` SSL or SASL_SSL. An
  embedded cluster is a file the gateway opens on its own machine: no network, nothing to encrypt.
- **throttle**: recorded and listed for MapR compatibility; it limits nothing yet (issue 20).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
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


@dataclass(frozen=True)
class NetworkOptions:
    """A replica link's network options, validated (``StreamAdmin.network_options``)."""

    throttle: bool
    networkencryption: bool
    networkcompression: str

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
