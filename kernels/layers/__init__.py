"""The layers: ``nn.Module`` s and autograd glue built on :mod:`kernels.ops`.

* :mod:`kernels.layers.sparse_linear`: ``SparseLinear`` (a drop-in ``nn.Linear`` for 2:4 sparse
  training: fst, srste, weight24, dense) and ``GradHandoff``.
* :mod:`kernels.layers.sparse_activation`: ``fst_gelu`` / ``fst_gated``, the activation after an
  fst layer whose backward also packs that layer's weight-gradient operand.
* :mod:`kernels.layers.gemm24`: ``Gemm24Only``, the timing-only GEMM-level ceiling of fst.

Code inside the repository imports from those modules (``repro.deps`` follows module imports,
not this package's re-exports); the names below are for users.
"""

from kernels.layers.gemm24 import Gemm24Only
from kernels.layers.sparse_activation import fst_act, fst_gated, fst_gelu
from kernels.layers.sparse_linear import MODES, GradHandoff, SparseLinear

__all__ = ["MODES", "Gemm24Only", "GradHandoff", "SparseLinear", "fst_act", "fst_gated", "fst_gelu"]
