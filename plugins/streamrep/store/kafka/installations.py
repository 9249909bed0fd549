"""Streamrep installations on shared brokers.

**Installations on shared brokers own their topics** (issue 18: a namespace-less installation created
``/prod/apps/clicks`` and read a ``prod`` stream's topic). A store finds the other installations from
the topic list (their ``_streamrep[.<ns>].catalog``) and folds their catalogs read-only into claims:
each stream's naming, and each namespace's prefix ``<ns>.`` (every topic under it is that
installation's, but for a namespace nested in it). Of a stream and a claim that could both name a
Kafka topic, the higher rank holds it (``naming.rank``: a naming that creates its topics outranks an
adopting one, a narrower prefix a wider one; the namespace prefix outranks both).

- ``stream create`` refuses a naming that would share or take another installation's topics; it
  allows only an adopting naming wider than the other's (``cluster`` beside other installations),
  and a creating naming over an adopting one. The default and ``hpe`` namings never adopt: a Kafka
  topic already in their range is refused, so nothing existing changes hands on creation.
- ``topics``, reads, writes, cursors and ``drop_stream`` skip topics another installation holds, so
  a ``cluster`` stream never sees them (nor anyone's internal topics); ``topic create`` refuses them.
- Cost: creating reads the others anew (a topic list and one offset request per installation). Other
  calls use what the store last read, and read again only for a Kafka topic name it has not judged:
  a judgement holds while the topic exists, since the rules above keep it from changing hands.
- With ACLs, an installation may be refused another's catalog: that installation's streams are then
  unknown here (its namespace prefix still counts, from the topic list) and the broker's ACLs guard
  its topics; streamrep never fails for it. Two installations blind to each other, or creating at the
  same moment, can still both name a topic: the rank decides, and an exact tie gives it to neither.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NamedTuple

from streamrep.errors import Conflict, NotFound, PermissionDenied, StreamrepError
from streamrep.model.catalog import STREAM_KIND
from streamrep.model.naming import DEFAULT_NAMING, PrefixNaming, TopicNaming, naming_for
from streamrep.store.kafka.client import installation_of, internal_prefix
from streamrep.store.kafka.folds import CatalogFold
from streamrep.store.kafka.parts import StoreCore


class Claim(NamedTuple):
    """Kafka topics another installation on the same brokers holds: those of ``naming``."""

    naming: TopicNaming
    rank: tuple[int, ...]  # see Installations.rank; a namespace's own prefix outranks every stream's
    whose: str  # "stream /a of the streamrep installation with namespace 'prod'"


class Installations:
    """What the other installations on a store's brokers hold, as the store last read it."""

    def __init__(self, store: StoreCore):
        self.store = store
        self.others: dict[str, CatalogFold] = {}  # namespace of another installation on the brokers -> its catalog
        self.claims: list[Claim] = []  # what the other installations hold, as last read
        self.claimed: dict[str, list[Claim]] = {}  # Kafka topic -> the claims on it (kept while it exists)

    def check_new(self, path: str, naming: TopicNaming) -> None:
        """Refuse a new stream at ``path`` named by ``naming`` whose topics would share, or take,
        another installation's, or take Kafka topics that exist (unless it adopts topics)."""
        listed = self.store._kafka_topics()
        self.refresh(listed)  # creating a stream always reads the other installations anew
        rank = self.rank(naming)
        for claim in self.claims:
            # Two overlaps are allowed: an adopting naming wider than the other's (it yields the other's
            # topics when read), and a naming that creates its topics over an adopting one (which yields
            # them; none exist yet, checked below). Anything else would share, or take, the other's topics.
            yields = rank < claim.rank and not naming.within(claim.naming)
            creates_new = not naming.adopts and claim.naming.adopts
            if naming.overlaps(claim.naming) and not (yields or creates_new):
                raise Conflict(
                    f"the Kafka topics of {path} ({naming.spec}) would overlap those of {claim.whose} "
                    "on the same brokers; choose another path or -topicnaming"
                )
        if not naming.adopts:
            existing = sorted(name for name in listed if naming.topic_of(name) is not None)
            if existing:  # no stream of this installation names it (checked above): someone else's, or left over
                raise Conflict(
                    f"Kafka topic {existing[0]} already exists, and the {naming.spec} naming of {path} "
                    "never adopts a topic; adopt existing topics with -topicnaming prefix:<P>, "
                    "or choose another path"
                )

    def rank(self, naming: TopicNaming) -> tuple[int, ...]:
        """Of two overlapping streams of different installations, the higher rank holds a shared topic;
        the longer namespace breaks a tie (it is the one whose prefix the topic is under)."""
        return (*naming.rank, len(self.store.namespace))

    def refresh(self, listed: Mapping[str, int]) -> None:
        """Read again what the other installations on these brokers hold (``listed`` is the topic list):
        each one's namespace prefix ``<ns>.``, and its streams' namings, from its catalog (read-only;
        folded on from where this store left it, so a refresh costs one offset request per installation)."""
        found = {ns for ns in map(installation_of, listed) if ns is not None and ns != self.store.namespace}
        for gone in set(self.others) - found:
            self.others.pop(gone).close()
        streams: list[Claim] = []
        namespaces: list[Claim] = []
        for ns in sorted(found):
            installation = (
                f"the streamrep installation with namespace {ns!r}"
                if ns
                else "the streamrep installation without a namespace"
            )
            if ns and not f"{self.store.namespace}.".startswith(f"{ns}."):  # not ours when ours is nested in it
                namespaces.append(
                    Claim(
                        PrefixNaming(f"{ns}.", DEFAULT_NAMING),
                        (2, len(ns) + 1, len(ns)),
                        f"{installation} (every topic under '{ns}.')",
                    )
                )
            fold = self.others.get(ns)
            if fold is None:
                fold = self.others[ns] = CatalogFold(self.store, internal_prefix(ns) + "catalog", learn=False)
            try:
                fold.catch_up()
            except PermissionDenied:
                # ACLs keep its catalog from this installation: its streams are unknown here, and the
                # broker's ACLs on its topics are what guards them (its namespace prefix still counts).
                continue
            except NotFound:  # deleted since it was listed
                self.others.pop(ns).close()
                continue
            for (kind, path), doc in sorted(fold.state.items()):
                try:
                    if kind == STREAM_KIND:
                        naming = naming_for(doc.get("naming"), doc["path"], ns)
                        streams.append(Claim(naming, (*naming.rank, len(ns)), f"stream {path} of {installation}"))
                except (StreamrepError, KeyError, TypeError, AttributeError):
                    continue  # a stream whose naming cannot be used holds no topics
        self.claims = streams + namespaces  # a stream's claim names what overlaps most precisely
        self.claimed = {}

    def foreign(
        self, naming: TopicNaming, names: Sequence[str], listed: Mapping[str, int] | None = None, refresh: bool = False
    ) -> dict[str, Claim]:
        """Of the Kafka topics ``names`` (named by ``naming``, a stream of this installation), those another
        installation holds against it: name -> its claim.

        The others are read again when asked to (creating), or when a name comes up that this store has
        not judged. A judgement is kept while the Kafka topic exists (``listed`` is the topic list, when
        the caller has it): the checks on creating keep an existing topic from changing hands."""
        if listed is not None:
            for gone in [name for name in self.claimed if name not in listed]:
                del self.claimed[gone]  # deleted: judged again if made again
        judged = self.claimed
        if refresh or any(name not in judged for name in names):
            listed = self.store._kafka_topics() if listed is None else listed
            # Judged again with the new claims, not forgotten: a store writing 64 topics in turn
            # otherwise read the topic list and every other catalog again for each one it named.
            names_known = [*self.claimed, *names]
            self.refresh(listed)
            judged = {name: [c for c in self.claims if c.naming.topic_of(name) is not None] for name in names_known}
            self.claimed.update((name, claims) for name, claims in judged.items() if name in listed)
        rank = self.rank(naming)
        held = {name: [c for c in judged[name] if c.rank >= rank] for name in names}
        return {name: claims[0] for name, claims in held.items() if claims}  # a stream's first: the most precise

    def close(self) -> None:
        for fold in self.others.values():
            fold.close()
