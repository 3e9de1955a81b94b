"""Exact global pivot and tie share of sharded weights on the device: a four-pass radix select whose
digit histograms are all-reduced over a process group between passes.

Why: FAST's mask needs the k-th largest |w| over every shard of every sparse weight. Our
``kernels.ops.pivot.find_pivot_stats`` methods decide each round on the host (a sync per round);
at training scale that cost dominated FAST's end-to-end step (``repro.tp_step``: 200-1240 ms per
regeneration for MAP-NEO 460M and 7B cut to 6 layers at world 1 on an H100, campaign 324330c,
where PyTorch's gather-and-top-k took 16-77 ms). Here the four 256-bin histograms stay on the
device, each all-reduced (2 KiB) before the next pass reads it, and the select runs in a kernel:
no host round trip, no weights gathered, the same answer on every rank, bit for bit the exact
select (``kernels.ops.pivot.find_pivot(method="exact")`` and ``kernels.ops.flex.tie_share``).

Triton kernels (``kernels.ops._pivot_radix_triton``) on CUDA and under the interpreter; elsewhere the
same passes in plain PyTorch (``torch.bincount``), which is also the reference of the kernels.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.distributed as dist

from kernels.ops.common import FLOAT_DTYPES, check_tensor, use_triton

PASSES = 4
HIST_LEN = 256 * PASSES
COUNTS_LEN = HIST_LEN + 3
NONFINITE, GT, EQ = HIST_LEN, HIST_LEN + 1, HIST_LEN + 2
_SHIFT = (23, 15, 7, 0)  # the digit of pass p: bits _SHIFT[p].. (8 bits; 7 in the last pass)
_PSHIFT = (31, 23, 15, 7)  # the prefix before pass p: bits _PSHIFT[p]..30
_FIELD = (0xFF, 0xFF, 0xFF, 0x7F)


class RadixPivot:
    """``pivot()`` -> (pivot, tie share) of ``tensors`` (this rank's shards) over ``group``, as
    0-dim float32 device tensors (the k-th largest |w| with k = round(density * n), n over every
    rank; keep |w| > pivot and the share of |w| == pivot that makes the budget exact). Every rank
    must call with its own shards, in the same order of calls.

    Set up once for fixed tensors (their values may change between calls: the passes read them in
    place). ``check()`` reads the global non-finite count (one host sync) and raises ValueError if
    any weight on any rank is NaN or Inf; ``pivot()`` alone never syncs with the host."""

    def __init__(
        self, tensors: torch.Tensor | Sequence[torch.Tensor], density: float, group: dist.ProcessGroup | None = None
    ) -> None:
        ts = [tensors] if isinstance(tensors, torch.Tensor) else list(tensors)
        if not ts:
            raise ValueError("tensors is empty: give at least one tensor")
        for i, t in enumerate(ts):
            check_tensor(f"tensors[{i}]", t, dtypes=FLOAT_DTYPES, finite=False)
            if not t.is_contiguous():  # a reshape would copy: later in-place updates never seen
                raise ValueError(f"tensors[{i}] is not contiguous (the passes read views of the tensors in place)")
        if len({t.dtype for t in ts}) != 1:  # one pointer type per launch (the kernel selects among 8)
            raise TypeError(f"tensors must share one dtype, got {sorted({str(t.dtype) for t in ts})}")
        if len({t.device for t in ts}) != 1:
            raise ValueError(f"tensors must be on one device, got {sorted({str(t.device) for t in ts})}")
        d = float(density) if isinstance(density, (int, float)) and not isinstance(density, bool) else math.nan
        if not 0.0 <= d <= 1.0:  # NaN fails the comparison
            raise ValueError(f"density must be a real number in [0, 1], got {density!r}")
        if group is not None and not (dist.is_available() and isinstance(group, dist.ProcessGroup)):
            raise TypeError(f"group must be a torch.distributed ProcessGroup or None, got {type(group).__name__}")
        self.group = group
        self.device = ts[0].device
        self.flats = [t.detach().reshape(-1) for t in ts if t.numel()]
        n = torch.tensor([sum(f.numel() for f in self.flats)], dtype=torch.int64, device=self.device)
        if group is not None:
            dist.all_reduce(n, group=group)
        self.n = int(n.item())
        if self.n == 0:
            raise ValueError("no weights: every tensor is empty on every rank")
        self.k = min(self.n, max(0, round(d * self.n)))
        self.counts = torch.zeros(COUNTS_LEN, dtype=torch.int64, device=self.device)
        self.state = torch.zeros(2, dtype=torch.float32, device=self.device)
        self._triton = use_triton(ts[0])
        self._launches = self._build() if self._triton else []

    def _build(self) -> list[list[tuple]]:
        from kernels.ops._pivot_radix_triton import radix_hist_passes

        return radix_hist_passes(self.flats, self.counts, self.k)

    def _reduce(self, p: int) -> None:
        if self.group is not None:
            dist.all_reduce(self.counts[256 * p : 256 * (p + 1)], group=self.group)

    def pivot(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(pivot, tie share) as 0-dim float32 views of the device state (overwritten by the next
        call); the global #(|w| > pivot), #(|w| == pivot) and non-finite count land in ``counts``."""
        if self.k == 0:  # keeps nothing (every rank knows n, hence k)
            self.state.copy_(torch.tensor([math.inf, 1.0], device=self.device))
            self.counts[HIST_LEN:].zero_()
            return self.state[0], self.state[1]
        if not self._triton:
            return self._pivot_torch()
        from kernels.ops._pivot_radix_triton import radix_select_launch

        self.counts.zero_()  # also clears what an interrupted call left
        for p, launches in enumerate(self._launches):
            for kernel, grid, args, warps in launches:
                kernel[grid](*args, num_warps=warps)
            self._reduce(p)
        kernel, grid, args, warps = radix_select_launch(self.counts, self.state, self.k, clear=False)
        kernel[grid](*args, num_warps=warps)
        return self.state[0], self.state[1]

    def _pivot_torch(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The passes in plain PyTorch (the kernels' reference); the select on the host."""
        self.counts.zero_()
        mags = [f.float().abs().view(torch.int32) for f in self.flats]  # abs(-0.0) is 0: bits 0
        prefix, above = 0, 0
        for p in range(PASSES):
            hist = self.counts[256 * p : 256 * (p + 1)]
            for m in mags:
                if p == 0:
                    digit = m >> 23
                else:
                    m = m[(m >> _PSHIFT[p]) == prefix]
                    digit = (m >> _SHIFT[p]) & _FIELD[p]
                hist += torch.bincount(digit.reshape(-1).long(), minlength=256).to(hist.device)
            self._reduce(p)
            counts = hist.tolist()
            digit_p = 0
            for b in range(255, -1, -1):
                if above + counts[b] >= self.k:
                    digit_p = b
                    break
                above += counts[b]
            if p < PASSES - 1:
                prefix = (prefix << 8) | digit_p
            else:
                gt, eq = above, counts[digit_p]
                prefix = (prefix << 7) | digit_p
        nonfinite = int(self.counts[255])
        pivot = float(torch.tensor([prefix], dtype=torch.int32).view(torch.float32))
        share = 1.0 if eq == 0 else min(1.0, max(0.0, (self.k - gt) / eq))
        self.counts[HIST_LEN:] = torch.tensor([nonfinite, gt, eq], device=self.device)
        self.state.copy_(torch.tensor([pivot, share], dtype=torch.float32))
        return self.state[0], self.state[1]

    def check(self) -> None:
        """Raise ValueError if the last ``pivot()`` saw NaN or Inf on any rank (a host sync)."""
        self.read()

    def read(self) -> tuple[float, float]:
        """The last (pivot, tie share) as floats, after the check of ``check()`` (one host sync)."""
        values = torch.cat([self.state.double(), self.counts[NONFINITE:].double()]).tolist()
        if self.k and values[2]:
            raise ValueError("weights contain NaN or Inf; refusing to compute a pivot on non-finite values")
        return values[0], values[1]


def radix_pivot_and_tie(
    tensors: torch.Tensor | Sequence[torch.Tensor], density: float, group: dist.ProcessGroup | None = None
) -> tuple[float, float]:
    """One-shot ``RadixPivot``: (pivot, tie share) as floats; raises ValueError on NaN/Inf.
    Non-contiguous tensors are read through a contiguous copy (one call: nothing to go stale)."""
    ts = [tensors] if isinstance(tensors, torch.Tensor) else list(tensors)
    r = RadixPivot([t.contiguous() if isinstance(t, torch.Tensor) else t for t in ts], density, group)
    r.pivot()
    return r.read()
