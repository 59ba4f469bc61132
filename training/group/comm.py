"""Collectives that count the bytes each rank sends and receives.

Every exchange between trainers goes through one :class:`Comm`, so the bytes a
strategy moves are counted the same way for all strategies (ASEPR's reconciliation
and the fully-decentralized baseline alike). Counting is by the cost model of the
algorithm gloo and NCCL use for each collective (payload bytes only, no headers):

==================  =====================================  ==================
collective          bytes sent by each rank                bytes received
==================  =====================================  ==================
all_reduce (ring)   2 (W-1)/W · B                          the same
all_gather (ring)   (W-1) · B  (B = one rank's share)      the same
all_to_all          Σ bytes addressed to other ranks       Σ bytes from them
==================  =====================================  ==================

With one rank (``W == 1``) nothing is sent. ``Comm(None)`` is that single-process
case (the centralized baseline, unit tests) and runs no collective at all.

Messages (for the latency term of a network model) are counted per rank and category
by the same algorithms: a ring all_reduce sends ``2 (W-1)`` messages, a ring all_gather
``W-1``, and an all_to_all one to every other rank (``W-1``, empty ones included: the
pairwise exchange sends them) plus ``W-1`` for the sizes that precede it (``"control"``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.distributed as dist

__all__ = ["ByteCounter", "Comm"]


@dataclass
class ByteCounter:
    """Bytes sent and received and messages sent, per category (e.g. ``"model"``, ``"features"``)."""

    sent: dict[str, float] = field(default_factory=dict)
    received: dict[str, float] = field(default_factory=dict)
    messages: dict[str, float] = field(default_factory=dict)

    def add(self, category: str, sent: float, received: float, messages: int = 0) -> None:
        self.sent[category] = self.sent.get(category, 0.0) + float(sent)
        self.received[category] = self.received.get(category, 0.0) + float(received)
        self.messages[category] = self.messages.get(category, 0.0) + float(messages)

    @property
    def total_sent(self) -> float:
        return sum(self.sent.values())

    @property
    def total_received(self) -> float:
        return sum(self.received.values())

    def state_dict(self) -> dict[str, dict[str, float]]:
        return {"sent": dict(self.sent), "received": dict(self.received), "messages": dict(self.messages)}

    def load_state_dict(self, state: dict) -> None:
        self.sent = {k: float(v) for k, v in state.get("sent", {}).items()}
        self.received = {k: float(v) for k, v in state.get("received", {}).items()}
        self.messages = {k: float(v) for k, v in state.get("messages", {}).items()}


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


class Comm:
    """Byte-counting collectives over the default process group (or none).

    Under NCCL, whose collectives take device tensors only, every buffer travels through
    this process's GPU (``device``) and comes back on the caller's device; under gloo
    (or without a group) it stays in host memory.
    """

    def __init__(self, group=None, *, world_size: int | None = None, rank: int | None = None):
        self.distributed = dist.is_available() and dist.is_initialized()
        self.group = group
        self.world_size = dist.get_world_size(group) if self.distributed else 1
        self.rank = dist.get_rank(group) if self.distributed else 0
        if world_size is not None and world_size != self.world_size:
            raise RuntimeError(f"expected a process group of {world_size} ranks, found {self.world_size}")
        nccl = self.distributed and dist.get_backend(group) == "nccl"
        #: Where the collectives' buffers live.
        self.device = torch.device("cuda", torch.cuda.current_device()) if nccl else torch.device("cpu")
        self.bytes = ByteCounter()

    def _wire(self, tensor: torch.Tensor) -> torch.Tensor:
        """``tensor`` on :attr:`device` (itself when it is there already)."""
        return tensor if tensor.device == self.device else tensor.to(self.device)

    def all_reduce(self, tensor: torch.Tensor, category: str, op=None) -> torch.Tensor:
        """In-place sum (or ``op``) over ranks; returns ``tensor``."""
        w = self.world_size
        if w > 1:
            b = 2.0 * (w - 1) / w * _nbytes(tensor)
            self.bytes.add(category, b, b, 2 * (w - 1))
            wire = self._wire(tensor)
            dist.all_reduce(wire, op=op or dist.ReduceOp.SUM, group=self.group)
            if wire is not tensor:
                tensor.copy_(wire)
        return tensor

    def all_gather(self, tensor: torch.Tensor, category: str) -> list[torch.Tensor]:
        """Every rank's ``tensor`` (same shape on all ranks), in rank order."""
        w = self.world_size
        if w == 1:
            return [tensor]
        wire = self._wire(tensor.contiguous())
        out = [torch.empty_like(wire) for _ in range(w)]
        b = float((w - 1) * _nbytes(tensor))
        self.bytes.add(category, b, b, w - 1)
        dist.all_gather(out, wire, group=self.group)
        return [o.to(tensor.device) for o in out]

    def all_to_all(self, sends: list[torch.Tensor], category: str) -> list[torch.Tensor]:
        """Send ``sends[j]`` to rank j; returns what each rank sent here (1-d or row tensors).

        Shapes travel first (a small all_to_all of sizes, counted under ``"control"``).
        """
        w = self.world_size
        if w == 1:
            return [sends[0]]
        rows = torch.tensor([s.shape[0] for s in sends], dtype=torch.int64, device=self.device)
        recv_rows = torch.empty_like(rows)
        dist.all_to_all_single(recv_rows, rows, group=self.group)
        self.bytes.add("control", 8 * (w - 1), 8 * (w - 1), w - 1)
        tail = tuple(sends[0].shape[1:])
        # gloo implements only the single-buffer all_to_all: one flat send, split by rows.
        counts = recv_rows.tolist()
        recv = torch.empty((sum(counts), *tail), dtype=sends[0].dtype, device=self.device)
        dist.all_to_all_single(recv, self._wire(torch.cat([s.contiguous() for s in sends])),
                               output_split_sizes=counts, input_split_sizes=rows.tolist(), group=self.group)
        recvs = list(torch.split(recv.to(sends[0].device), counts))
        sent = sum(_nbytes(s) for j, s in enumerate(sends) if j != self.rank)
        received = sum(_nbytes(r) for j, r in enumerate(recvs) if j != self.rank)
        self.bytes.add(category, sent, received, w - 1)
        return recvs

    def max_int(self, value: int) -> int:
        t = torch.tensor([int(value)], dtype=torch.int64)
        self.all_reduce(t, "control", op=dist.ReduceOp.MAX if self.distributed else None)
        return int(t.item())

    def gather_uncounted(self, values: torch.Tensor) -> torch.Tensor:
        """Every rank's ``values`` (a 1-d float64 tensor of the same length on all ranks),
        stacked as ``[world_size, n]`` in rank order, in host memory.

        For bookkeeping (the bytes columns of a metrics row, which ranks failed a setup
        step): the bytes it moves are not counted.
        """
        values = values.to(torch.float64).reshape(-1)
        if self.world_size == 1:
            return values.unsqueeze(0).cpu()
        wire = self._wire(values)
        out = [torch.empty_like(wire) for _ in range(self.world_size)]
        dist.all_gather(out, wire, group=self.group)
        return torch.stack(out).cpu()

    def barrier(self) -> None:
        if self.world_size > 1:
            dist.barrier(group=self.group)
