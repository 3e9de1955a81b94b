"""A Triton launch repeated with the very same arguments, at a fraction of the host cost.

Why: a fused mask kernel runs for a few microseconds on an H100, while ``kernel[grid](...)``
spends tens of microseconds on the host (binding and specializing the arguments, the cache
lookup) every call; a block's mask generation is a dozen launches, so eager generation is host
bound. ``Launch`` binds once: the first call goes through Triton (compiling if needed) and keeps
the compiled kernel; once ``direct`` is switched on, later calls hand the same arguments straight
to the compiled kernel's launcher, exactly as ``JITFunction.run`` does after its cache hit. That
is only valid while every argument is the same object/value as at the first call (so the cached
specialization still holds): the caller (``kernels.flex.FlexMasker``) builds the arguments once
and checks the direct launches against Triton's own at construction. Launch hooks (profilers)
and the interpreter always take Triton's path.
"""

from __future__ import annotations

import torch


class Launch:
    """``kernel[grid](*args, num_warps=warps)``, repeatable; ``args`` lists every kernel
    parameter in signature order (constexprs included)."""

    __slots__ = ("kernel", "grid", "args", "warps", "compiled", "direct")

    def __init__(self, kernel: object, grid: tuple[int, ...], args: tuple, warps: int) -> None:
        self.kernel = kernel
        self.grid = tuple(grid) + (1,) * (3 - len(grid))
        self.args = args
        self.warps = warps
        self.compiled: object | None = None
        self.direct = False

    def __call__(self, stream: int | None = None) -> None:
        """Launch; directly on ``stream`` (from ``direct_stream``) when switched on, else through Triton."""
        ck = self.compiled
        if self.direct and ck is not None and stream is not None:
            g = self.grid
            ck.run(g[0], g[1], g[2], stream, ck.function, ck.packed_metadata, None, None, None, *self.args)
            return
        got = self.kernel[self.grid](*self.args, num_warps=self.warps)
        if ck is None and all(hasattr(got, a) for a in ("run", "function", "packed_metadata")):
            self.compiled = got  # a compiled kernel (CUDA); the interpreter returns none

    def with_arg(self, index: int, value: object) -> Launch:
        """The same launch with argument ``index`` replaced (a non-specialized one, e.g. the seed)."""
        new = Launch(self.kernel, self.grid, self.args[:index] + (value,) + self.args[index + 1 :], self.warps)
        new.compiled, new.direct = self.compiled, self.direct
        return new


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
