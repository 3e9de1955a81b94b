"""Triton device helpers shared by several kernels."""

import triton
import triton.language as tl


@triton.jit
def cast_out(v, out_ptr):
    """fp32 -> the output pointer's dtype with round-to-nearest-even. bf16 is rounded by hand:
    the Triton interpreter truncates fp32 -> bf16 while the GPU rounds to nearest even; after this
    the final conversion is exact on both, so CPU tests and GPU runs agree bit for bit."""
    ty: tl.constexpr = out_ptr.dtype.element_ty
    if tl.constexpr(ty == tl.bfloat16):
        b = v.to(tl.uint32, bitcast=True)
        b = ((b + 0x7FFF + ((b >> 16) & 1)) >> 16) << 16
        v = b.to(tl.float32, bitcast=True)
    return v.to(ty)
