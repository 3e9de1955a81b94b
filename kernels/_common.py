"""Input validation and Triton dispatch shared by every kernel of the package.

Kernels never return a silently wrong answer: every public entry point checks
shape, dtype, device and finiteness here and raises a ValueError/TypeError
that names the constraint.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

import torch

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
