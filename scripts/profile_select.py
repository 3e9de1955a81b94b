"""Profile TBS(4)'s reference selection on a 460M block (diagnostic)."""

import sys
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from kernels.flex import choose_configs, tile_counts  # noqa: E402
from kernels.patterns import TBS  # noqa: E402

w = (0.02 * torch.randn(3072, 1024, device="cuda")).to(torch.bfloat16)
p = TBS(4)
piv = w.abs().float().flatten().kthvalue(w.numel() // 2).values.item()
mags, c = tile_counts(w, p, piv)
n = choose_configs("fast", p, c, int(c.sum()), 1)
p.select(mags, n)
torch.cuda.synchronize()
with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as prof:
    p.select(mags, n)
    torch.cuda.synchronize()
print(prof.key_averages().table(sort_by="cpu_time_total", row_limit=12, max_name_column_width=50))
