"""Shared test helpers: relative error that never lets NaN pass, poisoned outputs, a RunContext
with a scripted timer for the suites' measurement loops."""

from __future__ import annotations

import pandas as pd
import torch

from repro.checks import rel_err

__all__ = ["assert_close_rel", "rel_err"]


def assert_close_rel(out: torch.Tensor, ref: torch.Tensor, tol: float) -> None:
    e = rel_err(out, ref)
    assert e <= tol, f"relative error {e:.3e} > {tol:.1e}"


_ROW_FIELDS = ("method", "shape", "dtype", "metric", "value", "unit")


class ScriptedCtx:
    """Just enough of ``repro.suite.RunContext`` to run a suite's measurement loop on the CPU:
    every ``time`` call runs the function once and returns the next scripted time; rows are kept
    as dicts in ``rows``; checks must hold; the last log line is ``msg``."""

    def __init__(self, times: list[float], profile: str = "smoke") -> None:
        from repro.timing import Timing

        self.device = torch.device("cpu")
        self.profile = profile
        self.rows: list[dict] = []
        self.msg = ""
        self._times, self._timing = list(times), Timing
        self.results = self
        self.timed = 0

    def add(self, *args: object, **kw: object) -> None:
        row = dict(zip(_ROW_FIELDS, args, strict=False))
        row.update(kw)
        self.rows.append(row)

    def time(self, fn, graph: bool = True):  # noqa: ANN001, ANN201
        fn()
        self.timed += 1
        return self._timing(ms=self._times.pop(0), timer="scripted", reps=1)

    def time_checked(self, fn, check, what: str, graph: bool = True):  # noqa: ANN001, ANN201
        """As RunContext.time_checked: the output of a poisoned rerun must pass ``check``."""
        return self.time_checked_kept(fn, check, what, graph=graph)[0]

    def time_checked_kept(self, fn, check, what: str, graph: bool = True):  # noqa: ANN001, ANN201
        from repro.suite import poison

        t = self.time(fn, graph=graph)
        out = fn()
        poison(out)
        out = fn()
        assert check(out), what
        return t, fn

    def check(self, ok: bool, what: str) -> None:
        assert ok, what

    def log(self, msg: str) -> None:
        self.msg = msg

    def values(self) -> dict[tuple[str, str], float]:
        """(method, metric) -> value of the rows added so far."""
        return {(r["method"], r["metric"]): r["value"] for r in self.rows}


def result_frame(shape: str, rows: list[tuple[str, str, float]]) -> pd.DataFrame:
    """Stored result rows of one shape, as a suite's compare() reads them: (method, metric, value) each."""
    return pd.DataFrame([{"shape": shape, "method": m, "metric": k, "value": v} for m, k, v in rows])
