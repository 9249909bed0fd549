"""Tests for streamrep.model.stream: stream metadata defaults and validation."""

import pytest

from streamrep.errors import InvalidArgument
from streamrep.model.stream import (
    DEFAULT_PARTITIONS,
    DEFAULT_TTL_SECONDS,
    MAX_PARTITIONS,
    PERMISSIONS,
    StreamMeta,
    validate_partition_count,
)


def test_defaults_are_maprs():
    meta = StreamMeta.for_creator("alice")
    assert meta.defaultpartitions == 1 == DEFAULT_PARTITIONS
    assert meta.ttl == 604800 == DEFAULT_TTL_SECONDS
    assert meta.autocreate is True


def test_every_permission_goes_to_the_creator():
    meta = StreamMeta.for_creator("alice")
    assert set(PERMISSIONS) == {"produceperm", "consumeperm", "topicperm", "copyperm", "adminperm"}
    for perm in PERMISSIONS:
        assert getattr(meta, perm) == "u:alice"


def test_for_creator_applies_changes():
    meta = StreamMeta.for_creator("alice", defaultpartitions=3, ttl=0, autocreate=False, consumeperm="p")
    assert (meta.defaultpartitions, meta.ttl, meta.autocreate) == (3, 0, False)
    assert meta.consumeperm == "p"
    assert meta.produceperm == "u:alice"


def test_edited_ignores_none_values():
    meta = StreamMeta.for_creator("alice", ttl=60)
    assert meta.edited(ttl=None, defaultpartitions=None) == meta


def test_edited_returns_a_copy():
    meta = StreamMeta.for_creator("alice")
    edited = meta.edited(defaultpartitions=8)
    assert edited.defaultpartitions == 8
    assert meta.defaultpartitions == 1


@pytest.mark.parametrize("value", [0, -1, MAX_PARTITIONS + 1, True, False, "3", 2.0])
def test_bad_defaultpartitions(value):
    with pytest.raises(InvalidArgument, match=f"invalid defaultpartitions .*must be 1 to {MAX_PARTITIONS}"):
        StreamMeta.for_creator("alice").edited(defaultpartitions=value)


@pytest.mark.parametrize("value", [1, MAX_PARTITIONS])
def test_partition_bounds_accepted(value):
    assert StreamMeta.for_creator("alice").edited(defaultpartitions=value).defaultpartitions == value


@pytest.mark.parametrize("value", [-1, True, "60", 1.5])
def test_bad_ttl(value):
    with pytest.raises(InvalidArgument, match="invalid ttl"):
        StreamMeta.for_creator("alice").edited(ttl=value)


def test_ttl_zero_keeps_forever_is_valid():
    assert StreamMeta.for_creator("alice").edited(ttl=0).ttl == 0


@pytest.mark.parametrize("value", ["true", 1, 0])
def test_bad_autocreate(value):
    with pytest.raises(InvalidArgument, match="invalid autocreate"):
        StreamMeta.for_creator("alice").edited(autocreate=value)


@pytest.mark.parametrize("ace", ["u:", "x:alice", "u:alice &", "(u:alice", "u:alice$#"])
def test_bad_ace(ace):
    with pytest.raises(InvalidArgument, match="invalid access control expression"):
        StreamMeta.for_creator("alice").edited(adminperm=ace)


def test_unknown_setting():
    with pytest.raises(InvalidArgument, match=r"unknown stream setting\(s\): bogus, colour"):
        StreamMeta.for_creator("alice").edited(bogus=1, colour="red")


def test_unknown_setting_names_each():
    with pytest.raises(InvalidArgument) as err:
        StreamMeta.for_creator("alice", zeta=1, alpha=2)
    assert "alpha, zeta" in str(err.value)


def test_canonical_ace_is_stored():
    meta = StreamMeta.for_creator("alice").edited(consumeperm="u:alice|g:eng&!u:bob", topicperm="  p  ")
    assert meta.consumeperm == "u:alice | g:eng & !u:bob"
    assert meta.topicperm == "p"


def test_empty_ace_means_nobody_and_is_kept():
    assert StreamMeta.for_creator("alice").edited(topicperm="").topicperm == ""


@pytest.mark.parametrize("perm", ["produceperm", "consumeperm"])
def test_an_empty_produceperm_or_consumeperm_is_refused_but_one_stored_so_stays_editable(perm):
    with pytest.raises(InvalidArgument, match=f"^an empty {perm} would let no one "):
        StreamMeta.for_creator("alice").edited(**{perm: " "})
    stored = StreamMeta.from_dict({**StreamMeta.for_creator("alice").to_dict(), perm: ""})
    assert stored.edited(ttl=5).ttl == 5


def test_dict_round_trip():
    meta = StreamMeta.for_creator("alice", defaultpartitions=4, ttl=10, consumeperm="g:eng")
    assert StreamMeta.from_dict(meta.to_dict()) == meta


def test_from_dict_ignores_unknown_keys():
    data = StreamMeta.for_creator("alice").to_dict() | {"future_setting": 1}
    assert StreamMeta.from_dict(data) == StreamMeta.for_creator("alice")


@pytest.mark.parametrize("count", [0, MAX_PARTITIONS + 1, True, None, "2"])
def test_validate_partition_count_refuses(count):
    with pytest.raises(InvalidArgument, match="invalid partition count"):
        validate_partition_count(count)


def test_validate_partition_count_accepts():
    assert validate_partition_count(7) == 7
