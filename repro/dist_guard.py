"""A multi-rank run that fails must fail everywhere, in bounded time, naming the rank, and write
nothing: the guard around every ``torchrun`` launch of ``python -m repro run`` and ``repro train``.

Why: a rank that raises leaves its peers blocked in their next collective, and a rank that hangs
blocks all of them; without a bound the job sits on its GPUs forever, and a rank 0 that finished
its own part could write results of a run another rank never completed. The pieces:

- ``dist_timeout_s``: the bound on every collective (``REPRO_DIST_TIMEOUT_S``, default 600 s),
  given to ``init_process_group``. NCCL's watchdog then aborts a stuck collective
  (``TORCH_NCCL_ASYNC_ERROR_HANDLING``, set to 3 unless the user set it); gloo raises.
- ``rank_guard``: an exception on a rank becomes ``RankFailure("rank R of W failed: ...")``. The
  failing rank first leaves its message in the process group's key-value store, so a peer that
  then fails (its collective errors or times out) names the rank that failed, or the ranks it
  heard nothing from (hung or dead), instead of only its own timeout.
- ``all_ranks_succeeded``: the last collective of a run: every rank says it finished; rank 0
  writes results (or marks a training run finished) only after it returns. On gloo a
  ``monitored_barrier`` names the ranks that did not arrive.
- ``inject_test_fault``: ``REPRO_TEST_FAIL_RANK`` / ``REPRO_TEST_HANG_RANK`` make one rank raise or
  sleep at a named point; for the tests of this module only (nothing sets them otherwise).
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Iterator
from datetime import timedelta

import torch
import torch.distributed as dist

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "FAIL_RANK_ENV",
    "FAULT_AT_ENV",
    "HANG_RANK_ENV",
    "TIMEOUT_ENV",
    "RankFailure",
    "all_ranks_succeeded",
    "dist_timeout_s",
    "init_distributed",
    "inject_test_fault",
    "rank_guard",
]

TIMEOUT_ENV = "REPRO_DIST_TIMEOUT_S"
DEFAULT_TIMEOUT_S = 600.0
FAIL_RANK_ENV = "REPRO_TEST_FAIL_RANK"
HANG_RANK_ENV = "REPRO_TEST_HANG_RANK"
FAIL_AS_CHECK_ENV = "REPRO_TEST_FAIL_AS_CHECK"  # set: the injected failure is a CorrectnessError
FAULT_AT_ENV = "REPRO_TEST_FAULT_AT"  # which named point fires (default: every point that asks)
_KEY = "repro_dist_guard"


class RankFailure(RuntimeError):
    """A rank of a multi-rank run failed (its own error, or a peer's, or a peer that went silent).
    ``failed_check``: the failure was a failed correctness check (``repro.suite.CorrectnessError``)
    on this rank or on a peer that reported first: the run's rows must then all be dropped."""

    def __init__(self, rank: int, world: int, detail: str, failed_check: bool = False) -> None:
        self.rank, self.world, self.failed_check = rank, world, failed_check
        super().__init__(f"rank {rank} of {world} failed: {detail}")


CHECK_ERROR = "CorrectnessError"
"""The class name of ``repro.suite.CorrectnessError`` (matched by name: ``repro.suite`` imports
this module's users, and a peer's failure arrives as text through the store)."""


def _is_failed_check(exc: BaseException | None, peers: str) -> bool:
    """Whether ``exc`` (this rank's error) or a peer's word (``_peers_word``) is a failed check."""
    own = exc is not None and any(c.__name__ == CHECK_ERROR for c in type(exc).__mro__)
    return own or f": {CHECK_ERROR}: " in peers


def dist_timeout_s() -> float:
    """Seconds a collective may wait for its peers: ``REPRO_DIST_TIMEOUT_S`` (default 600)."""
    raw = os.environ.get(TIMEOUT_ENV, "").strip()
    if not raw:
        return DEFAULT_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{TIMEOUT_ENV}={raw!r} is not a number of seconds") from None
    if not value > 0:
        raise ValueError(f"{TIMEOUT_ENV}={raw!r} must be > 0 seconds")
    return value


def init_distributed(device: torch.device, timeout_s: float | None = None) -> bool:
    """Join the default process group (NCCL on CUDA, gloo on the CPU) unless one exists, every
    collective bounded by ``timeout_s`` (default ``dist_timeout_s()``); returns whether this call
    created it (then the caller destroys it). Under torchrun: ``env://``; in a lone process: a world
    of 1 on an in-memory store, so the same code runs without a launcher."""
    if dist.is_initialized():
        return False
    backend = "nccl" if device.type == "cuda" else "gloo"
    timeout = timedelta(seconds=dist_timeout_s() if timeout_s is None else timeout_s)
    if device.type == "cuda" and device.index is None:  # NCCL binds to one device: say which
        device = torch.device("cuda", torch.cuda.current_device())
    kw = {"device_id": device} if device.type == "cuda" else {}
    if backend == "nccl":  # the watchdog aborts a timed-out collective (torch's default since 2.2)
        os.environ.setdefault("TORCH_NCCL_ASYNC_ERROR_HANDLING", "3")
    if "WORLD_SIZE" in os.environ and "MASTER_ADDR" in os.environ:
        dist.init_process_group(backend, timeout=timeout, **kw)
    else:
        dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1, timeout=timeout, **kw)
    return True


