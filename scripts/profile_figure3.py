"""Where figure3's time goes on one block (diagnostic): each stage timed separately."""

import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from kernels._flex_triton import fast_mask_triton  # noqa: E402
from kernels.flex import choose_configs, tile_counts  # noqa: E402
from kernels.patterns import parse_pattern  # noqa: E402
from kernels.pivot import find_pivot_stats  # noqa: E402
from repro.models.llama import CONFIGS, block_linear_shapes  # noqa: E402


def t(fn, n=5):
    fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        ts.append((time.perf_counter() - t0) * 1e3)
    return sorted(ts)[n // 2]


model = sys.argv[1] if len(sys.argv) > 1 else "map-neo-460m"
cfg = CONFIGS[model]
ws = [(0.02 * torch.randn(o, i, device="cuda")).to(torch.bfloat16) for _, o, i in block_linear_shapes(cfg)]
for m in ("exact", "radix", "gaussian"):
    r = find_pivot_stats(ws, 0.5, method=m, check_finite=False)
    ms = t(lambda m=m: find_pivot_stats(ws, 0.5, method=m, check_finite=False))
    print(f"pivot {m}: {ms:.2f} ms rounds={r.rounds}")
piv = find_pivot_stats(ws, 0.5, method="exact").pivot
for spec in ("TBS(4)", "TBS(8)", "Vegeta(4)", "2:4"):
    p = parse_pattern(spec)
    print(spec, f"counts {t(lambda p=p: [tile_counts(w, p, piv) for w in ws]):.2f} ms")
    cnts = [tile_counts(w, p, piv) for w in ws]
    for meth in ("torch", "vegeta", "fast"):
        ms = t(lambda p=p, meth=meth, cnts=cnts: [choose_configs(meth, p, c, int(c.sum()), 1) for _, c in cnts])
        print(f"   choose {meth}: {ms:.2f} ms")
    ns = [choose_configs("fast", p, c, int(c.sum()), 1) for _, c in cnts]
    ms = t(lambda p=p, ns=ns, cnts=cnts: [p.select(mg, n) for (mg, _), n in zip(cnts, ns, strict=True)])
    print(f"   select: {ms:.2f} ms")
    print(f"   untile: {t(lambda p=p: [p.untile(p.tiles(w.abs()), tuple(w.shape)) for w in ws]):.2f} ms")
    print(f"   fast triton: {t(lambda p=p: [fast_mask_triton(w, p, piv, 1) for w in ws]):.3f} ms")
