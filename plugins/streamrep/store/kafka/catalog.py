"""The catalog on Kafka: documents by kind and key in the internal catalog topic, each changed by
compare-and-set in a transaction of its own (``keys.catalog_txid``), and the topic naming a new
stream may take (``check_naming``).

A stream's change carries its ACLs with it (``acls``), and a new stream is marked as written
under apply lanes in the transaction that creates it (``_born_laned``, the apply path's, in
``store``).
"""

from __future__ import annotations

import json
from abc import abstractmethod
from collections.abc import Callable, Mapping

import streamrep.store.kafka.keys as keys
from streamrep.errors import Conflict, RetryNow, StreamrepError
from streamrep.model.catalog import STREAM_KIND, check_document
from streamrep.model.naming import naming_for
from streamrep.store.base import CatalogDoc
from streamrep.store.kafka.client import CATALOG_RETRIES
from streamrep.store.kafka.core import KafkaCore
from streamrep.store.kafka.folds import CatalogFold
from streamrep.store.kafka.transactions import Transaction


class KafkaCatalog(KafkaCore):
    """The Store's catalog methods, on the catalog fold and catalog transactions."""

    def catalog_get(self, kind: str, key: str) -> CatalogDoc | None:
        doc = self._catalog().get((kind, key))
        # Read before every change of it (catalog_update): a newer streamrep's document is never written over.
        self._fold("catalog", CatalogFold).refuse_newer("catalog document", kind, key)
        return json.loads(json.dumps(doc)) if doc is not None else None

    def catalog_list(self, kind: str) -> dict[str, CatalogDoc]:
        return {k: json.loads(json.dumps(doc)) for (kd, k), doc in sorted(self._catalog().items()) if kd == kind}

    def catalog_update(
        self, kind: str, key: str, change: Callable[[CatalogDoc | None], CatalogDoc | None]
    ) -> CatalogDoc | None:
        txid = keys.catalog_txid(self._internal, kind, key)
        self.acls.enforced()  # the first catalog write on a cluster with an authorizer sets streamrep's own ACLs
        for _ in range(CATALOG_RETRIES):
            try:
                with self._transaction(txid, "catalog") as txn:
                    # Read after this writer fenced the others. The change's own refusal (a Conflict
                    # among them) is a user error, never retried; only a fenced writer (RetryNow) is.
                    old = self.catalog_get(kind, key)
                    new = change(old)
                    payload = None if new is None else json.dumps(new).encode("utf-8")
                    if payload is not None:  # what the folds would skip is refused here, never lost unseen
                        check_document(kind, key, json.loads(payload))
                    if kind == STREAM_KIND:  # the broker's ACLs follow the stream's ACEs, set before the commit
                        self.acls.sync_stream(self.catalog_get(kind, key), new)
                        if old is None and new is not None:
                            self._born_laned(txn, new["uuid"])
                    txn.internal("catalog", keys.catalog_key(kind, key), payload)
                return new
            except RetryNow:
                continue
        raise Conflict(f"cluster {self.cluster}: catalog entry {kind} {key} kept changing; try again")

    def check_naming(self, path: str, spec: str | None, others: Mapping[str, str | None]) -> None:
        naming = naming_for(spec, path, self.namespace)
        for other_path, other_spec in sorted(others.items()):
            try:
                other = naming_for(other_spec, other_path, self.namespace)
            except StreamrepError:
                continue
            if other_path != path and naming.overlaps(other):
                raise Conflict(
                    f"the Kafka topics of {path} ({naming.spec}) would overlap those of stream "
                    f"{other_path} ({other.spec}); choose another -topicnaming"
                )
        if path in others:
            return  # the stream exists: creating it is refused as AlreadyExists
        self._installations.check_new(path, naming)

    def native_topic(self, stream: str, topic: str) -> str | None:
        return self._naming(stream).kafka_topic(topic)

    @abstractmethod
    def _born_laned(self, txn: Transaction, stream: str) -> None:
        """Write, in the catalog transaction ``txn`` that creates ``stream``, that its replica
        partitions are written under lane ids only."""
