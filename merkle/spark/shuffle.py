"""Sending each write group's rows to a chosen Spark partition.

``df.repartition(n, col)`` sends a row to partition ``pmod(hash(col), n)``
with Spark's Murmur3 hash (seed 42). To put group ``g`` in exactly the
partition the planner chose (so every partition gets a balanced, contiguous
run of groups and no group is split), each partition ``p`` gets a *tag*: the
smallest non-negative integer that Spark hashes to ``p``; rows carry the tag
of their partition. :func:`spark_hash_long` is Spark's hash of a BIGINT,
checked against Spark's own ``hash()`` in the tests.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["pack_groups", "partition_tags", "spark_hash_long"]

_MASK = 0xFFFFFFFF
_SEED = 42


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _MASK


def _mix_k1(k1: int) -> int:
    k1 = (k1 * 0xCC9E2D51) & _MASK
    k1 = _rotl(k1, 15)
    return (k1 * 0x1B873593) & _MASK


def _mix_h1(h1: int, k1: int) -> int:
    h1 ^= k1
    h1 = _rotl(h1, 13)
    return (h1 * 5 + 0xE6546B64) & _MASK


def _fmix(h1: int, length: int) -> int:
    h1 ^= length
    h1 ^= h1 >> 16
    h1 = (h1 * 0x85EBCA6B) & _MASK
    h1 ^= h1 >> 13
    h1 = (h1 * 0xC2B2AE35) & _MASK
    h1 ^= h1 >> 16
    return h1


def spark_hash_long(value: int, seed: int = _SEED) -> int:
    """Spark's ``hash()`` of a BIGINT (Murmur3_x86_32.hashLong), as a signed 32-bit int."""
    value &= 0xFFFFFFFFFFFFFFFF
    h1 = _mix_h1(seed & _MASK, _mix_k1(value & _MASK))
    h1 = _mix_h1(h1, _mix_k1(value >> 32))
    h1 = _fmix(h1, 8)
    return h1 - (1 << 32) if h1 >= 1 << 31 else h1


def partition_tags(partitions: int) -> list[int]:
    """For each partition ``p``, a BIGINT that ``repartition(partitions, col)`` sends to ``p``."""
    tags: list[int | None] = [None] * partitions
    missing = partitions
    value = 0
    while missing:
        p = spark_hash_long(value) % partitions  # Python's % is pmod for a positive divisor
        if tags[p] is None:
            tags[p] = value
            missing -= 1
        value += 1
    return [t for t in tags if t is not None]


def pack_groups(weights: Sequence[int], target: int) -> list[int]:
    """Contiguous runs of groups, each of about ``target`` weight: the partition of each group."""
    out: list[int] = []
    part, load = 0, 0
    for weight in weights:
        if load and load + weight > target:
            part += 1
            load = 0
        out.append(part)
        load += weight
    return out
