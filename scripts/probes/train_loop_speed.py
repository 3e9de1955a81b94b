"""GPU probe (device tool): eager training-loop throughput of dense, fst and srste (flip tracking
on and off) and torch.compile(dense), at GPT-2 124M and a 6-layer d=384 model, batch 16 x 1024,
40 steps of synthetic data (CUDA-event step medians). Decides whether pretraining runs need graph
capture of the step.

usage: PYTHONPATH=. python3 scripts/probes/train_loop_speed.py  (OUT=dir for the json)
"""

import dataclasses
import functools
import json
import os
import time
from pathlib import Path

import torch

from kernels.layers.sparse_linear import SparseLinear
from repro.models.gpt2 import CONFIGS, build_gpt2
from repro.train import synthetic_batches, train


def measure(name: str, cfg, mode: str, track: bool, compile_: bool, batch: int, steps: int = 40) -> dict:  # noqa: ANN001
    torch.manual_seed(0)
    fac = None if mode == "dense" else functools.partial(SparseLinear, mode=mode, checks=False, track_flip=track)
    with torch.device("cuda"):
        model = build_gpt2(dataclasses.replace(cfg, ffn_mode=mode), linear_factory=fac)
    if compile_:
        model = torch.compile(model)
    t0 = time.time()
    r = train(model, synthetic_batches(50257, batch, 1024, device="cuda"), steps=steps, progress=False)
    return dict(
        model=name, mode=mode, track=track, compile=compile_, N=batch, wall_s=time.time() - t0,
        ms_per_step=r.ms_per_step, tokens_per_s=r.tokens_per_s, final_loss=r.final_loss, timer=r.timer,
    )  # fmt: skip


def main() -> None:
    small = dataclasses.replace(CONFIGS["gpt2-124m"], d_model=384, n_layer=6, n_head=6)
    rows = []
    for name, cfg in (("gpt2-124m", CONFIGS["gpt2-124m"]), ("small-6x384", small)):
        plan = [("dense", False, False), ("fst", False, False), ("fst", True, False), ("srste", True, False)]
        for mode, track, comp in [*plan, ("dense", False, True)]:
            try:
                rows.append(measure(name, cfg, mode, track, comp, 16))
                print(json.dumps(rows[-1]), flush=True)
            except Exception as e:  # noqa: BLE001 - a probe reports and goes on
                print("FAIL", name, mode, comp, repr(e)[:300], flush=True)
            torch.cuda.empty_cache()
    Path(os.environ.get("OUT", "/tmp"), "train_speed.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
