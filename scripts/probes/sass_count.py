"""Static SASS of the MVUE pack kernels for sm_90, compiled here without a GPU (ptxas +
nvdisasm that ship with Triton): instructions per element, by opcode, to see where an
ALU-bound kernel spends its issue slots before spending device time on it. ``--tbs4``: the same
for FAST's TBS(4,4) mask kernel (one 4x4 tile a thread), and where its instructions go, from
variants of the generated source with one part cut (the n = 2 search, the n = 1/3 permutation
search, both, the Philox draw); a variant's masks are wrong, only its count matters. ``--tbs8``:
FAST's TBS(8) kernel with 0, 1 and 2 sweeps (where its registers and spills come from). ``--radix``:
the float32 radix pivot's histogram pass (``_radix_hist_kernel``, passes 1, 2 and 4): its
shared-memory atomics (``ATOMS``) a value.

    python3 scripts/probes/sass_count.py [--dump KERNEL] [--tbs4] [--tbs8] [--radix]
"""

from __future__ import annotations

import argparse
import collections
import re
import subprocess
import tempfile
from pathlib import Path

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from kernels.ops import _cslt_pack_triton as pk

TARGET = GPUTarget("cuda", 90, 32)


def compile_sass(fn, signature: dict, constexprs: dict, num_warps: int) -> tuple[str, int | None]:
    """As a launch would specialize it: a unit stride is a constant, every pointer and every
    other integer is divisible by 16 (the shapes the suites run). Returns the SASS and the
    registers per thread (from cuobjdump's resource usage; None where it cannot be read)."""
    idx = fn.arg_names.index
    runtime = [k for k, v in signature.items() if k not in constexprs and v != "constexpr"]
    attrs = {(idx(k),): [["tt.divisibility", 16]] for k in runtime}
    src = ASTSource(fn, signature, constexprs={(idx(k),): v for k, v in constexprs.items()}, attrs=attrs)
    kernel = triton.compile(src, target=TARGET, options={"num_warps": num_warps})
    return kernel.asm["sass"], _registers(kernel.asm["cubin"])


def _registers(cubin: bytes) -> int | None:
    tool = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        try:
            out = subprocess.run([str(tool), "-res-usage", f.name], capture_output=True, text=True, check=True).stdout
        except (OSError, subprocess.CalledProcessError):
            return None
    m = re.search(r"REG:(\d+)", out)
    return int(m.group(1)) if m else None


def opcode_counts(sass: str) -> collections.Counter:
    ops: collections.Counter = collections.Counter()
    for line in sass.splitlines():
        m = re.match(r"\s*(?:/\*[0-9a-f]+\*/|[-0-9a-fA-FY:]+\t)\s*(@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", line)
        if m:
            ops[m.group(2).split(".")[0]] += 1
    return ops


PTRS = {"*bf16", "*i32", "*i16", "*i64"}


def unit_stride(row_major: bool) -> dict:
    return {"stride_ac": 1} if row_major else {"stride_ar": 1}


