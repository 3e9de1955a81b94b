"""The pretraining runs behind Hu et al.'s training-dynamics artifacts (Figs. 1, 2, 3, 10; Tables 1,
5, 7), shared by their suites: one plan of named runs per profile, each a :class:`TrainConfig`;
``ensure`` trains what is missing (a finished run is read, never re-trained) and turns each run
into rows; curves are read back from the run directories for the figures.

Scale (``full``, one H100): GPT-2 124M for the headline comparisons (Table 5, Fig. 10, Table 1's
test) and a 6-layer d=384 GPT-2 for the sweeps (Figs. 1, 2, 3, Table 7), one pass over the offline
corpus's training split or less (never several epochs), validation loss on its held-out split.
The paper trains on OpenWebText for billions of tokens (nanoGPT: 491,520 tokens per step); the
``paper`` profile writes that configuration for users with the GPUs and the data. ``smoke`` runs
a tiny model on a synthetic token file on the CPU: it checks the plumbing, not the claims.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pandas as pd

from repro.data.tokens import Document, write_corpus
from repro.paper import claim_holds, load_claims
from repro.results import results_root
from repro.suite import RunContext
from repro.train import TrainConfig, ensure_run
from suites._common import Verdict

PROFILES = ("smoke", "full", "paper")
CHECKS = (
    "every run trained all its planned steps; a run resumed from a checkpoint continues bit for bit (tests)",
    "training and validation losses are finite (a NaN stops the run)",
    "flip rate = changed mask entries / mask entries per optimizer step, over all sparse layers (tests: "
    "equals a direct count)",
    "the sparse layers match their plain-PyTorch references (kernel tests; table8 checks whole steps on the GPU)",
)
OFFLINE_PLUS = "data/offline-en-plus"  # python -m repro data build --corpus offline-en-plus
OPENWEBTEXT = "data/openwebtext"  # python -m repro data hf Skylion007/openwebtext --out data/openwebtext (hub)
SCALE = (
    "ours: GPT-2 124M for 600 steps of 16 x 1024 tokens (9.8M tokens) and a 6-layer d=384 GPT-2 for 300 steps "
    "(4.9M tokens), on the 14.8M-token offline corpus (offline-en-plus; less than one pass), validation loss on "
    "its held-out split; paper: GPT-2 on OpenWebText with nanoGPT (491,520 tokens per step; token count not "
    "stated), BERT-base on C4, Transformer-base on WMT14. Only differences between methods compare; absolute "
    "losses do not. `--profile paper` runs the paper's configuration."
)
DATA = {"full": OFFLINE_PLUS}  # corpus per profile that the workflow builds first (smoke writes its own)
HEADLINE, SWEEP = "headline", "sweep"
PAPER_LAMBDA_124M = 6e-5  # Hu et al. Table 1, GPT-2 124M
LAMBDA_GRID = (6e-6, 2e-5, 6e-5, 2e-4, 6e-4)  # Table 1's test: candidates around the paper's value
SWEEP_LAMBDAS = (6e-6, 6e-5, 6e-4)  # Fig. 1: decay factors of the flip-rate sweep
MU_RANGE = (0.60, 0.95)  # Hu et al. Sec. 4.3: feasible mu = sparse / dense flip rate at t0

# Base configuration of each scale, per profile (what the run's TrainConfig is built from).
SCALES: dict[str, dict[str, dict]] = {
    "full": {
        HEADLINE: dict(
            model="gpt2-124m", seq_len=1024, batch_size=16, steps=600, lr=6e-4, warmup=60, min_lr_ratio=0.1,
            eval_every=100, eval_batches=8, checkpoint_every=200, data=OFFLINE_PLUS,
        ),
        SWEEP: dict(
            model="gpt2-mini", seq_len=1024, batch_size=16, steps=300, lr=1e-3, warmup=30, min_lr_ratio=0.1,
            eval_every=50, eval_batches=8, checkpoint_every=100, data=OFFLINE_PLUS,
        ),
    },
    "smoke": {
        HEADLINE: dict(
            model="tiny", seq_len=16, batch_size=2, steps=12, lr=3e-3, warmup=2, min_lr_ratio=0.1,
            eval_every=6, eval_batches=2, checkpoint_every=6, mask_interval=2, amp="none",
        ),
        SWEEP: dict(
            model="tiny", seq_len=16, batch_size=2, steps=12, lr=3e-3, warmup=2, min_lr_ratio=0.1,
            eval_every=6, eval_batches=2, checkpoint_every=6, mask_interval=2, amp="none",
        ),
    },
    "paper": {  # nanoGPT's GPT-2 124M on OpenWebText, as Hu et al. ran it (their GPUs, their data)
        HEADLINE: dict(
            model="gpt2-124m", seq_len=1024, batch_size=12, grad_accum=40, steps=600_000, lr=6e-4, warmup=2000,
            min_lr_ratio=0.1, eval_every=2000, eval_batches=200, checkpoint_every=2000, data=OPENWEBTEXT,
        ),
        SWEEP: dict(
            model="gpt2-124m", seq_len=1024, batch_size=12, grad_accum=40, steps=600_000, lr=6e-4, warmup=2000,
            min_lr_ratio=0.1, eval_every=2000, eval_batches=200, checkpoint_every=2000, data=OPENWEBTEXT,
        ),
    },
}  # fmt: skip

# Recipes: how each method trains, as TrainConfig fields (Hu et al. Secs. 3-4).
FST = dict(mode="fst", decay=PAPER_LAMBDA_124M, decay_on="grad", mvue=True, dense_phase="finetune")
RECIPES: dict[str, dict] = {
    "dense": dict(mode="dense"),
    "fst": FST,  # the paper's recipe: masked decay on gradients, MVUE, dense fine-tuning (last 1/6)
    "srste": dict(mode="srste", decay=PAPER_LAMBDA_124M, decay_on="grad", dense_phase="none"),
    "half": dict(mode="half"),  # dense with the FFN width halved (same FFN non-zeros as 2:4)
    "weight24": dict(mode="weight24", decay=PAPER_LAMBDA_124M, decay_on="grad", dense_phase="none"),
    "ste": dict(mode="srste", decay=0.0, dense_phase="none"),  # STE: sparse forward, no decay
}


def lam(x: float) -> str:
    return f"{x:.0e}".replace("e-0", "e-")


def _sweep_runs() -> dict[str, tuple[str, dict]]:
    runs: dict[str, tuple[str, dict]] = {
        "dense": (SWEEP, RECIPES["dense"]),
        "ste": (SWEEP, RECIPES["ste"]),
        # Fig. 2: the same lambda on weights (SR-STE's Eq. 8) and on gradients (Eq. 10)
        f"decay-weights-{lam(6e-5)}": (SWEEP, dict(RECIPES["ste"], decay=6e-5, decay_on="weight")),
        # Hu's Fig. 3 and Table 7: fst with its parts switched off one by one
        "fst": (SWEEP, FST),
        "fst-pretrain": (SWEEP, dict(FST, dense_phase="pretrain")),
        "fst-noft": (SWEEP, dict(FST, dense_phase="none")),
        "fst-nodecay-nomvue-noft": (SWEEP, dict(FST, decay=0.0, mvue=False, dense_phase="none")),
        "fst-nomvue-noft": (SWEEP, dict(FST, mvue=False, dense_phase="none")),
        "fst-nomvue": (SWEEP, dict(FST, mvue=False)),
    }
    for x in SWEEP_LAMBDAS:  # Fig. 1 (and Fig. 2's on-gradients run at 6e-5)
        runs[f"decay-grads-{lam(x)}"] = (SWEEP, dict(RECIPES["ste"], decay=x, decay_on="grad"))
    return runs


_EXTRA: dict[str, tuple[str, dict]] = {}


def extend_plan(run_id: str, scale: str, recipe: dict) -> None:
    """Add a run decided by a measurement (Table 1's full run with the chosen lambda_W)."""
    _EXTRA[run_id] = (scale, recipe)


def plan() -> dict[str, tuple[str, dict]]:
    """Every run of the training-dynamics suites: run id -> (scale, recipe fields)."""
    runs = dict(_EXTRA)
    runs |= {f"sweep-{k}": v for k, v in _sweep_runs().items()}
    for seed in (0, 1):  # Table 5: two seeds each, so the seed spread sits beside the gap
        runs[f"124m-dense-s{seed}"] = (HEADLINE, dict(RECIPES["dense"], seed=seed))
        runs[f"124m-fst-s{seed}"] = (HEADLINE, dict(RECIPES["fst"], seed=seed))
    for name in ("srste", "half", "weight24"):  # Fig. 10
        runs[f"124m-{name}-s0"] = (HEADLINE, dict(RECIPES[name], seed=0))
    for x in LAMBDA_GRID:  # Table 1's test: the warm-up phase only (see lambda_test_steps)
        runs[f"124m-lambda-{lam(x)}"] = (HEADLINE, dict(FST, decay=x, dense_phase="none", seed=0))
    return runs


# Which runs each artifact reads.
NEEDS: dict[str, tuple[str, ...]] = {
    "figure1": ("sweep-dense", "sweep-ste", *(f"sweep-decay-grads-{lam(x)}" for x in SWEEP_LAMBDAS)),
    "figure2": ("sweep-dense", "sweep-ste", f"sweep-decay-weights-{lam(6e-5)}", f"sweep-decay-grads-{lam(6e-5)}"),
    "hu_figure3": ("sweep-fst", "sweep-fst-pretrain", "sweep-fst-noft"),
    "figure10": ("124m-dense-s0", "124m-fst-s0", "124m-srste-s0", "124m-half-s0", "124m-weight24-s0"),
    "table5": ("124m-dense-s0", "124m-dense-s1", "124m-fst-s0", "124m-fst-s1"),
    "table7": (
        "sweep-fst-nodecay-nomvue-noft",
        "sweep-fst-nomvue-noft",
        "sweep-fst-noft",
        "sweep-fst-nomvue",
        "sweep-fst",
    ),
    "hu_table1": ("124m-dense-s0", *(f"124m-lambda-{lam(x)}" for x in LAMBDA_GRID)),
}
# Table 7's rows as the paper prints them: (masked decay, MVUE, dense fine-tuning).
TABLE7_ROWS = {
    "sweep-fst-nodecay-nomvue-noft": ("none", (False, False, False)),
    "sweep-fst-nomvue-noft": ("decay", (True, False, False)),
    "sweep-fst-noft": ("decay+mvue", (True, True, False)),
    "sweep-fst-nomvue": ("decay+ft", (True, False, True)),
    "sweep-fst": ("decay+mvue+ft", (True, True, True)),
}


def lambda_test_steps(profile: str) -> int:
    """t0 of Table 1's test: the end of the learning-rate warm-up (the paper samples "a small number
    of training steps" in the warm-up stage)."""
    return int(SCALES[profile][HEADLINE]["warmup"])


def config(run_id: str, profile: str, data: str | None = None) -> TrainConfig:
    """The TrainConfig of ``run_id`` under ``profile`` (``data``: the token folder, where the
    profile does not fix one: the smoke corpus)."""
    scale, recipe = plan()[run_id]
    fields = {**SCALES[profile][scale], "seed": 0, **recipe}
    if data is not None:
        fields["data"] = data
    return TrainConfig(**fields)


class _Bytes:
    """Byte-level encoding for the smoke corpus (the ``tiny`` model's 256-token vocabulary)."""

    n_vocab, eot_token = 256, 0

    def encode_ordinary_batch(self, texts: list[str]) -> list[list[int]]:
        return [[b or 1 for b in t.encode()] for t in texts]


def smoke_corpus(root: Path) -> Path:
    """A small synthetic corpus of byte tokens (the smoke profile trains on it on a CPU in seconds)."""
    out = root / "smoke-corpus"
    if not (out / "manifest.json").exists():
        rng = np.random.default_rng(0)
        words = ["the", "cat", "sat", "on", "a", "mat", "dog", "ran", "far", "away", "and", "then", "slept"]
        docs = (Document(f"toy/{i}", " ".join(rng.choice(words, size=60)) + f" {i}.") for i in range(200))
        tok = {"name": "bytes", "n_vocab": 256}
        quiet = lambda *a, **k: None  # noqa: E731
        write_corpus(docs, out, _Bytes(), tokenizer=tok, sources=[{"name": "words"}], val_fraction=0.1, progress=quiet)
    return out


def run_path(results_dir: Path, profile: str, run_id: str) -> Path:
    """``<results>/<device>/runs/<run-id>``; runs of other profiles than ``full`` carry the
    profile in their id, so a smoke run on a GPU never lands on a full run."""
    return results_dir / "runs" / (run_id if profile == "full" else f"{profile}-{run_id}")


def _deadline() -> float:
    """When this process must stop training (``REPRO_TRAIN_MINUTES`` from its start; none if unset)."""
    minutes = os.environ.get("REPRO_TRAIN_MINUTES")
    return _STARTED + 60 * float(minutes) if minutes else math.inf


_STARTED = time.monotonic()


def last_step(run_dir: Path) -> int:
    log = run_dir / "log.csv"
    return int(pd.read_csv(log)["step"].iloc[-1]) if log.exists() and log.stat().st_size else 0


def ensure(ctx: RunContext, run_ids: Iterable[str], *, stop_at: dict[str, int] | None = None) -> dict[str, Path]:
    """Train every run of ``run_ids`` not finished yet (resuming its checkpoint where one exists)
    and return their directories. ``stop_at``: runs needed only up to a step (Table 1's warm-up
    test). Past the time budget (``REPRO_TRAIN_MINUTES``) the runs checkpoint and the suite stops,
    saying how to go on; nothing trained is lost."""
    stop_at = stop_at or {}
    results_dir = ctx.results.path().parent
    data = str(smoke_corpus(results_dir / "runs")) if ctx.profile == "smoke" else None
    out: dict[str, Path] = {}
    for rid in run_ids:
        d = run_path(results_dir, ctx.profile, rid)
        left = (_deadline() - time.monotonic()) / 60
        t0 = time.perf_counter()
        status = "stopped"
        if left > 0.1:
            cfg, budget = config(rid, ctx.profile, data), None if math.isinf(left) else left
            kw = dict(stop_at=stop_at.get(rid), device=ctx.device, gemm_tflops=ctx.ceilings.gemm_tflops)
            status = ensure_run(cfg, d, max_minutes=budget, **kw)
        done = status == "finished" or (rid in stop_at and last_step(d) >= stop_at[rid])
        ctx.log(f"run {rid}: {'done' if done else status} at step {last_step(d)} ({time.perf_counter() - t0:.0f}s)")
        if not done:
            raise SystemExit(
                f"run {rid} stopped at step {last_step(d)} (time budget REPRO_TRAIN_MINUTES); its checkpoint is "
                f"in {d}. Run the same command again to continue."
            )
        out[rid] = d
    return out


def read_log(run_dir: Path) -> pd.DataFrame:
    return pd.read_csv(run_dir / "log.csv")


def read_val(run_dir: Path) -> pd.DataFrame:
    return pd.read_csv(run_dir / "val.csv")


def smooth(x: np.ndarray, frac: float = 0.05) -> np.ndarray:
    """Centered moving average over ``frac`` of the curve (at least 1 point): flip rates are noisy."""
    k = max(1, int(round(frac * len(x))))
    if k == 1:
        return x.astype(float)
    return pd.Series(x, dtype=float).rolling(k, center=True, min_periods=1).mean().to_numpy()


def flip_late(log: pd.DataFrame) -> float:
    """Mean flip rate over the second half of training."""
    f = log["flip_rate"].to_numpy(float)
    return float(np.nanmean(f[len(f) // 2 :])) if len(f) else math.nan


def run_rows(ctx: RunContext, method: str, run_id: str, run_dir: Path) -> None:
    """The rows every training suite writes for one run: final validation and training loss, flip
    rate (peak, late mean), tokens trained, tokens/s and MFU (against the measured dense GEMM rate)."""
    summary = json.loads((run_dir / "summary.json").read_text())
    log, val = read_log(run_dir), read_val(run_dir)
    cfg = json.loads((run_dir / "config.json").read_text())
    shape = f"{cfg['model']}/{int(log['tokens'].iloc[-1])}tok"
    dtype = dtype_label(ctx)

    def add(metric: str, value: float, unit: str) -> None:
        if math.isfinite(float(value)):  # a run without a GEMM rate has no MFU: no row, not NaN
            ctx.results.add(method, shape, str(dtype), metric, float(value), unit, variant=run_id, verified=False)

    add("val_loss", val["val_loss"].iloc[-1], "nats")
    k = max(1, len(log) // 20)
    add("train_loss_last5pct", log["loss"].iloc[-k:].mean(), "nats")
    add("tokens", log["tokens"].iloc[-1], "tokens")
    add("tokens_per_s", summary.get("median_tokens_per_s", math.nan), "tokens/s")
    add("mfu", 100 * summary.get("mfu", math.nan), "%")
    if "flip_rate" in log and log["flip_rate"].notna().any():
        f = smooth(log["flip_rate"].to_numpy(float))
        add("flip_rate_peak", np.nanmax(f), "fraction")
        add("flip_rate_late", flip_late(log), "fraction")


# ---------------------------------------------------------------------------------------------
# claims (qualitative statements of figures without numbers) and the figures' curves
# ---------------------------------------------------------------------------------------------


def add_claim(ctx: RunContext, metric: str, value: float, runs: Iterable[str]) -> None:
    """One measured quantity a claim of ``repro/paper_data/claims_hu2024.csv`` is tested on."""
    scale = ",".join(runs)
    ctx.results.add("claim", scale, dtype_label(ctx), metric, float(value), "", variant=metric, verified=False)


def dtype_label(ctx: RunContext) -> str:
    """The compute dtype of the runs: bf16 autocast on a GPU (the full profile), float32 on a CPU."""
    return "bf16" if ctx.device.type == "cuda" and ctx.profile != "smoke" else "float32"


def claims_table(df: pd.DataFrame, artifact: str) -> pd.DataFrame:
    """Paper vs ours for each claim: the paper's statement, the test, our value, whether it holds
    (smoke rows: "n/a (smoke)", a few steps of a tiny model test no claim)."""
    claims = load_claims("hu2024", artifact)
    ours = df[df["method"] == "claim"].groupby("metric")["value"].last() if len(df) else pd.Series(dtype=float)
    smoke = len(df) > 0 and bool(df["profile"].eq("smoke").all())
    rows = []
    for c in claims.itertuples():
        v = float(ours.get(c.metric, math.nan))
        held = "smoke" if smoke else claim_holds(c.relation, v, c.threshold)
        rows.append(
            {
                "claim": c.claim,
                "paper": c.statement,
                "test": f"{c.metric} {c.relation} {c.threshold:g}",
                "ours": v,
                "holds": {True: "yes", False: "no", None: "not measured", "smoke": "n/a (smoke)"}[held],
            }
        )
    return pd.DataFrame(rows)


def claims_verdict(df: pd.DataFrame, artifact: str, scale: str) -> Verdict:
    """reproduced where every claim holds, falls short where one does not, not comparable where
    one was not measured; the caveat names the failing claims and the scale."""
    t = claims_table(df, artifact)
    if t["holds"].eq("n/a (smoke)").any():
        return Verdict("not comparable", f"smoke profile ({scale}): tiny models, a few steps; no claim tested")
    failed = list(t.loc[t["holds"] == "no", "claim"])
    missing = list(t.loc[t["holds"] == "not measured", "claim"])
    status = "falls short" if failed else ("not comparable" if missing else "reproduced")
    said = f"{len(t) - len(failed) - len(missing)} of {len(t)} claims hold"
    if failed:
        said += f"; not: {', '.join(failed)}"
    return Verdict(status, f"{said}; qualitative claims tested at reduced scale ({scale})")


def run_dirs_of(df: pd.DataFrame) -> dict[str, Path]:
    """Run id -> run directory, for the runs behind these rows (their device's results folder)."""
    out: dict[str, Path] = {}
    runs = df[~df["method"].isin(["claim", "ceiling"]) & df["metric"].eq("val_loss")]
    for (dev, profile, rid), _ in runs.groupby(["device", "profile", "variant"], sort=False):
        out[str(rid)] = run_path(results_root() / str(dev), str(profile), str(rid))
    return out


def curve(run_dir: Path, column: str, frac: float = 0.05) -> tuple[np.ndarray, np.ndarray]:
    """(tokens, smoothed ``column``) of a run's log; val_loss comes from its validation log."""
    t = read_val(run_dir) if column == "val_loss" else read_log(run_dir)
    y = t[column].to_numpy(float)
    return t["tokens"].to_numpy(float), (y if column == "val_loss" else smooth(y, frac))


def scale_note(df: pd.DataFrame) -> str:
    """ "gpt2-124m, 9.8M tokens" style: what the runs behind these rows trained (reduced scale is
    said next to every number)."""
    notes = []
    for s in sorted(set(df.loc[df["metric"] == "val_loss", "shape"])):
        model, _, tok = s.partition("/")
        n = float(tok.removesuffix("tok")) if tok.removesuffix("tok").isdigit() else float("nan")
        if n != n:
            notes.append(s)
        else:  # a smoke run's few hundred tokens would read "0.0M tokens"
            notes.append(f"{model}, {n / 1e6:.1f}M tokens" if n >= 1e5 else f"{model}, {int(n):,} tokens")
    return "; ".join(notes) or "no runs"
