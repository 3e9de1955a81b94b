"""CPU probe (no GPU needed): rounds and full counting passes of FAST's distribution-aware pivot
search (``kernels.ops.pivot.find_pivot_stats(method="gaussian")``, defaults) on fresh weights and on
the same weights after one flex-SS mask has zeroed half of them (as fast_figure3_e2e's trainer
keeps them) and a small update. Rounds and passes do not depend on the device, so the CPU can
count them. usage: PYTHONPATH=. python3 scripts/probes/cpu_probe_gaussian_rounds.py"""

from __future__ import annotations

import torch

from kernels.ops import pivot as P
from kernels.ops.flex import flex_mask
from kernels.ops.patterns import parse_pattern
from repro.models.llama import CONFIGS, block_linear_shapes

BLOCKS = 3
DENSITY = 0.5


def main() -> None:
    torch.manual_seed(0)
    cfg = CONFIGS["map-neo-460m"]
    fresh = [torch.randn(o, k) * 0.02 for _ in range(BLOCKS) for _, o, k in block_linear_shapes(cfg)]
    n = sum(w.numel() for w in fresh)
    passes = {"count": 0, "streamed": 0}
    count_ge = P._count_ge

    def counted(values, edges, comm):  # every full or compacted counting pass of the search
        passes["count"] += 1
        passes["streamed"] += sum(c.numel() for c in values.chunks())
        return count_ge(values, edges, comm)

    P._count_ge = counted
    print(f"MAP-NEO 460M shapes, {BLOCKS} blocks, {n / 1e6:.1f}M values, N(0, 0.02), density {DENSITY}")
    for pattern in (None, "TBS(4)", "TBS(8)", "Vegeta(4)", "Vegeta(8)"):
        weights = fresh
        if pattern is not None:
            pivot = P.find_pivot(fresh, DENSITY, method="exact")
            pat = parse_pattern(pattern)
            masked = [w * flex_mask(w, pat, DENSITY, "torch", 1, pivot) for w in fresh]
            weights = [w + (w != 0) * torch.randn_like(w) * 1e-4 for w in masked]  # one small update
        passes.update(count=0, streamed=0)
        r = P.find_pivot_stats(weights, DENSITY, "gaussian", None)
        zeros = sum(int((w == 0).sum()) for w in weights) / n
        print(
            f"{pattern or 'fresh':>10s}: zeros {zeros:.3f}, rounds {r.rounds}, counting passes {passes['count']} "
            f"(values streamed {passes['streamed'] / n:.2f} x n), candidates gathered {r.candidates}"
        )


if __name__ == "__main__":
    main()