def cases() -> list:
    common = {"m": "i32", "k": "i32", "stride_ar": "i32", "stride_ac": "i32"}
    out = []
    for row_major, tile in ((False, pk.MVUE_TILE_COL_MAJOR), (True, pk.MVUE_TILE_ROW_MAJOR)):
        sig = {"a_ptr": "*bf16", "out32_ptr": "*i32", "meta_ptr": "*i16", "seed_ptr": "*i64", **common}
        cx = {"BK": tile[0], "ROW_MAJOR": row_major, "BF16": True, "EVEN_M": True, **unit_stride(row_major)}
        out.append((f"mvue_pack row_major={row_major}", pk._mvue_pack_kernel, sig, cx, tile))
    for row_major, tile in ((False, pk.ACT_MVUE_TILE_COL_MAJOR), (True, pk.ACT_MVUE_TILE_ROW_MAJOR)):
        sig = {
            "h_ptr": "*bf16",
            "g_ptr": "*bf16",
            "dh_ptr": "*bf16",
            "out32_ptr": "*i32",
            "meta_ptr": "*i16",
            "seed_ptr": "*i64",
            **common,
        }
        cx = {"BK": tile[0], "ROW_MAJOR": row_major, "ACT": 1, "BF16": True, "EVEN_M": True, **unit_stride(row_major)}
        out.append((f"act_bwd_mvue_pack row_major={row_major}", pk._act_bwd_mvue_pack_kernel, sig, cx, tile))
    for row_major, tile in ((False, pk.GATED_MVUE_TILE_COL_MAJOR), (True, pk.GATED_MVUE_TILE_ROW_MAJOR)):
        sig = {"z_ptr": "*bf16", "g_ptr": "*bf16", "dz_ptr": "*bf16", "out32_ptr": "*i32", "meta_ptr": "*i16"}
        sig |= {"seed_ptr": "*i64", "r_tiles": "i32", "k": "i32", "up_off": "i32"}
        sig |= {name: "i32" for name in ("stride_zr", "stride_zc", "stride_gr", "stride_gc")}
        unit = {"stride_zc": 1, "stride_gc": 1} if row_major else {"stride_zr": 1, "stride_gr": 1}
        cx = {"BK": tile[0], "ROW_MAJOR": row_major, "ACT": 1, "BF16": True, "SPLIT": tile[2], **unit}
        # one 64 x BK tile per program (SPLIT), else two: per element as for the others
        name = f"gated_bwd_mvue_pack row_major={row_major} split={tile[2]}"
        out.append((name, pk._gated_bwd_mvue_pack_kernel, sig, cx, tile[:2], 1 if tile[2] else 2))
    return out


TBS4_CODE = "code = tl.where(n == 1, c1, tl.where(n == 2, c2, tl.where(n == 3, 65535 ^ c1, 0)))"
TBS4_CUTS = {
    "production": [],
    "no n=2 search": [(TBS4_CODE, TBS4_CODE.replace("n == 2, c2", "n == 2, 0"))],
    "no n=1/3 search": [(TBS4_CODE, "code = tl.where(n == 2, c2, 0)")],
    "no search": [(TBS4_CODE, "code = tl.where(n == 2, 255, 0)")],
    "no Philox": [("u = tl.rand(seed, tile)", "u = tile.to(tl.float32) * 0.001")],
}


def tbs4_attribution(top: int) -> None:
    """Instructions a value of ``flex_tbs4_kernel`` (TC = 128, 4 warps: what FlexMasker launches)
    and of each cut variant; the difference to production is what the cut part costs."""
    import importlib.util

    src = (Path(__file__).resolve().parents[2] / "kernels" / "ops" / "_flex_tbs4_triton.py").read_text()
    sig = {"w_ptr": "*bf16", "m_ptr": "*i8", "pivot": "fp32", "tie": "fp32", "seed": "i32"}
    sig |= {k: "i32" for k in ("n_tile_rows", "n_tile_cols", "stride_w", "stride_m")}
    cx = {"TC": 128, "PIVOT_PTR": False, "PDL": 0}
    with tempfile.TemporaryDirectory() as tmp:
        for name, cuts in TBS4_CUTS.items():
            text = src
            for old, new in cuts:
                if old not in text:
                    raise SystemExit(f"sass_count --tbs4: the generated kernel changed ({old!r} not found)")
                text = text.replace(old, new)
            path = Path(tmp) / f"tbs4_{len(name)}_{abs(hash(name))}.py"
            path.write_text(text)
            spec = importlib.util.spec_from_file_location(path.stem, path)
            mod = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(mod)
            sass, regs = compile_sass(mod.flex_tbs4_kernel, {**sig, **{k: "constexpr" for k in cx}}, cx, 4)
            ops = opcode_counts(sass)
            total = sum(ops.values())
            per = f"{total:4d} instr/thread (one tile), {total / 16:5.1f} per value, {regs} registers"
            print(f"flex_tbs4 {name:16s}: {per}")
            print("    " + ", ".join(f"{k} {v}" for k, v in ops.most_common(top)))


