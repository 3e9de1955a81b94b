"""What every suite gets from the runner: the device, the profile, the measured ceilings, a
results set and a progress line printer. Suites stay small: pick shapes, check, time, add rows."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import torch

from repro.provenance import REPO, device_slug
from repro.results import ResultSet
from repro.roofline import Ceilings, gbps
from repro.timing import Timing, time_fn_kept


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
    _copy_cache: dict[int, float] = field(default_factory=dict)

    def log(self, msg: str) -> None:
        print(f"[{self.suite} {time.perf_counter() - self.started:7.1f}s] {msg}", file=sys.stderr, flush=True)

    def time(self, fn, graph: bool = True, **kw: float) -> Timing:
        return self.time_kept(fn, graph=graph, **kw)[0]

    def time_kept(
        self, fn: Callable[[], object], graph: bool = True, **kw: float
    ) -> tuple[Timing, Callable[[], object]]:
        """The timing and the call it timed (a graph's replay), for a profile of that same call."""
        return time_fn_kept(fn, self.device, graph=graph, **kw)

    def check(self, ok: bool, what: str) -> None:
        """Stop the run (nothing written) unless ``ok``."""
        if not ok:
            raise CorrectnessError(f"{self.suite}: correctness check failed: {what}")

    def same_bytes_copy_gbps(self, nbytes: int) -> float:
        """Bandwidth of a device copy that moves ``nbytes`` (read + write), timed like the kernels.

        Small working sets do not reach the large-copy ceiling (launch latency and the ramp of a
        short kernel); this is the practical roof at that size.
        """
        if nbytes not in self._copy_cache:
            src = torch.empty(max(1, nbytes // 2), dtype=torch.uint8, device=self.device)
            dst = torch.empty_like(src)
            t = self.time(partial(dst.copy_, src), graph=False)
            self._copy_cache[nbytes] = gbps(2 * src.numel(), t.ms)
        return self._copy_cache[nbytes]

    def add_bandwidth_rows(
        self, method: str, shape: str, dtype: str, nbytes: int, t: Timing, *, paper_unit: str | None = None
    ) -> float:
        """Time, GB/s and % of the measured copy bandwidth of one verified measurement; returns GB/s."""
        bw = gbps(nbytes, t.ms)
        add = self.results.add
        add(method, shape, dtype, "time", t.ms, "ms", verified=True, timer=t.timer)
        add(method, shape, dtype, "bandwidth", bw, "GB/s", verified=True, timer=t.timer)
        add(method, shape, dtype, "pct_of_copy", 100 * bw / self.ceilings.copy_gbps, "%", verified=True, timer=t.timer)
        same = self.same_bytes_copy_gbps(nbytes)
        add(method, shape, dtype, "pct_of_same_bytes_copy", 100 * bw / same, "%", verified=True, timer=t.timer)
        if paper_unit == "TB/s":
            add(method, shape, dtype, "throughput", bw / 1e3, "TB/s", verified=True, timer=t.timer)
        return bw

    def add_ceiling_rows(self) -> None:
        c = self.ceilings
        timer = self.ceilings.timer
        self.results.add(
            "ceiling", str(c.copy_bytes), "float32", "copy_bandwidth", c.copy_gbps, "GB/s", verified=True, timer=timer
        )
        self.results.add(
            "ceiling",
            f"{c.gemm_n}x{c.gemm_n}x{c.gemm_n}",
            c.gemm_dtype,
            "gemm_rate",
            c.gemm_tflops,
            "TFLOP/s",
            verified=True,
            timer=timer,
        )


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
    if profile == "full" and device.type != "cuda":
        raise SystemExit("the full profile needs a CUDA GPU; use --profile smoke on a CPU")
    return profile
