"""The embedded store (``store.py``) and its parts: ``file`` (the SQLite file, its connections and
transactions), ``schema`` (its tables and formats) and ``rows`` (messages to and from rows).

``from streamrep.store.embedded import EmbeddedStore`` is the path callers use.
"""

from streamrep.store.embedded.store import EmbeddedStore

__all__ = ["EmbeddedStore"]
