"""CPU probe (no GPU needed): would the 16-bit window pivot, run on the top 16 bits of float32
|w|, find figure3's float32 pivot exactly in one counting pass, and how many values would the
low-16-bit resolution have to read again?

The design docs/methods.md proposes for FlexMasker's float32 pivot (its radix passes run at about
15% of copy): a 1/32 sample (one 16-value sector in every 32, as the 16-bit window pivot reads)
places a W-key window of 16-bit keys (|w|'s bits >> 16, its bf16-truncated key) around rank k;
one counting pass finds the rank-k key K, #(key > K) and #(key == K) if rank k falls in the window
(a hit), and compacts the values whose key is in the window; two 8-bit histograms over the
compacted values with key K give the low 16 bits. Exactness is checked against a sort. Reported per
weight regime: hits, the compacted share (what the second read costs) and the share with key K.
``rotated``: the sample reads sector s % 32 of span s instead of sector 0 (see ``sample_keys``).

Regimes, on MAP-NEO 460M's block linears in float32 (a few blocks; ``--blocks``): ``init`` (the
model's initialisation), ``scaled`` (row and column scales, as trained layers have), ``masked``
(the scaled values, half of them at random set to exactly 0, as figure3's trainer leaves pruned
weights after applying masks) and ``masked+step`` (then one small update to every value, as AdamW's next step gives).

    python3 scripts/probes/cpu_probe_f32_window_pivot.py [--blocks 2] [--seeds 3]
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from repro.models.llama import CONFIGS, LlamaModel, sparse_linears  # noqa: E402

SAMPLE = 32  # one 16-value sector in every 32


def sample_keys(bits: torch.Tensor, rotate: bool = False) -> torch.Tensor:
    """The sample's keys: sector 0 of every 32 (the window pivot's layout today), or sector
    s % 32 of span s (``rotate``), so that rows whose length is a multiple of the span (512
    values) are not always sampled at the same columns."""
    n = bits.numel() // (16 * SAMPLE) * (16 * SAMPLE)
    spans = bits[:n].view(-1, SAMPLE, 16)
    sector = torch.arange(spans.shape[0]) % SAMPLE if rotate else torch.zeros(spans.shape[0], dtype=torch.long)
    return spans[torch.arange(spans.shape[0]), sector].reshape(-1) >> 16


def window_pivot_f32(w: torch.Tensor, k: int, window: int, rotate: bool = False) -> dict:
    bits = w.abs().view(torch.int32).to(torch.int64)
    n = bits.numel()
    key = bits >> 16
    ks_keys = sample_keys(bits, rotate)
    ks = min(ks_keys.numel(), max(1, round(k * ks_keys.numel() / n)))
    key_s = int(ks_keys.topk(ks).values[-1])
    lo = min(max(key_s - (window // 2 - 1), 0), 0x8000 - window)
    above = int((key > lo + window - 1).sum())
    win = torch.bincount((key - lo).clamp(0, window - 1)[(key >= lo) & (key < lo + window)], minlength=window)
    rev = win.flip(0)
    cum = above + rev.cumsum(0)
    hit = above < k <= int(cum[-1])
    out = {"hit": hit, "compacted": int(win.sum()) / n}
    if not hit:
        return out
    i = int((cum >= k).nonzero()[0])
    big_k = lo + window - 1 - i
    gt = above + int(rev[:i].sum())
    low = bits[key == big_k] & 0xFFFF  # the compacted values with key K
    r = k - gt
    low_k = int(low.topk(r).values[-1])
    out |= {"at_key": low.numel() / n, "pivot_bits": (big_k << 16) | low_k}
    return out


def regimes(w: torch.Tensor, gen: torch.Generator) -> dict[str, torch.Tensor]:
    rows = torch.exp(0.5 * torch.randn(w.shape[0], 1, generator=gen))
    cols = torch.exp(0.5 * torch.randn(1, w.shape[1], generator=gen))
    scaled = w * rows * cols
    keep = torch.rand(w.shape, generator=gen) < 0.5
    masked = scaled * keep
    step = masked + 1e-4 * torch.randn(w.shape, generator=gen)
    return {"init": w, "scaled": scaled, "masked": masked, "masked+step": step}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--blocks", type=int, default=2)
    ap.add_argument("--seeds", type=int, default=3)
    args = ap.parse_args()
    cfg = dataclasses.replace(CONFIGS["map-neo-460m"], layers=args.blocks)
    print(f"MAP-NEO 460M, {args.blocks} blocks, float32; density 0.5 (k = n / 2); {args.seeds} seeds", flush=True)
    for seed in range(args.seeds):
        torch.manual_seed(seed)
        model = LlamaModel(cfg)
        gen = torch.Generator().manual_seed(seed)
        parts = {name: [] for name in ("init", "scaled", "masked", "masked+step")}
        for m in sparse_linears(model).values():
            for name, t in regimes(m.weight.detach(), gen).items():
                parts[name].append(t.reshape(-1))
        for name, ts in parts.items():
            w = torch.cat(ts)
            k = w.numel() // 2
            exact = int(w.abs().view(torch.int32).to(torch.int64).kthvalue(w.numel() - k + 1).values)
            for window, rotate in ((8, False), (16, False), (8, True)):
                r = window_pivot_f32(w, k, window, rotate)
                ok = "exact" if r["hit"] and r["pivot_bits"] == exact else ("miss" if not r["hit"] else "WRONG")
                extra = f", key K holds {100 * r['at_key']:.3f}%" if r["hit"] else ""
                print(
                    f"seed {seed} {name:12s} W={window:2d}{' rotated' if rotate else '        '} "
                    f"{w.numel() / 1e6:.1f}M values: {ok}, "
                    f"window holds {100 * r['compacted']:.3f}% of the values{extra}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
