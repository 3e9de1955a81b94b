"""``TrainConfig``: everything that decides a pretraining run, validated on construction and stored
as JSON beside the run and inside every checkpoint, so a run can be repeated and a resume can refuse
to continue under different settings.

The sparse recipe is Hu et al. 2024's: ``mode`` picks the FFN linears (``kernels.layers.sparse_linear``),
``decay`` is lambda_W (masked decay), ``decay_on`` puts it on the gradient (the paper's Eq. 10) or on
the weights after the optimizer step (Eq. 8, the SR-STE original, for Fig. 2), ``mvue`` switches fst's
unbiased 2:4 weight-gradient estimator, ``dense_phase`` chooses dense fine-tuning (last
``dense_fraction`` of the steps dense, the paper's recipe) or STEP-style dense pre-training (first).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from repro.models.gpt2 import CONFIGS, GPT2Config

__all__ = [
    "AMP_DTYPES",
    "ARCHS",
    "DECAY_ON",
    "DENSE_PHASES",
    "FLEX_MASKS",
    "LATE_DEFAULTS",
    "MODELS",
    "MODES",
    "RECIPE_MODES",
    "TrainConfig",
    "model_config",
]

MODES = ("dense", "fst", "srste", "ste", "weight24", "half", "step", "bimask")
"""``ste`` = srste without masked decay; ``half`` = dense FFN of half the width (iso-FLOP baseline);
``step`` / ``bimask``: STEP and Bi-Mask (``kernels.layers.recipes``), the baselines of Hu et al. Table 4."""
RECIPE_MODES = ("step", "bimask")
STEP_SWITCHES = ("auto", "fixed")
ARCHS = ("gpt2", "llama")
FLEX_MASKS = ("dense", "4:8", "us", "tbs88")
"""FAST Table I's masks (``arch='llama'``): dense, 4:8, unstructured 50%, TBS(8,8) (``kernels.ops.flex``)."""
SPARSE_MODES = ("fst", "srste", "ste", "weight24")
DECAY_ON = ("grad", "weight")
DENSE_PHASES = ("none", "finetune", "pretrain")
AMP_DTYPES = ("bf16", "fp16", "none")

# small GPT-2s on the real vocabulary for sweeps, and a byte-vocabulary one for CPU tests
MODELS: dict[str, GPT2Config] = {
    **{k: v for k, v in CONFIGS.items() if k != "tiny"},
    "gpt2-mini": GPT2Config(d_model=384, n_layer=6, n_head=6),
    "gpt2-tiny": GPT2Config(d_model=128, n_layer=4, n_head=4),
    "tiny": CONFIGS["tiny"],
}


def model_config(name: str, mode: str, seq_len: int) -> GPT2Config:
    """The GPT-2 shape ``name`` with the FFN of ``mode`` and ``seq_len`` positions."""
    ffn_mode = {"ste": "srste", "half": "half", "step": "dense", "bimask": "dense"}.get(mode, mode)
    return dataclasses.replace(MODELS[name], ffn_mode=ffn_mode, seq_len=seq_len)


LATE_DEFAULTS: dict[str, Any] = {"step_switch": "auto", "arch": "gpt2", "mask": "dense"}
"""Fields added after runs existed: ``to_dict`` leaves them out at these values, so the run ids
(a hash of ``to_dict``) and resume checks of earlier runs do not change."""


def _default_data() -> str:
    return "data/offline-en"


