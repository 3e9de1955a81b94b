"""Shared pieces of the 2:4 training-speed suites (figure6, table8): layer factories per mode, the
fwd+bwd call that gets graph-captured, the correctness check every timed module passes first, and
the GEMM-level ceiling of fst (:class:`Gemm24Only`).

Modes: ``dense`` (nn.Linear), ``half`` (dense, FFN inner width halved: the iso-FLOP baseline) and
the SparseLinear modes ``fst``, ``weight24``, ``srste``. Sparse layers run with ``checks=False``
and ``track_flip=False`` (no host syncs, so fwd+bwd can be captured in a CUDA graph)."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import statistics
from collections.abc import Callable, Collection, Mapping, Sequence

import torch
from torch import nn

from kernels.layers.gemm24 import Gemm24Only
from repro.checks import rel_err
from repro.models.gpt2 import GPT2Config

SPARSE_MODES = ("fst", "weight24", "srste")
CEILING = "fst_gemms_only"
"""Pseudo-mode of :class:`Gemm24Only`: fst with every per-step 2:4 cost removed (the ceiling)."""


FST_ALL = "fst_all"
"""Beyond the paper: fst in the attention projections (QKV and output) as well as in the FFN."""

COMPILED = "_compiled"
"""Suffix of a run whose model is ``torch.compile``d (``dense_compiled``, ``fst_compiled``, ...)."""


def compiled_name(mode: str) -> str:
    """The name of ``mode``'s compiled run."""
    return mode + COMPILED


def split_run(run: str) -> tuple[str, bool]:
    """(mode, compiled) of a run name: ``"fst_compiled"`` -> ``("fst", True)``."""
    return (run.removesuffix(COMPILED), True) if run.endswith(COMPILED) else (run, False)


def compile_settings(device: torch.device) -> dict[str, str | None]:
    """``torch.compile`` keywords of the compiled runs: Inductor in its default mode on CUDA (no
    CUDA graphs of its own: the suites capture the whole call in theirs), or the mode that
    ``REPRO_COMPILE_MODE`` names; on a CPU (smoke) ``aot_eager``, which traces the model whole
    through the same custom ops without Inductor's C++ build time."""
    if device.type != "cuda":
        return {"backend": "aot_eager", "mode": None}
    return {"backend": "inductor", "mode": os.environ.get("REPRO_COMPILE_MODE") or None}


def compile_label(device: torch.device) -> str:
    """How compiled runs were compiled, for their rows' ``variant``."""
    kw = compile_settings(device)
    return f"torch.compile(backend={kw['backend']}, mode={kw['mode'] or 'default'}, fullgraph=True)"


def compile_in_place(module: nn.Module, device: torch.device) -> None:
    """Compile ``module``'s forward in place (its names, parameters and masks stay where they are,
    so checks and mask refreshes reach the same layers); ``fullgraph``: a graph break inside the
    model is an error, not a silent eager fallback. The compiler's caches are reset first: every
    build compiles afresh (its compile time is its own), and builds of earlier runs, which share
    the model's code, do not count towards the recompile limit."""
    torch.compiler.reset()
    module.compile(fullgraph=True, **compile_settings(device))


def compiled_runs_enabled() -> bool:
    """Whether the suites time compiled runs beside the eager ones (``REPRO_COMPILED=0``: eager only)."""
    v = os.environ.get("REPRO_COMPILED", "1")
    if v not in ("0", "1"):
        raise ValueError(f"REPRO_COMPILED must be 0 or 1, got {v!r}")
    return v == "1"


def factory(mode: str) -> Callable[..., nn.Module] | None:
    """Linear factory for the FFN linears of ``mode`` (None: nn.Linear)."""
    if mode in ("dense", "half"):
        return None
    if mode == CEILING:
        return Gemm24Only
    from kernels.layers.sparse_linear import SparseLinear

    return functools.partial(SparseLinear, mode="fst" if mode == FST_ALL else mode, checks=False, track_flip=False)


