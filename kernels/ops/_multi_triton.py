"""One launch of a fused mask kernel over up to 8 weights (a block's weights in ``FlexMasker``).

Why: on a MAP-NEO 460M block a weight's mask takes 1-3 us of memory traffic, about what a launch
and its ramp-up cost, so seven launches spent half the block's mask time between kernels. A multi
launch is one 1-D grid over the programs of every weight's own 2-D launch, in weight order:
program p finds its weight j (the last slot whose first program is <= p) and the program ids
(p0, p1) its weight's own launch would have given it, and reads that weight's pointer, strides and
mask offset. Each program then runs the same code on the same tile as before, so the masks (and
the Philox draws, numbered per weight) are the same bit for bit.

The table (int64 [MULTI_SLOTS, TABLE_COLS], one row per slot) holds: first program, programs
along axis 1, tile rows, tile columns, weight row stride, mask row stride, mask offset (elements
from the launch's mask pointer), unused. Unused slots start past every program. The strides and
the mask offset are multiples of 16 (the host checks), so the loads and stores stay vectorised as
with a weight's own launch, whose pointer and stride arguments Triton specialises the same way.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

MULTI_SLOTS = 8  # weights per multi launch
TABLE_COLS = 8
FIRST, GRID1, TILE_ROWS, TILE_COLS, STRIDE_W, STRIDE_M, MASK_OFFSET = range(7)
ALIGN = 16  # elements: strides and mask offsets of a multi launch are multiples of this


@triton.jit
def multi_program(w_ptr, x1, x2, x3, x4, x5, x6, x7, m_ptr, table_ptr):
    """(p0, p1, weight pointer, mask pointer, tile rows, tile columns, weight stride, mask stride)
    of this program of a multi launch: what the weight's own 2-D launch would have given it."""
    p = tl.program_id(0)
    j = 0
    for s in tl.static_range(1, 8):
        j += (p >= tl.load(table_ptr + 8 * s)).to(tl.int32)
    x = w_ptr
    if j >= 1:
        x = x1
    if j >= 2:
        x = x2
    if j >= 3:
        x = x3
    if j >= 4:
        x = x4
    if j >= 5:
        x = x5
    if j >= 6:
        x = x6
    if j >= 7:
        x = x7
    row = table_ptr + 8 * j
    local = p - tl.load(row).to(tl.int32)
    g1 = tl.load(row + 1).to(tl.int32)
    n_rows = tl.load(row + 2).to(tl.int32)
    n_cols = tl.load(row + 3).to(tl.int32)
    stride_w = tl.multiple_of(tl.load(row + 4), 16)
    stride_m = tl.multiple_of(tl.load(row + 5), 16)
    offset = tl.multiple_of(tl.load(row + 6), 16)
    return local // g1, local % g1, x, m_ptr + offset, n_rows, n_cols, stride_w, stride_m


def multi_table(rows: list[tuple[int, int, int, int, int, int, int]], device: torch.device) -> torch.Tensor:
    """The table of a multi launch from per-weight rows (first program, programs along axis 1,
    tile rows, tile columns, weight stride, mask stride, mask offset); unused slots start past
    every program."""
    if not 1 <= len(rows) <= MULTI_SLOTS:
        raise ValueError(f"a multi launch takes 1..{MULTI_SLOTS} weights, got {len(rows)}")
    past = 2**31 - 1
    table = torch.zeros(MULTI_SLOTS, TABLE_COLS, dtype=torch.int64)
    table[:, FIRST] = past
    table[:, GRID1] = 1
    for i, row in enumerate(rows):
        table[i, : len(row)] = torch.tensor(row, dtype=torch.int64)
    table[0, FIRST] = 0
    return table.to(device)


def aligned(*values: int) -> bool:
    """Whether every value is a multiple of ``ALIGN`` (a multi launch's promise to the compiler)."""
    return all(v % ALIGN == 0 for v in values)


__all__ = ["ALIGN", "MULTI_SLOTS", "TABLE_COLS", "aligned", "multi_program", "multi_table"]
