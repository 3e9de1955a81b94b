"""One launch of a fused mask kernel over up to 8 weights (a block's weights in ``FlexMasker``).

Why: on a MAP-NEO 460M block a weight's mask takes 1-3 us of memory traffic, about what a launch
and its ramp-up cost, so seven launches spent a good part of the block's mask time between
kernels. A multi launch is one 1-D grid over the programs of every weight's own 2-D launch, in
weight order: program p finds its weight j (the last slot whose first program is <= p) and the
program ids (p0, p1) its weight's own launch would have given it, and takes that weight's
pointer, row length and mask offset. Each program then runs the same code on the same tile as
before, so the masks (and the Philox draws, numbered per weight) are the same bit for bit.

Per slot the launch passes scalars, not a table in memory (whose loads would put two dependent
memory round trips before every program's work): s1..s7 the first program of slots 1..7 (slot 0
starts at 0; an unused slot starts past every program), c0..c7 the row length (weights and masks
are contiguous rows: stride = row length), o0..o7 the mask's offset from the launch's mask
pointer. Row lengths and offsets are multiples of 16 (the host checks), so loads and stores stay
vectorised as with a weight's own launch. The lookup still costs each program some integer work,
which short programs over large weights notice (a 2:4 program reads 1024 values): FlexMasker
takes a multi launch only below ``_flex_triton.MULTI_MAX_VALUES``
(results/tuning/h100_probe_masker_launches.txt).
"""

from __future__ import annotations

import triton
import triton.language as tl

MULTI_SLOTS = 8  # weights per multi launch
ALIGN = 16  # elements: row lengths and mask offsets of a multi launch are multiples of this
PAST = 2**31 - 1  # the first program of an unused slot


@triton.jit
def multi_program(
    w_ptr, x1, x2, x3, x4, x5, x6, x7, m_ptr,
    s1, s2, s3, s4, s5, s6, s7,
    c0, c1, c2, c3, c4, c5, c6, c7,
    o0, o1, o2, o3, o4, o5, o6, o7,
    TILE_W: tl.constexpr, TC: tl.constexpr,
):  # fmt: skip
    """(p0, p1, weight pointer, mask pointer, tile columns, row stride) of this program of a multi
    launch: what its weight's own 2-D launch (TC tiles of TILE_W columns a program along a row)
    would have given it."""
    p = tl.program_id(0)
    x, c, o, first = w_ptr, c0, o0, 0
    if p >= s1:
        x, c, o, first = x1, c1, o1, s1
    if p >= s2:
        x, c, o, first = x2, c2, o2, s2
    if p >= s3:
        x, c, o, first = x3, c3, o3, s3
    if p >= s4:
        x, c, o, first = x4, c4, o4, s4
    if p >= s5:
        x, c, o, first = x5, c5, o5, s5
    if p >= s6:
        x, c, o, first = x6, c6, o6, s6
    if p >= s7:
        x, c, o, first = x7, c7, o7, s7
    c = tl.multiple_of(c, 16)
    n_cols = c // TILE_W
    g1 = tl.cdiv(n_cols, TC)
    local = p - first
    return local // g1, local % g1, x, m_ptr + tl.multiple_of(o, 16), n_cols, c


def multi_scalars(firsts: list[int], cols: list[int], offsets: list[int]) -> tuple[int, ...]:
    """The launch's s1..s7, c0..c7, o0..o7 from per-weight first programs, row lengths and mask
    offsets (unused slots start past every program)."""
    k = len(cols)
    if not 1 <= k <= MULTI_SLOTS or len(firsts) != k or len(offsets) != k or firsts[0] != 0:
        raise ValueError(f"a multi launch takes 1..{MULTI_SLOTS} weights, the first at program 0")
    pad = MULTI_SLOTS - k
    return (*firsts[1:], *[PAST] * pad, *cols, *[ALIGN] * pad, *offsets, *[0] * pad)


def aligned(*values: int) -> bool:
    """Whether every value is a multiple of ``ALIGN`` (a multi launch's promise to the compiler)."""
    return all(v % ALIGN == 0 for v in values)


SCALARS = tuple(f"{p}{i}" for p, r in (("s", range(1, 8)), ("c", range(8)), ("o", range(8))) for i in r)

__all__ = ["ALIGN", "MULTI_SLOTS", "PAST", "SCALARS", "aligned", "multi_program", "multi_scalars"]
