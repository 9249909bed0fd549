"""Tests for streamrep.model.partitioner: Kafka's murmur2 and default partitioner."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamrep.model.partitioner import murmur2, partition_for_key

# Test vectors from Kafka's UtilsTest.testMurmur2.
KAFKA_VECTORS = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
}


@pytest.mark.parametrize("data,expected", sorted(KAFKA_VECTORS.items()))
def test_kafka_murmur2_vectors(data, expected):
    assert murmur2(data) == expected


def test_every_tail_length_is_hashed_and_in_signed_range():
    # Lengths 0-5 take every tail branch (0, 1, 2, 3 bytes left over after 4-byte blocks).
    hashes = [murmur2(b"abcde"[:n]) for n in range(6)]
    assert len(set(hashes)) == 6
    assert all(-(1 << 31) <= h < (1 << 31) for h in hashes)


def test_tail_bytes_all_matter():
    assert len({murmur2(b"xyz"), murmur2(b"xy"), murmur2(b"x"), murmur2(b"xyw"), murmur2(b"xwz")}) == 5


def test_partition_for_key_is_positive_murmur_modulo():
    # Kafka: toPositive(murmur2(key)) % numPartitions, toPositive masking the sign bit.
    # b"21" has a negative hash: masking gives partition 0 where abs() would give 8.
    assert partition_for_key(b"21", 10) == (-973932308 & 0x7FFFFFFF) % 10 == 0
    assert partition_for_key(b"foobar", 7) == (-790332482 & 0x7FFFFFFF) % 7


def test_one_partition():
    assert partition_for_key(b"anything", 1) == 0


@settings(max_examples=200, deadline=None)
@given(key=st.binary(max_size=64), partitions=st.integers(1, 4096))
def test_partition_in_range_and_stable(key, partitions):
    p = partition_for_key(key, partitions)
    assert 0 <= p < partitions
    assert partition_for_key(key, partitions) == p
    assert -(1 << 31) <= murmur2(key) < (1 << 31)


def test_keys_spread_over_partitions():
    hits = {partition_for_key(f"key-{i}".encode(), 8) for i in range(200)}
    assert hits == set(range(8))
