"""Replay an allocation/free sequence through a model of PyTorch's CUDA caching allocator.

The traced step logs every storage's allocation and free (autoconf/estimators/traced/live_bytes.py, ``events``);
this module plays them through the rules of ``DeviceCachingAllocator`` in
c10/cuda/CUDACachingAllocator.cpp (pytorch/pytorch, read at eb42ad6e) to get ``max_memory_reserved``:
the bytes of the segments cudaMalloc'd, free blocks included. Pure Python: no torch.

Rules modelled (default settings: ``max_split_size`` unlimited, no roundup_power2_divisions):

* ``round_size``: requests are rounded up to a multiple of ``kMinBlockSize`` = 512 B.
* ``get_pool``: ≤ ``kSmallSize`` (1 MiB) → the small pool, else the large pool.
* ``get_free_block``: best fit: ``pool.blocks.lower_bound(search_key)`` on blocks ordered by (stream, size,
  address), failing when the block found belongs to another stream: the smallest free block of the
  request's stream that fits, the lowest address among equals. A block returns to its allocation stream.
* ``get_allocation_size``: a new segment is ``kSmallBuffer`` (2 MiB) for small requests, ``kLargeBuffer``
  (20 MiB) for requests below ``kMinLargeAlloc`` (10 MiB), else the request rounded up to ``kRoundLarge``
  (2 MiB).
* ``should_split``: the rest of a chosen block becomes a free block if it is ≥ 512 B (small pool, or any
  pool with expandable segments) or > ``kSmallSize`` (large pool); otherwise the whole block is handed out.
* ``free_block`` / ``try_merge_blocks``: a freed block merges with free neighbours of its segment.
* ``malloc``: when a new segment would pass the device capacity, ``release_cached_blocks`` frees every
  segment that is wholly free and the allocation is retried; only then is it an out-of-memory.
  (``release_available_cached_blocks`` acts only with a finite max_split_size.)
* ``expandable_segments:True``: one segment per pool that grows by mapping pages of ``kSmallBuffer``
  (small pool) or ``kLargeBuffer`` (large pool) at its end (``get_expandable_segment``: ``segment_size =
  pool->is_small ? kSmallBuffer : kLargeBuffer``); a request that no free block fits extends the mapped end,
  using the free block already there.

Not modelled: CUDA graphs' private pools, garbage_collection_threshold, ``record_stream`` delaying a
free until another stream's work is done (the trace frees when Python drops the storage).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

MIN_BLOCK = 512  # kMinBlockSize: every block is a multiple of 512 B
SMALL_SIZE = 1 << 20  # kSmallSize: largest "small" request, 1 MiB
SMALL_BUFFER = 2 << 20  # kSmallBuffer: small-pool segment (and expandable page), 2 MiB
LARGE_BUFFER = 20 << 20  # kLargeBuffer: segment for 1-10 MiB requests (and expandable large page), 20 MiB
MIN_LARGE_ALLOC = 10 << 20  # kMinLargeAlloc: from here segments are the request rounded to kRoundLarge
ROUND_LARGE = 2 << 20  # kRoundLarge, 2 MiB


class OutOfMemory(RuntimeError):
    """A request that no free block fits and no new segment can hold, even after releasing the cache."""

    def __init__(self, nbytes: int, left: int) -> None:
        super().__init__(f"{nbytes} B more than the {left} B left")
        self.nbytes = nbytes


def round_size(size: int) -> int:
    return MIN_BLOCK if size < MIN_BLOCK else MIN_BLOCK * -(-size // MIN_BLOCK)


def allocation_size(size: int) -> int:
    """Bytes of the segment cudaMalloc'd for a (rounded) request no free block fits."""
    if size <= SMALL_SIZE:
        return SMALL_BUFFER
    if size < MIN_LARGE_ALLOC:
        return LARGE_BUFFER
    return ROUND_LARGE * -(-size // ROUND_LARGE)


@dataclass(eq=False)
class _Block:
    ptr: int
    size: int
    segment: int
    pool: _Pool = field(repr=False)
    free: bool = True
    prev: _Block | None = None
    next: _Block | None = None


@dataclass(eq=False)
class _Pool:
    small: bool
    free: list[tuple[int, int]] = field(default_factory=list)  # sorted (size, ptr) of free blocks
    by_ptr: dict[int, _Block] = field(default_factory=dict)  # free blocks by address
    tail: _Block | None = None  # expandable: the last block of the mapped range

    def add(self, block: _Block) -> None:
        bisect.insort(self.free, (block.size, block.ptr))
        self.by_ptr[block.ptr] = block

    def remove(self, block: _Block) -> None:
        del self.free[bisect.bisect_left(self.free, (block.size, block.ptr))]
        del self.by_ptr[block.ptr]

    def best_fit(self, size: int) -> _Block | None:
        i = bisect.bisect_left(self.free, (size, -1))
        return self.by_ptr[self.free[i][1]] if i < len(self.free) else None


@dataclass
class Replay:
    """Peaks of a replayed sequence, in bytes: the tensors' own sizes, the allocator's (rounded, unsplit)
    blocks, and the reserved segments."""

    max_requested: int = 0
    max_allocated: int = 0
    max_reserved: int = 0
    num_segments: int = 0
    releases: int = 0  # times the cache was released to make room (free-and-retry)
    out_of_memory: bool = False  # a segment did not fit even after the release; max_reserved is what it needed


class CachingAllocator:
    """Blocks, segments and the two pools of one device and one stream."""

    def __init__(self, capacity: int | None = None, expandable: bool = False) -> None:
        self.capacity, self.expandable = capacity, expandable
        self.pools: dict[tuple[int, bool], _Pool] = {}  # (stream, small) -> pool: blocks are reused per stream
        self.segments: dict[int, int] = {}  # segment id -> bytes reserved
        self.next_ptr = 0
        self.live: dict[int, tuple[_Block, int]] = {}  # block id -> (block, requested bytes)
        self.requested = self.allocated = self.reserved = 0
        self.stats = Replay()

    def malloc(self, key: int, nbytes: int, stream: int = 0) -> None:
        size = round_size(nbytes)
        pool = self.pools.setdefault((stream, size <= SMALL_SIZE), _Pool(small=size <= SMALL_SIZE))
        block = pool.best_fit(size)
        if block is None:
            block = self._grow(pool, size)
        else:
            pool.remove(block)
        rest = block.size - size
        if rest >= MIN_BLOCK if (pool.small or self.expandable) else rest > SMALL_SIZE:  # should_split
            tail = _Block(block.ptr + size, rest, block.segment, pool, prev=block, next=block.next)
            if block.next is not None:
                block.next.prev = tail
            block.next, block.size = tail, size
            pool.add(tail)
            if pool.tail is block:
                pool.tail = tail
        block.free = False
        self.live[key] = (block, nbytes)
        self.requested += nbytes
        self.allocated += block.size
        s = self.stats
        s.max_requested, s.max_allocated = max(s.max_requested, self.requested), max(s.max_allocated, self.allocated)

    def free(self, key: int) -> None:
        block, nbytes = self.live.pop(key)
        self.requested -= nbytes
        self.allocated -= block.size
        pool = block.pool
        block.free = True
        for other in (block.prev, block.next):  # try_merge_blocks with free neighbours
            if other is not None and other.free:
                pool.remove(other)
                if other is block.prev:
                    _absorb(pool, other, block)
                    block = other
                else:
                    _absorb(pool, block, other)
        pool.add(block)

    def _grow(self, pool: _Pool, size: int) -> _Block:
        """A new segment (or, expandable, more pages at the mapped end) holding ``size``; release the cache
        and retry before giving up."""
        if self.expandable:
            page = SMALL_BUFFER if pool.small else LARGE_BUFFER
            tail = pool.tail if pool.tail is not None and pool.tail.free else None
            need = size - (tail.size if tail is not None else 0)
            grow = page * -(-need // page)
            self._reserve(grow)
            if tail is not None:
                pool.remove(tail)
                tail.size += grow
                return tail
            return self._segment(pool, grow, pool.tail)
        grow = allocation_size(size)
        self._reserve(grow)
        return self._segment(pool, grow, None)

    def _segment(self, pool: _Pool, nbytes: int, after: _Block | None) -> _Block:
        seg = after.segment if after is not None else len(self.segments)
        self.segments[seg] = self.segments.get(seg, 0) + nbytes
        block = _Block(self.next_ptr, nbytes, seg, pool, prev=after)
        if after is not None:
            after.next = block
        self.next_ptr += nbytes
        if self.expandable:
            pool.tail = block
        self.stats.num_segments = len(self.segments)
        return block

    def _reserve(self, nbytes: int) -> None:
        if self.capacity is not None and self.reserved + nbytes > self.capacity:
            self._release_cached()
            self.stats.releases += 1
            if self.reserved + nbytes > self.capacity:
                raise OutOfMemory(nbytes, self.capacity - self.reserved)
        self.reserved += nbytes
        self.stats.max_reserved = max(self.stats.max_reserved, self.reserved)

    def _release_cached(self) -> None:
        """release_cached_blocks: give back every segment that is one free block (whole pages, expandable)."""
        for pool in self.pools.values():
            for _, ptr in list(pool.free):
                block = pool.by_ptr[ptr]
                if block.prev is None and block.next is None:
                    pool.remove(block)
                    self.reserved -= block.size
                    self.segments.pop(block.segment, None)
                    if pool.tail is block:
                        pool.tail = None


def replay(events: list[tuple[int, int]] | list[tuple[int, int, int]], capacity: int | None = None,
           expandable: bool = False) -> Replay:
    """Play (block id, +bytes allocated / −bytes freed[, stream of the allocation]) events; the peaks. Frees of blocks never
    allocated in the sequence (tensors alive before it began) are ignored. With a ``capacity`` (bytes
    the allocator may reserve), the first allocation that cannot fit ends the replay as out of memory,
    its ``max_reserved`` being the bytes it would have needed."""
    alloc = CachingAllocator(capacity, expandable)
    for event in events:
        key, nbytes = event[0], event[1]
        if nbytes > 0:
            try:
                alloc.malloc(key, nbytes, event[2] if len(event) > 2 else 0)
            except OutOfMemory as exc:
                alloc.stats.out_of_memory = True
                alloc.stats.max_reserved = max(alloc.stats.max_reserved, alloc.reserved + exc.nbytes)
                break
        elif key in alloc.live:
            alloc.free(key)
    return alloc.stats


def _absorb(pool: _Pool, left: _Block, right: _Block) -> None:
    """Merge ``right`` into its free neighbour ``left`` of the same segment (try_merge_blocks' splice)."""
    left.size += right.size
    left.next = right.next
    if right.next is not None:
        right.next.prev = left
    if pool.tail is right:
        pool.tail = left
