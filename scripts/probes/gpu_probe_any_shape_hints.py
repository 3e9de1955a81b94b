"""Probe (GPU, not a suite): does the any-shape TBS(8) baseline graph run slower on a large model
when it was compiled for a small one? figure3 compiles ``masks_any_shape`` once, at its first model
(MAP-NEO 460M), and reuses it for 7B and 13B; inductor tunes its kernels for the sizes it first
sees (the size hints), and at a6d205f a graph compiled for the GPU tests' small weights ran the 7B
block slower than eager (docs/methods.md, "FX graph cache"). If a graph compiled
at the large model's own sizes is clearly faster, figure3 should compile afresh per model.

Each case runs in its own process (fresh dynamo state, inductor's FX graph cache off for this
graph): ``--case small-first`` compiles at a 460M block, then times a TARGET block; ``--case
target-first`` compiles at the TARGET block. Both time a whole masker call (pivot and masks of the
block's seven weights, the compiled ``torch`` baseline) by ``repro.timing.time_gpu`` (CUDA-graph
replays, L2 flushed, median) and check the masks against eager once. Without ``--case`` it runs
both cases as subprocesses and prints them side by side.

    python3 scripts/probes/gpu_probe_any_shape_hints.py [--target map-neo-7b] [--smoke]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from functools import partial
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from kernels.ops.flex_torch import TorchFlexMasker  # noqa: E402
from kernels.ops.patterns import TBS  # noqa: E402
from repro.models.llama import CONFIGS, LlamaConfig, block_linear_shapes  # noqa: E402
from repro.timing import time_fn  # noqa: E402
from suites.figure3 import DENSITY  # noqa: E402

SMOKE = {
    "small": LlamaConfig(hidden=64, ffn=128, layers=1, heads=4, vocab=256, seq_len=32),
    "large": LlamaConfig(hidden=128, ffn=384, layers=1, heads=4, vocab=256, seq_len=32),
}


def block(cfg: LlamaConfig, device: torch.device) -> list[torch.Tensor]:
    gen = torch.Generator(device=device).manual_seed(1234)
    return [
        (0.02 * torch.randn(o, i, device=device, generator=gen)).to(torch.bfloat16)
        for _, o, i in block_linear_shapes(cfg)
    ]


def run_case(case: str, target: str, smoke: bool) -> None:
    dev = torch.device("cpu" if smoke else "cuda")
    small_cfg = SMOKE["small"] if smoke else CONFIGS["map-neo-460m"]
    target_cfg = SMOKE["large"] if smoke else CONFIGS[target]
    pattern = TBS(8)
    t0 = time.perf_counter()
    if case == "small-first":
        TorchFlexMasker(block(small_cfg, dev), pattern, DENSITY, "torch", compile=True)()
        print(f"{case}: compiled at the small block in {time.perf_counter() - t0:.1f} s", flush=True)
    ws = block(target_cfg, dev)
    masker = TorchFlexMasker(ws, pattern, DENSITY, "torch", compile=True)
    t1 = time.perf_counter()
    got = masker()
    print(f"{case}: first call at the target block {time.perf_counter() - t1:.1f} s", flush=True)
    want = TorchFlexMasker(ws, pattern, DENSITY, "torch")()
    same = all(torch.equal(a, b) for a, b in zip(got, want, strict=True))
    timing = time_fn(partial(masker, check=False), dev)
    eager = time_fn(partial(TorchFlexMasker(ws, pattern, DENSITY, "torch"), check=False), dev)
    print(
        f"RESULT {case} target={'smoke-large' if smoke else target}: "
        f"compiled {timing.ms:.2f} ms, eager {eager.ms:.2f} ms "
        f"({timing.timer}), masks equal to eager: {same}",
        flush=True,
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--case", choices=("small-first", "target-first"))
    ap.add_argument("--target", default="map-neo-7b")
    ap.add_argument("--smoke", action="store_true", help="small blocks on the CPU")
    args = ap.parse_args()
    if args.case:
        run_case(args.case, args.target, args.smoke)
        return
    print(torch.__version__, torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu", flush=True)
    for case in ("target-first", "small-first"):
        cmd = [sys.executable, __file__, "--case", case, "--target", args.target] + (["--smoke"] if args.smoke else [])
        subprocess.run(cmd, check=True)


if __name__ == "__main__":
    main()