def attn_factory(mode: str) -> Callable[..., nn.Module] | None:
    """Linear factory for the attention projections of ``mode``: fst for :data:`FST_ALL`, else
    None (nn.Linear, as in the paper)."""
    return factory("fst") if mode == FST_ALL else None


def mode_config(cfg: GPT2Config, mode: str) -> GPT2Config:
    """``cfg`` with the FFN of ``mode`` (half: d_ff halved)."""
    return dataclasses.replace(cfg, ffn_mode="fst" if mode in (CEILING, FST_ALL) else mode)


AMP_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def amp_name() -> str:
    """Compute dtype of the timed runs, by name: float32 master weights under ``torch.autocast`` in
    this dtype. ``REPRO_AMP_DTYPE=fp16`` runs what Hu et al. measure ("FP16 mixed precision training
    is used on all models"); bf16 (the default) is what Hopper training runs use. Each row's
    ``dtype`` says which (one run replaces the profile's rows, so a results file holds one)."""
    name = os.environ.get("REPRO_AMP_DTYPE", "bf16")
    if name not in AMP_DTYPES:
        raise ValueError(f"REPRO_AMP_DTYPE must be one of {sorted(AMP_DTYPES)}, got {name!r}")
    return name


def amp_dtype() -> torch.dtype:
    """The torch dtype of :func:`amp_name`."""
    return AMP_DTYPES[amp_name()]


def amp(device: torch.device) -> contextlib.AbstractContextManager:
    """Autocast to :func:`amp_dtype` on CUDA (no weight-cast cache: every call casts, as every
    training step does after its optimizer update); a no-op elsewhere (CPU smoke runs in fp32)."""
    if device.type != "cuda":
        return contextlib.nullcontext()
    return torch.autocast("cuda", dtype=amp_dtype(), cache_enabled=False)


def fwd_bwd(module: nn.Module, x: torch.Tensor, dy: torch.Tensor) -> Callable[[], tuple[torch.Tensor, torch.Tensor]]:
    """One forward and backward of ``module`` on a static input under :func:`amp` (input gradient
    included, as inside a network); parameter gradients accumulate in place across calls (the
    same for all modes). Returns (Y, dX), so the timed call's own output can be checked."""

    def call() -> tuple[torch.Tensor, torch.Tensor]:
        x.grad = None
        with amp(x.device):
            y = module(x)
        y.backward(dy)
        return y.detach(), x.grad

    return call


def round_summary(
    times: Mapping[str, Sequence[float]], base: str = "dense"
) -> tuple[dict[str, float], dict[str, list[float]]]:
    """Times taken in rounds (one fresh build per run and round, the same order every round):
    the median per run, and per run the ratios ``base`` / run of each round. Builds of the same
    module differ (up to 8% on an H100), so the median is the estimate and the per-round ratios
    give its range; the reported speedup is the ratio of the medians."""
    if base not in times:
        raise ValueError(f"no times for the baseline {base!r}")
    n = len(times[base])
    if n == 0 or any(len(v) != n for v in times.values()):
        counts = {k: len(v) for k, v in times.items()}
        raise ValueError(f"every run needs the same number (>= 1) of rounds, got {counts}")
    ms = {k: statistics.median(v) for k, v in times.items()}
    ratios = {k: [a / b for a, b in zip(times[base], v, strict=True)] for k, v in times.items()}
    return ms, ratios


BEST_DENSE = "best_dense"
"""Pseudo-run of :func:`best_dense_summary`: per round, the faster of dense and dense_compiled."""


def best_dense_summary(times: Mapping[str, Sequence[float]]) -> tuple[dict[str, float], dict[str, list[float]]]:
    """:func:`round_summary` against :data:`BEST_DENSE`, the faster of dense and dense_compiled in
    each round (both must have been timed): the base of the headline ``speedup_vs_best_dense``."""
    missing = [m for m in ("dense", compiled_name("dense")) if m not in times]
    if missing:  # against eager dense alone the headline would over-claim, under the same name
        raise ValueError(f"speedup_vs_best_dense needs both dense steps; {missing} not timed")
    dense = [times[m] for m in ("dense", compiled_name("dense"))]
    best = [min(v) for v in zip(*dense, strict=True)]
    return round_summary({**times, BEST_DENSE: best}, base=BEST_DENSE)


