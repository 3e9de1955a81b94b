"""Where approx2's device time goes (diagnostic): torch.profiler over a few calls."""

import sys
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from kernels.transposable import transposable_mask_approx2  # noqa: E402

for r, c in [(3072, 768), (30768, 8192)]:
    w = torch.randn(r, c, device="cuda", dtype=torch.float16)
    transposable_mask_approx2(w, check_finite=False)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as prof:
        for _ in range(3):
            transposable_mask_approx2(w, check_finite=False)
        torch.cuda.synchronize()
    print(f"== {r}x{c}")
    print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=14, max_name_column_width=60))
