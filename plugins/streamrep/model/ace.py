"""MapR access control expressions (ACEs), as used by stream permissions.

An ACE combines the terms ``u:<user>``, ``g:<group>``, ``r:<role>`` and ``p``
(public) with ``!`` (not), ``&`` (and), ``|`` (or) and parentheses; ``!`` binds
tightest and ``|`` loosest. The empty ACE grants access to no one.

Names are as in ``/etc/passwd`` and ``/etc/group`` (letters, digits, ``_ - . $ @``). MapR's
ACE syntax has no quoting, so a name with a space (``u:john smith``) or quotes cannot be
written: such an ACE is refused with a message saying so.
"""

from __future__ import annotations

import re
import string
from dataclasses import dataclass
from typing import ClassVar, NamedTuple, NoReturn

from streamrep.errors import InvalidArgument

MAX_LENGTH = 4096
MAX_DEPTH = 100

_NAME_CHARS = frozenset(string.ascii_letters + string.digits + "_-.$@")
_NAME_RE = re.compile(r"[A-Za-z0-9_.$@-]+")
_OPERATORS = "()!&|"


@dataclass(frozen=True)
class Identity:
    """Who is asking: a user name with the user's groups and roles."""

    user: str
    groups: frozenset[str] = frozenset()
    roles: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        # Callers often hold groups as lists or sets; equality and hashing need frozensets.
        object.__setattr__(self, "groups", frozenset(self.groups))
        object.__setattr__(self, "roles", frozenset(self.roles))


@dataclass(frozen=True)
class Ace:
    """Base of every ACE node; ``str(ace)`` is the canonical text form."""

    def allows(self, identity: Identity) -> bool:
        raise NotImplementedError


@dataclass(frozen=True)
class _Named(Ace):
    name: str
    prefix: ClassVar[str] = ""

    def __post_init__(self) -> None:
        # A name the parser would reject could not round-trip through str().
        if not isinstance(self.name, str) or not _NAME_RE.fullmatch(self.name):
            raise ValueError(f"invalid name for {self.prefix}: {self.name!r}")

    def __str__(self) -> str:
        return f"{self.prefix}:{self.name}"


@dataclass(frozen=True)
class User(_Named):
    """``u:<name>``: the user with that name."""

    prefix: ClassVar[str] = "u"

    def allows(self, identity: Identity) -> bool:
        return identity.user == self.name


@dataclass(frozen=True)
class Group(_Named):
    """``g:<name>``: members of that group."""

    prefix: ClassVar[str] = "g"

    def allows(self, identity: Identity) -> bool:
        return self.name in identity.groups


@dataclass(frozen=True)
class Role(_Named):
    """``r:<name>``: holders of that role."""

    prefix: ClassVar[str] = "r"

    def allows(self, identity: Identity) -> bool:
        return self.name in identity.roles


@dataclass(frozen=True)
class Public(Ace):
    """``p``: everyone."""

    def allows(self, identity: Identity) -> bool:
        return True

    def __str__(self) -> str:
        return "p"


@dataclass(frozen=True)
class Nobody(Ace):
    """The empty ACE: no one. It has no text, so it only stands alone."""

    def allows(self, identity: Identity) -> bool:
        return False

    def __str__(self) -> str:
        return ""


def _check_child(node: object) -> None:
    if not isinstance(node, Ace):
        raise TypeError(f"not an ACE node: {node!r}")
    if isinstance(node, Nobody):
        raise ValueError("Nobody() cannot be part of a larger ACE: it has no text form")


@dataclass(frozen=True)
class Not(Ace):
    """``!term``: everyone the term does not allow."""

    term: Ace

    def __post_init__(self) -> None:
        _check_child(self.term)

    def allows(self, identity: Identity) -> bool:
        return not self.term.allows(identity)

    def __str__(self) -> str:
        if isinstance(self.term, (And, Or)):
            return f"!({self.term})"
        return f"!{self.term}"


@dataclass(frozen=True)
class _Compound(Ace):
    items: tuple[Ace, ...]
    joiner: ClassVar[str] = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "items", tuple(self.items))
        # One item would print without its operator and re-parse as a different node.
        if len(self.items) < 2:
            raise ValueError(f"{type(self).__name__} needs at least two items")
        for item in self.items:
            _check_child(item)

    def __str__(self) -> str:
        return f" {self.joiner} ".join(f"({item})" if self._needs_parens(item) else str(item) for item in self.items)

    def _needs_parens(self, item: Ace) -> bool:
        raise NotImplementedError


@dataclass(frozen=True)
class And(_Compound):
    """``a & b & ...``: allowed when every item allows."""

    joiner: ClassVar[str] = "&"

    def _needs_parens(self, item: Ace) -> bool:
        # A nested And is parenthesised too, so the printed form keeps the tree's shape.
        return isinstance(item, (And, Or))

    def allows(self, identity: Identity) -> bool:
        return all(item.allows(identity) for item in self.items)


@dataclass(frozen=True)
class Or(_Compound):
    """``a | b | ...``: allowed when any item allows."""

    joiner: ClassVar[str] = "|"

    def _needs_parens(self, item: Ace) -> bool:
        return isinstance(item, Or)

    def allows(self, identity: Identity) -> bool:
        return any(item.allows(identity) for item in self.items)


