"""Tensor-parallel masked training step of a Llama model on PyTorch's distributed engine (FAST
Fig. 3, end to end): DTensor tensor parallelism, FSDP2 for a data-parallel dimension, flex-SS
masks made on each rank's shard with the pivot found over the ranks that hold the pieces.

Why this exists: FAST's end-to-end claim (10.40x / 1.56x over the PyTorch implementation and the
Vegeta-based method, MAP-NEO 7B "under model parallelism") is about a training step in which every
rank holds only a shard of each weight, so the global pivot needs communication. The step here is
what a PyTorch user writes for that setting, and every mask method runs in it in its own way.

Layout (the same code at world 1 and N; world from ``torchrun``):

- ``build_mesh``: a 2-D ``DeviceMesh`` ("dp", "tp"); tp defaults to the world size.
- ``parallelize_llama``: per block, ``parallelize_module`` with ``ColwiseParallel`` for q, k, v,
  gate, up and ``RowwiseParallel`` for o, down (Megatron's MLP/attention split: one all-reduce
  after o and one after down in the forward; in the backward each column-wise layer all-reduces
  its own input gradient, five a block, in float32 since RMSNorm's output is float32 under
  autocast: one per module was slower, ``results/tuning/h100x2_probe_tp_allreduces.txt``); a rank then holds
  heads / tp heads (``repro.models.llama.Attention`` reads the local head count from its input).
  Embedding, norms and the output projection stay replicated plain tensors. With dp > 1 every
  block and then the model get FSDP2's ``fully_shard`` on the "dp" sub-mesh.
- Masks: every sparse linear's local piece (``weight.to_local()``). Methods (``MASK_METHODS``):
  ``dense`` (no masks), ``srste`` (SR-STE's 2:4 by magnitude: per-shard, no pivot),
  ``torch`` / ``vegeta`` (the strong PyTorch baselines of ``kernels.ops.flex_torch``; the pivot
  as a PyTorch user finds it over a process group: all-gather every rank's |w| and take the top-k
  with the tie share as ``kernels.ops.flex_torch.pivot_and_tie`` does, its counts taken in chunks:
  ``gathered_pivot_and_tie``), and ``fast`` (the pivot without
  gathering any weights: by default the paper's distribution-aware search,
  ``kernels.ops.pivot.find_pivot_stats(method="gaussian")``, whose rounds are decided on the host
  (59-65 ms per regeneration at 460M and 178-180 ms at 7B-cut6 world 1 on an H100, against 16 and
  78 ms for the gathered top-k, campaign 85d52d1), then one
  all-reduce of the two tie counts; ``fast_pivot="radix"``: ``kernels.ops.pivot_radix.RadixPivot``,
  an exact four-pass radix select on the device whose 2 KiB digit histograms are all-reduced over
  the group, one host read of the result; then ``kernels.ops.flex.flex_mask``: the fused Triton
  kernel on a GPU, the reference elsewhere). The pivot group is every rank holding a
  distinct piece of the weights: the TP group, or the whole world when FSDP also shards (dp > 1).
- Masks act as in SR-STE's and FAST's training, with a straight-through estimator: the weights
  stay dense; every step the local pieces are masked for the forward and backward (their dense
  values saved first and put back after), the optimizer updates the dense weights with the
  gradient taken at the masked ones, and a regeneration reads the dense weights. Keeping the
  pruned half at 0 instead (as an earlier version did) makes a regeneration at the same density
  return the same kept set, and puts a spike at 0 under FAST's Gaussian fit (8 rounds of its
  pivot search instead of 4: ``results/tuning/cpu_probe_gaussian_rounds.txt``). Plain STE for
  every method (SR-STE's decay of the pruned weights is not modelled: one more elementwise pass).
  Regenerated every ``every`` steps (the paper does not state its interval; Fig. 3's one-GPU
  training step in ``suites/figure3.py`` uses 1 and 10, and SR-STE regenerates every step).

Step time is split into ``pivot`` (the pivot search with its collectives and the local passes
they need, the tie counts included), ``mask`` (local mask generation given the pivot, and every
step saving the dense pieces and masking them), ``fwd_bwd`` (forward and backward, the TP and
FSDP collectives inside them) and ``optimizer`` (putting the dense values back, AdamW step,
zero_grad): CUDA events on a GPU,
``perf_counter`` on the CPU; the mean per step over the timed steps (regeneration amortised),
the slowest rank's per part (every part ends with a 1-element all-reduce over the world, so that
no rank's wait for a slower one is timed in the next part). The forward and backward are the same
dense GEMMs for every method
(masked weights, no sparse GEMM): methods differ in the mask and pivot parts only.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.tensor import DTensor
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

from kernels.ops.flex import flex_mask, flex_mask_reference, needs_pivot, tie_share
from kernels.ops.flex_torch import compiled_masks_of_weight, masks_of_weight, recompile_limit, regular_table
from kernels.ops.nm_mask import nm_mask, nm_mask_reference
from kernels.ops.patterns import NM, TBS, Pattern, parse_pattern
from kernels.ops.pivot import above_and_at_triton, find_pivot, find_pivot_stats, kth_largest
from kernels.ops.pivot_radix import RadixPivot
from repro.dist_guard import init_distributed  # re-exported: the suite joins the group through it
from repro.models.llama import LlamaModel, sparse_linears

__all__ = [
    "MASK_METHODS",
    "FAST_PIVOTS",
    "PARTS",
    "DTensorAdamW",
    "DistEnv",
    "ShardAdamW",
    "ShardMasker",
    "TPTrainer",
    "build_mesh",
    "dist_env",
    "check_masks",
    "count_above_and_at",
    "full_masks",
    "gather_check_masks",
    "gathered_pivot_and_tie",
    "init_distributed",
    "parallelize_llama",
    "pivot_group",
    "reference_masks",
]

MASK_METHODS = ("dense", "srste", "torch", "vegeta", "fast")
FAST_PIVOTS = ("gaussian", "radix")
"""How ``fast`` finds its pivot over the group (``ShardMasker``): the paper's distribution-aware
search (host-decided rounds; the default), or the device radix select."""
PARTS = ("fwd_bwd", "mask", "pivot", "optimizer")
SRSTE = NM(2, 4)
SEED = 1234
COLWISE = ("attn.q", "attn.k", "attn.v", "ffn.gate", "ffn.up")
ROWWISE = ("attn.o", "ffn.down")


@dataclass(frozen=True)
class DistEnv:
    """This process's place in a ``torchrun`` launch (rank 0 of 1 without one)."""

    rank: int
    world: int
    local_rank: int


