"""Which gateway replicates which source partition.

Every gateway computes the same answer from the same inputs: the source partitions its
cluster must pull, and the gateways whose heartbeat is fresh. Partitions are dealt to the
live gateways round-robin in a stable order, whole apply lanes at a time (``model.lanes``), so each
gateway knows its share without any coordinator, and a gateway whose heartbeat expires has its partitions dealt to the others
(they resume from the stored positions; the transactional apply makes any brief overlap harmless).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from _typeshed import SupportsRichComparison

HEARTBEAT_INTERVAL_SECONDS = 2.0
HEARTBEAT_EXPIRY_SECONDS = 10.0

P = TypeVar("P", bound="SupportsRichComparison")


def live_gateways(heartbeats: Mapping[str, float], now: float, expiry: float = HEARTBEAT_EXPIRY_SECONDS) -> list[str]:
    """Gateways whose last heartbeat (seconds since the epoch) is younger than ``expiry``."""
    return sorted(g for g, beat in heartbeats.items() if now - beat < expiry)


def eligible(heartbeats: Mapping[str, float], listed: Sequence[str] | None) -> dict[str, float]:
    """The heartbeats of the gateways a source cluster sends to: those it lists for the
    destination (``cluster gateway set``), or every gateway of the destination if it lists none."""
    return {g: beat for g, beat in heartbeats.items() if listed is None or g in listed}


def deal(
    partitions: Iterable[P], gateways: Sequence[str], group: Callable[[P], Any] | None = None
) -> dict[str, list[P]]:
    """Deal ``partitions`` to ``gateways`` (in sorted order) round-robin, in sorted order; with
    ``group``, whole groups of them (the partitions of one apply lane: ``lane_group``), in the sorted
    order of their keys. Each share is sorted."""
    ordered = sorted(gateways)
    shares: dict[str, list[P]] = {g: [] for g in ordered}
    if not ordered:
        return shares
    groups: dict[Any, list[P]] = {}
    for partition in sorted(partitions):
        groups.setdefault(partition if group is None else group(partition), []).append(partition)
    for i, key in enumerate(sorted(groups)):
        shares[ordered[i % len(ordered)]].extend(groups[key])
    return {g: sorted(share) for g, share in shares.items()}


def shares_seen_by(
    gateway: str,
    partitions: Iterable[P],
    heartbeats: Mapping[str, float],
    now: float,
    expiry: float = HEARTBEAT_EXPIRY_SECONDS,
    group: Callable[[P], Any] | None = None,
) -> dict[str, list[P]]:
    """Every live gateway's share as ``gateway`` computes it: a gateway always counts itself live."""
    live = set(live_gateways(heartbeats, now, expiry)) | {gateway}
    return deal(partitions, sorted(live), group)