def tbs8_sweeps(top: int) -> None:
    """FAST's TBS(8) kernel (``_flex_tbs_kernel``, TC = 128, 4 warps: what FlexMasker launches)
    with 0, 1 and 2 sweeps of row-pair swaps: registers, spill loads and stores, instructions.
    Two sweeps are a loop, whose body is counted once."""
    from kernels.ops import _flex_triton as ft

    sig = {"w_ptr": "*bf16", "m_ptr": "*i8", "pivot": "fp32", "tie": "fp32", "seed": "i32"}
    sig |= {k: "i32" for k in ("n_tile_cols", "stride_w", "stride_m")}
    for sweeps in (0, 1, 2):
        cx = {"X": 8, "TC": 128, "SWEEPS": sweeps, "PIVOT_PTR": False, "PDL": 0}
        sass, regs = compile_sass(ft._flex_tbs_kernel, {**sig, **{k: "constexpr" for k in cx}}, cx, 4)
        ops = opcode_counts(sass)
        spills = f"STL {ops['STL']}, LDL {ops['LDL']}"
        print(f"TBS(8) SWEEPS={sweeps}: {sum(ops.values())} instructions, {regs} registers, {spills}")
        print("    " + ", ".join(f"{k} {v}" for k, v in ops.most_common(top)))


def radix_passes(top: int) -> None:
    """``_radix_hist_kernel`` on float32 values as FlexMasker launches it (BLOCK = 4096, 8 warps:
    16 values a thread a block): instructions and ATOMS a thread, per pass."""
    from kernels.ops import _pivot_radix_triton as rt

    sig = {f"x{i}": "*fp32" for i in range(8)} | {f"n{i}": "i32" for i in range(8)}
    sig |= {f"s{i}": "i32" for i in range(1, 8)} | {"hist_ptr": "*i64", "k": "i32", "iters": "i32", "ctl_ptr": "*i64"}
    for p in (1, 2, 4):
        cx = {"PASS": p, "BLOCK": rt.BLOCK, "MODE": 0}
        sass, regs = compile_sass(rt._radix_hist_kernel, {**sig, **{k: "constexpr" for k in cx}}, cx, 8)
        ops = opcode_counts(sass)
        print(f"radix pass {p}: {sum(ops.values())} instructions, {regs} registers, ATOMS {ops['ATOMS']} (16 values)")
        print("    " + ", ".join(f"{k} {v}" for k, v in ops.most_common(top)))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dump", default=None, help="substring of a case name: print its SASS")
    ap.add_argument("--top", type=int, default=12)
    ap.add_argument("--tbs4", action="store_true", help="FAST's TBS(4,4) mask kernel and its cut variants")
    ap.add_argument("--tbs8", action="store_true", help="FAST's TBS(8) kernel with 0, 1, 2 swap sweeps")
    ap.add_argument("--radix", action="store_true", help="the float32 radix pivot's histogram passes")
    args = ap.parse_args()
    if args.radix:
        radix_passes(args.top)
        return
    if args.tbs4:
        tbs4_attribution(args.top)
        return
    if args.tbs8:
        tbs8_sweeps(args.top)
        return
    for name, fn, sig, cx, (bk, warps), *tiles in cases():
        full = {**sig, **{k: "constexpr" for k in cx}}
        sass, regs = compile_sass(fn, full, cx, warps)
        ops = opcode_counts(sass)
        total = sum(ops.values())
        per_thread_elems = (tiles[0] if tiles else 1) * 64 * bk / (32 * warps)
        per_elem = total / per_thread_elems
        print(
            f"{name:40s} BK={bk:3d} warps={warps}: {total:5d} instr/thread, {per_elem:6.1f} per element, "
            f"{regs} registers"
        )
        print("    " + ", ".join(f"{k} {v}" for k, v in ops.most_common(args.top)))
        if args.dump and args.dump in name:
            print(sass)


if __name__ == "__main__":
    main()
