"""Exit 1 if Triton's interpreter cannot run a kernel whose loop bound is a runtime argument with
the installed NumPy (Triton 3.6, the version torch 2.11 pins, converts such a scalar with
``int()`` of a 1-element array, which NumPy 2.4 refuses: 74 of the CPU tests failed so, every
one a pivot or flex kernel). ``scripts/bootstrap.sh`` then installs a NumPy that still converts."""

from __future__ import annotations

import os
import sys

os.environ["TRITON_INTERPRET"] = "1"

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402


@triton.jit
def _count_up(out_ptr, n):
    acc = tl.zeros([1], dtype=tl.int32)
    for _ in range(n):
        acc += 1
    tl.store(out_ptr + tl.arange(0, 1), acc)


def main() -> int:
    out = torch.zeros(1, dtype=torch.int32)
    try:
        _count_up[(1,)](out, 3)
    except Exception as e:  # noqa: BLE001 (any failure means the interpreter cannot run our kernels)
        print(f"triton {triton.__version__} interpreter: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    return 0 if int(out.item()) == 3 else 1


if __name__ == "__main__":
    raise SystemExit(main())
