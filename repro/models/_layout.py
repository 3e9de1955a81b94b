"""Memory-layout preferences that model builders pass on to their linears."""

from __future__ import annotations

from torch import nn


def prefer_col_major_output(linear: nn.Module) -> None:
    """Ask a linear that can write its output column-major (``output_layout``, as
    ``kernels.layers.sparse_linear.SparseLinear`` has) to do so: the FFN's inner activation is then read
    element-wise by the activation and as a GEMM operand by the next linear, and its gradient is
    column-major in the backward, where the 2:4 weight-gradient operand is packed from rows (Hu et
    al. 2024, App. A.3). Others (nn.Linear) are left as they are."""
    if hasattr(linear, "output_layout"):
        linear.output_layout = "col"
