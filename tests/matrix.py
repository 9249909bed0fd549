"""Which cells of a wide test matrix CI runs.

CI runs each matrix dimension in one cell each (the newest release gets them all), to stay under its
time budget; ``STREAMREP_FULL_MATRIX=1`` runs every cell (docs/development.md, "The test suite").
"""

from __future__ import annotations

import os

import pytest

FULL_MATRIX = os.environ.get("STREAMREP_FULL_MATRIX") == "1"


def full_matrix_only(*values):
    """A ``parametrize`` cell that only ``STREAMREP_FULL_MATRIX=1`` runs; CI skips it, saying why."""
    reason = "a cell CI leaves out (one per dimension); STREAMREP_FULL_MATRIX=1 runs it"
    return pytest.param(*values, marks=pytest.mark.skipif(not FULL_MATRIX, reason=reason))
