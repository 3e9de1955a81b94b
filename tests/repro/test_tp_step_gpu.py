"""The tensor-parallel step of suite fast_figure3_e2e on one GPU with its blocks compiled (what the
suite runs there): the compiled blocks give the eager blocks' losses under bf16 autocast, and a
mask refresh keeps working through the compiled graph. GPU only (``-m gpu``)."""

from __future__ import annotations

import pytest
import torch

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]


def test_compiled_blocks_match_eager_on_one_gpu():
    import torch.distributed as dist

    from repro.models.llama import LlamaConfig, LlamaModel
    from repro.tp_step import TPTrainer, build_mesh, init_distributed, parallelize_llama

    device = torch.device("cuda", torch.cuda.current_device())
    created = init_distributed(device)
    try:
        cfg = LlamaConfig(hidden=512, ffn=1024, layers=2, heads=8, vocab=512, seq_len=128)
        mesh = build_mesh(device)
        tokens = torch.randint(0, cfg.vocab, (4, cfg.seq_len), generator=torch.Generator().manual_seed(0)).to(device)
        losses = {}
        for compiled in (False, True):
            torch.manual_seed(0)
            model = parallelize_llama(LlamaModel(cfg, device=device), mesh, compile_blocks=compiled)
            trainer = TPTrainer(model, mesh, "fast", "TBS(4)", every=2, fast_pivot="radix")
            losses[compiled] = torch.stack([trainer.step(tokens) for _ in range(4)]).float().cpu()
            assert trainer.times_ms()["regenerations"] == 2.0
        assert torch.isfinite(losses[True]).all()
        torch.testing.assert_close(losses[True], losses[False], rtol=2e-2, atol=2e-2)
    finally:
        if created:
            dist.destroy_process_group()
