"""GPU probe (device tool): the largest batch (sequence 1024) whose whole GPT-2 training step fits
on this GPU the way table8 runs it (build on the device, loss check against the float32 twin,
eager step, CUDA-graph capture, replay, kernel profile of a replay for dense and fst), for
every mode table8 times. Doubling from the paper's batch, then bisection to within 1/8, on the two
heaviest modes; the others are then tried at that batch and it is lowered until every mode fits.
Every attempt runs in a fresh process: an attempt that ran out of memory cannot leave memory
behind for the next, and the answer does not depend on the order of the attempts (an earlier
version tried them all in one process and found 774M's largest batch at 12 where a fresh process
fits 20).
    usage: PYTHONPATH=. python3 scripts/probes/gpu_probe_max_batch.py [model[:first batch] ...]"""

from __future__ import annotations

import subprocess
import sys
import time

import torch

from repro.models.gpt2 import CONFIGS
from repro.timing import capture_graph
from suites import _kernel_breakdown, table8
from suites._training_bench import CEILING

START = {"gpt2-124m": 16, "gpt2-350m": 16, "gpt2-774m": 5}
T0 = time.perf_counter()


class _Quiet:
    """The RunContext pieces table8's loss check touches, discarding what it reports."""

    def __init__(self) -> None:
        self.results = self

    def add(self, *a: object, **k: object) -> None:
        pass

    def check(self, ok: bool, what: str) -> None:
        if not ok:
            raise AssertionError(what)


def attempt(name: str, mode: str, batch: int) -> None:
    """One attempt, in this process; prints ``RESULT fits|oom <peak GiB>``."""
    cfg, dev = CONFIGS[name], torch.device("cuda")
    model = step = graph = None
    torch.cuda.reset_peak_memory_stats()
    try:
        tokens = torch.randint(0, cfg.vocab_size, (batch, table8.SEQ), device=dev)
        model = table8._model(cfg, mode, dev)
        step = table8._Step(model, tokens, tokens, True)
        step.loss()
        if mode != "dense" and mode != "half":
            table8._check_loss(_Quiet(), model, cfg, tokens, tokens, f"{name} N={batch}")
        step()
        graph = capture_graph(step)
        graph.replay()
        torch.cuda.synchronize()
        if mode in table8.PROFILED:
            try:  # table8 profiles a replay of the timed graph, and goes on without it where that fails
                _kernel_breakdown.profile(graph.replay, dev)
            except torch.cuda.OutOfMemoryError:
                print("   (no room for the kernel profile)", flush=True)
        ok = True
    except torch.cuda.OutOfMemoryError:
        ok = False
    peak = torch.cuda.max_memory_allocated() / 2**30
    print(f"RESULT {'fits' if ok else 'oom'} {peak:.1f}", flush=True)


def fits(name: str, mode: str, batch: int) -> bool:
    """One attempt in a fresh process."""
    cmd = [sys.executable, __file__, "--one", name, mode, str(batch)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    last = [ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")]
    if out.returncode != 0 or not last:
        raise RuntimeError(f"attempt {name} {mode} N={batch} failed:\n{out.stdout[-2000:]}\n{out.stderr[-4000:]}")
    _, verdict, peak = last[-1].split()
    ok = verdict == "fits"
    for ln in out.stdout.splitlines():
        if not ln.startswith("RESULT "):
            print(ln, flush=True)
    print(
        f"[{time.perf_counter() - T0:6.1f}s] {name} {mode:15s} N={batch:4d}: {'fits' if ok else 'OOM '} "
        f"(peak allocated {peak} GiB)",
        flush=True,
    )
    return ok


def largest(name: str, mode: str, start: int) -> int:
    lo, n, hi = 0, start, None
    while hi is None:
        if fits(name, mode, n):
            lo, n = n, 2 * n
        else:
            hi = n
    while hi - lo > max(1, lo // 8):
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(name, mode, mid) else (lo, mid)
    return lo


def main() -> None:
    if sys.argv[1:2] == ["--one"]:
        attempt(sys.argv[2], sys.argv[3], int(sys.argv[4]))
        return
    total = torch.cuda.get_device_properties(0).total_memory / 2**30
    print(f"{torch.cuda.get_device_name(0)}, {total:.1f} GiB", flush=True)
    for spec in sys.argv[1:] or list(START):
        name, _, first = spec.partition(":")
        start = int(first) if first else START[name]
        n = min(largest(name, "dense", start), largest(name, "fst", start))
        others = ("weight24", "srste", "half", CEILING)
        while n > 0 and not all(fits(name, m, n) for m in others):
            n -= max(1, n // 8)
        print(f"== {name}: largest batch for every mode: {n}", flush=True)


if __name__ == "__main__":
    main()
