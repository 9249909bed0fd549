"""maprcli's grammar: command words, then ``-name value`` options; ``-json`` is a flag."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from streamrep.errors import InvalidArgument

TRUE_WORDS = {"true", "yes", "1", "on"}
FALSE_WORDS = {"false", "no", "0", "off"}


def parse_bool(name: str, text: str) -> bool:
    word = text.strip().lower()
    if word in TRUE_WORDS:
        return True
    if word in FALSE_WORDS:
        return False
    raise InvalidArgument(f"option -{name} takes true/false/yes/no/1/0, not {text!r}")


def parse_int(name: str, text: str) -> int:
    try:
        return int(text.strip())
    except ValueError:
        raise InvalidArgument(f"option -{name} takes a whole number, not {text!r}") from None


def parse_float(name: str, text: str) -> float:
    try:
        value = float(text.strip())
    except ValueError:
        raise InvalidArgument(f"option -{name} takes a number of seconds, not {text!r}") from None
    if value < 0:
        raise InvalidArgument(f"option -{name} must not be negative")
    return value


CONVERTERS: dict[type, Callable[[str, str], Any]] = {
    bool: parse_bool, int: parse_int, float: parse_float, str: lambda _n, t: t,
}


@dataclass(frozen=True)
class Option:
    name: str
    kind: type = str
    required: bool = False
    help: str = ""


@dataclass(frozen=True)
class Command:
    words: tuple[str, ...]
    handler: Callable[..., Any]
    options: tuple[Option, ...] = field(default=())
    help: str = ""

    def usage(self) -> str:
        parts = ["streamrep", *self.words]
        for opt in self.options:
            shown = f"-{opt.name} <{opt.kind.__name__ if opt.kind is not str else opt.name}>"
            parts.append(shown if opt.required else f"[{shown}]")
        return " ".join(parts) + " [-json]"

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
            if i + 1 >= len(args):
                raise InvalidArgument(f"option {token} needs a value; usage: {self.usage()}")
            if opt.name in values:
                raise InvalidArgument(f"option {token} given twice")
            values[opt.name] = CONVERTERS[opt.kind](opt.name, args[i + 1])
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
