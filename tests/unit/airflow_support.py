"""What the Airflow operator and sensor tests share: the two streams and a task context."""

from __future__ import annotations

from types import SimpleNamespace

SRC = "/mapr/sanfrancisco/activity"
DST = "/mapr/newyork/activity"


def ctx(try_number: int = 1) -> dict:
    """The part of an Airflow task context the operators read."""
    return {"ti": SimpleNamespace(try_number=try_number)}
