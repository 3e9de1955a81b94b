"""Global Top-K magnitude threshold ("pivot") over sharded weights (FAST, Sec. III).

The pivot for a target density is the k-th largest |w| over every weight of every tensor on
every rank, k = round(density * n_total): keeping ``|w| >= pivot`` keeps exactly k weights when
there are no ties (with ties, #(|w| >= pivot) >= k > #(|w| > pivot)). k == 0 gives +inf.
Magnitudes are compared in float32 (fp16/bf16 magnitudes are exact there).

Three methods, all exact and all giving the same pivot on every rank:

- ``"exact"``: single process: torch's selection (``kthvalue`` on CPU, ``topk`` on CUDA) on the
  concatenated |w|; distributed: the baseline that all-gathers every shard's float32 |w| (sizes
  first, then the values padded to the largest shard) and selects locally. Above 2**27 values
  the local select is a histogram select (2 passes of 2**16 bins, no communication), whose
  memory stays bounded (torch's select would need 12 more bytes per value).
- ``"radix"``: a histogram select on the float32 bit patterns of |w| (non-negative floats order
  like their int32 bits): ceil(31 / bits) passes of 2**bits bins, each pass all-reducing only
  the bin counts and fixing the next ``bits`` bits of the pivot.
- ``"gaussian"`` (FAST): one all-reduce of (count, sum |w|, sum w^2) fits a zero-mean Gaussian,
  so |w| is half-normal; its quantile gives an interval around the pivot, which is split into
  ``bins`` bins of equal probability under the fit, and one all-reduce of the bin counts (plus
  the count above the interval) locates the bin holding the k-th largest. That repeats inside
  the bin until at most ``max_candidates`` values remain (then they are all-gathered and
  selected exactly) or the interval is one float wide. On data the fit misses (heavy tails,
  ties, zeros), the counts at the bin edges still tell on which side the pivot lies, so the
  search narrows on that side; a round that fails to halve the interval (in float32 bit
  patterns) is followed by a round with equal bins in bit-pattern space, which shrinks it about
  ``bins``-fold, so the search terminates on any finite input (at most ~64 count rounds).

Accounting (``PivotResult``): ``rounds`` counts the collective steps; ``bytes_communicated`` sums,
over those steps, the size in bytes of the buffer each rank ends up holding (all_reduce: the
reduced buffer; all_gather: the gathered total, world size x the per-rank buffer). With
``group=None`` the radix and gaussian steps run locally and are still counted as rounds (so
rounds do not depend on the sharding), with 0 bytes; exact has no steps in a single process.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from statistics import NormalDist

import torch
import torch.distributed as dist

from kernels.ops._pivot_gaussian_triton import (
    above_and_at_triton,  # re-exported: FAST's tie counts in repro.tp_step
    abs_sums_triton,
    bin_counts_ge_triton,
    compact_between_triton,
    compact_count_triton,
)
from kernels.ops.common import FLOAT_DTYPES, check_same_device, check_tensor, use_triton

__all__ = ["METHODS", "PivotResult", "above_and_at_triton", "find_pivot", "find_pivot_stats", "kth_largest"]

METHODS = ("exact", "radix", "gaussian")
_OPTIONS = {
    "exact": {"check_finite"},
    "radix": {"check_finite", "bits"},
    "gaussian": {"check_finite", "bins", "max_candidates", "margin"},
}
_INF_BITS = 0x7F800000  # float32 +inf; every finite |w| has smaller bits
_CHUNK = {"cpu": 1 << 22, "cuda": 1 << 26}  # elements per temporary (float32 |w|, bucket indices)
_JOINED_DEVICES = {"cuda"}  # where _Values joins small tensors into one chunk (tests add "cpu")
_TORCH_SELECT_MAX = 1 << 27  # above this, the local select is a histogram select (bounded memory)
# torch.topk's k is an int32 on CUDA: beyond this it returns a wrong value without an error (torch
# 2.11, H200, campaign 291c96d: the pivot of 7.4e9 gathered |w| with k = 3.7e9 came back as 0.0)
TOPK_MAX_K = (1 << 31) - 1
_MAX_ROUNDS = 256  # safety net; the gaussian search needs far fewer (see the module docstring)
_STD = NormalDist()


@dataclass(frozen=True)
class PivotResult:
    """A pivot and what it cost: ``rounds`` collective steps, ``bytes_communicated`` bytes
    (per step, the buffer each rank ends up holding), ``candidates`` values all-gathered in the
    final exact step (0 if none); ``k`` of ``n`` weights are kept by ``|w| >= pivot``."""

    pivot: float
    k: int
    n: int
    method: str
    rounds: int
    bytes_communicated: int
    candidates: int


# ----------------------------------------------------------------------------- communication


class _Comm:
    """Collectives over ``group`` (or local no-ops for ``None``) that count rounds and bytes."""

    def __init__(self, group: object | None, counted: bool = True):
        self.group = group
        self.world = 1 if group is None else dist.get_world_size(group)
        self.counted = counted
        self.rounds = 0
        self.bytes = 0

    def _count(self, nbytes: int) -> None:
        if self.counted:
            self.rounds += 1
            if self.group is not None:
                self.bytes += nbytes

    def all_reduce(self, t: torch.Tensor) -> torch.Tensor:
        """Sum ``t`` over ranks, in place."""
        if self.group is not None:
            dist.all_reduce(t, op=dist.ReduceOp.SUM, group=self.group)
        self._count(t.numel() * t.element_size())
        return t

    def all_gather(self, t: torch.Tensor) -> torch.Tensor:
        """Concatenate the equal-sized 1-D ``t`` of every rank (rank order)."""
        out = t
        if self.group is not None:
            out = torch.empty(self.world * t.numel(), dtype=t.dtype, device=t.device)
            gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
            gather(out, t.contiguous(), group=self.group)
        self._count(out.numel() * out.element_size())
        return out


# ----------------------------------------------------------------------------- local data


class _Values:
    """|w| in float32, streamed in chunks: either the caller's tensors (cast on the fly) or a
    compacted float32 tensor of magnitudes."""

    def __init__(self, flats: list[torch.Tensor], is_abs: bool = False):
        self.flats = flats
        self.is_abs = is_abs

    def chunks(self, raw: bool = False) -> Iterator[torch.Tensor]:
        """Chunks of at most ``_CHUNK`` values; on CUDA, small tensors are joined into one chunk
        (a model's hundreds of weights would otherwise cost every pass hundreds of launches and,
        in ``compact``, a host sync each). ``raw``: the values as stored (signed, their dtype),
        for passes that take |w| themselves; otherwise float32 |w|."""
        group: list[torch.Tensor] = []
        size = 0
        for t in self.flats:
            step = _CHUNK.get(t.device.type, 1 << 22)
            for i in range(0, t.numel(), step):
                c = t[i : i + step]
                if c.device.type not in _JOINED_DEVICES:
                    yield c if raw else self._mags(c)
                    continue
                if group and size + c.numel() > step:
                    yield self._joined(group, raw)
                    group, size = [], 0
                group.append(c)
                size += c.numel()
        if group:
            yield self._joined(group, raw)

    def _mags(self, c: torch.Tensor) -> torch.Tensor:
        # abs before the cast: exact in fp16/bf16, and the narrow pass is cheaper
        return c if self.is_abs else c.abs().float()

    def _joined(self, group: list[torch.Tensor], raw: bool = False) -> torch.Tensor:
        if len(group) == 1:
            return group[0] if raw else self._mags(group[0])
        return torch.cat(group) if raw else torch.cat([self._mags(c) for c in group])

    def compact(self, keep) -> _Values:
        """The values for which ``keep(chunk)`` (a bool mask) holds, as one float32 tensor."""
        parts = [c[keep(c)] for c in self.chunks()]
        dev = self.flats[0].device
        return _Values([torch.cat(parts) if parts else torch.empty(0, device=dev)], is_abs=True)

    def numel(self) -> int:
        return sum(t.numel() for t in self.flats)

    def compact_count(self, lo: int, hi: int, cap: int) -> tuple[_Values | None, int, int]:
        """(kept, inside, above): the |w| in [lo, hi) (float32 bit patterns) as one float32 tensor,
        their number and the number of |w| >= hi, in one read. ``cap`` is a guess of the number
        inside: where more lie there, ``kept`` is None."""
        if not _triton_passes(self.flats[0]):
            l_f, h_f = _bits_f32(lo), _bits_f32(hi)
            kept = self.compact(lambda c: (c >= l_f) & (c < h_f))
            above = sum(int((c >= h_f).sum()) for c in self.chunks())
            got = kept.flats[0].numel()
            return (kept if got <= cap else None), got, above
        dev = self.flats[0].device
        buf, got, above = compact_count_triton(self.chunks(raw=True), lo, hi, cap, dev)
        return (_Values([buf], is_abs=True) if got <= cap else None), got, above

    def compact_between(self, lo: int, hi: int, cap: int) -> _Values:
        """The |w| in [lo, hi) (float32 bit patterns) as one float32 tensor, in no defined order;
        ``cap`` bounds their number (a global count). With Triton, one pass that writes only them."""
        if not _triton_passes(self.flats[0]):
            l_f, h_f = _bits_f32(lo), _bits_f32(hi)
            return self.compact(lambda c: (c >= l_f) & (c < h_f))
        return _Values([compact_between_triton(self.chunks(raw=True), lo, hi, cap, self.flats[0].device)], is_abs=True)


def _triton_passes(t: torch.Tensor) -> bool:
    """Whether the gaussian search streams ``t``'s values through its Triton passes
    (``kernels.ops._pivot_gaussian_triton``): on CUDA. On the CPU the torch passes run, also under
    ``TRITON_INTERPRET=1`` (the interpreter would make every CPU search slow); the tests run the
    Triton passes there by patching this function."""
    return t.is_cuda


def _bin_counts(idx: torch.Tensor, nbins: int) -> torch.Tensor:
    """``torch.bincount(idx, minlength=nbins)`` (int64) for integer ``0 <= idx < nbins``. On CUDA
    without bincount's host sync (it reads ``max(idx)`` back: one sync per chunk and round, which
    serialised the gaussian search over a model's weights, 200-1240 ms per call in campaign
    324330c): :func:`_histc_counts`."""
    if not idx.is_cuda or torch.are_deterministic_algorithms_enabled():  # torch flags CUDA histc
        return torch.bincount(idx, minlength=nbins)
    return _histc_counts(idx, nbins)


def _histc_counts(idx: torch.Tensor, nbins: int) -> torch.Tensor:
    """The counts of :func:`_bin_counts` by ``torch.histc`` over ``idx + 0.5`` (bin ``i`` is
    [i, i + 1): the half keeps every value off a bin edge, whatever the rounding of the bin
    arithmetic), in slices of at most 2**24 values (histc counts in float32, exact up to 2**24)."""
    out = torch.zeros(nbins, dtype=torch.int64, device=idx.device)
    for part in idx.reshape(-1).split(1 << 24):
        out += torch.histc(part.float() + 0.5, bins=nbins, min=0, max=nbins).long()
    return out


def _f32_bits(x: float) -> int:
    """Bit pattern of float32(x) for x >= 0 (rounded to nearest; overflow gives +inf)."""
    return int(torch.tensor([x], dtype=torch.float64).float().view(torch.int32).item())


def _bits_f32(b: int) -> float:
    return float(torch.tensor([b], dtype=torch.int32).view(torch.float32).item())


def _kth_largest_torch(x: torch.Tensor, k: int, *, topk: bool | None = None) -> float:
    """The k-th largest of 1-D ``x``: by ``topk`` of the smaller side on CUDA, by ``kthvalue``
    elsewhere (``topk`` forces either, so the CUDA branch is tested on the CPU too)."""
    n = x.numel()
    if x.is_cuda if topk is None else topk:
        if k <= n - k + 1:
            return float(torch.topk(x, k, largest=True, sorted=False).values.min().item())
        return float(torch.topk(x, n - k + 1, largest=False, sorted=False).values.max().item())
    return float(torch.kthvalue(x, n - k + 1).values.item())


def kth_largest(mags: torch.Tensor, k: int) -> torch.Tensor:
    """The k-th largest of the 1-D non-negative floating ``mags`` (1 <= k <= numel), a 0-dim float32
    tensor on their device. NaN is not checked (a check would sync the host inside captured graphs):
    torch.topk ranks it above every value. ``torch.topk`` in their dtype (no host sync) of the k largest or of the
    n - k + 1 smallest, whichever fits its int32 k; where neither does (over 4.3e9 values near
    density 0.5), a 12-bit histogram select on float32 (host-synchronising, memory of one chunk
    plus one bin's values)."""
    n = mags.numel()
    if mags.dim() != 1 or mags.dtype not in FLOAT_DTYPES or not 1 <= k <= n:
        raise ValueError(
            f"kth_largest: need 1-D floating magnitudes and 1 <= k <= {n}; "
            f"got {mags.dtype} {tuple(mags.shape)}, k = {k}"
        )
    if k <= TOPK_MAX_K:
        return torch.topk(mags, k, sorted=False).values.min().float()
    if n - k + 1 <= TOPK_MAX_K:
        return torch.topk(mags, n - k + 1, largest=False, sorted=False).values.max().float()
    values = _Values([mags], is_abs=mags.dtype == torch.float32)
    pivot = _radix_search(values, lambda _n: k, _Comm(None, counted=False), 12, False)[0]
    return torch.tensor(pivot, dtype=torch.float32, device=mags.device)


def _select_local(values: _Values, n: int, k: int) -> float:
    """The k-th largest of ``n`` local magnitudes, without communication."""
    if n <= _TORCH_SELECT_MAX:
        parts = list(values.chunks())
        return _kth_largest_torch(parts[0] if len(parts) == 1 else torch.cat(parts), k)
    return _radix_search(values, lambda _n: k, _Comm(None, counted=False), 16, False)[0]


# ----------------------------------------------------------------------------- methods


def _exact(flats: list[torch.Tensor], density: float, comm: _Comm, check_finite: bool) -> PivotResult:
    device = flats[0].device
    n_local = sum(t.numel() for t in flats)
    if comm.group is None:
        n, sizes, pieces = n_local, [n_local], flats
    else:
        bad = sum(int((~torch.isfinite(t)).sum().item()) for t in flats) if check_finite else 0
        info = comm.all_gather(torch.tensor([n_local, bad], dtype=torch.int64, device=device)).view(-1, 2).tolist()
        sizes = [s for s, _ in info]
        n = sum(sizes)
        _check_global(n, sum(b for _, b in info))
        k = _k(density, n)
        if k == 0:
            return PivotResult(math.inf, 0, n, "exact", comm.rounds, comm.bytes, 0)
        width = max(sizes)
        send = torch.full((width,), -1.0, dtype=torch.float32, device=device)
        at = 0
        for t in flats:
            send[at : at + t.numel()].copy_(t)
            at += t.numel()
        send[:at].abs_()
        gathered = comm.all_gather(send).view(len(sizes), width)
        if all(s == width for s in sizes):
            pieces = [gathered.view(-1)]
        else:
            pieces = [gathered[r, :s] for r, s in enumerate(sizes) if s]
    k = _k(density, n)
    if k == 0:
        return PivotResult(math.inf, 0, n, "exact", comm.rounds, comm.bytes, 0)
    pivot = _select_local(_Values(list(pieces), is_abs=comm.group is not None), n, k)
    return PivotResult(pivot, k, n, "exact", comm.rounds, comm.bytes, 0)


def _radix_search(values: _Values, k_of_n, comm: _Comm, bits: int, check_finite: bool) -> tuple[float, int, int]:
    """Histogram select on the 31 value bits of |w|; returns (pivot, k, n)."""
    device = values.flats[0].device
    k = n = -1
    remaining, prefix = 31, 0
    first = True
    while remaining > 0:
        width = min(bits, remaining)
        shift = remaining - width
        mask = (1 << width) - 1
        hist = torch.zeros(1 << width, dtype=torch.int64, device=device)
        extra = torch.zeros(1, dtype=torch.int64, device=device)
        need_extra = first and check_finite and shift > 23  # below 8 bits the top digit mixes finite and inf
        for c in values.chunks():
            b = c.view(torch.int32)
            hist += _bin_counts((b >> shift) & mask, 1 << width)
            if need_extra:
                extra += (b >= _INF_BITS).sum()
        buf = comm.all_reduce(torch.cat([hist, extra]) if need_extra else hist)
        counts = buf.tolist()
        if first:
            if need_extra:
                bad = counts.pop()
            elif shift <= 23:  # non-finite |w| are exactly the top digits
                bad = sum(counts[_INF_BITS >> shift :])
            else:
                bad = 0
            n = sum(counts)
            _check_global(n, bad)
            k = k_of_n(n)
            if k == 0:
                return math.inf, 0, n
            first = False
        above = 0
        digit = mask
        while above + counts[digit] < k:  # walk the digits from the top until the k-th is inside
            above += counts[digit]
            digit -= 1
        k -= above
        prefix = (prefix << width) | digit
        remaining = shift
        if remaining > 0:
            values = values.compact(lambda c, s=shift, m=mask, d=digit: ((c.view(torch.int32) >> s) & m) == d)
    return _bits_f32(prefix), k_of_n(n), n


def _radix(flats: list[torch.Tensor], density: float, comm: _Comm, bits: int, check_finite: bool) -> PivotResult:
    pivot, k, n = _radix_search(_Values(flats), lambda n: _k(density, n), comm, bits, check_finite)
    return PivotResult(pivot, k, n, "radix", comm.rounds, comm.bytes, 0)


def _hn_sf(x: float, sigma: float) -> float:
    """P(|w| >= x) for w ~ N(0, sigma^2)."""
    return math.erfc(x / (sigma * math.sqrt(2.0)))


def _hn_isf(s: float, sigma: float) -> float:
    """x with P(|w| >= x) = s (accurate in the tail: uses the lower normal quantile)."""
    if s <= 0.0:
        return math.inf
    if s >= 1.0:
        return 0.0
    return -sigma * _STD.inv_cdf(s / 2.0)


def _gauss_edges(lo: int, hi: int, bins: int, sigma: float) -> list[int] | None:
    """Edges (float32 bits) from lo to hi of bins of equal half-normal probability, or None
    where the fit cannot split the interval (it holds ~no probability, or floats coincide)."""
    s_lo, s_hi = _hn_sf(_bits_f32(lo), sigma), _hn_sf(_bits_f32(hi), sigma)
    if not s_lo > s_hi or (s_lo - s_hi) <= 1e-9 * s_lo:
        return None
    xs = [_hn_isf(s_lo - j * (s_lo - s_hi) / bins, sigma) for j in range(1, bins)]
    inner = torch.tensor(xs, dtype=torch.float64).float().view(torch.int32).tolist()
    edges = sorted({lo, hi, *(min(max(e, lo), hi) for e in inner)})
    if len(edges) - 2 < min(bins - 1, hi - lo - 1) // 2:
        return None
    return edges


def _bit_edges(lo: int, hi: int, bins: int) -> list[int]:
    """Edges of equal width in float32 bit patterns (always splits an interval of >= 2 floats)."""
    return sorted({lo + (j * (hi - lo)) // bins for j in range(bins + 1)})


def _local_bins(values: _Values, edges: list[int]) -> torch.Tensor:
    """int64 [len(edges)] of this rank: entry j counts |w| in [e_j, e_j+1), the last one |w| >= the
    last edge (values below the first edge are not counted)."""
    device = values.flats[0].device
    if _triton_passes(values.flats[0]):  # one read of the stored values a chunk, no |w| copy
        e_bits = torch.tensor(edges, dtype=torch.int32).to(device)
        hist = torch.zeros(len(edges), dtype=torch.int64, device=device)
        for c in values.chunks(raw=True):
            hist += bin_counts_ge_triton(c, e_bits)
        return hist
    e = torch.tensor(edges, dtype=torch.int32).view(torch.float32).to(device)
    hist = torch.zeros(len(edges) + 1, dtype=torch.int64, device=device)
    for c in values.chunks():
        hist += _bin_counts(torch.bucketize(c, e, right=True, out_int32=True), len(edges) + 1)
    return hist[1:].contiguous()


def _ge_of_bins(hist: torch.Tensor, comm: _Comm) -> list[int]:
    """#(|w| >= e) over all ranks for every edge e, from the ranks' ``_local_bins``: one all-reduce."""
    counts = comm.all_reduce(hist).tolist()
    ge, acc = [0] * len(counts), 0
    for j in range(len(counts) - 1, -1, -1):
        acc += counts[j]
        ge[j] = acc
    return ge


def _count_ge(values: _Values, edges: list[int], comm: _Comm) -> list[int]:
    """#(|w| >= e) over all ranks for every edge e (float32 bits, increasing): one all-reduce of
    the counts per bin [e_j, e_j+1) plus the count above the last edge."""
    return _ge_of_bins(_local_bins(values, edges), comm)


def _first_cap(n_local: int, n: int, h: float) -> int:
    """The room for this rank's values inside the fit's first interval, which holds about 2h of
    all n values if the weights were Gaussian: twice that share, plus some slack."""
    return min(n_local, 2 * math.ceil(2.0 * h * n_local / max(n, 1)) + 4096)


def _first_round(values: _Values, edges: list[int], n: int, h: float, comm: _Comm) -> tuple[_Values | None, list[int]]:
    """The search's first count round over the fit's interval [edges[0], edges[-1]), in one read
    of the weights that keeps only the values inside it (about 5% of them at density 0.5 and the
    default margin) and counts those above it; the bins are
    then counted in what was kept. Returns the kept values and the same global counts as
    ``_count_ge(values, edges, comm)`` (the same all-reduce). A rank whose guess of the room was
    short compacts again with the exact count (one more read, no communication). (A None in
    place of the kept values would make the search stream the whole input on, as it did before
    this round kept anything: ``scripts/probes/gpu_probe_gaussian_pivot.py`` times both.)"""
    kept, inside, above = values.compact_count(edges[0], edges[-1], _first_cap(values.numel(), n, h))
    if kept is None:
        kept = values.compact_between(edges[0], edges[-1], inside)
    hist = _local_bins(kept, edges)
    hist[-1] += above
    return kept, _ge_of_bins(hist, comm)


def _gaussian(
    flats: list[torch.Tensor], density: float, comm: _Comm, bins: int, max_candidates: int, margin: float
) -> PivotResult:
    device = flats[0].device
    values = _Values(flats)
    sums = torch.zeros(2, dtype=torch.float64, device=device)
    triton_sums = _triton_passes(flats[0])
    for c in values.chunks(raw=True):  # float64 accumulation (squares of float32 cannot overflow there)
        if triton_sums:  # one read, no float64 copy
            sums += abs_sums_triton(c)
        else:
            norms = [torch.linalg.vector_norm(c, p, dtype=torch.float64) for p in (1, 2)]
            sums += torch.stack([norms[0], norms[1].square()])
    n_local = torch.tensor([float(sum(t.numel() for t in flats))], dtype=torch.float64, device=device)
    n_f, s1, s2 = comm.all_reduce(torch.cat([n_local, sums])).tolist()
    n = int(n_f)
    _check_global(n, 0 if math.isfinite(s1) and math.isfinite(s2) else 1)
    k = _k(density, n)
    if k == 0:
        return PivotResult(math.inf, 0, n, "gaussian", comm.rounds, comm.bytes, 0)
    sigma = math.sqrt(s2 / n)
    if sigma == 0.0:  # every |w| is 0
        return PivotResult(0.0, k, n, "gaussian", comm.rounds, comm.bytes, 0)

    # invariant: #(|w| >= lo) = c_lo >= k > c_hi = #(|w| >= hi); lo, hi float32 bit patterns
    lo, c_lo, hi, c_hi = 0, n, _INF_BITS, 0
    spread = k * (n - k) / n  # variance of the count above a fixed threshold
    h = margin * spread + 4.0 * math.sqrt(spread) + 2.0
    a = _f32_bits(_hn_isf(min(k + h, n) / n, sigma))
    b = _f32_bits(_hn_isf(max(k - h, 0.0) / n, sigma))
    edges = _gauss_edges(a, b, bins, sigma) if b > a else None
    work_n, offset = n, 0  # values streamed; values above them (dropped by a compaction)
    # the first round keeps the fit's interval while it counts (where that is a small share)
    first = edges is not None and 2.0 * h <= n / 4
    for _ in range(_MAX_ROUNDS):
        inside = c_lo - c_hi
        if inside <= max_candidates:
            return _gather_select(values, lo, hi, inside, k - c_hi, k, n, comm)
        if hi - lo == 1:  # one float32 value left: it is the pivot
            return PivotResult(_bits_f32(lo), k, n, "gaussian", comm.rounds, comm.bytes, 0)
        if edges is None:
            edges = _bit_edges(lo, hi, bins)
        width = hi - lo
        if first:
            kept, ge = _first_round(values, edges, n, h, comm)
            if kept is not None and ge[0] >= k > ge[-1]:  # the pivot lies in the kept interval
                values, work_n, offset = kept, ge[0] - ge[-1], ge[-1]
                ge = [c - offset for c in ge]
            first = False
        else:
            ge = _count_ge(values, edges, comm)
        for e, c_work in zip(edges, ge, strict=True):
            c = c_work + offset
            if c >= k and e > lo:
                lo, c_lo = e, c
            if c < k and e < hi:
                hi, c_hi = e, c
        if c_lo - c_hi <= work_n // 4:  # stream only the interval from now on
            values = values.compact_between(lo, hi, c_lo - c_hi)
            work_n, offset = c_lo - c_hi, c_hi
        # the next split: by the fit, unless this round failed to halve the interval
        edges = _gauss_edges(lo, hi, bins, sigma) if 2 * (hi - lo) <= width else None
    raise RuntimeError("gaussian pivot search did not converge (please report: this is a bug)")


def _gather_select(
    values: _Values, lo: int, hi: int, inside: int, rank: int, k: int, n: int, comm: _Comm
) -> PivotResult:
    """All-gather the ``inside`` values in [lo, hi) (padded to ``inside`` per rank) and take the
    ``rank``-th largest of them."""
    local = values.compact_between(lo, hi, inside).flats[0]
    if local.numel() > inside:
        raise RuntimeError("pivot search: local candidates exceed the global count (ranks disagree?)")
    send = torch.full((inside,), -1.0, dtype=torch.float32, device=local.device)
    send[: local.numel()] = local
    got = comm.all_gather(send)
    cand = got[got >= 0]
    if cand.numel() != inside:
        raise RuntimeError("pivot search: gathered candidates do not match the counts (ranks disagree?)")
    pivot = _kth_largest_torch(cand, rank)
    return PivotResult(pivot, k, n, "gaussian", comm.rounds, comm.bytes, inside)


# ----------------------------------------------------------------------------- validation, API


def _k(density: float, n: int) -> int:
    return min(n, max(0, int(round(density * n))))


def _check_global(n: int, nonfinite: int) -> None:
    if nonfinite:
        raise ValueError("weights contain NaN or Inf; refusing to compute a pivot on non-finite values")
    if n == 0:
        raise ValueError("no weights: the input is empty on every rank")


def _flatten(tensors: object, group: object | None, check_finite: bool) -> list[torch.Tensor]:
    if isinstance(tensors, torch.Tensor):
        seq = [tensors]
    elif isinstance(tensors, Iterable) and not isinstance(tensors, (str, bytes)):
        seq = list(tensors)
    else:
        raise TypeError(f"tensors must be a Tensor or a sequence of Tensors, got {type(tensors).__name__}")
    if len(seq) == 0:
        raise ValueError("tensors is empty: give at least one tensor")
    for i, t in enumerate(seq):
        # single process: check finiteness here; distributed: counted and all-reduced by the
        # method's first step, so that every rank raises (none is left waiting in a collective)
        check_tensor(f"tensors[{i}]", t, dtypes=FLOAT_DTYPES, finite=check_finite and group is None)
    check_same_device(**{f"tensors[{i}]": t for i, t in enumerate(seq)})
    flats = [t.detach().reshape(-1) for t in seq]
    if group is None and sum(t.numel() for t in flats) == 0:
        raise ValueError("no weights: every tensor is empty")
    return flats


def _check_density(density: object) -> None:
    ok = isinstance(density, numbers.Real) and not isinstance(density, bool)
    if not ok or not 0.0 <= float(density) <= 1.0:  # NaN fails the comparison
        raise ValueError(f"density must be a real number in [0, 1], got {density!r}")


def _check_args(density: object, method: str, opts: dict) -> None:
    _check_density(density)
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; known: {', '.join(METHODS)}")
    unknown = set(opts) - _OPTIONS[method]
    if unknown:
        raise TypeError(f"method {method!r} takes options {sorted(_OPTIONS[method])}, got {sorted(unknown)}")
    for name, lo_ in (("bits", 1), ("bins", 2), ("max_candidates", 1)):
        v = opts.get(name)
        if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < lo_ or (name == "bits" and v > 16)):
            hi_ = "16" if name == "bits" else "inf"
            raise ValueError(f"{name} must be an int in [{lo_}, {hi_}], got {v!r}")
    m = opts.get("margin")
    if m is not None and (not isinstance(m, numbers.Real) or not 0.0 <= float(m) < math.inf):
        raise ValueError(f"margin must be a finite real >= 0, got {m!r}")


def find_pivot_stats(
    tensors: torch.Tensor | Sequence[torch.Tensor],
    density: float,
    method: str = "exact",
    group: dist.ProcessGroup | None = None,
    **opts: object,
) -> PivotResult:
    """The k-th largest |w| over ``tensors`` on every rank of ``group`` (k = round(density * n)),
    with its communication cost.

    ``tensors``: this rank's shards (any shapes; fp16/bf16/fp32; one device). ``group``: a
    ``torch.distributed`` process group (every rank calls with its own shards and gets the same
    pivot), or None for a single process. Options: ``check_finite`` (all, default True; the
    gaussian and radix (bits >= 8) methods detect NaN/Inf from their first step anyway),
    ``bits`` (radix, default 8: 4 passes; 16: 2 passes), ``bins`` (gaussian, default 64),
    ``max_candidates`` (gaussian, default 4096), ``margin`` (gaussian, default 0.1: half-width
    of the first interval, as a fraction of the count variance k(n-k)/n, plus 4 standard
    deviations of sampling noise).

    ``rounds`` = collective steps; ``bytes_communicated`` = sum over steps of the bytes each rank
    ends up holding (all_reduce: the buffer; all_gather: world x per-rank buffer); 0 bytes
    without a group. Raises ValueError (density outside [0, 1] or NaN, NaN/Inf weights, empty
    input, unknown method or bad option value) or TypeError (not tensors, unsupported dtype,
    unknown option).
    """
    _check_args(density, method, opts)
    if group is not None and not (dist.is_available() and isinstance(group, dist.ProcessGroup)):
        raise TypeError(f"group must be a torch.distributed ProcessGroup or None, got {type(group).__name__}")
    check_finite = bool(opts.get("check_finite", True))
    flats = _flatten(tensors, group, check_finite)
    comm = _Comm(group)
    density = float(density)
    with torch.no_grad():
        if method == "exact":
            return _exact(flats, density, comm, check_finite)
        if method == "radix":
            return _radix(flats, density, comm, int(opts.get("bits", 8)), check_finite)
        return _gaussian(
            flats,
            density,
            comm,
            int(opts.get("bins", 64)),
            int(opts.get("max_candidates", 4096)),
            float(opts.get("margin", 0.1)),
        )


def find_pivot(
    tensors: torch.Tensor | Sequence[torch.Tensor],
    density: float,
    method: str = "exact",
    group: dist.ProcessGroup | None = None,
    **opts: object,
) -> float:
    """The pivot of :func:`find_pivot_stats` (keep ``|w| >= pivot``); +inf when k == 0."""
    return find_pivot_stats(tensors, density, method, group, **opts).pivot


def _check_16bit(tensors: torch.Tensor | Sequence[torch.Tensor], density: float) -> tuple[list[torch.Tensor], int]:
    ts = [tensors] if isinstance(tensors, torch.Tensor) else list(tensors)
    if not ts or any(not isinstance(t, torch.Tensor) or t.dtype not in (torch.bfloat16, torch.float16) for t in ts):
        raise TypeError("pivot_and_tie_16bit needs bf16 or fp16 tensors")
    if len({t.dtype for t in ts}) != 1:
        raise TypeError("all tensors must share one dtype")
    if len({t.device for t in ts}) != 1:
        raise ValueError(f"all tensors must be on one device, got {sorted({str(t.device) for t in ts})}")
    _check_density(density)  # float() took "0.5" and True here before
    n = sum(t.numel() for t in ts)
    k = round(float(density) * n)
    if k == 0 and any(t.numel() and not bool(torch.isfinite(t).all()) for t in ts):
        # no pass runs to count them, but the contract (raise on NaN/Inf) holds at density 0 too
        raise ValueError("weights contain NaN or Inf; refusing to compute a pivot on non-finite values")
    return ts, k


def _nonfinite_from_high(hi: list[int], dtype: torch.dtype) -> int:
    """Values whose magnitude bits are Inf or NaN, from the 256 high-byte counts."""
    first = 0x7F80 >> 7 if dtype == torch.bfloat16 else 0x7C00 >> 7
    return sum(hi[first:])


def _select_from_counts(hi: list[int], lo: list[int], k: int, dtype: torch.dtype) -> tuple[float, float]:
    if _nonfinite_from_high(hi, dtype):
        raise ValueError("weights contain NaN or Inf; refusing to compute a pivot on non-finite values")
    above = 0
    for bucket in range(255, -1, -1):
        if above + hi[bucket] >= k:
            break
        above += hi[bucket]
    for low in range(127, -1, -1):
        if above + lo[low] >= k:
            break
        above += lo[low]
    eq, gt = lo[low], above
    bits = torch.tensor([(bucket << 7) | low], dtype=torch.int16)
    pivot = float(bits.view(dtype).float().item())
    return pivot, min(1.0, max(0.0, (k - gt) / eq))


def pivot_and_tie_16bit(tensors: torch.Tensor | Sequence[torch.Tensor], density: float) -> tuple[float, float]:
    """Exact pivot and tie share of 16-bit weights (bf16 or fp16) in one process, in two passes.

    A non-negative 16-bit float orders like its 15 magnitude bits, so the k-th largest |w| is found
    by a 256-bin histogram of the high 8 bits, then a 128-bin histogram of the low 7 bits inside the
    bucket that holds rank k: no sort, two reads of the weights, one host sync (the 384 counts). The
    final bin also gives #(|w| > pivot) and #(|w| == pivot), hence the tie share that makes a budget
    exact (``kernels.ops.flex.tie_share``) without another pass. Non-finite weights are counted for free
    by the first pass and raise. Triton kernels (``kernels.ops._pivot_triton``) on CUDA and under the
    interpreter; ``pivot_and_tie_16bit_reference`` (``torch.bincount``) elsewhere.
    Returns (pivot, tie share)."""
    ts, k = _check_16bit(tensors, density)
    if k == 0:
        return math.inf, 1.0
    if not use_triton(ts[0]):
        return pivot_and_tie_16bit_reference(ts, density)
    from kernels.ops._pivot_triton import hist16_counts

    counts = hist16_counts(ts, k).tolist()
    return _select_from_counts(counts[:256], counts[256:384], k, ts[0].dtype)


def pivot_and_tie_16bit_reference(
    tensors: torch.Tensor | Sequence[torch.Tensor], density: float
) -> tuple[float, float]:
    """``pivot_and_tie_16bit`` in plain PyTorch (``torch.bincount``): the reference of the kernel."""
    ts, k = _check_16bit(tensors, density)
    if k == 0:
        return math.inf, 1.0

    def mags(t: torch.Tensor) -> torch.Tensor:
        return t.reshape(-1).view(torch.int16).to(torch.int32) & 0x7FFF

    hi = sum(torch.bincount(mags(t) >> 7, minlength=256).cpu() for t in ts)
    above = 0
    for bucket in range(255, -1, -1):
        if above + int(hi[bucket]) >= k:
            break
        above += int(hi[bucket])
    lo = torch.zeros(128, dtype=torch.int64)
    for t in ts:
        m = mags(t)
        lo += torch.bincount(m[(m >> 7) == bucket] & 0x7F, minlength=128).cpu()
    return _select_from_counts(hi.tolist(), lo.tolist(), k, ts[0].dtype)
