"""What every suite gets from the runner: the device, the profile, the measured ceilings, a
results set and a progress line printer. Suites stay small: pick shapes, check, time, add rows."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import torch

from repro.provenance import REPO, device_slug
from repro.results import ResultSet
from repro.roofline import Ceilings, gbps
from repro.timing import CaptureState, Timing, time_fn_kept


def num(v: float) -> str:
    """A number for a progress line: whole from 10 up, else two significant figures (a smoke run's
    0.0085x printed as "0.0x", which read as a failure)."""
    return f"{v:.0f}" if abs(v) >= 10 else f"{v:.2g}"


class CorrectnessError(AssertionError):
    """A kernel's output failed its check: the run stops and no number is written."""


@dataclass
class RunContext:
    suite: str
    artifact: str
    device: torch.device
    profile: str
    ceilings: Ceilings
    results: ResultSet
    started: float = field(default_factory=time.perf_counter)
    capture: CaptureState = field(default_factory=CaptureState)  # this run's CUDA-graph fallback
    _copy_cache: dict[int, float] = field(default_factory=dict)

    def log(self, msg: str) -> None:
        """A progress line, from rank 0 only under torchrun (every rank runs the same steps, and
        several ranks' lines ran together); a failing rank still names itself (``dist_guard``)."""
        if os.environ.get("RANK", "0") != "0":
            return
        print(f"[{self.suite} {time.perf_counter() - self.started:7.1f}s] {msg}", file=sys.stderr, flush=True)

    def time(self, fn, graph: bool = True, **kw: float) -> Timing:
        return self.time_kept(fn, graph=graph, **kw)[0]

    def time_kept(
        self, fn: Callable[[], object], graph: bool = True, **kw: float
    ) -> tuple[Timing, Callable[[], object]]:
        """The timing and the call it timed (a graph's replay), for a profile of that same call."""
        return time_fn_kept(fn, self.device, graph=graph, capture=self.capture, **kw)

    def time_checked(self, fn: Callable[[], Any], check: Callable[[Any], bool], what: str, **kw: Any) -> Timing:
        """Time ``fn``, then check what the timed call itself computes: every tensor of the output
        it returned is poisoned in place (:func:`poison`), the timed call (the captured graph's
        replay, or ``fn`` where it ran uncaptured) runs once more, and ``check(output)`` must
        hold, else the run stops. A row of this timing may say ``verified=True``."""
        return self.time_checked_kept(fn, check, what, **kw)[0]

    def time_checked_kept(
        self, fn: Callable[[], Any], check: Callable[[Any], bool], what: str, **kw: Any
    ) -> tuple[Timing, Callable[[], object]]:
        """:meth:`time_checked`, and the call it timed (as :meth:`time_kept`)."""
        held: list[Any] = [None]

        def call() -> Any:
            held[0] = fn()
            return held[0]

        t, timed = self.time_kept(call, **kw)
        poison(held[0])
        timed()
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        self.check(bool(check(held[0])), f"{what}: the output of the timed call (poisoned, then recomputed)")
        return t, timed

    def check(self, ok: bool, what: str) -> None:
        """Stop the run (nothing written) unless ``ok``."""
        if not ok:
            raise CorrectnessError(f"{self.suite}: correctness check failed: {what}")

    def same_bytes_copy_gbps(self, nbytes: int) -> float:
        """Bandwidth of a device copy that moves ``nbytes`` (read + write): the practical roof at
        that size (small working sets do not reach the large-copy ceiling: the ramp of a short
        kernel). Timed eagerly, one launch between events (a captured copy becomes a copy-engine
        node, slower), unlike the graph-replayed kernels: at small sizes its launch latency lowers
        this roof, so a kernel's % of it reads high there. ``pct_of_copy`` (the large copy) is the
        roofline the verdicts and README use; docs/methods.md says the same."""
        if nbytes not in self._copy_cache:
            src = torch.empty(max(1, nbytes // 2), dtype=torch.uint8, device=self.device)
            dst = torch.empty_like(src)
            t = self.time(partial(dst.copy_, src), graph=False)
            self._copy_cache[nbytes] = gbps(2 * src.numel(), t.ms)
        return self._copy_cache[nbytes]

    def add_bandwidth_rows(
        self,
        method: str,
        shape: str,
        dtype: str,
        nbytes: int,
        t: Timing,
        *,
        verified: bool,
        paper_unit: str | None = None,
    ) -> float:
        """Time, GB/s and % of the measured copy bandwidth of one measurement (``verified``: its
        timed call's output passed a check in this run, see :meth:`time_checked`); returns GB/s."""
        bw = gbps(nbytes, t.ms)
        add = partial(self.results.add, verified=verified, timer=t.timer)
        add(method, shape, dtype, "time", t.ms, "ms")
        add(method, shape, dtype, "bandwidth", bw, "GB/s")
        add(method, shape, dtype, "pct_of_copy", 100 * bw / self.ceilings.copy_gbps, "%")
        same = self.same_bytes_copy_gbps(nbytes)
        add(method, shape, dtype, "pct_of_same_bytes_copy", 100 * bw / same, "%")
        if paper_unit == "TB/s":
            add(method, shape, dtype, "throughput", bw / 1e3, "TB/s")
        return bw

    def add_ceiling_rows(self) -> None:
        c = self.ceilings
        self.results.add(
            "ceiling",
            str(c.copy_bytes),
            "float32",
            "copy_bandwidth",
            c.copy_gbps,
            "GB/s",
            verified=c.checked,
            timer=c.timer,
        )
        self.results.add(
            "ceiling",
            f"{c.gemm_n}x{c.gemm_n}x{c.gemm_n}",
            c.gemm_dtype,
            "gemm_rate",
            c.gemm_tflops,
            "TFLOP/s",
            verified=c.checked,
            timer=c.gemm_timer,  # was the copy's timer: the GEMM is graph-timed
        )


def poison(out: Any) -> None:
    """Overwrite in place every tensor in ``out`` (a tensor, or lists / tuples / dicts of them)
    with values no correct call leaves behind: bools inverted, floats NaN, integers bit-inverted.
    A timed call that does not rewrite its output then fails the check that follows."""
    if isinstance(out, torch.Tensor):
        with torch.no_grad():
            if out.dtype == torch.bool:
                out.logical_not_()
            elif out.is_floating_point() or out.is_complex():
                out.fill_(float("nan"))
            else:
                out.bitwise_not_()
    elif isinstance(out, (list, tuple)):
        for x in out:
            poison(x)
    elif isinstance(out, dict):
        for x in out.values():
            poison(x)


def figures_dir(device: torch.device) -> Path:
    return REPO / "figures" / device_slug(device)


def pick_device(name: str | None = None) -> torch.device:
    if name:
        dev = torch.device(name)
        if dev.type == "cuda" and not torch.cuda.is_available():
            raise SystemExit("--device cuda asked for, but torch sees no CUDA GPU")
        return dev
    return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")


def pick_profile(profile: str, device: torch.device) -> str:
    """``auto``: full on a GPU, smoke on a CPU. A full profile on a CPU is refused (hours, meaningless)."""
    if profile == "auto":
        return "full" if device.type == "cuda" else "smoke"
    if profile in ("full", "paper") and device.type != "cuda":
        raise SystemExit(
            f"the {profile} profile needs a CUDA GPU; on a CPU use the smoke profile: "
            "snakemake <target> --config profile=smoke, or python -m repro run <suite> --profile smoke"
        )
    return profile
