"""Models of the end-to-end sparse-training measurements."""

from repro.models.gpt2 import CONFIGS as GPT2_CONFIGS
from repro.models.gpt2 import GPT2Config, GPT2Model, build_gpt2, ffn_linears
from repro.models.llama import (
    CONFIGS,
    LlamaConfig,
    LlamaModel,
    block_linear_shapes,
    count_parameters,
    param_count,
    sparse_linear_count,
    sparse_linears,
    train_flops_per_token,
)

__all__ = [
    "CONFIGS",
    "GPT2_CONFIGS",
    "GPT2Config",
    "GPT2Model",
    "build_gpt2",
    "ffn_linears",
    "LlamaConfig",
    "LlamaModel",
    "block_linear_shapes",
    "count_parameters",
    "param_count",
    "sparse_linear_count",
    "sparse_linears",
    "train_flops_per_token",
]
