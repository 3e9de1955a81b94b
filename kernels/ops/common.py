"""Helpers shared by the kernel families of :mod:`kernels.ops` (and the layers above them):
input validation, Triton dispatch, Triton device functions and the repeatable launch.

Kernels never return a silently wrong answer: every public entry point checks
shape, dtype, device and finiteness here and raises a ValueError/TypeError
that names the constraint.

Every name here is public: a module that needs a helper from another one finds it here (or as a
public name of that family's module), never under a ``_`` name of another module
(``tests/test_imports.py``).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable

import torch
import triton
import triton.language as tl

FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def triton_interpret() -> bool:
    """True when Triton runs kernels on the CPU through its interpreter."""
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def use_triton(t: torch.Tensor) -> bool:
    """Whether the Triton path can run on ``t``: on CUDA, or on CPU under the interpreter."""
    if t.is_cuda:
        return True
    return t.device.type == "cpu" and triton_interpret()


def check_tensor(
    name: str,
    t: object,
    *,
    dtypes: Iterable[torch.dtype] = FLOAT_DTYPES,
    ndim: int | None = None,
    min_ndim: int | None = None,
    finite: bool = True,
) -> torch.Tensor:
    """Validate a tensor argument; raise TypeError/ValueError naming the constraint."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    dtypes = tuple(dtypes)
    if t.dtype not in dtypes:
        names = ", ".join(str(d).replace("torch.", "") for d in dtypes)
        raise TypeError(f"{name} has dtype {str(t.dtype).replace('torch.', '')}; supported: {names}")
    if t.device.type not in ("cpu", "cuda"):
        raise ValueError(f"{name} is on device {t.device}; supported devices: cpu, cuda")
    if ndim is not None and t.dim() != ndim:
        raise ValueError(f"{name} must be {ndim}-D, got shape {tuple(t.shape)}")
    if min_ndim is not None and t.dim() < min_ndim:
        raise ValueError(f"{name} must have at least {min_ndim} dimension(s), got shape {tuple(t.shape)}")
    if finite and t.is_floating_point() and t.numel() and not bool(torch.isfinite(t).all()):
        raise ValueError(f"{name} contains NaN or Inf; refusing to compute on non-finite values")
    return t


def check_int(name: str, value: object, lo: int | None = None, hi: int | None = None) -> int:
    """Validate an int argument (bools refused): TypeError if not an int, ValueError outside
    [lo, hi] (either bound optional); the messages name the argument. Returns the value."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {value!r} ({type(value).__name__})")
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        if hi is None:
            want = "a positive int" if lo == 1 else f"an int >= {lo}"
        elif lo is None:
            want = f"an int <= {hi}"
        else:
            want = f"an int in [{lo}, {hi}]"
        raise ValueError(f"{name} must be {want}, got {value}")
    return value


def check_divisible(name: str, size: int, by: int, what: str) -> None:
    if size % by != 0:
        raise ValueError(f"{name} has size {size}, which is not divisible by the {what} ({by})")


def check_same_device(**tensors: torch.Tensor) -> None:
    devices = {k: v.device for k, v in tensors.items()}
    if len(set(devices.values())) > 1:
        raise ValueError(f"tensors must be on one device, got {devices}")


def check_same_shape(**tensors: torch.Tensor) -> None:
    shapes = {k: tuple(v.shape) for k, v in tensors.items()}
    if len(set(shapes.values())) > 1:
        raise ValueError(f"tensors must have one shape, got {shapes}")


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


# --- Layouts and autocast ---


def is_col_major(z: torch.Tensor) -> bool:
    """True when z's memory is a contiguous [last, *leading] tensor (z2 has strides (1, P))."""
    return z.dim() >= 2 and z.movedim(-1, 0).is_contiguous()


def empty_in_layout(z: torch.Tensor, last: int, col_major: bool) -> torch.Tensor:
    """Uninitialised tensor of shape [*z.shape[:-1], last] in the given layout."""
    lead = tuple(z.shape[:-1])
    if col_major:
        return torch.empty((last, *lead), dtype=z.dtype, device=z.device).movedim(0, -1)
    return torch.empty((*lead, last), dtype=z.dtype, device=z.device)


def as_layout(t: torch.Tensor, col_major: bool) -> torch.Tensor:
    if col_major:
        return t if is_col_major(t) else t.movedim(-1, 0).contiguous().movedim(0, -1)
    return t.contiguous()


def as_2d(t: torch.Tensor, features: int) -> torch.Tensor:
    """``t`` as [tokens, features] without a copy where it is row-major or column-major (the
    layouts cuSPARSELt and our packer read directly), else a row-major copy."""
    t2 = t.reshape(-1, features)
    return t2 if t2.is_contiguous() or t2.t().is_contiguous() else t2.contiguous()


def autocast_enabled(device_type: str) -> bool:
    try:
        return bool(torch.is_autocast_enabled(device_type))
    except (RuntimeError, TypeError, ValueError):  # a device type autocast does not know
        return False


def no_autocast(device_type: str) -> contextlib.AbstractContextManager:
    if device_type in ("cuda", "cpu"):
        return torch.autocast(device_type, enabled=False)
    return contextlib.nullcontext()


# --- Triton device functions ---


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


