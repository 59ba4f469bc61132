"""Remote negatives for link prediction: other partitions' vertices, embedded locally.

On an attribute- or community-driven partition a rank's own vertices are all alike, so
negatives drawn among them never teach the model to tell a vertex from the rest of the
graph (docs/results/train-link-diagnosis). A :class:`NegativePool` gives each rank
vertices of the *other* partitions to draw negatives from. Each pool vertex (a
**root**) arrives with its sampled L-hop computation graph (features and structure,
one hop per fanout, sampled once by the rank that holds it as master, over that rank's
training edges), so the receiving rank's own model embeds it through its neighbourhood
exactly as it embeds a local vertex. Exchanging other ranks' *embeddings* instead made
the local models learn to push away stale vectors of a different model
(docs/results/train-link-diagnosis, ``rn1024``).

Placement (:func:`exchange_pool`, a collective, once at setup): every rank draws
``ceil(pool_size / (W - 1))`` of its master vertices (seeded by ``(seed, rank)``),
samples their computation graph with ``fanouts`` over its message-passing edges
(held-out edges excluded, so no validation or test edge travels), and sends the same
block to every other rank through :meth:`training.comm.Comm.all_to_all`, category
``"negatives"``. A block of ``n`` rows and ``e`` edges costs ``n · (8 + 4 · d)`` bytes
(global ids and float32 features of width ``d``) plus ``16 · e`` (int64 endpoint
pairs) plus ``8`` (its root count), per receiving rank, and the ``"control"`` sizes of
each all_to_all. The receiver keeps the blocks side by side as a graph of its own: the
pool's rows never merge with the local graph's, never carry training or evaluation
positives, and only its roots are drawn as negatives.

With one rank (the centralized run) there are no other partitions and the pool is empty.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import torch

from training.comm import Comm
from training.sampler import NeighborSampler

__all__ = ["NEGATIVES", "NegativePool", "exchange_pool", "pool_block"]

log = logging.getLogger(__name__)

#: The byte category of the pool's placement traffic.
NEGATIVES = "negatives"


@dataclass
class NegativePool:
    """The remote vertices a rank draws negatives from (see the module docstring).

    Rows are numbered from 0 within the pool; ``edge_index`` and ``roots`` index them.
    """

    x: torch.Tensor  # float32 [p, d] features of every pool row
    global_nid: torch.Tensor  # int64 [p] (a vertex may repeat across senders' blocks)
    edge_index: torch.Tensor  # int64 [2, e] message passing among pool rows
    roots: torch.Tensor  # int64 [r] the rows drawn as negatives (other ranks' masters)
    bytes_sent: float = 0.0
    bytes_received: float = 0.0

    @property
    def num_rows(self) -> int:
        return int(self.x.shape[0])

    @classmethod
    def empty(cls, width: int) -> NegativePool:
        return cls(torch.zeros((0, width)), torch.zeros(0, dtype=torch.int64),
                   torch.zeros((2, 0), dtype=torch.int64), torch.zeros(0, dtype=torch.int64))


def pool_block(x: torch.Tensor, global_nid: torch.Tensor, is_master: torch.Tensor, edge_index: torch.Tensor,
               roots: int, fanouts: tuple[int, ...], generator: torch.Generator) -> NegativePool:
    """This rank's block for the others: ``roots`` masters drawn uniformly without
    replacement (all of them when there are fewer) and their sampled computation graph
    over ``edge_index`` (local rows, messages flowing ``[0] → [1]``).

    Returns
    -------
    NegativePool
        Rows: the roots first, then each hop's new vertices; ``edge_index`` over them.
    """
    masters = torch.nonzero(is_master).view(-1)
    take = min(int(roots), len(masters))
    if take == 0:
        return NegativePool.empty(int(x.shape[1]))
    chosen = masters[torch.randperm(len(masters), generator=generator)[:take]]
    n_id, ei = NeighborSampler(edge_index, int(x.shape[0])).sample(chosen, fanouts, generator)
    return NegativePool(x[n_id], global_nid[n_id], ei, torch.arange(take))


def _send_to_others(comm: Comm, tensor: torch.Tensor) -> list[torch.Tensor]:
    """``tensor`` to every other rank (nothing to this one); what each other rank sent."""
    empty = tensor[:0]
    received = comm.all_to_all([empty if j == comm.rank else tensor for j in range(comm.world_size)], NEGATIVES)
    return [r for j, r in enumerate(received) if j != comm.rank]


def exchange_pool(x: torch.Tensor, global_nid: torch.Tensor, is_master: torch.Tensor, edge_index: torch.Tensor,
                  pool_size: int, fanouts: tuple[int, ...], comm: Comm, seed: int) -> NegativePool:
    """Build every rank's pool of about ``pool_size`` remote roots (a collective).

    Parameters
    ----------
    x, global_nid, is_master
        This rank's local rows (features as trained on).
    edge_index
        This rank's message-passing edges over its rows, held-out edges excluded.
    pool_size
        Roots to receive; each rank sends ``ceil(pool_size / (W - 1))``. 0: no pool.
    fanouts
        One per layer: the computation graph each root travels with.
    comm
        The ranks; with one, the pool is empty.
    seed
        The run's seed (the roots and samples derive from it and the rank).

    Returns
    -------
    NegativePool
        The other ranks' blocks, in rank order, with the bytes this rank sent and received.
    """
    width = int(x.shape[1])
    w = comm.world_size
    if w == 1 or pool_size <= 0:
        return NegativePool.empty(width)
    before_sent = comm.bytes.sent.get(NEGATIVES, 0.0)
    before_received = comm.bytes.received.get(NEGATIVES, 0.0)
    g = torch.Generator().manual_seed((int(seed) * 1_000_003 + 0x5EED * (comm.rank + 1)) & 0x7FFFFFFFFFFFFFFF)
    mine = pool_block(x, global_nid, is_master, edge_index, math.ceil(pool_size / (w - 1)), fanouts, g)
    head = torch.tensor([len(mine.roots)], dtype=torch.int64)
    counts = _send_to_others(comm, head)
    gids = _send_to_others(comm, mine.global_nid)
    feats = _send_to_others(comm, mine.x.contiguous())
    edges = _send_to_others(comm, mine.edge_index.t().contiguous())
    offset, roots, shifted = 0, [], []
    for count, gid, ei in zip(counts, gids, edges):
        roots.append(offset + torch.arange(int(count[0]) if len(count) else 0))
        shifted.append(ei.t() + offset)
        offset += len(gid)
    pool = NegativePool(torch.cat(feats) if feats else torch.zeros((0, width)), torch.cat(gids),
                        torch.cat(shifted, dim=1), torch.cat(roots).to(torch.int64),
                        comm.bytes.sent.get(NEGATIVES, 0.0) - before_sent,
                        comm.bytes.received.get(NEGATIVES, 0.0) - before_received)
    log.info("rank %d: negative pool of %d remote roots (%d rows, %d edges); sent %.2f MiB, received %.2f MiB",
             comm.rank, len(pool.roots), pool.num_rows, pool.edge_index.shape[1], pool.bytes_sent / 2**20,
             pool.bytes_received / 2**20)
    return pool
