"""The latency (α) of a NCCL collective call, by algorithm, rank count and node count.

A collective of N bytes over n ranks costs α + β·N: the bandwidth part β·N is throughput._ring_seconds; this
module is α, the fixed cost of one call, which grows with the number of ranks a ring passes through and does not
shrink with the message. It follows NCCL's own cost model, the one NCCL uses to pick an algorithm
(NVIDIA/nccl src/graph/tuning.cc, ``ncclTopoTuneModel`` and ``ncclTopoGetAlgoTime``, NCCL 2.8; commit 01afd20):

- a ring all-gather or reduce-scatter takes n - 1 steps, of which nodes - 1 cross the network; an all-reduce
  2(n - 1) steps, 2(nodes - 1) of them between nodes; latency = base + intra steps · intra hop + inter steps · net
  hop, and a multi-node ring all-reduce of a large message is 1.9 × that ("plateau effect of ring");
- a tree all-reduce (NCCL's other algorithm for all-reduce) costs 2 · ((ranks per node - 1) · intra hop
  + floor(log2(nodes)) · net hop) with the tree hop latencies; NCCL takes whichever of ring and tree is faster;
  their bandwidth terms are about equal for large messages (tree: half the bus bandwidth, ring: n / 2(n - 1)
  of it), so the choice is the smaller latency: the ring inside a node and on a few nodes, the tree at scale;
- a ring broadcast takes nRanks steps (``nsteps`` = nRanks for broadcast and reduce); its first chunk passes every
  rank, and broadcasts issued one after another on one stream each pay that fill: base + ranks · hop, the hop the
  ring's (NVLink / PCIe inside a node; the network's on every step once the ring spans nodes, NCCL's ``hw`` rule).
  NCCL's tuner charges one hop when every rank uses the same channels and nRanks tree hops (28 µs from 2.8.3)
  otherwise; measured, InternEvo's per-rank broadcasts over 8-128 nodes cost ~9-12 µs per rank and call (docs/
  throughput.md), the ring's network hop, which is used here;
- a point-to-point send (pipeline stages) is one hop: base + one hop.

Every constant is the Simple protocol's, the one NCCL picks for the megabyte buckets and layer shards of
training (LL and LL128 carry small messages). Microseconds.

The constants changed between NCCL releases. ``nccl="2.8"`` (the default, above) is the table most stacks are priced
with; ``nccl="2.18"`` is NCCL v2.18.1's (tag v2.18.1-1, src/graph/tuning.cc; unchanged in 2.19-2.21): network ring
hop 14 µs (was 9.6), network tree hop 28 µs (was 50), and the ring's plateau × 1.4 from compute capability 8.0
(``minCompCap < 80 ? 1.9 : 1.4``; every GPU that runs FlashAttention-2 is ≥ 8.0). Its multi-node rings also charge
each in-node step at least 3 × the host's network overhead (1 µs on Intel / other CPUs, 2 µs on AMD); on NVLink
(3.4 µs) the Intel figure changes nothing and the host CPU is not modelled. A stack names its release in
stacks.Stack.nccl (nanotron's benchmark: PyTorch 2.1, which ships NCCL 2.18.1).
"""

from __future__ import annotations

import math
from typing import Literal

Collective = Literal["all-gather", "reduce-scatter", "all-reduce", "broadcast", "send"]

RING_BASE_US = 8.4  # baseLat[Ring][Simple]
RING_HOP_US = {"nvlink": 3.4, "pcie": 5.7, "net": 9.6}  # hwLat[NVLINK | PCI | NET][Ring][Simple]
TREE_HOP_US = {"nvlink": 28.0, "pcie": 28.0, "net": 50.0}  # hwLat[...][Tree][Simple] (baseLat[Tree][Simple] = 0)
RING_PLATEAU = 1.9  # multi-node ring all-reduce of a large message: latency × 1.9
# NCCL 2.18.1: the same base and in-node hops; the network's ring and tree hops and the plateau differ
RING_HOP_US_2_18 = {**RING_HOP_US, "net": 14.0}
TREE_HOP_US_2_18 = {**TREE_HOP_US, "net": 28.0}
RING_PLATEAU_2_18 = 1.4  # compute capability >= 8.0
NCCL_RELEASES = ("2.8", "2.18")


def latency_seconds(kind: Collective, ranks: int, nodes: int, link: str, nccl: str = "2.8") -> float:
    """α of one collective call over ``ranks`` GPUs spread on ``nodes`` nodes; ``link`` the in-node link
    ("nvlink" or "pcie"); ``nccl`` the release whose constants apply (NCCL_RELEASES). 0 for a single rank."""
    if ranks <= 1:
        return 0.0
    newer = nccl == "2.18"
    ring_hop, tree_hop = (RING_HOP_US_2_18, TREE_HOP_US_2_18) if newer else (RING_HOP_US, TREE_HOP_US)
    plateau = RING_PLATEAU_2_18 if newer else RING_PLATEAU
    nodes = max(1, min(nodes, ranks))
    intra = ring_hop["nvlink" if link == "nvlink" else "pcie"]
    net = ring_hop["net"]
    if kind == "send":
        return (RING_BASE_US + (net if nodes > 1 else intra)) * 1e-6
    if kind == "broadcast":
        return (RING_BASE_US + ranks * (net if nodes > 1 else intra)) * 1e-6
    if kind in ("all-gather", "reduce-scatter"):
        steps, inter = ranks - 1, nodes - 1
        return (RING_BASE_US + (steps - inter) * intra + inter * net) * 1e-6
    steps, inter = 2 * (ranks - 1), 2 * (nodes - 1)
    ring = (RING_BASE_US + (steps - inter) * intra + inter * net) * (plateau if nodes > 1 else 1.0)
    tree_intra = tree_hop["nvlink" if link == "nvlink" else "pcie"]
    tree = 2 * ((ranks / nodes - 1) * tree_intra + math.floor(math.log2(nodes)) * tree_hop["net"])
    return min(ring, tree) * 1e-6
