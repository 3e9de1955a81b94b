"""repro.timing: running out of memory while capturing is reported as such and does not switch the
process to un-graphed timing (CUDA calls stubbed: the logic runs on the CPU)."""

from __future__ import annotations

import pytest
import torch

from repro import timing


def test_out_of_memory_cause_walks_the_context_chain():
    oom = torch.cuda.OutOfMemoryError("CUDA out of memory")
    wrapped = RuntimeError("capture_end: operation not permitted")
    wrapped.__context__ = oom  # what a with-block's __exit__ raising during an OOM leaves behind
    assert timing.out_of_memory_cause(wrapped) is oom
    assert timing.out_of_memory_cause(oom) is oom
    assert timing.out_of_memory_cause(RuntimeError("cudaErrorStreamCaptureUnsupported")) is None


@pytest.fixture
def no_cuda_calls(monkeypatch):
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: None)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)


def test_time_gpu_reraises_out_of_memory_and_keeps_capturing(monkeypatch, no_cuda_calls):
    def capture(fn):  # noqa: ANN001, ANN202
        raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setattr(timing, "capture_graph", capture)
    state = timing.CaptureState()
    with pytest.raises(torch.cuda.OutOfMemoryError):
        timing.time_gpu_kept(lambda: None, capture=state)
    assert state.broken is False  # later calls still get captured


def test_time_gpu_falls_back_to_direct_timing_when_capture_is_refused(monkeypatch, no_cuda_calls):
    def capture(fn):  # noqa: ANN001, ANN202
        raise RuntimeError("operation not permitted when stream is capturing")

    monkeypatch.setattr(timing, "capture_graph", capture)
    monkeypatch.setattr(timing, "bench_events", lambda fn, *a, **k: 1.25)
    state = timing.CaptureState()
    t, _ = timing.time_gpu_kept(lambda: None, capture=state)
    assert (t.ms, t.timer) == (1.25, "cuda-events-readflush")
    assert state.broken is True  # the owner's later calls are timed directly
    monkeypatch.setattr(timing, "capture_graph", lambda fn: pytest.fail("captured after a refusal"))
    t, _ = timing.time_gpu_kept(lambda: None, capture=state)
    assert t.timer == "cuda-events-readflush"


def test_no_process_wide_capture_flag(monkeypatch, no_cuda_calls):
    """A refused capture changes only its owner's later timings, not another caller's."""

    def refuse(fn):  # noqa: ANN001, ANN202
        raise RuntimeError("operation not permitted when stream is capturing")

    class Graph:
        def replay(self) -> None:
            pass

    monkeypatch.setattr(timing, "bench_events", lambda fn, *a, **k: 1.0)
    monkeypatch.setattr(timing, "capture_graph", refuse)
    timing.time_gpu(lambda: None)  # refused: a fresh state, dropped
    monkeypatch.setattr(timing, "capture_graph", lambda fn: Graph())
    assert timing.time_gpu(lambda: None).timer == "cuda-graph-events-readflush"
    assert not hasattr(timing, "_CAPTURE_BROKEN")


def test_time_gpu_kept_returns_the_call_it_timed(monkeypatch, no_cuda_calls):
    """The kept call is the captured graph's replay (what was timed), or ``fn`` when capture is refused."""

    class Graph:
        def replay(self) -> None:
            pass

    graph = Graph()
    timed = []

    def bench(fn, *a, **k):  # noqa: ANN001, ANN002, ANN003, ANN202
        timed.append(fn)
        return 2.0

    monkeypatch.setattr(timing, "bench_events", bench)
    monkeypatch.setattr(timing, "capture_graph", lambda fn: graph)

    def fn() -> None:
        pass

    t, call = timing.time_gpu_kept(fn)
    assert call == graph.replay and timed == [call] and t.timer == "cuda-graph-events-readflush"

    def refuse(fn):  # noqa: ANN001, ANN202
        raise RuntimeError("operation not permitted when stream is capturing")

    monkeypatch.setattr(timing, "capture_graph", refuse)
    t, call = timing.time_gpu_kept(fn)
    assert call is fn and timed[-1] is fn and t.timer == "cuda-events-readflush"
