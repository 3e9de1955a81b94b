"""The shared kernel package: Triton kernels for structured sparse training, each beside a
plain-PyTorch reference (``*_reference``) that the tests compare it with.

Two layers: :mod:`kernels.ops` (one module per kernel family with its Triton twin, and the
shared helpers in :mod:`kernels.ops.common`) and :mod:`kernels.layers` (the ``nn.Module`` s and
autograd glue built on them: ``SparseLinear``, ``GradHandoff``, ``Gemm24Only``, ``fst_gelu`` /
``fst_gated``). The names below are re-exported for users; no re-exported name is also the name
of a submodule of this package.

Every entry point takes tensors on any device; on CUDA (or on CPU under ``TRITON_INTERPRET=1``)
it runs the Triton kernel, elsewhere the reference. Nothing here assumes a single GPU: the
kernels work per tensor (or per shard) and carry no global state but per-shape caches.
"""

from kernels.layers.sparse_linear import SparseLinear
from kernels.ops.flex import flex_mask, flex_mask_reference, mask_quality
from kernels.ops.geglu import geglu, geglu_intuitive, geglu_reference, swiglu, swiglu_reference
from kernels.ops.masked_decay import masked_decay_, masked_decay_reference
from kernels.ops.mvue import mvue24, mvue24_reference
from kernels.ops.nm_mask import nm_mask
from kernels.ops.patterns import NM, TBS, Pattern, Unstructured, Vegeta, parse_pattern
from kernels.ops.pivot import PivotResult, find_pivot, find_pivot_stats
from kernels.ops.sparse_gemm import Sparse24Weight, cusparselt_available
from kernels.ops.transposable import (
    TRANSPOSABLE_24_PATTERNS,
    transposable_mask,
    transposable_mask_approx2,
    transposable_mask_reference,
)

__all__ = [
    "NM",
    "TBS",
    "Pattern",
    "PivotResult",
    "Unstructured",
    "Vegeta",
    "find_pivot",
    "find_pivot_stats",
    "flex_mask",
    "flex_mask_reference",
    "mask_quality",
    "parse_pattern",
    "TRANSPOSABLE_24_PATTERNS",
    "Sparse24Weight",
    "SparseLinear",
    "cusparselt_available",
    "geglu",
    "geglu_intuitive",
    "geglu_reference",
    "masked_decay_",
    "masked_decay_reference",
    "mvue24",
    "mvue24_reference",
    "nm_mask",
    "swiglu",
    "swiglu_reference",
    "transposable_mask",
    "transposable_mask_approx2",
    "transposable_mask_reference",
]
