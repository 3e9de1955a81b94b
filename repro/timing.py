"""Timers. GPU: CUDA events around CUDA-graph replays of the call, warm-up, L2 flushed before
every sample, median (the method of ``triton.testing.do_bench``, with the flush made explicit).
CPU (smoke profile only): host clock median after warm-up. A timing always says which timer and
which flush produced it, so CPU numbers are never mixed with GPU numbers.

Why our own loop rather than ``do_bench``: do_bench flushes L2 by zero-filling a 256 MB buffer,
which leaves L2 full of *dirty* lines; the timed kernel then pays for writing them back to DRAM
(up to the L2 size, 50 MB on an H100) as if it were its own traffic. For a 100 MB kernel that is a
quarter of its bytes. The default ``flush="read"`` evicts L2 by reading a buffer larger than it,
so the kernel starts with a cold L2 holding only clean lines: cold, but not billed for the
harness's writes. ``flush="write"`` reproduces do_bench's behaviour for comparison.
"""

from __future__ import annotations

import gc
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Timing:
    ms: float  # median milliseconds per call
    timer: str  # e.g. "cuda-graph-events-readflush", "cuda-events-writeflush", "cpu-perf_counter"
    reps: int


FLUSHES = ("read", "write", "none")
_FLUSH_BYTES = 256 * 2**20  # > 5x the L2 of an H100 / H200 (50 / 60 MB)
_flush_buf: dict[torch.device, torch.Tensor] = {}


def capture_graph(fn: Callable[[], object]) -> torch.cuda.CUDAGraph:
    """Record ``fn`` (already warmed up) into a CUDA graph; raises if it syncs with the host.

    The allocator's unused cached blocks are released first: the graph allocates from a private
    pool that cannot reuse them. (Releasing them again between the side-stream warm-up and the
    capture did not change the largest batches table8 can capture on an H100, so it is not done.)"""
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph):
            fn()
    except RuntimeError as e:
        oom = out_of_memory_cause(e)
        if oom is not None and oom is not e:  # ending the broken capture raised on top of it
            raise oom from None
        raise
    torch.cuda.synchronize()
    return graph


def release_memory(device: torch.device) -> None:
    """Free what a finished or failed build left behind. Reference cycles go first: an exception's
    traceback and the frames it holds form one (a frame holds the exception that holds the frame),
    and after an out-of-memory error it keeps the failed build's model, activations and captured
    graph pool allocated until the garbage collector happens to run, so every later build fails too.
    Call it after the ``except`` block that handled the error, not inside it. Then the allocator's
    unused cached blocks go back to the device, and cuBLAS's workspaces with them: one is allocated
    per (handle, stream) and kept in a map, so every capture's streams leave one behind (measured on
    the H100: 64 MB allocated and 1.5 GiB reserved more after each timed GPT-2 build, until GPT-2
    774M at batch 23 no longer fitted after its batch-5 builds)."""
    gc.collect()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        clear = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)
        if clear is not None:
            clear()
        torch.cuda.empty_cache()


def out_of_memory_cause(e: BaseException) -> torch.cuda.OutOfMemoryError | None:
    """The out-of-memory error behind ``e`` (``e`` itself, or what it was raised while handling)."""
    seen: set[int] = set()
    cur: BaseException | None = e
    while cur is not None and id(cur) not in seen:
        if isinstance(cur, torch.cuda.OutOfMemoryError):
            return cur
        seen.add(id(cur))
        cur = cur.__cause__ or cur.__context__
    return None


def l2_flusher(flush: str) -> Callable[[], object]:
    if flush not in FLUSHES:
        raise ValueError(f"flush must be one of {FLUSHES}, got {flush!r}")
    if flush == "none":
        return lambda: None
    dev = torch.device("cuda", torch.cuda.current_device())
    if dev not in _flush_buf:
        _flush_buf[dev] = torch.ones(_FLUSH_BYTES // 4, dtype=torch.int32, device=dev)
    buf = _flush_buf[dev]
    if flush == "write":
        return buf.zero_  # do_bench's flush: leaves dirty lines in L2
    return lambda: torch.amax(buf)  # reads every line: L2 ends up holding clean lines only


def bench_events(
    fn: Callable[[], object], warmup_ms: float = 25.0, rep_ms: float = 100.0, flush: str = "read"
) -> float:
    """Median milliseconds of ``fn`` between CUDA events, L2 flushed before each sample."""
    flusher = l2_flusher(flush)
    fn()
    torch.cuda.synchronize()
    # estimate the cost of one call (flush included) to size warm-up and repetitions
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(5):
        flusher()
        fn()
    end.record()
    torch.cuda.synchronize()
    est = max(start.elapsed_time(end) / 5, 1e-3)
    n_warm = max(1, int(warmup_ms / est))
    n_rep = min(max(10, int(rep_ms / est)), 2000)
    for _ in range(n_warm):
        flusher()
        fn()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(n_rep)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(n_rep)]
    for s, e in zip(starts, ends, strict=True):
        flusher()
        s.record()
        fn()
        e.record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends, strict=True))


def time_gpu(
    fn: Callable[[], object],
    warmup_ms: float = 25.0,
    rep_ms: float = 100.0,
    graph: bool = True,
    flush: str = "read",
) -> Timing:
    """Median device time of ``fn`` with L2 flushed (``flush``, see module docstring) before each call.

    With ``graph`` (default) the call is captured in a CUDA graph and its replays are timed, so
    the number is device time, not the host's launch overhead (which otherwise leaks into the
    events of sub-100-microsecond kernels); a call that cannot be captured (it syncs with the
    host) is timed directly. The ``timer`` field says which, and which flush.
    """
    return time_gpu_kept(fn, warmup_ms, rep_ms, graph, flush)[0]