# Read when this module is imported, as Triton reads it: a jit function sees it as a constant.
INTERPRETED: tl.constexpr = tl.constexpr(os.environ.get("TRITON_INTERPRET", "0") == "1")


@triton.jit
def store_cast(v, out_ptr):
    """fp32 -> the output pointer's dtype as the GPU casts it (round to nearest even), on the GPU
    and under the interpreter alike. Unlike :func:`cast_out` the GPU's code is the plain cast: the
    hand rounding is compiled only where the interpreter would otherwise truncate bf16."""
    if INTERPRETED:
        v = cast_out(v, out_ptr)
    return v.to(out_ptr.dtype.element_ty)


# --- Launch ---
# A Triton launch repeated with the very same arguments, at a fraction of the host cost.
#
# Why: a fused mask kernel runs for a few microseconds on an H100, while ``kernel[grid](...)``
# spends tens of microseconds on the host (binding and specializing the arguments, the cache
# lookup) every call; a block's mask generation is a dozen launches, so eager generation is host
# bound. ``Launch`` binds once: the first call goes through Triton (compiling if needed) and keeps
# the compiled kernel; once ``direct`` is switched on, later calls hand the same arguments straight
# to the compiled kernel's launcher, exactly as ``JITFunction.run`` does after its cache hit. That
# is only valid while every argument is the same object/value as at the first call (so the cached
# specialization still holds): the caller (``kernels.ops.flex.FlexMasker``) builds the arguments once
# and checks the direct launches against Triton's own at construction. Launch hooks (profilers)
# and the interpreter always take Triton's path.


class Launch:
    """``kernel[grid](*args, num_warps=warps)``, repeatable; ``args`` lists every kernel
    parameter in signature order (constexprs included)."""

    __slots__ = ("kernel", "grid", "args", "warps", "compiled", "direct", "pdl")

    def __init__(self, kernel: object, grid: tuple[int, ...], args: tuple, warps: int, pdl: bool = False) -> None:
        self.kernel = kernel
        self.grid = tuple(grid) + (1,) * (3 - len(grid))
        self.args = args
        self.warps = warps
        self.compiled: object | None = None
        self.direct = False
        self.pdl = pdl  # a chained launch (kernels/ops/_chain_triton.py): args hold PDL=True

    def __call__(self, stream: int | None = None) -> None:
        """Launch; directly on ``stream`` (from ``direct_stream``) when switched on, else through Triton."""
        ck = self.compiled
        if self.direct and ck is not None and stream is not None:
            g = self.grid
            ck.run(g[0], g[1], g[2], stream, ck.function, ck.packed_metadata, None, None, None, *self.args)
            return
        extra = {"launch_pdl": True} if self.pdl else {}
        got = self.kernel[self.grid](*self.args, num_warps=self.warps, **extra)
        if ck is None and all(hasattr(got, a) for a in ("run", "function", "packed_metadata")):
            self.compiled = got  # a compiled kernel (CUDA); the interpreter returns none

    def with_arg(self, index: int, value: object) -> Launch:
        """The same launch with argument ``index`` replaced (a non-specialized one, e.g. the seed)."""
        args = self.args[:index] + (value,) + self.args[index + 1 :]
        new = Launch(self.kernel, self.grid, args, self.warps, self.pdl)
        new.compiled, new.direct = self.compiled, self.direct
        return new


def chained(kernel: object, args: tuple, flag: int) -> tuple:
    """``args`` of ``kernel`` (signature order, trailing defaults left out or not) with its last
    parameter, ``PDL``, set to ``flag`` (``kernels/ops/_chain_triton.py``: WAIT | TRIGGER bits)."""
    names = kernel.arg_names
    if names[-1] != "PDL" or not len(names) - 1 <= len(args) <= len(names):
        raise ValueError(f"{getattr(kernel, '__name__', kernel)} takes no PDL flag last")
    return tuple(args[: len(names) - 1]) + (flag,)


def chain(launches: list[tuple]) -> list[Launch]:
    """``Launch`` of each (kernel, grid, args, warps) of a chain with programmatic dependent
    launch: each kernel but the first waits for the ones before it and is launched with PDL,
    each but the last lets the next launch early. One kernel alone does not chain."""
    if len(launches) < 2:
        return [Launch(*x) for x in launches]
    last = len(launches) - 1
    out = []
    for i, (kernel, grid, args, warps) in enumerate(launches):
        flag = (1 if i else 0) | (2 if i < last else 0)  # WAIT, TRIGGER
        out.append(Launch(kernel, grid, chained(kernel, args, flag), warps, pdl=i > 0))
    return out


def _no_launch_hooks() -> bool:
    from triton import knobs

    for hook in (knobs.runtime.launch_enter_hook, knobs.runtime.launch_exit_hook):
        if hook is not None and getattr(hook, "calls", True):  # a HookChain with hooks, or a function
            return False
    return True


def direct_stream(device: torch.device) -> int | None:
    """The raw current CUDA stream of ``device`` (what Triton launches on; the capture stream
    under CUDA-graph capture) for direct launches; None (Triton's path) off CUDA or while launch
    hooks (a profiler) are registered."""
    if device.type != "cuda" or not _no_launch_hooks():
        return None
    index = device.index if device.index is not None else torch.cuda.current_device()
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    return raw(index) if raw is not None else torch.cuda.current_stream(index).cuda_stream