def _store() -> dist.Store | None:
    """The default group's key-value store (the rendezvous store), where one exists."""
    if not dist.is_initialized():
        return None
    with contextlib.suppress(Exception):
        return dist.distributed_c10d._get_default_store()
    return None


def _key(kind: str, rank: int) -> str:
    """A store key of this launch (a torchrun restart starts afresh)."""
    return f"{_KEY}/{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}/{kind}/{rank}"


def _peers_word(store: dist.Store, rank: int, world: int) -> str:
    """What the store says of the other ranks: who reported a failure (with its message), and
    who has not said it finished (hung, dead, or still inside the collective that failed here)."""
    failed, silent = [], []
    for r in range(world):
        if r == rank:
            continue
        with contextlib.suppress(Exception):
            if store.check([_key("failed", r)]):
                failed.append(store.get(_key("failed", r)).decode(errors="replace"))
            elif not store.check([_key("done", r)]):
                silent.append(r)
    said = [f"reported by a peer: {m}" for m in failed]
    if silent and not failed:
        said.append(f"no word from rank(s) {', '.join(map(str, silent))} (hung or dead?)")
    return "; ".join(said)


@contextlib.contextmanager
def rank_guard(what: str = "run") -> Iterator[None]:
    """Re-raise any exception in the block as ``RankFailure`` naming this rank (and, from the
    store, the peer that failed first or the peers that went silent); the failure is left in the
    store for the peers before this rank goes on to tear its group down. A world of 1 passes
    exceptions through unchanged."""
    if not dist.is_initialized() or dist.get_world_size() == 1:
        yield
        return
    rank, world = dist.get_rank(), dist.get_world_size()
    try:
        yield
    except RankFailure:
        raise
    except Exception as exc:
        detail = f"{what}: {type(exc).__name__}: {' '.join(str(exc).split())[:500]}"
        store = _store()
        peers = ""
        if store is not None:
            with contextlib.suppress(Exception):
                store.set(_key("failed", rank), f"rank {rank} of {world} failed: {detail}")
            peers = _peers_word(store, rank, world)
        failed_check = _is_failed_check(exc, peers)
        raise RankFailure(rank, world, f"{detail}{f' [{peers}]' if peers else ''}", failed_check) from exc


def all_ranks_succeeded(timeout_s: float | None = None) -> None:
    """Return only once every rank has got here (its work done, without error); else raise (the
    caller writes nothing). Gloo: ``monitored_barrier``, which names the ranks that did not
    arrive; NCCL: an all-reduce of a success flag under the group's timeout. A world of 1 or no
    process group: nothing to agree on."""
    if not dist.is_initialized() or dist.get_world_size() == 1:
        return
    rank, world = dist.get_rank(), dist.get_world_size()
    store = _store()
    if store is not None:
        with contextlib.suppress(Exception):
            store.set(_key("done", rank), "1")
    timeout = timedelta(seconds=dist_timeout_s() if timeout_s is None else timeout_s)
    try:
        if dist.get_backend() == "gloo":
            dist.monitored_barrier(timeout=timeout, wait_all_ranks=True)
        else:
            flag = torch.ones(1, device=torch.device("cuda", torch.cuda.current_device()))
            dist.all_reduce(flag, op=dist.ReduceOp.MIN)
            if flag.item() != 1:
                raise RuntimeError("a rank reported failure")
    except Exception as exc:
        peers = _peers_word(store, rank, world) if store is not None else ""
        detail = f"not every rank finished: {' '.join(str(exc).split())[:500]}"
        failed_check = _is_failed_check(None, peers)  # a peer's check failed: drop this rank's rows too
        raise RankFailure(rank, world, f"{detail}{f' [{peers}]' if peers else ''}", failed_check) from exc


def inject_test_fault(point: str) -> None:
    """For tests only: on the rank named by ``REPRO_TEST_FAIL_RANK`` raise (a failed correctness
    check where ``REPRO_TEST_FAIL_AS_CHECK`` is set), on the rank named by
    ``REPRO_TEST_HANG_RANK`` sleep (as good as forever), at ``point`` (or only at the point named
    by ``REPRO_TEST_FAULT_AT``, where set). Does nothing unless one of them is set."""
    fail, hang = os.environ.get(FAIL_RANK_ENV), os.environ.get(HANG_RANK_ENV)
    if fail is None and hang is None:
        return
    at = os.environ.get(FAULT_AT_ENV)
    if at is not None and at != point:
        return
    rank = int(os.environ.get("RANK", "0"))
    if fail is not None and int(fail) == rank:
        if os.environ.get(FAIL_AS_CHECK_ENV):  # a failed correctness check rather than a crash
            from repro.suite import CorrectnessError

            raise CorrectnessError(f"{FAIL_RANK_ENV}={fail}: injected failed check at {point}")
        raise RuntimeError(f"{FAIL_RANK_ENV}={fail}: injected failure at {point}")
    if hang is not None and int(hang) == rank:
        print(f"{HANG_RANK_ENV}={hang}: hanging at {point}", file=sys.stderr, flush=True)  # tests wait for it
        time.sleep(24 * 3600)
