"""The caching-allocator replay against sequences derived by hand from CUDACachingAllocator.cpp's rules."""

from __future__ import annotations

import pytest

from autoconf.estimators.traced.allocator import allocation_size, replay, round_size

KIB, MIB = 1024, 1024 * 1024


@pytest.mark.parametrize(("size", "rounded"), [(1, 512), (512, 512), (513, 1024), (3 * MIB + 1, 3 * MIB + 512)])
def test_round_size(size: int, rounded: int) -> None:
    assert round_size(size) == rounded


@pytest.mark.parametrize(("size", "segment"), [
    (512, 2 * MIB), (MIB, 2 * MIB),  # small pool: 2 MiB segments
    (MIB + 512, 20 * MIB), (10 * MIB - 512, 20 * MIB),  # 1-10 MiB: 20 MiB segments
    (10 * MIB, 10 * MIB), (11 * MIB + 512, 12 * MIB),  # large: rounded up to 2 MiB
])
def test_allocation_size(size: int, segment: int) -> None:
    assert allocation_size(size) == segment


def test_small_requests_share_one_segment() -> None:
    # 4 × 500 KiB: each rounds to 500 KiB, splits the 2 MiB segment (rest >= 512 B): one segment.
    out = replay([(i, 500 * KIB) for i in range(4)])
    assert (out.max_reserved, out.max_allocated, out.num_segments) == (2 * MIB, 2000 * KIB, 1)
    # a 5th does not fit in the 48 KiB left: a second 2 MiB segment
    assert replay([(i, 500 * KIB) for i in range(5)]).max_reserved == 4 * MIB


def test_mid_sized_requests_fill_a_20_mib_segment() -> None:
    # 3 MiB requests share a 20 MiB segment, split while the rest is > 1 MiB: 6 fit and leave a 2 MiB
    # free block, too small for the 7th, which opens a second 20 MiB segment.
    events = [(i, 3 * MIB) for i in range(7)]
    out = replay(events)
    assert out.max_reserved == 40 * MIB and out.max_allocated == 21 * MIB


def test_large_block_not_split_when_rest_is_small() -> None:
    # a 12 MiB segment freed, then 11.5 MiB asked: the 0.5 MiB rest is <= kSmallSize, so the whole
    # 12 MiB block is handed out (allocated counts 12 MiB) and no new segment is made.
    out = replay([(1, 12 * MIB), (1, -12 * MIB), (2, 11 * MIB + 512 * KIB)])
    assert (out.max_reserved, out.max_allocated, out.num_segments) == (12 * MIB, 12 * MIB, 1)


def test_best_fit_and_merge() -> None:
    # Two 40 MiB segments; free both; a 30 MiB request takes one (best fit, lowest address), splits
    # off 10 MiB (> 1 MiB); freeing it merges back to 40 MiB; an 80 MiB request needs a new segment.
    events = [(1, 40 * MIB), (2, 40 * MIB), (1, -40 * MIB), (2, -40 * MIB), (3, 30 * MIB), (4, 10 * MIB),
              (3, -30 * MIB), (4, -10 * MIB), (5, 80 * MIB)]
    out = replay(events)
    assert out.max_reserved == 160 * MIB and out.num_segments == 3


def test_free_and_retry_before_oom() -> None:
    # 100 MiB capacity: 60 MiB allocated and freed stays cached; 70 MiB then needs the cache released.
    events = [(1, 60 * MIB), (1, -60 * MIB), (2, 70 * MIB)]
    out = replay(events, capacity=100 * MIB)
    assert out.releases == 1 and out.max_reserved == 70 * MIB
    oom = replay([(1, 60 * MIB), (2, 50 * MIB)], capacity=100 * MIB)  # 60 MiB live: nothing to release
    assert oom.out_of_memory and oom.max_reserved == 110 * MIB


def test_expandable_segments_grow_by_pages() -> None:
    # Large pool pages of 20 MiB: 30 MiB maps 40 MiB; 30 MiB more uses the 10 MiB free tail and maps 20 MiB.
    # 3 × 25 MiB: expandable maps 40 + 20 + 20 = 80 MiB; plain segments are 3 × 26 MiB (rounded to 2 MiB).
    assert replay([(1, 30 * MIB), (2, 30 * MIB)], expandable=True).max_reserved == 60 * MIB
    three = [(i, 25 * MIB) for i in range(3)]
    assert replay(three, expandable=True).max_reserved == 80 * MIB
    assert replay(three).max_reserved == 78 * MIB
    # freed and asked again larger: plain segments cannot reuse a 26 MiB block for 30 MiB; expandable can
    # extend the free tail.
    grow = [(1, 25 * MIB), (1, -25 * MIB), (2, 30 * MIB)]
    assert replay(grow).max_reserved == 56 * MIB
    assert replay(grow, expandable=True).max_reserved == 40 * MIB


def test_blocks_are_reused_only_on_their_stream() -> None:
    # 40 MiB freed on stream 1 (FSDP's all-gather stream) cannot serve 40 MiB on stream 0: a second segment;
    # on stream 1 again it is reused.
    assert replay([(1, 40 * MIB, 1), (1, -40 * MIB, 1), (2, 40 * MIB, 0)]).max_reserved == 80 * MIB
    assert replay([(1, 40 * MIB, 1), (1, -40 * MIB, 1), (2, 40 * MIB, 1)]).max_reserved == 40 * MIB
