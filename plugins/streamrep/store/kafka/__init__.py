"""The Kafka store (``store.py``) and its parts; see ``store.py`` for what it keeps where.

Everything a caller needs is re-exported here: ``from streamrep.store.kafka import KafkaStore``.
Importing this package imports confluent-kafka, so callers import it only where Kafka is used.
"""

from streamrep.store.kafka.client import NAMESPACE_SETTING, TIMEOUT_SECONDS, watermarks
from streamrep.store.kafka.store import KafkaStore
from streamrep.store.kafka.transactions import TRANSACTION_TIMEOUT_MS, VISIBLE_WITHIN_SECONDS

__all__ = [
    "NAMESPACE_SETTING",
    "TIMEOUT_SECONDS",
    "TRANSACTION_TIMEOUT_MS",
    "VISIBLE_WITHIN_SECONDS",
    "KafkaStore",
    "watermarks",
]