def dist_env() -> DistEnv:
    """RANK, WORLD_SIZE, LOCAL_RANK from the environment torchrun sets (0, 1, 0 without it)."""
    return DistEnv(
        int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1")), int(os.environ.get("LOCAL_RANK", "0"))
    )


def build_mesh(device: torch.device, tp: int | None = None) -> DeviceMesh:
    """The ("dp", "tp") mesh over the default group: tp ranks per tensor-parallel group
    (default: all), dp = world / tp data-parallel replicas (sharded by FSDP2)."""
    world = dist.get_world_size()
    tp = world if tp is None else tp
    if tp < 1 or world % tp:
        raise ValueError(f"tensor-parallel size {tp} must divide the world size {world}")
    return init_device_mesh(device.type, (world // tp, tp), mesh_dim_names=("dp", "tp"))


def parallelize_llama(model: LlamaModel, mesh: DeviceMesh, *, compile_blocks: bool = False) -> LlamaModel:
    """Shard ``model`` in place over ``mesh``: column/row-wise TP plans for every block's
    attention and MLP projections on "tp" when it has more than one rank (at tp 1 the weights
    stay plain tensors: DTensor's dispatch costs host time on every op and one rank gains nothing
    from it), FSDP2 on "dp" when it has more than one rank.

    ``compile_blocks``: each block ``torch.compile``d (fullgraph) after the TP plan and before
    FSDP2, as torchtitan composes them: the fastest step a PyTorch user runs, and the one whose
    host time does not grow with the TP collectives (eager DTensor dispatch made the world-4 460M
    step 2.6x the world-1 one, 296 vs 113 ms forward+backward, campaign 324330c). The blocks'
    parameters keep their objects (the masks act on them in place); their names gain
    ``_orig_mod``."""
    tp = mesh["tp"].size()
    cfg = model.cfg
    if cfg.heads % tp or cfg.ffn % tp:
        raise ValueError(f"heads ({cfg.heads}) and FFN ({cfg.ffn}) must be divisible by the TP size {tp}")
    plan = {name: ColwiseParallel() for name in COLWISE} | {name: RowwiseParallel() for name in ROWWISE}
    if tp > 1:
        for block in model.layers:
            parallelize_module(block, mesh["tp"], plan)
    if compile_blocks:
        for i, block in enumerate(model.layers):
            model.layers[i] = torch.compile(block, fullgraph=True)
    model.compiled_blocks = compile_blocks  # read by TPTrainer (recompile limit) and the suite's rows
    if mesh["dp"].size() > 1:
        from torch.distributed.fsdp import fully_shard

        for block in model.layers:
            fully_shard(block, mesh=mesh["dp"])
        fully_shard(model, mesh=mesh["dp"])
    return model


def pivot_group(mesh: DeviceMesh) -> dist.ProcessGroup | None:
    """The ranks holding distinct pieces of every sparse weight: the TP group, or the whole world
    when FSDP shards over dp too; None for a single rank (no collective at all)."""
    if mesh.size() == 1:
        return None
    return mesh["tp"].get_group() if mesh["dp"].size() == 1 else dist.group.WORLD


def local_piece(w: torch.Tensor) -> torch.Tensor:
    """This rank's piece of a (possibly DTensor) parameter, sharing its storage."""
    return w.to_local() if isinstance(w, DTensor) else w


class ShardAdamW:
    """AdamW over every parameter's local piece (``local_piece``: a DTensor's local tensor, a plain
    tensor itself), its gradient's local piece handed over before each step: one fused (CUDA) or
    foreach call over plain tensors, the same update per element as AdamW over the DTensors.

    Why: over DTensor parameters every optimizer call goes through DTensor's dispatch (sharding
    propagation over every tensor of the fused call), host time that at MAP-NEO 460M on two H100s
    made the dense step's optimizer part 58.8 ms against 5.0 ms on one GPU
    (``results/tuning/h100x2_probe_tp_dense_step.txt``). A gradient whose placements differ from
    its parameter's (a partial sum) is redistributed to the parameter's placements first."""

    def __init__(self, params: list[nn.Parameter], lr: float, fused: bool) -> None:
        self.params = list(params)
        with torch.no_grad():
            self.pieces = [local_piece(p) for p in self.params]
        self.optimizer = torch.optim.AdamW(self.pieces, lr=lr, fused=fused, foreach=None if fused else True)

    @torch.no_grad()
    def step(self) -> None:
        for p, piece in zip(self.params, self.pieces, strict=True):
            g = p.grad
            if isinstance(g, DTensor):
                if g.placements != p.placements:
                    g = g.redistribute(p.device_mesh, p.placements)
                g = g.to_local()
            if piece is not p:
                piece.grad = g
        self.optimizer.step()

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p, piece in zip(self.params, self.pieces, strict=True):
            if piece is not p:
                piece.grad = None
        for p in self.params:
            if set_to_none:
                p.grad = None
            elif p.grad is not None:
                p.grad.zero_()


class DTensorAdamW:
    """torch's AdamW over the parameters as they are, one optimizer per kind (DTensors of one mesh,
    plain tensors: one foreach or fused call may not mix them): ``TPTrainer``'s optimizer before
    ``ShardAdamW``, kept as the reference the tests compare it with and the probe times it against."""

    def __init__(self, params: list[nn.Parameter], lr: float, fused: bool) -> None:
        kinds: dict[object, list[nn.Parameter]] = {}
        for p in params:
            kinds.setdefault(p.device_mesh if isinstance(p, DTensor) else None, []).append(p)
        self.optimizers = [
            torch.optim.AdamW(ps, lr=lr, fused=fused, foreach=None if fused else True) for ps in kinds.values()
        ]

    def step(self) -> None:
        for opt in self.optimizers:
            opt.step()

    def zero_grad(self, set_to_none: bool = True) -> None:
        for opt in self.optimizers:
            opt.zero_grad(set_to_none=set_to_none)


def fast_seed(rank: int, index: int) -> int:
    """The draws of FAST for weight ``index`` on pivot-group rank ``rank`` (distinct per piece)."""
    return SEED + 7919 * rank + index


COUNT_CHUNK = 1 << 27
"""Entries compared per pass in ``count_above_and_at``: a bool tensor is summed through an int64
copy (8 B an entry), so the counts over 7B-cut17's gathered magnitudes at world 4 (4.5e9 entries)
asked for 33.5 GiB at once (campaign 85d52d1); per chunk of 2^27 it is 1 GiB."""


def count_above_and_at(tensors: list[torch.Tensor], pivot: float | torch.Tensor) -> torch.Tensor:
    """int64 device tensor [above, at]: entries of ``|t|`` (float32) above ``pivot`` and equal to
    it over ``tensors``, in chunks of ``COUNT_CHUNK`` entries (memory O(chunk), not O(entries))."""
    counts = torch.zeros(2, dtype=torch.int64, device=tensors[0].device)
    for t in tensors:
        for c in t.reshape(-1).split(COUNT_CHUNK):
            a = c.abs().float()
            counts += torch.stack([(a > pivot).sum(), (a == pivot).sum()])
    return counts


def gathered_pivot_and_tie(mags: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``kernels.ops.flex_torch.pivot_and_tie([mags], k)`` (the baselines' top-k pivot and tie
    share over the gathered |w|, 0-dim float32 device tensors; the same values), with the counts
    taken by ``count_above_and_at`` so that they need no int64 copy of every entry."""
    if k == 0:
        inf = torch.full((), float("inf"), dtype=torch.float32, device=mags.device)
        return inf, torch.ones((), dtype=torch.float32, device=mags.device)
    pivot = kth_largest(mags, k)  # torch.topk, or a histogram select where its k overflows
    gt, eq = count_above_and_at([mags], pivot).unbind()
    share = ((k - gt).double() / eq.clamp(min=1).double()).clamp(0.0, 1.0)
    share = torch.where(eq > 0, share, torch.ones_like(share))
    return pivot, share.float()


def _all_gather(out: torch.Tensor, t: torch.Tensor, group: dist.ProcessGroup) -> None:
    """Every rank's equal-sized ``t`` into ``out`` (rank order), by the name this torch has."""
    gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    gather(out, t, group=group)


def _now(device: torch.device) -> object:
    if device.type == "cuda":
        e = torch.cuda.Event(enable_timing=True)
        e.record()
        return e
    return time.perf_counter()


def _elapsed_ms(a: object, b: object) -> float:
    if isinstance(a, float):
        return (b - a) * 1e3  # type: ignore[operator]
    return a.elapsed_time(b)  # type: ignore[union-attr]


class ShardMasker:
    """Masks of the local pieces of every sparse linear, by one method, with the pivot found over
    ``group`` in that method's own way. Set up once; ``pivot()`` then ``masks(pivot, tie)``."""

    def __init__(
        self,
        weights: list[torch.Tensor],
        method: str,
        pattern: Pattern | None,
        density: float,
        group: dist.ProcessGroup | None,
        *,
        compile: bool = False,
        fast_pivot: str = "gaussian",
    ) -> None:
        if method not in MASK_METHODS or method == "dense":
            raise ValueError(f"method must be one of {MASK_METHODS[1:]}, got {method!r}")
        self.method = method
        self.pattern = SRSTE if method == "srste" else pattern
        if self.pattern is None:
            raise ValueError(f"method {method!r} needs a pattern")
        self.density = float(density)
        self.group = group
        self.rank = 0 if group is None else dist.get_rank(group)
        self.world = 1 if group is None else dist.get_world_size(group)
        self.pieces = [local_piece(w).detach() for w in weights]
        for i, p in enumerate(self.pieces):
            if not p.is_contiguous():
                raise ValueError(f"piece {i} of the sparse weights is not contiguous")
            self.pattern.check_shape(tuple(p.shape))
        n_local = sum(p.numel() for p in self.pieces)
        self.k = round(self.density * n_local * self.world)  # equal pieces on every rank (checked below)
        if group is not None:
            sizes = torch.tensor([n_local], dtype=torch.int64, device=self.pieces[0].device)
            gathered = torch.zeros(self.world, dtype=torch.int64, device=sizes.device)
            _all_gather(gathered, sizes, group)
            if len(set(gathered.tolist())) != 1:
                raise ValueError(f"ranks hold pieces of different sizes {gathered.tolist()}: shard evenly")
        device = self.pieces[0].device
        self.configs = torch.tensor(self.pattern.configs, dtype=torch.float32, device=device)
        small_tbs = isinstance(self.pattern, TBS) and self.pattern.x <= 4
        self.table = regular_table(self.pattern.x, device) if small_tbs else None
        self._mask_fn: Callable = masks_of_weight
        self.compiled = compile and method in ("torch", "vegeta")
        if self.compiled:
            self._mask_fn = compiled_masks_of_weight(self.pattern, self.pieces)
        self.seeds = [fast_seed(self.rank, i) for i in range(len(self.pieces))]
        if fast_pivot not in FAST_PIVOTS:
            raise ValueError(f"fast_pivot must be one of {FAST_PIVOTS}, got {fast_pivot!r}")
        self.fast_pivot = fast_pivot
        use_radix = method == "fast" and fast_pivot == "radix" and self.needs_pivot
        self._radix = RadixPivot(self.pieces, self.density, group) if use_radix else None

    @property
    def needs_pivot(self) -> bool:
        return needs_pivot(self.pattern)

    def pivot(self) -> tuple[float | torch.Tensor, float | torch.Tensor]:
        """(pivot, tie share) over the group: device tensors for the baselines, floats for FAST."""
        if not self.needs_pivot:
            return 0.0, 1.0
        if self._radix is not None:
            self._radix.pivot()
            return self._radix.read()  # one host read; NaN/Inf on any rank raises on every rank
        if self.method == "fast":
            # one buffer of the pieces for the search and the counts: fed the pieces themselves
            # (168 at 460M) the search cast and joined them again in every round and the counts
            # took seven launches a piece (65 ms a regeneration on an H100, mostly host launches:
            # results/tuning/h100_probe_gaussian_pivot.txt); the same multiset, so the same pivot.
            # Signed: the search's passes and the counts take |w| as they read (Triton on CUDA)
            flat = torch.cat([w.reshape(-1) for w in self.pieces])
            p = find_pivot_stats([flat], self.density, "gaussian", self.group, check_finite=False).pivot
            counts = above_and_at_triton(flat, p) if flat.is_cuda else count_above_and_at([flat], p)
            del flat
            if self.group is not None:
                dist.all_reduce(counts, group=self.group)
            gt, eq = counts.tolist()
            return p, 1.0 if eq == 0 else min(1.0, max(0.0, (self.k - gt) / eq))
        mags = torch.cat([w.reshape(-1) for w in self.pieces]).abs()
        if self.group is not None:  # what a PyTorch user does: gather every rank's |w|
            out = torch.empty(self.world * mags.numel(), dtype=mags.dtype, device=mags.device)
            _all_gather(out, mags, self.group)
            mags = out
        return gathered_pivot_and_tie(mags, self.k)

    def masks(self, pivot: float | torch.Tensor, tie: float | torch.Tensor) -> list[torch.Tensor]:
        """The local pieces' masks given the group's pivot and tie share."""
        if self.method == "srste":
            return [nm_mask(w, 2, 4, check_finite=False) for w in self.pieces]
        if self.method == "fast":
            return [
                flex_mask(w, self.pattern, self.density, "fast", s, float(pivot), tie=float(tie), check_finite=False)
                for w, s in zip(self.pieces, self.seeds, strict=True)
            ]
        # every (piece shape, pattern, method) is its own static graph (TBS(x >= 8): one for every shape)
        with recompile_limit(1024) if self.compiled else contextlib.nullcontext():
            return [
                self._mask_fn(w, self.pattern, self.method, self.configs, pivot, tie, self.table) for w in self.pieces
            ]


class TPTrainer:
    """Masked training of a parallelized Llama model: masks regenerated every ``every`` steps on
    the local pieces, step time split into ``PARTS``. ``method="dense"`` trains without masks."""

    def __init__(
        self,
        model: LlamaModel,
        mesh: DeviceMesh,
        method: str,
        pattern: Pattern | str | None,
        every: int,
        *,
        density: float = 0.5,
        lr: float = 1e-4,
        autocast: bool | None = None,
        compile_baselines: bool = False,
        fast_pivot: str = "gaussian",
    ) -> None:
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise ValueError(f"every (mask refresh interval) must be an int >= 1, got {every!r}")
        self.model, self.mesh, self.method, self.every = model, mesh, method, every
        self.linears = sparse_linears(model)
        self.weights = [lin.weight for lin in self.linears.values()]
        self.device = local_piece(self.weights[0]).device
        self.autocast = self.device.type == "cuda" if autocast is None else bool(autocast)
        self.group = pivot_group(mesh)
        pat = parse_pattern(pattern) if isinstance(pattern, str) else pattern
        self.masker = (
            None
            if method == "dense"
            else ShardMasker(
                self.weights, method, pat, density, self.group, compile=compile_baselines, fast_pivot=fast_pivot
            )
        )
        # AdamW on the local pieces (ShardAdamW: no DTensor dispatch in the optimizer)
        params = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = ShardAdamW(params, lr=lr, fused=self.device.type == "cuda")
        self.masks: list[torch.Tensor] | None = None
        self._dense: list[torch.Tensor] | None = None  # the dense pieces while the masked ones run
        self.step_index = 0
        self._marks: list[tuple[bool, list[object]]] = []
        several = dist.is_initialized() and dist.get_world_size() > 1
        self._align_buf = torch.zeros(1, device=self.device) if several else None

    def _align(self) -> None:
        """End a timed part on every rank together: a 1-element all-reduce over the world. Without
        it a rank that finishes its masks early waits for the slowest one inside the forward's
        first TP collective, so that wait is timed as its forward+backward, and the per-part
        maxima over ranks add up to more than the step (campaign 85d52d1, 460M at world 4: torch
        TBS(8) reported fwd_bwd 620 ms against dense's 109, on top of its 2677 ms of masks). One
        tiny collective per part (tens of microseconds); nothing in one process."""
        if self._align_buf is not None:
            dist.all_reduce(self._align_buf)

    @torch.no_grad()
    def mask_weights(self) -> None:
        """Save every local piece's dense values and mask the piece (for one forward and backward;
        :meth:`unmask_weights` puts the dense values back). Nothing without masks."""
        if self.masks is None:
            return
        pieces = [local_piece(w) for w in self.weights]
        if self._dense is None:
            self._dense = [torch.empty_like(p) for p in pieces]
        for p, d, m in zip(pieces, self._dense, self.masks, strict=True):
            d.copy_(p)
            p.mul_(m)

    @torch.no_grad()
    def unmask_weights(self) -> None:
        """Put the dense values saved by :meth:`mask_weights` back (the straight-through step:
        the gradients stay those taken at the masked weights)."""
        if self.masks is None:
            return
        assert self._dense is not None, "unmask_weights without mask_weights"
        for w, d in zip(self.weights, self._dense, strict=True):
            local_piece(w).copy_(d)

    @torch.no_grad()
    def regenerate(self) -> tuple[object, object]:
        """New masks from the current (dense) weights; returns the timing marks after the pivot
        and after the masks."""
        assert self.masker is not None
        pivot, tie = self.masker.pivot()
        self._align()
        t_pivot = _now(self.device)
        self.masks = self.masker.masks(pivot, tie)
        return t_pivot, _now(self.device)

    def _loss_and_backward(self, tokens: torch.Tensor) -> torch.Tensor:
        # compiled blocks: every model built in one process (one per method and pattern) may add
        # a compiled variant of the same block code; past dynamo's default 8 it would run eager
        compiled = getattr(self.model, "compiled_blocks", False)
        with recompile_limit(1024) if compiled else contextlib.nullcontext():
            with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.autocast):
                loss = self.model.loss(tokens)
            loss.backward()
        return loss.detach()

    def forward_backward(self, tokens: torch.Tensor) -> torch.Tensor:
        """Loss (detached) of ``tokens`` at the masked weights after its backward; gradients (at
        the masked weights) left in ``.grad``, the dense weights back in place."""
        self.mask_weights()
        try:
            return self._loss_and_backward(tokens)
        finally:
            self.unmask_weights()

    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        """One training step (regeneration on schedule); the loss as a device scalar."""
        marks = [_now(self.device)]
        regen = self.masker is not None and self.step_index % self.every == 0
        if regen:
            t_pivot, _ = self.regenerate()
            marks.append(t_pivot)
        else:
            marks.append(marks[0])
        if self.masks is not None:
            self.mask_weights()
            self._align()
            marks.append(_now(self.device))
        else:
            marks.append(marks[0])
        loss = self._loss_and_backward(tokens)
        self._align()
        marks.append(_now(self.device))
        self.unmask_weights()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self._align()
        marks.append(_now(self.device))
        self._marks.append((regen, marks))
        self.step_index += 1
        return loss

    def reset_times(self) -> None:
        """Forget the marks of the steps so far (the warm-up)."""
        self._marks.clear()

    def times_ms(self) -> dict[str, float]:
        """Mean ms per step of every part over the steps since ``reset_times``, the slowest rank's
        per part (a collective over the world), plus ``step`` (their sum) and ``regenerations``."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        sums = dict.fromkeys(PARTS, 0.0)
        for _, (t0, t1, t2, t3, t4) in self._marks:
            sums["pivot"] += _elapsed_ms(t0, t1) if t1 is not t0 else 0.0
            sums["mask"] += _elapsed_ms(t1, t2) if t2 is not t0 else 0.0
            sums["fwd_bwd"] += _elapsed_ms(t2, t3)
            sums["optimizer"] += _elapsed_ms(t3, t4)
        n = max(1, len(self._marks))
        vals = torch.tensor([sums[p] / n for p in PARTS], dtype=torch.float64, device=self.device)
        if dist.is_initialized() and dist.get_world_size() > 1:
            dist.all_reduce(vals, op=dist.ReduceOp.MAX)
        out = dict(zip(PARTS, vals.tolist(), strict=True))
        out["step"] = sum(out[p] for p in PARTS)
        out["regenerations"] = float(sum(r for r, _ in self._marks))
        return out


# ----------------------------------------------------------------------------- checks


def full_masks(trainer: TPTrainer) -> list[torch.Tensor]:
    """Every sparse linear's global mask (a collective: every rank calls it), as the weights'
    DTensor layout assembles the local masks; the masks themselves where nothing is sharded."""
    assert trainer.masks is not None
    out = []
    for w, m in zip(trainer.weights, trainer.masks, strict=True):
        if isinstance(w, DTensor):
            full = DTensor.from_local(m.to(torch.uint8), w.device_mesh, w.placements, run_check=False)
            out.append(full.full_tensor().bool())
        else:
            out.append(m)
    return out


def reference_masks(
    pieces: list[list[torch.Tensor]], method: str, pattern: Pattern | None, density: float
) -> tuple[list[list[torch.Tensor]], float, float]:
    """The single-process reference of ``pieces[rank][i]`` (every rank's local pieces, gathered):
    the exact pivot and tie share of all of them together (the global weights), then each piece's
    mask by the readable reference with that pivot (FAST: the piece's own seed). Returns the
    masks, the pivot and the tie share."""
    if method == "srste":
        return [[nm_mask_reference(w, 2, 4) for w in ws] for ws in pieces], 0.0, 1.0
    assert pattern is not None
    flat = [w for ws in pieces for w in ws]
    pivot = find_pivot(flat, density, method="exact")
    tie = tie_share(flat, pivot, density)
    masks = [
        [flex_mask_reference(w, pattern, density, method, fast_seed(r, i), pivot, tie) for i, w in enumerate(ws)]
        for r, ws in enumerate(pieces)
    ]
    return masks, pivot, tie


def _agree(got: torch.Tensor, want: torch.Tensor, w: torch.Tensor, pattern: Pattern, exact: bool) -> bool:
    """Equal masks; or (fused Triton / compiled forms, whose float32 arithmetic may round a tile's
    target the other way) at most 1e-4 of the tiles with another configuration and, where the
    configuration agrees, the same kept |W| per tile (layouts whose sums tie may differ)."""
    if torch.equal(got, want):
        return True
    if exact:
        return False
    same = pattern.tile_configs(got) == pattern.tile_configs(want)
    if (~same).float().mean().item() > 1e-4:
        return False
    mags = pattern.tiles(w.abs().double())
    kept = [(mags * pattern.tiles(x)).flatten(1).sum(1)[same] for x in (got, want)]
    return bool(torch.allclose(kept[0], kept[1], rtol=1e-6, atol=0.0))


def _f32(x: float) -> float:
    """``x`` rounded to float32 (pivots and tie shares live in float32 on the device)."""
    return float(torch.tensor(x, dtype=torch.float32))


def _mask_failures(trainer: TPTrainer, rank: int, masks: list, want: list, pieces: list) -> list[str]:
    """One line per piece of ``rank`` whose mask does not agree with the reference's (``_agree``:
    equal, or within the tolerance of fused Triton / compiled forms)."""
    masker = trainer.masker
    assert masker is not None
    exact = not (masker.compiled or (masker.method == "fast" and masker.pieces[0].is_cuda))
    names = list(trainer.linears)
    return [
        f"rank {rank}: {masker.method} mask of {names[i]} differs from the reference"
        for i, (m, ref, w) in enumerate(zip(masks, want, pieces, strict=True))
        if not _agree(m, ref, w, masker.pattern, exact)
    ]


def gather_check_masks(trainer: TPTrainer, density: float = 0.5) -> list[str]:
    """Regenerate the masks once and check them against the single-process reference: every
    rank's pieces and masks are gathered on rank 0 of the pivot group (in this check only), the
    reference is made there from all pieces together, and the pivot and tie share the method
    found over the group are compared with the exact ones. Returns the failures (rank 0 of the
    group; [] elsewhere); every rank of the group must call it."""
    masker = trainer.masker
    if masker is None:
        return []
    pivot, tie = masker.pivot()
    masks = masker.masks(pivot, tie)
    pivot, tie = float(pivot), float(tie)
    group = masker.group
    if group is None:  # one process: the pieces and masks stay where they are
        got = [(masker.pieces, masks, pivot, tie)]
    else:
        mine = ([p.cpu() for p in masker.pieces], [m.cpu() for m in masks], pivot, tie)
        got = [None] * masker.world if masker.rank == 0 else None
        dist.gather_object(mine, got, dst=dist.get_global_rank(group, 0), group=group)
    if masker.rank != 0:
        return []
    device = masker.pieces[0].device
    try:  # the reference on this rank's GPU (on the CPU it took minutes per method at 460M)
        return _check_gathered(trainer, got, density, device)
    except torch.cuda.OutOfMemoryError:
        if device.type != "cuda":
            raise
        torch.cuda.empty_cache()  # all pieces of a large model do not fit beside it: the CPU then
        cpu = torch.device("cpu")
        got = [([p.to(cpu) for p in ps], [m.to(cpu) for m in ms], p_, t_) for ps, ms, p_, t_ in got]
        return _check_gathered(trainer, got, density, cpu)


def check_masks(trainer: TPTrainer, density: float = 0.5) -> list[str]:
    """``gather_check_masks``'s check without gathering the weights: regenerate the masks once;
    the method's pivot is the exact one iff #(|w| > pivot) < k <= #(|w| >= pivot) over the group
    (k = round(density * n), the two counts all-reduced), its tie share must be (k - #above) /
    #at; then every rank checks its own pieces' masks against the readable reference with that
    pivot and tie (FAST: the piece's own seed), as the gathered check does on rank 0. Gathering
    7B-cut17's pieces at world 4 pickled 18 GB through one rank and took 100 s per method
    (campaign 85d52d1); here each rank checks on its own device. Returns this rank's failures
    (the suite all-reduces the verdict); every rank of the group must call it."""
    masker = trainer.masker
    if masker is None:
        return []
    pivot, tie = masker.pivot()
    masks = masker.masks(pivot, tie)
    pivot, tie = float(pivot), float(tie)
    pieces, rank, bad = masker.pieces, masker.rank, []
    if masker.method == "srste":
        want = [nm_mask_reference(w, 2, 4) for w in pieces]
    else:
        device = pieces[0].device
        n = torch.tensor([sum(w.numel() for w in pieces)], dtype=torch.int64, device=device)
        counts = count_above_and_at(pieces, pivot)
        if masker.group is not None:
            dist.all_reduce(n, group=masker.group)
            dist.all_reduce(counts, group=masker.group)
        k = round(density * int(n))
        gt, eq = counts.tolist()
        # |w| are float32: so is the k-th largest
        exact = pivot == float("inf") if k == 0 else (gt < k <= gt + eq and _f32(pivot) == pivot)
        if not exact:
            bad.append(f"rank {rank}: pivot {pivot} is not the k-th largest |w| (k = {k}; {gt} above it, {eq} at it)")
        ref_tie = 1.0 if eq == 0 else min(1.0, max(0.0, (k - gt) / eq))
        if _f32(tie) != _f32(ref_tie):
            bad.append(f"rank {rank}: tie share {tie} != exact {ref_tie}")
        want = [
            flex_mask_reference(w, masker.pattern, density, masker.method, fast_seed(rank, i), pivot, ref_tie)
            for i, w in enumerate(pieces)
        ]
    return bad + _mask_failures(trainer, rank, masks, want, pieces)


def _check_gathered(trainer: TPTrainer, got: list, density: float, device: torch.device) -> list[str]:
    """``gather_check_masks``'s comparison on ``device``: (pieces, masks, pivot, tie) per rank."""
    masker = trainer.masker
    got = [([p.to(device) for p in ps], [m.to(device) for m in ms], p_, t_) for ps, ms, p_, t_ in got]
    pieces = [g[0] for g in got]
    want, ref_pivot, ref_tie = reference_masks(pieces, masker.method, masker.pattern, density)
    bad = []
    for r, (_, ms, p, t) in enumerate(got):
        if masker.needs_pivot and (p, _f32(t)) != (ref_pivot, _f32(ref_tie)):
            bad.append(f"rank {r}: pivot/tie ({p}, {t}) != exact ({ref_pivot}, {ref_tie})")
        bad += _mask_failures(trainer, r, ms, want[r], pieces[r])
    return bad
