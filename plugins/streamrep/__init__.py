"""streamrep: MapR Event Store style stream replication on open parts.

Layers, each importing only the ones above it: model, store, client, replication,
spark, airflow/cli. See docs/internals.md for the map.
"""

__version__ = "0.1.0"
