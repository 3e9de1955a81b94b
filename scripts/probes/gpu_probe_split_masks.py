"""Probe (not a suite): could FAST's mask generation of a MAP-NEO 460M block reach 50% of copy
(issue 20) if the pivot-independent within-tile search ran beside the pivot instead of after it?

The TBS(4,4) kernel's searches (about 27 of its 46.5 instructions a value) do not need the pivot;
only the tile counts, the Philox draw and the choice of layout do. A split design would run a
search kernel (writing each tile's layouts) on a second stream while the pivot's launches run,
then a finalize kernel (counts against the pivot, draw, choice, mask bytes). This probe bounds
that design with stand-ins, before any of it is built:

  A    FlexMasker as figure3 times it (pivot and mask launches chained with PDL)
  P    the pivot's launches alone (chained)
  M    the mask launch alone (pivot precomputed): an upper bound for the search kernel
  N    the mask launch with the searches cut out (a stand-in for the finalize kernel; wrong masks)
  P+N  the pivot, then N, chained: the split design if the search were free
  P|M  then N: the pivot's launches on one stream and M on another in one CUDA graph, joined,
       then N: the split design's shape with stand-ins (M does more than a search kernel, N
       less than a finalize, which also reads the tile codes)

Each timed as figure3 times FAST (CUDA-graph replay, L2 flushed, median), with % of copy as
figure3 counts it (two reads and the mask bytes); C, a plain copy of as many bytes (read half,
write half), shows what that share means at this size. Only A's masks are valid; A is checked equal to
``flex_mask`` with the same pivot first.

    python3 scripts/probes/gpu_probe_split_masks.py
"""

from __future__ import annotations

import importlib.util
import sys
import tempfile
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from kernels.ops import common  # noqa: E402
from kernels.ops.flex import TBS, FlexMasker  # noqa: E402
from repro.models.llama import CONFIGS, block_linear_shapes  # noqa: E402
from repro.roofline import measure_ceilings  # noqa: E402
from repro.timing import time_gpu  # noqa: E402
from suites.figure3 import task_bytes  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_probe_masker_launches import weights  # noqa: E402
from sass_count import TBS4_CODE  # noqa: E402

DENSITY = 0.5


def no_search_module(tmp: str):
    """The generated TBS(4,4) kernels with both searches cut (the compiler drops them)."""
    src = (ROOT / "kernels" / "ops" / "_flex_tbs4_triton.py").read_text()
    if TBS4_CODE not in src:
        raise SystemExit("the generated TBS(4,4) kernel changed: update the cut")
    path = Path(tmp) / "tbs4_no_search.py"
    path.write_text(src.replace(TBS4_CODE, "code = tl.where(n == 2, 255, 0)"))
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def raw(launches) -> list[tuple]:
    return [(x.kernel, x.grid, x.args, x.warps) for x in launches]


def run(launches) -> None:
    for x in launches:
        x(None)


def probe(model: str, copy: float, cut) -> None:
    """Every variant on one MAP-NEO block (7 bf16 weights, row-scaled like trained layers)."""
    from kernels.ops.flex import flex_mask

    ws = weights([(o, i) for _, o, i in block_linear_shapes(CONFIGS[model])])
    pattern = TBS(4)
    floor_us = task_bytes(ws, pattern) / copy / 1e3
    a = FlexMasker(ws, pattern, DENSITY)  # as figure3 builds it
    a(check=True)
    pivot, tie = float(a.state[0]), float(a.state[1])
    for w, got in zip(ws, a.masks, strict=True):
        if not torch.equal(got, flex_mask(w, pattern, DENSITY, "fast", 0, pivot, tie=tie)):
            raise SystemExit("A's masks differ from flex_mask with its pivot")
    # unchained launches: p for the pivot (its own state), m for the masks (a state set once)
    p = FlexMasker(ws, pattern, DENSITY, pdl=False)
    m = FlexMasker(ws, pattern, DENSITY, pdl=False)
    m(check=True)  # m.state now holds the pivot; its mask launches only read it
    pivot_chain = common.chain(raw(p._pivot_launches))
    n_raw = [(getattr(cut, x[0].fn.__name__), *x[1:]) for x in raw(p._mask_launches)]
    n_alone = [common.Launch(*x) for x in n_raw]
    p_then_n = common.chain(raw(p._pivot_launches) + n_raw)
    side = torch.cuda.Stream()

    def overlap() -> None:
        main = torch.cuda.current_stream()
        side.wait_stream(main)
        with torch.cuda.stream(side):
            run(m._mask_launches)
        run(pivot_chain)
        main.wait_stream(side)
        run(n_alone)

    half = task_bytes(ws, pattern) // 4  # int16 values: a copy of half the bytes reads and writes the rest
    src = torch.empty(half, dtype=torch.int16, device="cuda")
    dst = torch.empty_like(src)
    variants = {
        "C    copy of the same bytes": lambda: dst.copy_(src),
        "A    FlexMasker (figure3)": lambda: a(check=False),
        "P    pivot alone": lambda: run(pivot_chain),
        "M    masks alone": lambda: run(m._mask_launches),
        "N    masks, no search": lambda: run(n_alone),
        "P+N  chained": lambda: run(p_then_n),
        "P|M, then N": overlap,
    }
    n = sum(w.numel() for w in ws)
    print(
        f"\n{model}, TBS(4,4), density {DENSITY}: {n / 1e6:.1f}M values; figure3's floor {floor_us:.1f} us", flush=True
    )
    for name, fn in variants.items():
        t = time_gpu(fn).ms * 1e3
        print(f"  {name:28s} {t:8.1f} us  {100 * floor_us / t:5.1f}% of copy", flush=True)


def main() -> None:
    copy = measure_ceilings(torch.device("cuda")).copy_gbps
    print(f"{torch.cuda.get_device_name()}; copy {copy:.0f} GB/s; torch {torch.__version__}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        cut = no_search_module(tmp)
        for model in ("map-neo-460m", "map-neo-7b"):
            probe(model, copy, cut)


if __name__ == "__main__":
    main()
