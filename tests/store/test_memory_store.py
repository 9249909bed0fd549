"""The memory backend (``memory_store.py``) writes what ``Store`` declares abstract and nothing else,
so its pass of the conformance suite proves that a backend needs no more: the count that
docs/internals.md gives.
"""

from __future__ import annotations

import re
from pathlib import Path

from store.memory_store import MemoryStore
from streamrep.store.base import Store

INTERNALS = Path(__file__).resolve().parents[2] / "docs" / "internals.md"


def test_the_memory_store_writes_the_abstract_methods_and_no_other() -> None:
    written = {name for name in vars(MemoryStore) if not name.startswith("_")}
    assert written == Store.__abstractmethods__


def test_the_docs_count_the_methods_a_backend_writes() -> None:
    said = re.search(r"What a backend writes: (\d+) methods", INTERNALS.read_text())
    assert said is not None and int(said[1]) == len(Store.__abstractmethods__)
