"""The shared kernel package: Triton kernels for structured sparse training, each beside a
plain-PyTorch reference (``*_reference``) that the tests compare it with.

Every entry point takes tensors on any device; on CUDA (or on CPU under ``TRITON_INTERPRET=1``)
it runs the Triton kernel, elsewhere the reference. Nothing here assumes a single GPU: the
kernels work per tensor (or per shard) and carry no global state but per-shape caches.
"""

from kernels.flex import flex_mask, flex_mask_reference, mask_quality
from kernels.geglu import geglu, geglu_intuitive, geglu_reference, swiglu, swiglu_reference
from kernels.masked_decay import masked_decay_, masked_decay_reference
from kernels.mvue import mvue24, mvue24_reference
from kernels.nm_mask import nm_mask
from kernels.patterns import NM, TBS, Pattern, Unstructured, Vegeta, parse_pattern
from kernels.pivot import PivotResult, find_pivot, find_pivot_stats
from kernels.sparse_gemm import Sparse24Weight, cusparselt_available
from kernels.sparse_linear import SparseLinear
from kernels.transposable import (
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