_TERMS: dict[str, type[_Named]] = {"u": User, "g": Group, "r": Role}


def _fail(text: str, what: str) -> NoReturn:
    quoted = text if len(text) <= 60 else text[:57] + "..."
    # repr() escapes newlines and other control characters, keeping the message on one line.
    raise InvalidArgument(f"invalid access control expression {quoted!r}: {what}")


class _Token(NamedTuple):
    kind: str  # one of _OPERATORS, "term" or "end"
    text: str
    pos: int
    node: Ace | None = None  # set for terms only


class _Parser:
    """Recursive descent over: or := and ('|' and)*; and := unary ('&' unary)*;
    unary := '!' unary | '(' or ')' | term."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = self._tokenize()
        self.i = 0

    def fail(self, what: str) -> NoReturn:
        _fail(self.text, what)

    def _tokenize(self) -> list[_Token]:
        text, i, tokens = self.text, 0, []
        quote = next((k for k, c in enumerate(text) if c in "\"'"), None)
        if quote is not None:
            self.fail(f"quote at position {quote}: MapR's ACE syntax has no quoting, so names cannot contain spaces")
        while i < len(text):
            ch = text[i]
            if ch.isspace():
                i += 1
            elif ch in _OPERATORS:
                tokens.append(_Token(ch, ch, i))
                i += 1
            elif ch in _NAME_CHARS or ch == ":":
                j = i
                while j < len(text) and (text[j] in _NAME_CHARS or text[j] == ":"):
                    j += 1
                before = tokens[-1] if tokens else None
                if before is not None and before.kind == "term" and ":" not in text[i:j] and text[i:j] != "p":
                    self.fail(
                        f"{text[i:j]!r} at position {i} follows {before.text!r}: names cannot contain "
                        "spaces (MapR's ACE syntax has no quoting)"
                    )
                tokens.append(_Token("term", text[i:j], i, self._term(text[i:j], i)))
                i = j
            else:
                self.fail(f"unexpected character {ch!r} at position {i}")
        tokens.append(_Token("end", "", len(text)))
        return tokens

    def _term(self, word: str, pos: int) -> Ace:
        if word == "p":
            return Public()
        prefix, colon, name = word.partition(":")
        if not colon or prefix not in _TERMS:
            self.fail(f"unknown term {word!r} at position {pos} (expected u:<user>, g:<group>, r:<role> or p)")
        start = pos + len(prefix) + 1
        if not name:
            self.fail(f"missing {_TERMS[prefix].__name__.lower()} name after '{prefix}:' at position {start}")
        if ":" in name:
            self.fail(f"unexpected character ':' in name at position {start + name.index(':')}")
        return _TERMS[prefix](name)

    def _next(self) -> _Token:
        tok = self.tokens[self.i]
        self.i += 1
        return tok

    def _found(self, tok: _Token) -> str:
        return "" if tok.kind == "end" else f", found {tok.text!r}"

    def parse(self) -> Ace:
        if self.tokens[0].kind == "end":
            return Nobody()
        node = self._or(0)
        tok = self.tokens[self.i]
        if tok.kind == ")":
            self.fail(f"unmatched ')' at position {tok.pos}")
        if tok.kind != "end":
            self.fail(f"expected '&' or '|' at position {tok.pos}{self._found(tok)}")
        return node

    def _or(self, depth: int) -> Ace:
        items = [self._and(depth)]
        while self.tokens[self.i].kind == "|":
            self.i += 1
            items.append(self._and(depth))
        return items[0] if len(items) == 1 else Or(tuple(items))

    def _and(self, depth: int) -> Ace:
        items = [self._unary(depth)]
        while self.tokens[self.i].kind == "&":
            self.i += 1
            items.append(self._unary(depth))
        return items[0] if len(items) == 1 else And(tuple(items))

    def _unary(self, depth: int) -> Ace:
        tok = self._next()
        if tok.kind in ("!", "(") and depth >= MAX_DEPTH:
            # Bounding the depth keeps the recursion far from Python's recursion limit.
            self.fail(f"nested deeper than {MAX_DEPTH} levels at position {tok.pos}")
        if tok.kind == "!":
            return Not(self._unary(depth + 1))
        if tok.kind == "(":
            node = self._or(depth + 1)
            close = self._next()
            if close.kind == "end":
                self.fail(f"missing ')' for '(' at position {tok.pos}")
            if close.kind != ")":
                self.fail(f"expected '&', '|' or ')' at position {close.pos}{self._found(close)}")
            return node
        if tok.node is not None:
            return tok.node
        after = f" after {self.tokens[self.i - 2].text!r}" if self.i >= 2 else ""
        self.fail(f"expected a term{after} at position {tok.pos}{self._found(tok)}")


def parse_ace(text: str) -> Ace:
    """Parse an ACE; raise InvalidArgument saying what is wrong and where."""
    if not isinstance(text, str):
        raise InvalidArgument(f"invalid access control expression: expected a string, got {type(text).__name__}")
    if len(text) > MAX_LENGTH:
        _fail(text, f"longer than {MAX_LENGTH} characters ({len(text)})")
    return _Parser(text).parse()


def validate_ace(text: str) -> str:
    """Check an ACE and return its canonical form (raises InvalidArgument)."""
    return str(parse_ace(text))
