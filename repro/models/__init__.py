"""Models of the end-to-end sparse-training measurements."""

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
    "LlamaConfig",
    "LlamaModel",
    "block_linear_shapes",
    "count_parameters",
    "param_count",
    "sparse_linear_count",
    "sparse_linears",
    "train_flops_per_token",
]