def timer_of(timers: Collection[str]) -> str:
    """One run's timer over its rounds: the timer, or ``mixed:a+b`` where it changed between rounds
    (a capture that broke mid-run times every later call uncaptured): a median over both timers
    is no one timer's."""
    kinds = sorted(set(timers))
    return kinds[0] if len(kinds) == 1 else "mixed:" + "+".join(kinds)


def same_timer(*labels: str) -> bool:
    """Whether a ratio of these runs compares like with like: one timer, the same in every round."""
    return len(set(labels)) == 1 and not labels[0].startswith("mixed:")


def timers_by_run(
    timers: Mapping[str, Collection[str]], log: Callable[[str], None], label: str
) -> tuple[dict[str, str], list[str]]:
    """Each run's timer label over its rounds (:func:`timer_of`), and the runs timed unlike dense,
    which get no ratio to it (a capture broke mid-run: the ratio would divide a replay's time by a
    launch's); those are logged."""
    timer = {m: timer_of(v) for m, v in timers.items()}
    unlike = [m for m in timer if not same_timer(timer["dense"], timer[m])]
    if unlike:
        log(f"{label}: no speedups for {unlike}: timed unlike dense ({ {m: timer[m] for m in unlike} })")
    return timer, unlike


def range_label(ratios: Sequence[float]) -> str:
    """`` [lo-hi]`` of per-round ratios for a log line; empty for a single round."""
    return f" [{min(ratios):.2f}-{max(ratios):.2f}]" if len(ratios) > 1 else ""


def sparse_layers(module: nn.Module) -> list[nn.Module]:
    from kernels.layers.sparse_linear import SparseLinear

    return [m for m in module.modules() if isinstance(m, SparseLinear) and not m.is_dense]


def masked_layers(module: nn.Module) -> list[nn.Module]:
    """Layers whose forward multiplies the weight by ``.mask``: sparse SparseLinears, Gemm24Only."""
    return [*sparse_layers(module), *(m for m in module.modules() if isinstance(m, Gemm24Only))]


def ceiling_refusal(d: int, f: int, tokens: int, device: torch.device) -> str | None:
    """Why :class:`Gemm24Only` cannot run an FFN of these shapes here (None: it can)."""
    if device.type != "cuda":
        return "needs CUDA"
    from kernels.ops.sparse_gemm import cslt_refusal

    for rows, cols, n in ((f, d, tokens), (d, f, tokens), (f, tokens, d), (d, tokens, f)):
        reason = cslt_refusal(rows, cols, n, amp_dtype(), device)
        if reason is not None:
            return reason
    return None


def fst_min_extra_bytes(d: int, f: int, tokens: int) -> int:
    """Bytes that any fst FFN step must move beyond what its GEMMs (the ``Gemm24Only`` ceiling) do:
    this step's packed weights from the fp32 master (read 4 B, write the kept 2 B of W*M and the
    2 B of (W*M)^T at half density: 6 B per weight element, the bytes dense spends on its weight
    cast), MVUE + pack of dY [T, d] (read 2 B, write 1 B per element) and of dH [T, f] (write
    1 B per element: its read is fused into the GELU backward, which the ceiling runs anyway).
    Metadata, masked decay (foldable into the optimizer) and launches are left out: a lower bound."""
    return 6 * 2 * d * f + 3 * tokens * d + tokens * f


