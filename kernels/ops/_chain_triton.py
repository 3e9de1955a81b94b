"""Programmatic dependent launch (PDL) for a chain of small kernels (``FlexMasker``'s pivot and masks).

Why: a MAP-NEO 460M block's masks take about ten kernels of a few microseconds each, and on a GPU
each kernel waits for the one before it to finish before its own launch starts. With PDL (Hopper
and later) the next kernel launches while this one runs: it calls ``gdc_wait`` first, which
blocks until every kernel before it has finished and its writes are visible, so it reads nothing
early, and this one calls ``gdc_launch_dependents`` at its start, so the next launch can begin at
once. The results are the same; only the gaps between kernels shrink. A kernel of the chain takes
``PDL: tl.constexpr`` last (0, off, by default, and under the interpreter): ``WAIT`` (launched
with ``launch_pdl=True``, ``kernels.ops.common.Launch``: every kernel of the chain but the first)
and ``TRIGGER`` (every kernel but the last). A chain of one kernel does not chain: on a MAP-NEO 7B
block a lone 2:4 mask kernel compiled with both ran 10% slower
(results/tuning/h100_probe_masker_launches.txt)."""

from __future__ import annotations

import triton
import triton.language as tl

WAIT, TRIGGER = 1, 2  # the PDL flag's bits


@triton.jit
def chain_prologue(PDL: tl.constexpr):
    """First statement of a chained kernel: wait for the kernels before it (``WAIT``), let the
    next one launch (``TRIGGER``)."""
    if PDL & 1:
        tl.extra.cuda.gdc_wait()
    if PDL & 2:
        tl.extra.cuda.gdc_launch_dependents()


def pdl_supported(device) -> bool:
    """Whether launches on ``device`` can chain: a CUDA GPU of compute capability 9.0 or later, not
    the interpreter, and a Triton that takes ``launch_pdl``."""
    import os

    import torch

    if getattr(device, "type", None) != "cuda" or os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        return False
    if torch.cuda.get_device_capability(device)[0] < 9:
        return False
    try:
        from triton.backends.nvidia.compiler import CUDAOptions
    except ImportError:
        return False
    import dataclasses

    return "launch_pdl" in {f.name for f in dataclasses.fields(CUDAOptions)} and hasattr(tl.extra.cuda, "gdc_wait")


__all__ = ["TRIGGER", "WAIT", "chain_prologue", "pdl_supported"]
