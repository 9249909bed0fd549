"""maprcli's grammar: command words, then ``-name value`` options; ``-json`` is a flag.

A boolean option given bare (followed by another option or the end of the line) means true,
as ``-json`` does. A value that is itself one of the command's option names is a missing value.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from streamrep.errors import InvalidArgument

TRUE_WORDS = {"true", "yes", "1", "on"}
FALSE_WORDS = {"false", "no", "0", "off"}
# Options every command takes besides its own.
GLOBAL_FLAGS = ("json", "help")
# Whole numbers are stored as SQLite integers: 64-bit signed.
MAX_INT = 2**63 - 1
# Numbers as a shell script writes them: ASCII digits, nothing around them. Python's int() and float()
# would also take ' 3', '1_000' and full-width or Arabic-Indic digits, which no one means to type.
WHOLE_NUMBER = re.compile(r"-?[0-9]+", re.ASCII)
DECIMAL_NUMBER = re.compile(r"-?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?", re.ASCII)
NON_FINITE = {"nan", "-nan", "inf", "-inf", "infinity", "-infinity"}
# Float options whose 0 is no bound but a loop that never waits: a gateway's seconds between polls.
POSITIVE = frozenset({"interval"})


def parse_bool(name: str, text: str) -> bool:
    word = text.strip().lower()
    if word in TRUE_WORDS:
        return True
    if word in FALSE_WORDS:
        return False
    raise InvalidArgument(f"option -{name} takes true/false/yes/no/1/0, not {text!r}")


def _lookalike(text: str, kind: Callable[[str], Any]) -> str:
    """What to add when ``text`` is a number only to Python (padded, other digits, underscores)."""
    try:
        kind(text)
    except ValueError:
        return ""
    return " (ASCII digits only, nothing around them)"


def parse_int(name: str, text: str, maximum: float | None = None) -> int:
    """A whole number in ASCII digits (``-`` allowed), with nothing around it."""
    if WHOLE_NUMBER.fullmatch(text) is None:
        raise InvalidArgument(f"option -{name} takes a whole number, not {text[:40]!r}{_lookalike(text, int)}")
    value = int(text)
    bound = MAX_INT if maximum is None else maximum
    if not -MAX_INT <= value <= bound:
        raise InvalidArgument(f"option -{name} must be from {-MAX_INT} to {bound}, not {text[:40]}")
    return value


def parse_float(name: str, text: str, maximum: float | None = None) -> float:
    """A finite, non-negative number of seconds in ASCII digits, with nothing around it; more than 0
    for the options in :data:`POSITIVE`."""
    if text.lower() in NON_FINITE:
        raise InvalidArgument(f"option -{name} takes a finite number of seconds, not {text!r}")
    if DECIMAL_NUMBER.fullmatch(text) is None:
        raise InvalidArgument(f"option -{name} takes a number of seconds, not {text[:40]!r}{_lookalike(text, float)}")
    value = float(text)
    if not math.isfinite(value):
        raise InvalidArgument(f"option -{name} takes a finite number of seconds, not {text[:40]!r}")
    if value < 0:
        raise InvalidArgument(f"option -{name} must not be negative")
    if name in POSITIVE and value == 0:
        raise InvalidArgument(f"option -{name} must be more than 0 seconds")
    if maximum is not None and value > maximum:
        raise InvalidArgument(f"option -{name} must be at most {maximum:g} seconds, not {text[:40]}")
    return value


CONVERTERS: dict[type, Callable[..., Any]] = {
    bool: lambda n, t, _m: parse_bool(n, t),
    int: parse_int,
    float: parse_float,
    str: lambda _n, t, _m: t,
}
KIND_NAMES = {bool: "true|false", int: "number", float: "seconds"}


@dataclass(frozen=True)
class Option:
    """One ``-name value`` option.

    :param kind: str, int, float (seconds) or bool.
    :param maximum: the largest value a number may take (documented in the usage).
    :param choices: the only values a str option takes.
    """

    name: str
    kind: type = str
    required: bool = False
    help: str = ""
    maximum: float | None = None
    choices: tuple[str, ...] = ()

    def placeholder(self) -> str:
        return f"<{'|'.join(self.choices) or KIND_NAMES.get(self.kind, self.name)}>"

    def convert(self, text: str) -> Any:
        value = CONVERTERS[self.kind](self.name, text, self.maximum)
        if self.choices and value not in self.choices:
            raise InvalidArgument(f"option -{self.name} takes {', '.join(self.choices)}, not {text!r}")
        return value

    def describe(self) -> str:
        text = self.help or ""
        if self.maximum is not None:
            text += f"{'; ' if text else ''}at most {self.maximum:g}"
        if self.kind is bool:
            text += f"{'; ' if text else ''}bare -{self.name} means true"
        return text


@dataclass(frozen=True)
class Command:
    words: tuple[str, ...]
    handler: Callable[..., Any]
    options: tuple[Option, ...] = field(default=())
    help: str = ""

    def usage(self) -> str:
        parts = ["streamrep", *self.words]
        for opt in self.options:
            shown = f"-{opt.name} {opt.placeholder()}"
            parts.append(shown if opt.required else f"[{shown}]")
        return " ".join(parts) + " [-json]"

    def help_text(self) -> str:
        """The usage line, then each option: required or not, and what it means."""
        lines = [f"usage: {self.usage()}", "", self.help, ""]
        if self.options:
            lines.append("options:")
            for opt in self.options:
                need = "required" if opt.required else "optional"
                lines.append(f"  -{opt.name:20} {need:9} {opt.describe()}".rstrip())
        lines.append(f"  {'-json':21} {'optional':9} print maprcli's JSON envelope (errors too)")
        lines.append(f"  {'-help':21} {'optional':9} print this help")
        return "\n".join(lines)

    def _is_option_name(self, token: str) -> bool:
        name = token[1:].lower() if token.startswith("-") else ""
        return name in GLOBAL_FLAGS or any(opt.name.lower() == name for opt in self.options)

    def parse(self, args: list[str]) -> tuple[dict[str, Any], bool]:
        """Options by name (converted, with Python names) and whether ``-json`` was given."""
        known = {opt.name.lower(): opt for opt in self.options}
        values: dict[str, Any] = {}
        as_json = False
        i = 0
        while i < len(args):
            token = args[i]
            if not token.startswith("-") or len(token) < 2:
                raise InvalidArgument(f"unexpected argument {token!r}; usage: {self.usage()}")
            name = token[1:].lower()
            if name == "json":
                as_json = True
                # maprcli accepts '-json' alone; also take an explicit boolean after it
                if i + 1 < len(args) and args[i + 1].lower() in TRUE_WORDS | FALSE_WORDS:
                    as_json = parse_bool("json", args[i + 1])
                    i += 1
                i += 1
                continue
            opt = known.get(name)
            if opt is None:
                valid = ", ".join(f"-{o.name}" for o in self.options) or "none"
                raise InvalidArgument(f"unknown option {token} for '{' '.join(self.words)}' (valid: {valid}, -json)")
            if opt.name in values:
                raise InvalidArgument(f"option {token} given twice")
            bare = i + 1 >= len(args) or args[i + 1].startswith("-")
            if opt.kind is bool and bare:
                values[opt.name] = True
                i += 1
                continue
            if i + 1 >= len(args) or self._is_option_name(args[i + 1]):
                raise InvalidArgument(f"option {token} needs a value; usage: {self.usage()}")
            values[opt.name] = opt.convert(args[i + 1])
            i += 2
        missing = [f"-{o.name}" for o in self.options if o.required and o.name not in values]
        if missing:
            raise InvalidArgument(f"missing required option(s) {', '.join(missing)}; usage: {self.usage()}")
        return values, as_json


def split_words(args: list[str]) -> tuple[list[str], list[str]]:
    """The leading command words and the option tokens after them."""
    for i, token in enumerate(args):
        if token.startswith("-"):
            return args[:i], args[i:]
    return list(args), []


def wants_json(options: list[str]) -> bool:
    """Whether ``-json`` is among the option tokens (for errors met before they are parsed)."""
    lowered = [t.lower() for t in options]
    for i, token in enumerate(lowered):
        if token == "-json":
            return not (i + 1 < len(lowered) and lowered[i + 1] in FALSE_WORDS)
    return False


def wants_help(options: list[str]) -> bool:
    return any(t.lower() in ("-help", "--help", "-h") for t in options)
