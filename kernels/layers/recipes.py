"""STEP and Bi-Mask: the two 2:4 recipes Hu et al. 2024 compare against (their Table 4), as
reference-speed ``nn.Linear`` layers in plain PyTorch (dense GEMMs of masked operands: the point is
the accuracy of the recipe, not its speed).

* :class:`StepLinear` + :class:`StepAdamW` (Lu et al. 2023, "STEP: Learning N:M Structured Sparsity
  Masks from Scratch with Precondition"). Precondition phase: dense training with Adam while the
  optimizer watches its second moment v. At the switch point (AutoSwitch, or a fixed step as the
  documented fallback) v is bias-corrected and frozen; from then on Adam updates only its first
  moment and divides by the frozen sqrt(v*), and the layers train 2:4 masked (magnitude mask along
  the input recomputed every forward, straight-through gradient to the dense weight, SR-STE's masked
  decay lambda_W (1 - M) W on the gradient).
* :class:`BiMaskLinear` (Zhang et al. 2023, "Bi-directional Masks for Efficient N:M Sparse
  Training"). Forward mask M_f: 2:4 of |W| along the input (every forward). Backward mask M_b, for
  the input-gradient GEMM dX = dY (W * M_b): 2:4 along the *output* dimension of W * M_f after a
  permutation P of the output rows; P is chosen every ``perm_interval`` optimizer steps among the
  identity and ``perm_trials - 1`` random permutations as the one whose M_b keeps the most of M_f's
  weights (the paper's efficient row permutation; the permuted order is what a sparse GEMM would
  read, by permuting dY's columns the same way). dW = dY^T X dense plus the masked decay.

Both follow ``SparseLinear``'s step protocol: ``after_optimizer_step(step, total_steps)`` after each
optimizer step, ``flip_rate`` / ``flip_rate_tensor`` (the forward mask of the weights after this step
vs after the previous one, Hu et al. Def. 4.1), ``sparse_state_dict`` / ``load_sparse_state_dict``
for what ``state_dict`` leaves out, so a checkpoint resumes bit for bit.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from kernels.ops.common import autocast_enabled, no_autocast
from kernels.ops.nm_mask import stable_nm

__all__ = [
    "RECIPE_MODES",
    "AutoSwitch",
    "BiMaskLinear",
    "StepAdamW",
    "StepLinear",
    "bimask_backward_mask",
    "nm_magnitude_mask",
]

RECIPE_MODES = ("step", "bimask")
N, M = 2, 4


def nm_magnitude_mask(w: torch.Tensor, dim: int = 1) -> torch.Tensor:
    """2 largest |w| of every 4 along ``dim`` (ties to the lower index), no host sync."""
    return stable_nm(w.detach(), N, M, dim)


def bimask_backward_mask(w: torch.Tensor, fwd: torch.Tensor, perm: torch.Tensor) -> torch.Tensor:
    """Bi-Mask's backward mask of ``w`` [out, in] given its forward mask and a permutation of the
    output rows: in the permuted order, 2 of every 4 consecutive rows per column (the largest |W*M_f|),
    and only where M_f keeps the weight too (so M_b is at most 2:4 along the permuted output)."""
    ws = (w.detach() * fwd)[perm]
    keep = stable_nm(ws, N, M, 0) & fwd[perm]
    out = torch.empty_like(keep)
    out[perm] = keep
    return out


def _compute_dtype(x: torch.Tensor, w: torch.Tensor) -> torch.dtype:
    dev = x.device.type
    return torch.get_autocast_dtype(dev) if autocast_enabled(dev) and x.is_floating_point() else x.dtype


class _MaskedLinearFn(torch.autograd.Function):
    """Y = X (W*M_f)^T + b; dX = dY (W*M_b); dW = dY^T X + decay * (1 - M_f) * W (straight-through)."""

    @staticmethod
    def forward(ctx: Any, x, weight, bias, fwd_mask, bwd_mask, decay: float, dt: torch.dtype):  # type: ignore[override]
        ctx.save_for_backward(x, weight, fwd_mask, bwd_mask)
        ctx.decay, ctx.dt, ctx.has_bias = decay, dt, bias is not None
        w = (weight * fwd_mask).to(dt)
        return F.linear(x.to(dt), w, None if bias is None else bias.to(dt))

    @staticmethod
    def backward(ctx: Any, dy: torch.Tensor):  # type: ignore[override]
        x, weight, fwd_mask, bwd_mask = ctx.saved_tensors
        dt = ctx.dt
        dy2 = dy.reshape(-1, dy.shape[-1]).to(dt)
        x2 = x.reshape(-1, x.shape[-1]).to(dt)
        dx = (dy2 @ (weight * bwd_mask).to(dt)).reshape(x.shape).to(x.dtype)
        dw = (dy2.t() @ x2).to(weight.dtype)
        if ctx.decay:
            dw = dw + ctx.decay * weight * ~fwd_mask
        db = dy2.sum(0).to(weight.dtype) if ctx.has_bias else None
        return dx, dw, db, None, None, None, None


class _RecipeLinear(nn.Linear):
    """Shared state of the two recipes: flip-rate bookkeeping against the forward mask."""

    mode = "dense"

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        *,
        decay: float = 6e-5,
        track_flip: bool = True,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        if in_features % M:
            raise ValueError(f"in_features={in_features} is not divisible by {M} (2:4 groups along in)")
        if not (isinstance(decay, int | float) and math.isfinite(decay) and decay >= 0):
            raise ValueError(f"decay must be finite and >= 0, got {decay!r}")
        super().__init__(in_features, out_features, bias=bias, device=device, dtype=dtype)
        self.decay = float(decay)
        self.track_flip = bool(track_flip)
        self._flip_count: torch.Tensor | None = None
        ref = torch.zeros(out_features, in_features, dtype=torch.bool, device=self.weight.device)
        self.register_buffer("_flip_ref", ref if track_flip else None, persistent=False)
        self._have_prev = False

    @property
    def fwd_mask(self) -> torch.Tensor:
        """The forward mask the next forward applies (a function of the current weights)."""
        return nm_magnitude_mask(self.weight)

    @property
    def flip_rate_tensor(self) -> torch.Tensor | None:
        """Fraction of forward-mask entries changed by the last optimizer step (0-d, no host sync)."""
        return None if self._flip_count is None else self._flip_count.float() / self.weight.numel()

    @property
    def flip_rate(self) -> float | None:
        """``flip_rate_tensor`` as a float (one host sync)."""
        r = self.flip_rate_tensor
        return None if r is None else float(r)

    @torch.no_grad()
    def _measure_flip(self) -> None:
        self._flip_count = None
        if self._flip_ref is None:
            return
        cur = self.fwd_mask
        if self._have_prev:
            self._flip_count = torch.count_nonzero(cur != self._flip_ref)
        self._flip_ref.copy_(cur)
        self._have_prev = True

    def _check_step(self, step: int, total_steps: int) -> None:
        for name, v in (("step", step), ("total_steps", total_steps)):
            if isinstance(v, bool) or not isinstance(v, int):
                raise TypeError(f"{name} must be an int, got {type(v).__name__}")
        if step < 0 or total_steps < 1:
            raise ValueError(f"need step >= 0 and total_steps >= 1, got step={step}, total_steps={total_steps}")

    def _base_state(self) -> dict[str, Any]:
        ref = None if self._flip_ref is None else self._flip_ref.detach().clone()
        return {"mode": self.mode, "have_prev": self._have_prev, "flip_ref": ref}

    @torch.no_grad()
    def _load_base_state(self, state: dict[str, Any]) -> None:
        if not isinstance(state, dict) or state.get("mode") != self.mode:
            raise ValueError(f"state is not a sparse_state_dict() of a mode={self.mode!r} layer")
        ref = state.get("flip_ref")
        if (ref is None) != (self._flip_ref is None):
            raise ValueError("state and layer disagree on track_flip")
        if ref is not None:
            self._flip_ref.copy_(ref)
        self._have_prev = bool(state["have_prev"])
        self._flip_count = None

    def extra_repr(self) -> str:
        return super().extra_repr() + f", mode={self.mode!r}, decay={self.decay:g}"


class StepLinear(_RecipeLinear):
    """STEP's layer: dense until :meth:`switch` (called by :class:`StepAdamW` at the switch point),
    then SR-STE-style 2:4 training (forward W * M with M the 2:4 magnitude mask of the current weights
    along the input; dX = dY (W * M); dW = dY^T X + decay (1 - M) W)."""

    mode = "step"

    def __init__(self, in_features: int, out_features: int, bias: bool = True, **kw: Any) -> None:
        super().__init__(in_features, out_features, bias, **kw)
        self.switched = False

    @property
    def is_dense(self) -> bool:
        """True in the precondition phase."""
        return not self.switched

    @property
    def mask(self) -> torch.Tensor:
        """The mask the next forward applies (all True before the switch)."""
        if not self.switched:
            return torch.ones_like(self.weight, dtype=torch.bool)
        return self.fwd_mask

    def switch(self) -> None:
        """Enter the mask-learning phase (for good)."""
        self.switched = True

    @torch.no_grad()
    def after_optimizer_step(self, step: int, total_steps: int) -> None:
        """Flip rate of the 2:4 magnitude mask (also measured in the dense phase, as for Fig. 1)."""
        self._check_step(step, total_steps)
        self._measure_flip()

    def sparse_state_dict(self) -> dict[str, Any]:
        """Phase and flip reference (outside ``state_dict``, so checkpoints stay nn.Linear's)."""
        return {**self._base_state(), "switched": self.switched}

    def load_sparse_state_dict(self, state: dict[str, Any]) -> None:
        """Inverse of :meth:`sparse_state_dict`."""
        self._load_base_state(state)
        self.switched = bool(state["switched"])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.switched:
            return F.linear(x, self.weight, self.bias)
        m = self.fwd_mask
        dt = _compute_dtype(x, self.weight)
        with no_autocast(x.device.type):
            return _MaskedLinearFn.apply(x, self.weight, self.bias, m, m, self.decay, dt)


class BiMaskLinear(_RecipeLinear):
    """Bi-Mask's layer (see the module docstring). ``perm_interval``: optimizer steps between
    permutation searches (the paper's I = 100 iterations); ``perm_trials``: permutations tried (G =
    100). The random permutations are drawn from a generator seeded by (``seed``, step), so a resumed
    run draws the same ones."""

    mode = "bimask"

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        *,
        perm_interval: int = 100,
        perm_trials: int = 100,
        seed: int = 0,
        **kw: Any,
    ) -> None:
        if out_features % M:
            raise ValueError(f"out_features={out_features} is not divisible by {M} (backward 2:4 groups along out)")
        for name, v in (("perm_interval", perm_interval), ("perm_trials", perm_trials)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be a positive int, got {v!r}")
        super().__init__(in_features, out_features, bias, **kw)
        self.perm_interval, self.perm_trials, self.seed = perm_interval, perm_trials, int(seed)
        self.register_buffer("perm", torch.arange(out_features, device=self.weight.device), persistent=False)
        self._perm_stale = True

    is_dense = False

    @property
    def mask(self) -> torch.Tensor:
        """The forward mask the next forward applies."""
        return self.fwd_mask

    @property
    def bwd_mask(self) -> torch.Tensor:
        """The backward mask the next forward's backward applies."""
        self._ensure_perm(0)
        return bimask_backward_mask(self.weight, self.fwd_mask, self.perm)

    @torch.no_grad()
    def search_permutation(self, step: int) -> None:
        """Pick the output-row permutation (identity or one of ``perm_trials - 1`` random ones) whose
        backward mask keeps the most forward-kept weights; first best wins."""
        w = self.weight.detach()
        fwd = nm_magnitude_mask(w)
        g = torch.Generator(device="cpu").manual_seed((self.seed * 1_000_003 + step) % (1 << 63))
        best, best_score = torch.arange(self.out_features), -1
        for i in range(self.perm_trials):
            p = torch.arange(self.out_features) if i == 0 else torch.randperm(self.out_features, generator=g)
            score = int(bimask_backward_mask(w, fwd, p.to(w.device)).sum())
            if score > best_score:
                best, best_score = p, score
        self.perm.copy_(best.to(self.perm.device))
        self._perm_stale = False

    def _ensure_perm(self, step: int) -> None:
        if self._perm_stale:
            self.search_permutation(step)

    @torch.no_grad()
    def after_optimizer_step(self, step: int, total_steps: int) -> None:
        """New permutation every ``perm_interval`` steps; flip rate of the forward mask."""
        self._check_step(step, total_steps)
        if step % self.perm_interval == 0:
            self.search_permutation(step)
        self._measure_flip()

    def sparse_state_dict(self) -> dict[str, Any]:
        """Permutation and flip reference (outside ``state_dict``)."""
        return {**self._base_state(), "perm": self.perm.detach().clone(), "perm_stale": self._perm_stale}

    @torch.no_grad()
    def load_sparse_state_dict(self, state: dict[str, Any]) -> None:
        """Inverse of :meth:`sparse_state_dict`."""
        self._load_base_state(state)
        perm = state.get("perm")
        if not isinstance(perm, torch.Tensor) or perm.shape != self.perm.shape:
            raise ValueError(f"state['perm'] must be a permutation of {self.out_features} rows")
        self.perm.copy_(perm)
        self._perm_stale = bool(state["perm_stale"])

    def extra_repr(self) -> str:
        return super().extra_repr() + f", perm_interval={self.perm_interval}, perm_trials={self.perm_trials}"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self._ensure_perm(0)
        with torch.no_grad():
            fwd = self.fwd_mask
            bwd = bimask_backward_mask(self.weight, fwd, self.perm)
        dt = _compute_dtype(x, self.weight)
        with no_autocast(x.device.type):
            return _MaskedLinearFn.apply(x, self.weight, self.bias, fwd, bwd, self.decay, dt)


class AutoSwitch:
    """Our reading of STEP's AutoSwitch (the paper samples the change of Adam's variance estimate
    along the trajectory and switches once the samples concentrate). Sample every step
    z_t = ||v_t - v_{t-1}||_1 / ||v_{t-1}||_1 over the watched parameters; with two consecutive
    windows of ``window`` samples, switch at the first step t >= ``t_min`` where their means differ by
    less than ``eps`` (relative to the older window): the variance change has stopped falling and
    what is left is the noise floor (1 - beta2) |g^2 - v| / v. Never later than ``t_max``."""

    def __init__(self, t_min: int, t_max: int, window: int, eps: float = 0.05) -> None:
        if not 0 <= t_min <= t_max or window < 1 or not eps > 0:
            got = f"t_min={t_min}, t_max={t_max}, window={window}, eps={eps}"
            raise ValueError(f"AutoSwitch needs 0 <= t_min <= t_max, window >= 1, eps > 0; got {got}")
        self.t_min, self.t_max, self.window, self.eps = t_min, t_max, window, eps

    @classmethod
    def for_run(cls, total_steps: int) -> AutoSwitch:
        """Defaults for a run of ``total_steps``: switch between 10% and 50% of the steps (the range
        STEP suggests, as Hu et al. quote it), windows of 2% of the steps (at least 2 samples)."""
        return cls(max(1, total_steps // 10), max(1, total_steps // 2), max(2, total_steps // 50))

    def should_switch(self, step: int, samples: list[float]) -> bool:
        """Whether to switch after optimizer step ``step`` given the samples so far (newest last)."""
        if step >= self.t_max:
            return True
        if step < self.t_min or len(samples) < 2 * self.window:
            return False
        new = sum(samples[-self.window :]) / self.window
        old = sum(samples[-2 * self.window : -self.window]) / self.window
        return old > 0 and abs(new - old) / old < self.eps


class StepAdamW(torch.optim.AdamW):
    """AdamW with STEP's frozen preconditioner. Until the switch it is AdamW, and it samples the
    variance change of the ``watch`` parameters for the switch rule; at the switch every parameter's
    v is bias-corrected, stored as v* in ``exp_avg_sq`` and frozen, the ``layers`` are switched to 2:4,
    and later steps do m = beta1 m + (1 - beta1) g; w -= lr wd w; w -= lr (m / (1 - beta1^t)) /
    (sqrt(v*) + eps). ``switch_at``: a fixed switch step (the fallback), or None for :class:`AutoSwitch`.
    The phase, the switch step and the samples live in the first param group, so ``state_dict``
    carries them and a resumed run continues exactly."""

    def __init__(
        self,
        params: Any,
        *,
        layers: list[StepLinear],
        total_steps: int,
        switch_at: int | None = None,
        auto: AutoSwitch | None = None,
        watch: list[torch.Tensor] | None = None,
        **kw: Any,
    ) -> None:
        super().__init__(params, **kw)
        self.layers = list(layers)
        self.switch_at = switch_at
        self.auto = auto or AutoSwitch.for_run(total_steps)
        self.watch = list(watch) if watch is not None else [m.weight for m in self.layers]
        g0 = self.param_groups[0]
        g0.setdefault("step_switched_at", -1)
        g0.setdefault("step_samples", [])
        self.n_steps = 0

    @property
    def switched_at(self) -> int | None:
        """The optimizer step after which v was frozen (None: still preconditioning)."""
        v = int(self.param_groups[0]["step_switched_at"])
        return None if v < 0 else v

    def _variance_change(self) -> float | None:
        num = den = 0.0
        beta2 = self.param_groups[0]["betas"][1]
        for p in self.watch:
            st = self.state.get(p)
            if p.grad is None or not st or "exp_avg_sq" not in st:
                return None
            v = st["exp_avg_sq"]
            num += float(((1 - beta2) * (p.grad.float().square() - v)).abs().sum())
            den += float(v.abs().sum())
        return num / den if den > 0 else None

    @torch.no_grad()
    def _freeze(self, step: int) -> None:
        for g in self.param_groups:
            beta2 = g["betas"][1]
            for p in g["params"]:
                st = self.state.get(p)
                if st and "exp_avg_sq" in st:
                    t = float(st["step"])
                    st["exp_avg_sq"].div_(1 - beta2**t)
        self.param_groups[0]["step_switched_at"] = step
        for m in self.layers:
            m.switch()

    @torch.no_grad()
    def _frozen_step(self) -> None:
        for g in self.param_groups:
            beta1, _ = g["betas"]
            lr, wd, eps = g["lr"], g["weight_decay"], g["eps"]
            for p in g["params"]:
                if p.grad is None:
                    continue
                st = self.state[p]
                st["step"] += 1
                t = float(st["step"])
                st["exp_avg"].lerp_(p.grad, 1 - beta1)
                p.mul_(1 - lr * wd)
                p.addcdiv_(st["exp_avg"], st["exp_avg_sq"].sqrt().add_(eps), value=-lr / (1 - beta1**t))

    def step(self, closure: Any = None) -> Any:  # type: ignore[override]
        """One optimizer step: AdamW and the switch rule before the switch, frozen-v updates after."""
        if self.switched_at is not None:
            self._frozen_step()
            return None
        g0 = self.param_groups[0]
        z = self._variance_change()
        out = super().step(closure)
        step = int(next(float(st["step"]) for st in self.state.values())) if self.state else 0
        if z is not None:
            g0["step_samples"] = [*g0["step_samples"], z][-2 * self.auto.window :]
        if self.switch_at is not None:
            due = step >= self.switch_at
        else:
            due = self.auto.should_switch(step, g0["step_samples"])
        if due:
            self._freeze(step)
        return out

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """AdamW's, then the layers follow the restored phase."""
        super().load_state_dict(state_dict)
        if self.switched_at is not None:
            for m in self.layers:
                m.switch()