@torch.no_grad()
def masked_dense_twin(module: nn.Module, build_dense: Callable[[], nn.Module]) -> nn.Module:
    """A dense float32 copy of ``module`` whose sparse linears' weights are multiplied by their
    current masks: the reference of the sparse module's forward and input gradient."""
    ref = build_dense().to(device=next(module.parameters()).device, dtype=torch.float32)
    state = {k: v.float() for k, v in module.state_dict().items()}
    sparse = set(masked_layers(module))  # once, not per module
    for name, m in module.named_modules():
        if m in sparse:
            state[f"{name}.weight" if name else "weight"] = m.weight.float() * m.mask  # "" = module itself
    ref.load_state_dict(state, strict=True)
    return ref


def check_against_twin(
    module: nn.Module, build_dense: Callable[[], nn.Module], x: torch.Tensor, dy: torch.Tensor
) -> tuple[float, float]:
    """Relative errors of output and input gradient vs the masked dense float32 twin."""
    c = twin_check(module, build_dense, x, dy, draws=0)
    return c.out, c.dx


MVUE_DRAWS = 32
"""Calls averaged in the weight-gradient check of modes whose dW is an MVUE estimate (fst): one
draw is off the dense dW by a relative 0.6-0.7 (measured, GPT-2 FFN shapes), the mean of 32 by
about 0.12; :data:`DW_TOL` then still fails a dW that is zero, of the wrong sign or layout, half
its size, or drawn with the same seed every call (no averaging)."""
DW_TOL = {"mvue": 0.35, "exact": 3e-2}


@dataclasses.dataclass(frozen=True)
class TwinCheck:
    """Relative errors of a module's output, input gradient and (``dw``) weight gradients (the
    largest over its masked layers; NaN where not checked) vs the masked dense float32 twin, and
    the twin's Y and dX, against which a timed call's own output is checked afterwards."""

    out: float
    dx: float
    dw: float
    y_ref: torch.Tensor
    dx_ref: torch.Tensor

    def matches(self, got: tuple[torch.Tensor, torch.Tensor], tol_out: float, tol_dx: float) -> bool:
        """Whether (Y, dX) of a later call agree with the twin within the tolerances."""
        y, dx = got
        return rel_err(y, self.y_ref) <= tol_out and dx is not None and rel_err(dx, self.dx_ref) <= tol_dx


def _mvue_grad(module: nn.Module) -> bool:
    return any(getattr(m, "mode", None) == "fst" for m in sparse_layers(module))


def twin_check(
    module: nn.Module, build_dense: Callable[[], nn.Module], x: torch.Tensor, dy: torch.Tensor, draws: int | None = None
) -> TwinCheck:
    """Output, input gradient and weight gradients of ``module`` vs its masked dense float32 twin.

    The weight gradient of every masked layer (sparse ``SparseLinear``; not ``Gemm24Only``, whose
    dW is not a gradient) is the mean over ``draws`` calls (default: :data:`MVUE_DRAWS` where fst's
    dW is an MVUE estimate, unbiased but noisy; 1 where it is exact); ``draws=0`` skips it.
    Parameter gradients are cleared afterwards."""
    x1 = x.detach().clone().requires_grad_(True)
    with amp(x.device):
        y = module(x1)
    y.backward(dy)
    ref = masked_dense_twin(module, build_dense)
    x2 = x.detach().float().clone().requires_grad_(True)
    y2 = ref(x2)
    y2.backward(dy.float())
    e_out, e_dx = rel_err(y, y2), rel_err(x1.grad, x2.grad)
    layers = {name: m for name, m in module.named_modules() if m in set(sparse_layers(module))}
    if draws is None:
        draws = MVUE_DRAWS if _mvue_grad(module) else 1
    e_dw = float("nan")
    if draws and layers:
        for p in module.parameters():
            p.grad = None
        for _ in range(draws):
            xi = x.detach().clone().requires_grad_(True)
            with amp(x.device):
                yi = module(xi)
            yi.backward(dy)
        twin = dict(ref.named_modules())
        e_dw = max(rel_err(m.weight.grad / draws, twin[name].weight.grad) for name, m in layers.items())
    for p in module.parameters():
        p.grad = None
    return TwinCheck(e_out, e_dx, e_dw, y2.detach(), x2.grad.detach())