@dataclass(frozen=True)
class TrainConfig:
    """One pretraining run. Tokens per optimizer step = batch_size * grad_accum * seq_len * world size
    (``batch_size`` sequences per micro-batch per process)."""

    model: str = "gpt2-124m"
    mode: str = "dense"
    seq_len: int = 1024
    batch_size: int = 16
    grad_accum: int = 1
    steps: int = 1000
    lr: float = 6e-4
    min_lr_ratio: float = 0.1
    warmup: int = 100
    weight_decay: float = 0.1
    betas: tuple[float, float] = (0.9, 0.95)
    grad_clip: float = 1.0  # 0: no clipping
    seed: int = 0
    data: str = field(default_factory=_default_data)  # token folder (``python -m repro data build``)
    eval_every: int = 100  # 0: validation only at the end
    eval_batches: int = 20
    checkpoint_every: int = 200  # 0: checkpoints only when stopping
    compile: bool = False
    amp: str = "bf16"  # autocast dtype on CUDA ("none": float32); CPU runs are float32
    # sparse recipe (Hu et al. 2024)
    decay: float = 6e-5  # lambda_W; ignored by dense, half and ste; step / bimask: decay_on="grad" only
    decay_on: str = "grad"
    mvue: bool = True  # fst only
    dense_phase: str = "finetune"
    dense_fraction: float = 1 / 6
    mask_interval: int = 40  # fst / weight24 / llama masks: steps between mask refreshes; bimask: permutations
    track_flip: bool = True
    # added later (left out of to_dict at their defaults: old run ids and checkpoints stay valid)
    step_switch: str = "auto"  # step: AutoSwitch, or "fixed" after dense_fraction of the steps
    arch: str = "gpt2"  # "llama": FAST Table I's Llama-style models (model from LLAMA_MODELS)
    mask: str = "dense"  # llama: flex-SS mask of the sparse linears (FLEX_MASKS), width-matched

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):  # 1 and 1.0 are one config: one JSON form, one run id
            v = getattr(self, f.name)
            if f.type in ("float", float) and isinstance(v, int) and not isinstance(v, bool):
                object.__setattr__(self, f.name, float(v))

        def pos_int(name: str, minimum: int = 1) -> None:
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
                what = "a positive int" if minimum == 1 else f"an int >= {minimum}"
                raise ValueError(f"TrainConfig.{name} must be {what}, got {v!r}")

        def real(name: str, lo: float, hi: float = math.inf, lo_open: bool = False) -> None:
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
                raise ValueError(f"TrainConfig.{name} must be a finite number, got {v!r}")
            if v < lo or v > hi or (lo_open and v == lo):
                side = "(" if lo_open else "["
                raise ValueError(f"TrainConfig.{name} must be in {side}{lo}, {hi}], got {v!r}")

        def choice(name: str, options: tuple) -> None:
            if getattr(self, name) not in options:
                raise ValueError(f"TrainConfig.{name} must be one of {options}, got {getattr(self, name)!r}")

        choice("arch", ARCHS)
        choice("mask", FLEX_MASKS)
        choice("step_switch", STEP_SWITCHES)
        if self.arch == "llama":
            from repro.train.flexmask import LLAMA_MODELS

            if self.model not in LLAMA_MODELS:
                known = sorted(LLAMA_MODELS)
                raise ValueError(f"TrainConfig.model must be one of {known} for arch='llama', got {self.model!r}")
            if self.mode != "dense":
                why = "its sparsity is `mask`"
                raise ValueError(f"TrainConfig.mode must be 'dense' for arch='llama' ({why}), got {self.mode!r}")
        elif self.model not in MODELS:
            raise ValueError(f"TrainConfig.model must be one of {sorted(MODELS)}, got {self.model!r}")
        elif self.mask != "dense":
            raise ValueError(f"TrainConfig.mask applies to arch='llama' only, got {self.mask!r}")
        choice("mode", MODES)
        choice("decay_on", DECAY_ON)
        choice("dense_phase", DENSE_PHASES)
        choice("amp", AMP_DTYPES)
        for name in ("seq_len", "batch_size", "grad_accum", "steps", "eval_batches", "mask_interval"):
            pos_int(name)
        for name in ("warmup", "seed", "eval_every", "checkpoint_every"):
            pos_int(name, 0)
        if self.warmup > self.steps:
            raise ValueError(f"TrainConfig.warmup ({self.warmup}) must not exceed steps ({self.steps})")
        real("lr", 0.0, lo_open=True)
        real("min_lr_ratio", 0.0, 1.0)
        real("weight_decay", 0.0)
        real("grad_clip", 0.0)
        real("decay", 0.0)
        if self.mode in RECIPE_MODES and self.decay_on == "weight" and self.decay:
            # the recipes' layers apply lambda_W on the gradient only: it would be silently dropped
            raise ValueError(f"TrainConfig.decay_on='weight' is not supported for mode={self.mode!r}: use 'grad'")
        real("dense_fraction", 0.0, 1.0)
        betas = self.betas
        if isinstance(betas, list):
            object.__setattr__(self, "betas", tuple(betas))
        if not (
            isinstance(self.betas, tuple)
            and len(self.betas) == 2
            and all(isinstance(b, int | float) and not isinstance(b, bool) and 0.0 <= b < 1.0 for b in self.betas)
        ):
            raise ValueError(f"TrainConfig.betas must be two numbers in [0, 1), got {betas!r}")
        for name in ("compile", "mvue", "track_flip"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"TrainConfig.{name} must be true or false, got {getattr(self, name)!r}")
        if not isinstance(self.data, str) or not self.data:
            raise ValueError(f"TrainConfig.data must be a token folder path, got {self.data!r}")
        if self.seq_len > 1 << 16:
            raise ValueError(f"TrainConfig.seq_len {self.seq_len} is implausibly large")

    # derived --------------------------------------------------------------------------------

    @property
    def sparse(self) -> bool:
        """Whether the FFN linears are SparseLinear layers."""
        return self.mode in SPARSE_MODES

    @property
    def layer_decay(self) -> float:
        """lambda_W as the layers apply it (on the gradient, once per micro-batch backward)."""
        if self.mode not in ("fst", "srste", "weight24", *RECIPE_MODES) or self.decay_on != "grad":
            return 0.0
        return self.decay / self.grad_accum

    @property
    def weight_decay_masked(self) -> float:
        """lambda_W applied to the weights after the optimizer step (``decay_on='weight'``), else 0."""
        return self.decay if self.mode in ("fst", "srste", "weight24") and self.decay_on == "weight" else 0.0

    def dense_at(self, step: int) -> bool:
        """Whether optimizer step ``step`` (0-based) trains the sparse layers dense."""
        f = self.dense_fraction if self.sparse else 0.0
        if self.dense_phase == "finetune":
            return f > 0 and step >= (1.0 - f) * self.steps - 1e-9
        if self.dense_phase == "pretrain":
            return step < f * self.steps - 1e-9
        return False

    def gpt2(self) -> GPT2Config:
        """The model's GPT-2 configuration."""
        if self.arch != "gpt2":
            raise ValueError(f"TrainConfig.gpt2(): arch is {self.arch!r}")
        return model_config(self.model, self.mode, self.seq_len)

    def step_switch_at(self) -> int | None:
        """STEP's fixed switch step (``step_switch='fixed'``: after ``dense_fraction`` of the steps), else None."""
        return max(1, round(self.dense_fraction * self.steps)) if self.step_switch == "fixed" else None

    # JSON -----------------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON types (tuples as lists)."""
        d = dataclasses.asdict(self)
        d["betas"] = list(self.betas)
        for k, v in LATE_DEFAULTS.items():  # fields added later: absent at their defaults
            if d.get(k) == v:
                del d[k]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TrainConfig:
        """Inverse of ``to_dict``; unknown keys are refused (a typo must not be silently ignored)."""
        if not isinstance(d, dict):
            raise ValueError(f"a TrainConfig must come from a JSON object, got {type(d).__name__}")
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - names)
        if unknown:
            raise ValueError(f"unknown TrainConfig key(s) {unknown}; known: {sorted(names)}")
        d = dict(d)
        if "betas" in d and isinstance(d["betas"], list):
            d["betas"] = tuple(d["betas"])
        return cls(**d)

    def with_updates(self, **kw: Any) -> TrainConfig:
        """A copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **kw)

    def with_overrides(self, assignments: list[str]) -> TrainConfig:
        """A copy with ``key=value`` strings applied (values parsed as JSON, else taken as strings)."""
        names = {f.name: f for f in dataclasses.fields(self)}
        kw: dict[str, Any] = {}
        for a in assignments:
            key, sep, raw = a.partition("=")
            key = key.strip()
            if not sep or key not in names:
                raise ValueError(f"--set {a!r}: expected key=value with key one of {sorted(names)}")
            try:
                val = json.loads(raw)
            except ValueError:
                val = raw
            if key == "data":
                val = raw
            if isinstance(val, int) and not isinstance(val, bool) and isinstance(getattr(self, key), float):
                val = float(val)
            kw[key] = tuple(val) if isinstance(val, list) else val
        return dataclasses.replace(self, **kw)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n"

    def save(self, path: str | os.PathLike) -> None:
        """Write the JSON atomically."""
        from repro.train.checkpoint import atomic_write_text

        atomic_write_text(Path(path), self.to_json())

    @classmethod
    def load(cls, path: str | os.PathLike) -> TrainConfig:
        """Read a JSON file written by ``save`` (or by hand)."""
        try:
            d = json.loads(Path(path).read_text())
        except (OSError, ValueError) as exc:
            raise ValueError(f"cannot read the training config {path}: {exc}") from None
        return cls.from_dict(d)
