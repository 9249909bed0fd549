"""docs/airflow.md lists every public operator, sensor and trigger of the provider, and nothing
else: its table under "Operators for your own DAGs" against every ``BaseOperator`` (sensors among
them) and ``BaseTrigger`` subclass that a module of ``streamrep.airflow`` defines or exports under
a name without a leading ``_``, each importable from the module the table names."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
from pathlib import Path

from airflow.sdk import BaseOperator
from airflow.triggers.base import BaseTrigger

import streamrep.airflow

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "airflow.md"
TABLE_MARKER = "<!-- the provider's public operators, sensors and triggers -->"
ROW = re.compile(r"^\| `(\w+)` \| `([\w.]+)` \|", re.MULTILINE)


def documented() -> dict[str, str]:
    """The table's classes, by name, with the module it says to import each from."""
    text = GUIDE.read_text(encoding="utf-8")
    assert TABLE_MARKER in text, f"docs/airflow.md no longer has the table after {TABLE_MARKER}"
    table = text.split(TABLE_MARKER, 1)[1].split("\n\n", 1)[0]
    rows = ROW.findall(table)
    names = [name for name, _ in rows]
    assert len(names) == len(set(names)), "a class is listed twice"
    return dict(rows)


def exported() -> dict[str, type]:
    """Every public operator, sensor and trigger class the package's modules make importable."""
    found: dict[str, type] = {}
    for module_info in pkgutil.walk_packages(streamrep.airflow.__path__, "streamrep.airflow."):
        module = importlib.import_module(module_info.name)
        for name, cls in inspect.getmembers(module, inspect.isclass):
            if (
                not name.startswith("_")
                and cls.__module__.startswith("streamrep.")
                and issubclass(cls, (BaseOperator, BaseTrigger))
            ):
                found[name] = cls
    return found


def test_the_airflow_guide_lists_every_public_operator_sensor_and_trigger():
    listed, public = documented(), exported()
    assert sorted(set(public) - set(listed)) == [], "public in the package, missing from docs/airflow.md"
    assert sorted(set(listed) - set(public)) == [], "in docs/airflow.md, not a public class of the package"


def test_each_is_importable_from_the_module_the_guide_names():
    public = exported()
    for name, module in documented().items():
        assert getattr(importlib.import_module(module), name, None) is public[name], f"{name} from {module}"
