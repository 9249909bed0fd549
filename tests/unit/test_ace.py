"""Tests for streamrep.model.ace: parsing, evaluation, canonical form and error messages."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamrep.errors import InvalidArgument
from streamrep.model.ace import (
    MAX_DEPTH,
    MAX_LENGTH,
    Ace,
    And,
    Group,
    Identity,
    Nobody,
    Not,
    Or,
    Public,
    Role,
    User,
    parse_ace,
    validate_ace,
)

ALICE = Identity("alice", groups=frozenset({"dev", "ops"}), roles=frozenset({"admin"}))
BOB = Identity("bob", groups=frozenset({"dev"}))
NOBODY_SPECIAL = Identity("carol")


# --- terms -------------------------------------------------------------------


def test_user_term():
    ace = parse_ace("u:alice")
    assert ace == User("alice")
    assert ace.allows(ALICE)
    assert not ace.allows(BOB)


def test_group_term():
    ace = parse_ace("g:ops")
    assert ace == Group("ops")
    assert ace.allows(ALICE)
    assert not ace.allows(BOB)


def test_role_term():
    ace = parse_ace("r:admin")
    assert ace == Role("admin")
    assert ace.allows(ALICE)
    assert not ace.allows(BOB)


def test_user_name_is_not_a_group_name():
    assert not parse_ace("u:dev").allows(BOB)
    assert not parse_ace("g:bob").allows(BOB)
    assert not parse_ace("r:bob").allows(BOB)
    assert User("x") != Group("x") != Role("x")


def test_public_allows_everybody():
    assert parse_ace("p") == Public()
    for identity in (ALICE, BOB, NOBODY_SPECIAL, Identity("")):
        assert parse_ace("p").allows(identity)


@pytest.mark.parametrize("text", ["", " ", "  \t\n  "])
def test_empty_ace_allows_nobody(text):
    ace = parse_ace(text)
    assert ace == Nobody()
    assert str(ace) == ""
    for identity in (ALICE, BOB, NOBODY_SPECIAL):
        assert not ace.allows(identity)


def test_name_characters():
    assert parse_ace("u:J.doe-1_$x@corp.example") == User("J.doe-1_$x@corp.example")
    assert parse_ace("g:0") == Group("0")


# --- operators -----------------------------------------------------------------


def test_and_is_tighter_than_or():
    ace = parse_ace("u:a | u:b & g:c")
    assert ace == Or((User("a"), And((User("b"), Group("c")))))
    assert ace.allows(Identity("a"))
    assert not ace.allows(Identity("b"))
    assert ace.allows(Identity("b", groups=frozenset({"c"})))
    assert parse_ace("u:b & g:c | u:a") == Or((And((User("b"), Group("c"))), User("a")))


def test_chains_are_flat():
    assert parse_ace("u:a & u:b & u:c") == And((User("a"), User("b"), User("c")))
    assert parse_ace("u:a | u:b | u:c") == Or((User("a"), User("b"), User("c")))


def test_negation():
    assert parse_ace("!u:alice") == Not(User("alice"))
    assert not parse_ace("!u:alice").allows(ALICE)
    assert parse_ace("!u:alice").allows(BOB)
    assert parse_ace("!!u:alice") == Not(Not(User("alice")))
    assert parse_ace("!!u:alice").allows(ALICE)
    assert not parse_ace("!p").allows(ALICE)


def test_negation_binds_tightest():
    assert parse_ace("!u:a & u:b") == And((Not(User("a")), User("b")))
    assert parse_ace("!u:a | u:b") == Or((Not(User("a")), User("b")))
    assert parse_ace("!(u:a & u:b)") == Not(And((User("a"), User("b"))))


def test_parentheses_group():
    ace = parse_ace("(u:a | u:b) & g:c")
    assert ace == And((Or((User("a"), User("b"))), Group("c")))
    assert not ace.allows(Identity("a"))
    assert ace.allows(Identity("a", groups=frozenset({"c"})))
    assert parse_ace("((u:a))") == User("a")


def test_parenthesised_chain_stays_nested():
    assert parse_ace("(u:a & u:b) & u:c") == And((And((User("a"), User("b"))), User("c")))
    assert str(parse_ace("(u:a & u:b) & u:c")) == "(u:a & u:b) & u:c"


def test_typical_stream_permission():
    ace = parse_ace("u:mapr | g:admins | (g:dev & !u:intern)")
    assert ace.allows(Identity("mapr"))
    assert ace.allows(Identity("x", groups=frozenset({"admins"})))
    assert ace.allows(Identity("x", groups=frozenset({"dev"})))
    assert not ace.allows(Identity("intern", groups=frozenset({"dev"})))
    assert not ace.allows(Identity("x"))


def test_whitespace_is_ignored():
    spaced = parse_ace("  u:a\t&\n(  g:b|r:c )  ")
    assert spaced == parse_ace("u:a&(g:b|r:c)")
    assert spaced == And((User("a"), Or((Group("b"), Role("c")))))


# --- canonical form and helpers ---------------------------------------------------


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        ("u:a&(g:b|r:c)", "u:a & (g:b | r:c)"),
        ("((u:a))", "u:a"),
        ("u:a|u:b&g:c", "u:a | u:b & g:c"),
        ("(u:a|u:b)&g:c", "(u:a | u:b) & g:c"),
        ("(u:a|u:b)|g:c", "(u:a | u:b) | g:c"),
        ("u:a|(u:b&g:c)", "u:a | u:b & g:c"),
        ("!(u:a|u:b)", "!(u:a | u:b)"),
        ("!(!u:a)", "!!u:a"),
        ("!(p)", "!p"),
        ("   ", ""),
    ],
)
def test_validate_ace_returns_canonical_form(text, canonical):
    assert validate_ace(text) == canonical
    assert validate_ace(canonical) == canonical


def test_ace_allows():
    assert parse_ace("g:dev & !u:bob").allows(ALICE)
    assert not parse_ace("g:dev & !u:bob").allows(BOB)
    assert not parse_ace("").allows(ALICE)
    with pytest.raises(InvalidArgument):
        parse_ace("u:").allows(ALICE)


def test_identity_accepts_any_iterables():
    identity = Identity("a", groups={"g1"}, roles=["r1"])
    assert identity.groups == frozenset({"g1"}) and identity.roles == frozenset({"r1"})
    assert parse_ace("g:g1 & r:r1").allows(identity)
    assert hash(identity) == hash(Identity("a", frozenset({"g1"}), frozenset({"r1"})))


def test_nodes_are_immutable_and_hashable():
    ace = parse_ace("u:a & g:b")
    with pytest.raises(AttributeError):
        ace.items = ()
    assert {ace, parse_ace("u:a&g:b")} == {ace}
    assert isinstance(ace, Ace)


@pytest.mark.parametrize(
    "build",
    [
        lambda: User(""),
        lambda: User("a b"),
        lambda: Group("a:b"),
        lambda: And((User("a"),)),
        lambda: Or(()),
        lambda: And((User("a"), Nobody())),
        lambda: Not(Nobody()),
    ],
)
def test_nodes_reject_what_has_no_text_form(build):
    with pytest.raises(ValueError):
        build()


# --- errors ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("u:bob &", "expected a term after '&' at position 7"),
        ("u:bob |", "expected a term after '|' at position 7"),
        ("u:a & | u:b", "expected a term after '&' at position 6, found '|'"),
        ("& u:a", "expected a term at position 0, found '&'"),
        ("!", "expected a term after '!' at position 1"),
        ("u:a !u:b", "expected '&' or '|' at position 4, found '!'"),
        ("u:a u:b", "expected '&' or '|' at position 4, found 'u:b'"),
        ("u:a (u:b)", "expected '&' or '|' at position 4, found '('"),
        ("(u:a", "missing ')' for '(' at position 0"),
        ("((u:a)", "missing ')' for '(' at position 0"),
        ("u:a)", "unmatched ')' at position 3"),
        (")", "expected a term at position 0, found ')'"),
        ("()", "expected a term after '(' at position 1, found ')'"),
        ("(u:a u:b)", "expected '&', '|' or ')' at position 5, found 'u:b'"),
        ("x:foo", "unknown term 'x:foo' at position 0 (expected u:<user>, g:<group>, r:<role> or p)"),
        ("u:a | bob", "unknown term 'bob' at position 6 (expected u:<user>, g:<group>, r:<role> or p)"),
        ("p:x", "unknown term 'p:x' at position 0 (expected u:<user>, g:<group>, r:<role> or p)"),
        (":a", "unknown term ':a' at position 0 (expected u:<user>, g:<group>, r:<role> or p)"),
        ("U:a", "unknown term 'U:a' at position 0 (expected u:<user>, g:<group>, r:<role> or p)"),
        ("u:", "missing user name after 'u:' at position 2"),
        ("g: dev", "missing group name after 'g:' at position 2"),
        ("p & r:", "missing role name after 'r:' at position 6"),
        ("u:a:b", "unexpected character ':' in name at position 3"),
        ("u:bo#b", "unexpected character '#' at position 4"),
        ("u:a, u:b", "unexpected character ',' at position 3"),
        ("u:jos\u00e9", "unexpected character '\u00e9' at position 5"),
        ("u:a\x00", "unexpected character '\\x00' at position 3"),
    ],
)
def test_error_messages(text, problem):
    with pytest.raises(InvalidArgument) as info:
        parse_ace(text)
    assert str(info.value) == f"invalid access control expression {text!r}: {problem}"


def test_nesting_up_to_the_limit_is_fine():
    assert parse_ace("(" * MAX_DEPTH + "u:a" + ")" * MAX_DEPTH) == User("a")
    assert parse_ace("!" * MAX_DEPTH + "u:a") is not None
    assert parse_ace("!(" * (MAX_DEPTH // 2) + "u:a" + ")" * (MAX_DEPTH // 2)) is not None


@pytest.mark.parametrize(
    "text",
    [
        "(" * (MAX_DEPTH + 1) + "u:a" + ")" * (MAX_DEPTH + 1),
        "!" * (MAX_DEPTH + 1) + "u:a",
        "!(" * 51 + "u:a" + ")" * 51,
        "(" * 2000 + "p" + ")" * 2000,
        "!" * MAX_LENGTH,
        "(" * MAX_LENGTH,
    ],
)
def test_too_deep_nesting(text):
    with pytest.raises(InvalidArgument, match=rf"nested deeper than {MAX_DEPTH} levels at position \d+$"):
        parse_ace(text)


def test_length_limit():
    longest = "u:" + "a" * (MAX_LENGTH - 2)
    assert parse_ace(longest) == User("a" * (MAX_LENGTH - 2))
    with pytest.raises(InvalidArgument) as info:
        parse_ace(longest + "a")
    message = str(info.value)
    assert message.endswith(f"longer than {MAX_LENGTH} characters ({MAX_LENGTH + 1})")
    assert len(message) < 200  # the expression is quoted only in part


def test_messages_stay_on_one_line():
    with pytest.raises(InvalidArgument) as info:
        parse_ace("u:a\n&\n")
    assert "\n" not in str(info.value)
    assert "'u:a\\n&\\n'" in str(info.value)


@pytest.mark.parametrize("value", [None, 3, b"u:a"])
def test_non_string_is_invalid_argument(value):
    with pytest.raises(InvalidArgument, match="expected a string"):
        parse_ace(value)


# --- properties ---------------------------------------------------------------------

NAME_ALPHABET = "abcXYZ019_-.$@"
names = st.sampled_from(["a", "b", "c"]) | st.text(alphabet=NAME_ALPHABET, min_size=1, max_size=6)
leaves = st.one_of(
    st.builds(User, names),
    st.builds(Group, names),
    st.builds(Role, names),
    st.just(Public()),
)


def _extend(children):
    items = st.lists(children, min_size=2, max_size=4).map(tuple)
    return st.one_of(st.builds(Not, children), st.builds(And, items), st.builds(Or, items))


trees = st.recursive(leaves, _extend, max_leaves=20)
aces = trees | st.just(Nobody())
identities = st.builds(
    Identity,
    user=names,
    groups=st.frozensets(names, max_size=3),
    roles=st.frozensets(names, max_size=3),
)


def _reference(node, identity):
    """Evaluation written independently of Ace.allows."""
    match node:
        case User(name=name):
            return identity.user == name
        case Group(name=name):
            return name in identity.groups
        case Role(name=name):
            return name in identity.roles
        case Public():
            return True
        case Nobody():
            return False
        case Not(term=term):
            return not _reference(term, identity)
        case And(items=items):
            return all(_reference(item, identity) for item in items)
        case Or(items=items):
            return any(_reference(item, identity) for item in items)
    raise AssertionError(node)


@settings(max_examples=300, deadline=None)
@given(aces, st.lists(identities, min_size=1, max_size=4))
def test_str_round_trips_and_preserves_evaluation(ace, people):
    text = str(ace)
    parsed = parse_ace(text)
    assert parsed == ace
    assert validate_ace(text) == text
    assert parse_ace(text.replace(" ", "")) == ace
    for identity in people:
        assert parsed.allows(identity) == ace.allows(identity) == _reference(ace, identity)


def _check_parse(text):
    try:
        ace = parse_ace(text)
    except InvalidArgument as err:
        message = str(err)
        assert message.startswith("invalid access control expression ")
        assert len(message.splitlines()) == 1
    else:
        assert isinstance(ace, Ace)
        assert parse_ace(str(ace)) == ace


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_arbitrary_text_parses_or_raises_invalid_argument(text):
    _check_parse(text)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="ugrpx: \t\n!&|()ab.#", max_size=40))
def test_ace_like_text_parses_or_raises_invalid_argument(text):
    _check_parse(text)
