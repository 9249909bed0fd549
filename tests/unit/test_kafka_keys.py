"""The Kafka store's record and transactional id formats (``store/kafka/keys.py``): every key
decodes to what it was made from, and the formats already in clusters stay as they are."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamrep.store.kafka import keys

# A field that comes before others in a key never holds the separator; the last one may.
leading = st.text().filter(lambda s: keys.SEPARATOR not in s)
anything = st.text()


@given(leading, anything)
def test_catalog_keys_round_trip(kind, key):
    assert keys.parse_catalog_key(keys.catalog_key(kind, key)) == (kind, key)


@given(leading, anything)
def test_mark_keys_round_trip(stream, mark):
    assert keys.parse_mark_key(keys.mark_key(stream, mark)) == (stream, mark)


@given(leading, leading, st.integers(min_value=0, max_value=(1 << 63) - 1))
def test_sync_keys_round_trip(stream, source, offset):
    assert keys.parse_sync_key(keys.sync_key(stream, source, offset)) == (stream, source, offset)


@given(st.integers(min_value=-(1 << 63), max_value=(1 << 63) - 1))
def test_mark_values_round_trip(value):
    assert keys.parse_mark_value(keys.mark_value(value)) == value


@given(st.integers(0, 1 << 20), st.integers(0, 1 << 62), st.integers(1, 1 << 30))
def test_sync_values_round_trip(partition, offset, count):
    assert keys.parse_sync_value(keys.sync_value(partition, offset, count)) == (partition, offset, count)


def test_a_leading_field_with_the_separator_is_refused():
    with pytest.raises(ValueError, match="separator"):
        keys.mark_key("a\x1fb", "m")
    with pytest.raises(ValueError, match="separator"):
        keys.sync_key("s", "p|a\x1fb", 0)
    assert keys.parse_mark_key(keys.mark_key("s", "p|x\x1fy")) == ("s", "p|x\x1fy")  # the last field may


def test_the_formats_in_clusters_stay_as_they_are():
    """Records already written, and the transactional ids that fence writers of one thing, must
    keep their format: an old and a new writer of one replica partition would otherwise both run."""
    assert keys.catalog_key("stream", "/a/b") == "stream\x1f/a/b"
    assert keys.mark_key("u-1", "p|u-2|t|0") == "u-1\x1fp|u-2|t|0"
    assert keys.sync_key("u-1", "p|u-2|t|0", 42) == "u-1\x1fp|u-2|t|0\x1f42"
    assert keys.mark_value(7) == b"7" and keys.sync_value(1, 2, 3) == b"[1, 2, 3]"
    # a replica partition's writers before lanes: fenced once per replica stream (KafkaStore._to_lanes)
    assert keys.partition_txid("_streamrep.ns.", "u-1", "t", 0) == "_streamrep.ns.apply.c2630d0fef0eef2b09c0"
    assert keys.apply_txid("_streamrep.ns.", "u-1", "t", 0) == "_streamrep.ns.apply.357564f2c9cafda634b6"
    assert keys.lanes_txid("_streamrep.ns.", "u-1") == "_streamrep.ns.lanes.3e71f65032cc1376c5b8"
    assert keys.catalog_txid("_streamrep.", "stream", "/a/b") == "_streamrep.catalog.c7cbb888a2c8a35c4085"


# -- records streamrep did not write (issue 29): refused in a line naming why, for the fold to skip --
@pytest.mark.parametrize(
    ("parse", "record_key", "why"),
    [
        (keys.parse_catalog_key, "no-separator", "is no catalog key"),
        (keys.parse_mark_key, "", "is no marks key"),
        (keys.parse_sync_key, "s\x1fsrc", "is no offset syncs key"),
        (keys.parse_sync_key, "s\x1fsrc\x1f 7", "source offset is not an integer"),
        (keys.parse_sync_key, "s\x1fsrc\x1f1_000", "source offset is not an integer"),
    ],
)
def test_a_key_not_in_the_format_is_refused(parse, record_key, why):
    with pytest.raises(ValueError, match=why):
        parse(record_key)


@pytest.mark.parametrize("value", [b"five", b" 7 ", b"+7", b"1_000", "\u0663".encode(), b"", b"\xff"])
def test_a_mark_value_is_ascii_digits_only(value):
    with pytest.raises(ValueError, match="mark's value is not an integer"):
        keys.parse_mark_value(value)


@pytest.mark.parametrize("value", [b"[0, 0]", b'[0, "0", 1]', b"[0, true, 1]", b"[0, -1, 1]", b"{}", b"[0, 0, 1.5]"])
def test_an_offset_sync_value_is_three_counts(value):
    with pytest.raises(ValueError, match="is not \\[replica partition, replica offset, run length\\]"):
        keys.parse_sync_value(value)


def test_a_records_format_is_its_header_or_1():
    assert keys.record_format(None) == keys.record_format([("other", b"9")]) == 1
    assert keys.FORMAT == keys.LANES_FORMAT == 2  # format 2 is the lanes mark alone
    assert keys.record_format([(keys.FORMAT_HEADER, b"2")]) == 2
    with pytest.raises(ValueError, match="format header is not an integer"):
        keys.record_format([(keys.FORMAT_HEADER, b"two")])
