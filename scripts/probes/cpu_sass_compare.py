"""Do two trees compile the same kernels? Static SASS for sm_90 (no GPU needed: ptxas and nvdisasm
ship with Triton) of the kernels a refactor touches, from the ``kernels`` package of ``--before``
(a directory holding an older tree's ``kernels/``, e.g. from ``git archive REV kernels | tar -x``)
and of this tree, compared line by line with addresses dropped. Identical SASS means the refactor
changed no instruction, so results measured before it still describe the code (a review's
evidence, results/reviews.csv). Covers: the transposable 2:4 search kernel (three tile shapes),
FAST's TBS(4,4) mask kernels (one weight, pointer pivot with PDL, up to 8 weights), the radix
pivot's histogram pass (passes 1, 2, 4) and select, the 16-bit two-pass select's passes.

    mkdir -p /tmp/old && git archive REV kernels | tar -x -C /tmp/old
    python3 scripts/probes/cpu_sass_compare.py --before /tmp/old
"""

from __future__ import annotations

import argparse
import importlib
import re
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve()
ROOT = HERE.parents[2]


def _signature(fn, pointers: dict[str, str], ints: str = "i32", wide: tuple[str, ...] = ()) -> dict:
    sig = {}
    for a in fn.arg_names:
        if a in pointers:
            sig[a] = pointers[a]
        elif re.fullmatch(r"x\d", a):
            sig[a] = pointers.get("x*", "*bf16")
        else:
            sig[a] = "i64" if a in wide else ints
    return sig


def jobs() -> list[tuple]:
    """(name, kernel, signature, constexprs, warps) of every kernel compared."""
    tt = importlib.import_module("kernels.ops._transposable_triton")
    ft = importlib.import_module("kernels.ops._flex_tbs4_triton")
    rt = importlib.import_module("kernels.ops._pivot_radix_triton")
    out = []
    sig = _signature(tt.transposable24_kernel, {"w_ptr": "*bf16", "m_ptr": "*i8"})
    for tr, tc, warps in ((1, 128, 4), (2, 64, 4), (4, 64, 8)):
        out.append((f"transposable24 {tr}x{tc}", tt.transposable24_kernel, sig, {"TR": tr, "TC": tc}, warps))
    flex = {"w_ptr": "*bf16", "m_ptr": "*i8", "tie": "fp32", "x*": "*bf16"}
    for name, fn, cx in (
        ("flex_tbs4", ft.flex_tbs4_kernel, {"TC": 128, "PIVOT_PTR": False, "PDL": 0}),
        ("flex_tbs4 pointer pivot, PDL", ft.flex_tbs4_kernel, {"TC": 128, "PIVOT_PTR": True, "PDL": 1}),
        ("flex_tbs4_multi", ft.flex_tbs4_multi_kernel, {"TC": 128, "PIVOT_PTR": True, "PDL": 1}),
    ):
        sig = _signature(fn, {**flex, "pivot": "*fp32" if cx["PIVOT_PTR"] else "fp32"})
        out.append((name, fn, sig, cx, 4))
    sig = _signature(rt._radix_hist_kernel, {"hist_ptr": "*i64", "ctl_ptr": "*i64"}, wide=("k",))
    mode = {"MODE": 0} if "MODE" in rt._radix_hist_kernel.arg_names else {}  # trees before the f32 window pivot
    for p in (1, 2, 4):
        out.append((f"radix_hist pass {p}", rt._radix_hist_kernel, sig, {"PASS": p, "BLOCK": 4096, **mode}, 8))
    fn = rt._radix_select_kernel
    sig = _signature(fn, {"hist_ptr": "*i64", "state_ptr": "*fp32", "ctl_ptr": "*i64"}, wide=("k",))
    device_k = {"DEVICE_K": False} if "DEVICE_K" in fn.arg_names else {}
    out.append(("radix_select clear", fn, sig, {"CLEAR": True, **device_k}, 4))
    pt = importlib.import_module("kernels.ops._pivot_triton")
    fn = pt._hist16_kernel
    ptrs = {"x*": "*i16", "hist_ptr": "*i64", "flag_ptr": "*i64", "state_ptr": "*fp32", "ticket_ptr": "*i64"}
    sig = _signature(fn, ptrs, wide=("k",))
    shift = {"KEY_SHIFT": 0} if "KEY_SHIFT" in fn.arg_names else {}
    for p, select in ((1, 0), (2, 1)):  # every value (SAMPLE 1): the two-pass select's passes
        cx = {"PASS": p, "BLOCK": 4096, "SAMPLE": 1, "GUARDED": False, "SELECT": select, "IS_BF16": True, "W": 8}
        out.append((f"hist16 pass {p}", fn, sig, {**cx, **shift, "PDL": False}, 8))
    return out


def snapshot() -> dict[str, str]:
    """SASS (addresses dropped) of every job, compiled from the ``kernels`` first on sys.path."""
    sys.path.insert(0, str(HERE.parent))
    from sass_count import compile_sass

    out = {"from": importlib.import_module("kernels").__file__}
    for name, fn, sig, cx, warps in jobs():
        sig = {**sig, **{k: "constexpr" for k in cx}}
        sass, _ = compile_sass(fn, sig, cx, warps)
        lines = (re.sub(r"/\*[0-9a-f]+\*/", "", line).strip() for line in sass.splitlines())
        out[name] = "\n".join(line for line in lines if line)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--before", help="a directory holding the older tree's kernels/")
    ap.add_argument("--snapshot", help=argparse.SUPPRESS)  # internal: print one tree's SASS as JSON
    args = ap.parse_args()
    import json

    if args.snapshot:
        sys.path.insert(0, args.snapshot)
        print(json.dumps(snapshot()))
        return
    if not args.before:
        ap.error("--before DIR is required")
    import triton

    print(f"triton {triton.__version__}, sm_90; before: {args.before}; after: {ROOT}")
    snaps = []
    for root in (args.before, str(ROOT)):  # one process each: the two trees share module names
        cmd = [sys.executable, str(HERE), "--snapshot", root]
        snap = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.splitlines()[-1])
        print(f"  compiled from {snap.pop('from')}")
        snaps.append(snap)
    same = True
    for name, old in snaps[0].items():
        new = snaps[1][name]
        verdict = "identical" if old == new else "DIFFERS"
        same &= old == new
        print(f"  {name:32s} {len(old.splitlines()):5d} instructions  {verdict}")
    print("all identical" if same else "SASS differs: the refactor changed code")


if __name__ == "__main__":
    main()
