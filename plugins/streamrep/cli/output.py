"""maprcli-style output: a table of rows, or with ``-json`` maprcli's JSON envelope."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterable
from enum import Enum
from typing import Any, TextIO

from streamrep.model.message import Message


def _stamped(status: str) -> dict[str, Any]:
    now = time.time()
    return {
        "timestamp": int(now * 1000),
        "timeofday": time.strftime("%Y-%m-%d %H:%M:%S GMT%z", time.localtime(now)),
        "status": status,
    }


def envelope(rows: list[dict[str, Any]]) -> dict[str, Any]:
    return {**_stamped("OK"), "total": len(rows), "data": rows}


def error_envelope(message: str) -> dict[str, Any]:
    """maprcli's shape for a failed command."""
    return {**_stamped("ERROR"), "errors": [{"desc": message}]}


def print_error_json(message: str, out: TextIO) -> None:
    json.dump(error_envelope(message), out, indent=2)
    out.write("\n")


def cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Enum):
        return str(value.value)
    if isinstance(value, (list, tuple)):
        return ",".join(cell(v) for v in value) or "-"
    return str(value)


def print_rows(rows: list[dict[str, Any]], as_json: bool, out: TextIO) -> None:
    if as_json:
        json.dump(envelope(rows), out, indent=2)
        out.write("\n")
        return
    if not rows:
        return
    columns = list(dict.fromkeys(k for row in rows for k in row))
    table = [columns] + [[cell(row.get(c)) for c in columns] for row in rows]
    widths = [max(len(r[i]) for r in table) for i in range(len(columns))]
    for r in table:
        out.write("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=False)).rstrip() + "\n")


def text_or_base64(data: bytes | None) -> tuple[str | None, bool]:
    """A UTF-8 string when the bytes are UTF-8, else base64 (and True)."""
    if data is None:
        return None, False
    try:
        return data.decode("utf-8"), False
    except UnicodeDecodeError:
        return base64.b64encode(data).decode("ascii"), True


def message_json(m: Message) -> dict[str, Any]:
    value, value_b64 = text_or_base64(m.value)
    key, key_b64 = text_or_base64(m.key)
    doc: dict[str, Any] = {
        "topic": m.topic,
        "partition": m.partition,
        "offset": m.offset,
        "key": key,
        "value": value,
        "headers": {},
        "timestamp": m.timestamp,
    }
    for name, raw in m.headers:
        doc["headers"][name] = text_or_base64(raw)[0]
    encoded = [f for f, b64 in (("key", key_b64), ("value", value_b64)) if b64]
    if encoded:
        doc["base64"] = encoded
    return doc


def print_messages(messages: Iterable[Message], as_json: bool, out: TextIO) -> None:
    """One line per message: its JSON document, or its value as the raw bytes it holds."""
    if as_json:
        for m in messages:
            out.write(json.dumps(message_json(m)) + "\n")
        out.flush()
        return
    raw = getattr(out, "buffer", None)
    if raw is None:  # a text-only stream: undecodable bytes survive as surrogate escapes
        out.write("".join((m.value or b"").decode("utf-8", "surrogateescape") + "\n" for m in messages))
        out.flush()
        return
    out.flush()  # keep the text layer's order
    raw.write(b"".join((m.value or b"") + b"\n" for m in messages))
    raw.flush()
