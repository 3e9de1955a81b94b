"""suites._pretrain: the scale said next to every training number."""

from __future__ import annotations

import pandas as pd

from suites._pretrain import scale_note


def test_scale_note_says_tokens_at_every_scale():
    df = pd.DataFrame(
        {
            "metric": ["val_loss", "val_loss", "train_loss_last5pct"],
            "shape": ["gpt2-124m/9830400tok", "llama-micro/128tok", "other/1tok"],
        }
    )
    assert scale_note(df) == "gpt2-124m, 9.8M tokens; llama-micro, 128 tokens"  # smoke: not "0.0M"
    assert scale_note(df.iloc[:0]) == "no runs"