@dataclass
class CaptureState:
    """Whether a CUDA-graph capture has failed for this owner (a suite run's ``RunContext`` holds
    one): a failed capture can leave a process unable to capture again, so its owner times every
    later call directly, and each row's ``timer`` says so. A call without an owner gets a fresh
    state: no process-wide flag changes how unrelated numbers are timed."""

    broken: bool = False


def time_gpu_kept(
    fn: Callable[[], object],
    warmup_ms: float = 25.0,
    rep_ms: float = 100.0,
    graph: bool = True,
    flush: str = "read",
    capture: CaptureState | None = None,
) -> tuple[Timing, Callable[[], object]]:
    """:func:`time_gpu`, and the call it timed: the captured graph's ``replay`` (which keeps the
    graph and its memory alive), or ``fn`` where it ran uncaptured. A profile of that call sees
    exactly the kernels that were timed (an eager call of ``fn`` can run other ones: at GPT-2 774M
    the eager optimizer kernels took 9 ms more than the replayed ones). ``capture``: the owner's
    :class:`CaptureState` (a refused capture sets it, and later calls with it are not captured)."""
    state = capture if capture is not None else CaptureState()
    fn()
    torch.cuda.synchronize()
    if graph and not state.broken:
        try:
            g = capture_graph(fn)
        except torch.cuda.OutOfMemoryError:
            # not a capture problem: the caller decides (e.g. leaves the shape out); the process
            # can still capture once the failed graph's pool is gone
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
            raise
        except RuntimeError as e:  # the call syncs with the host or copies from it
            # a failed capture can leave the process unable to capture again (and its pool
            # allocated): the owner times everything after it directly, and says so
            state.broken = True
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            print(f"   note: capture failed ({first[:100]}); this and later calls are timed directly", file=sys.stderr)
        else:
            ms = bench_events(g.replay, warmup_ms, rep_ms, flush)
            return Timing(ms=float(ms), timer=f"cuda-graph-events-{flush}flush", reps=-1), g.replay
    ms = bench_events(fn, warmup_ms, rep_ms, flush)
    return Timing(ms=float(ms), timer=f"cuda-events-{flush}flush", reps=-1), fn


class DeviceClock:
    """A clock that reads the summed device time of the calls made through it: a pytest-benchmark
    timer (``@pytest.mark.benchmark(timer=clock)``) under which ``benchmark.pedantic(clock.wrap(fn),
    rounds=R, iterations=N)`` stores the mean device time per call of each round, so what
    pytest-benchmark saves and compares is device time, never host launch or sync latency.

    Each wrapped call runs ``setup`` (untimed), flushes L2 as :func:`bench_events` does, and
    records CUDA events around ``fn`` (typically the graph replay :func:`time_gpu_kept` returned).
    Reading the clock synchronises and adds the elapsed times of the event pairs recorded since the
    last reading; host time between calls (Python, launches, the synchronise itself) is never
    counted, so host overhead is 0% of a round by construction. The host enqueues a call (flush,
    two events, one replay: ~20 us) faster than the device runs it (the flush alone reads 256 MB),
    so the device never waits for the host between the events of a call.

    ``event`` / ``synchronize`` / ``flusher``: injectable for tests without a GPU."""

    def __init__(
        self,
        flush: str = "read",
        event: Callable[[], object] | None = None,
        synchronize: Callable[[], object] | None = None,
        flusher: Callable[[], object] | None = None,
    ) -> None:
        self.flush = flush
        self.__name__ = f"repro.timing.DeviceClock(flush={flush})"  # as pytest-benchmark saves a timer
        self._event = event or (lambda: torch.cuda.Event(enable_timing=True))
        self._sync = synchronize or torch.cuda.synchronize
        self._flusher = flusher
        self._pending: list[tuple[object, object]] = []
        self._total_s = 0.0
        self.calls = 0

    def wrap(self, fn: Callable[[], object], setup: Callable[[], object] | None = None) -> Callable[[], object]:
        """``fn`` as a timed call: setup (untimed), L2 flush (untimed), events around ``fn``."""
        if self._flusher is None:
            self._flusher = l2_flusher(self.flush)
        flusher = self._flusher

        def call() -> object:
            if setup is not None:
                setup()
            flusher()
            start, end = self._event(), self._event()
            start.record()
            out = fn()
            end.record()
            self._pending.append((start, end))
            self.calls += 1
            return out

        return call

    def __call__(self) -> float:
        """Seconds of device time spent inside wrapped calls so far."""
        if self._pending:
            self._sync()
            self._total_s += sum(s.elapsed_time(e) for s, e in self._pending) / 1e3
            self._pending.clear()
        return self._total_s


def time_cpu(fn: Callable[[], object], warmup: int = 1, reps: int = 5) -> Timing:
    """Median host time of ``fn`` on the CPU (smoke profile; not a performance claim)."""
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1e3)
    return Timing(ms=statistics.median(samples), timer="cpu-perf_counter", reps=reps)


def time_fn(fn: Callable[[], object], device: torch.device, graph: bool = True, **kw: object) -> Timing:
    """Device-appropriate timer: ``time_gpu`` on CUDA, ``time_cpu`` elsewhere."""
    return time_fn_kept(fn, device, graph=graph, **kw)[0]


def time_fn_kept(
    fn: Callable[[], object],
    device: torch.device,
    graph: bool = True,
    capture: CaptureState | None = None,
    **kw: object,
) -> tuple[Timing, Callable[[], object]]:
    """:func:`time_fn`, and the call it timed (:func:`time_gpu_kept`; ``fn`` itself on the CPU)."""
    if device.type == "cuda":
        return time_gpu_kept(fn, graph=graph, capture=capture, **kw)
    return time_cpu(fn), fn
