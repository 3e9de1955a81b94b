"""One declaration per kernel benchmark, in the way tritonbench declares operators.

A :class:`KernelBench` holds what every consumer of a kernel's benchmark needs:

- ``cases``: the inputs per profile (``smoke``: tiny shapes that run on a CPU through the Triton
  interpreter; ``full``: the paper's shapes); a case with ``gate=False`` is left out of the
  pytest-benchmark regression set (``tests/benchmarks``) but kept in the suites;
- ``inputs(case, device, generator)``: builds the tensors of a case;
- ``nbytes(inputs)`` (bytes moved by one call) or ``flops(inputs)``;
- ``check(inputs, variant, out)``: the correctness check of a variant's output; raises
  :class:`CheckFailed` naming what failed, returns quality metrics (``{"rel_err_vs_fp64": ...}``);
- ``same(out, want)``: equality used to re-check the timed call's own output (default: exact);
- the variants: each one decorated function ``inputs -> call`` (a zero-argument callable, the
  thing that is timed), one of them the baseline. Adding a baseline is adding one function::

      @GEGLU.variant(baseline=True, doc="row-walking Triton kernel (the paper's baseline)")
      def intuitive(inp):
          return lambda: geglu_intuitive(inp.z, approximate="tanh", check_finite=False)

Consumers: ``suites/table2.py`` / ``suites/table3.py`` (rows through ``RunContext.time_checked``)
and ``tests/benchmarks`` (pytest-benchmark, device time through :class:`repro.timing.DeviceClock`).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

PROFILES = ("smoke", "full")
DECLARATIONS = ("transposable", "geglu", "mvue", "masked_decay", "nm_mask")
"""Modules of :mod:`repro.kbench` that declare a benchmark (imported by :func:`all_benches`)."""

_REGISTRY: dict[str, KernelBench] = {}


class CheckFailed(AssertionError):
    """A variant's output failed the declaration's correctness check."""


@dataclass(frozen=True)
class Case:
    """One input of a profile: the suites' ``shape`` and ``dtype`` columns and what ``inputs`` takes."""

    shape: str
    dtype: str
    args: tuple = ()
    gate: bool = True  # part of the pytest-benchmark regression set

    @property
    def label(self) -> str:
        return f"{self.shape}-{self.dtype}"


@dataclass(frozen=True)
class Variant:
    name: str
    make: Callable[[Any], Callable[[], Any]]
    baseline: bool = False
    doc: str = ""
    gate: bool = True  # benchmarked by tests/benchmarks
    graph: Callable[[Any], bool] = field(default=lambda inp: True)  # time from a CUDA graph?

    def __call__(self, inp: Any) -> Callable[[], Any]:
        return self.make(inp)


def _same_exact(out: Any, want: Any) -> bool:
    if isinstance(out, torch.Tensor):
        return isinstance(want, torch.Tensor) and torch.equal(out, want)
    if isinstance(out, (list, tuple)):
        return len(out) == len(want) and all(_same_exact(a, b) for a, b in zip(out, want, strict=True))
    return out == want


def clone_output(out: Any) -> Any:
    """A copy of a call's output that later calls (in-place kernels, graph replays) cannot change."""
    if isinstance(out, torch.Tensor):
        return out.detach().clone()
    if isinstance(out, (list, tuple)):
        return type(out)(clone_output(x) for x in out)
    return out


class KernelBench:
    """The declaration of one kernel's benchmark (module docstring)."""

    def __init__(
        self,
        name: str,
        doc: str,
        *,
        cases: dict[str, list[Case]],
        inputs: Callable[[Case, torch.device, torch.Generator], Any],
        check: Callable[[Any, str, Any], dict[str, float]],
        nbytes: Callable[[Any], int] | None = None,
        flops: Callable[[Any], float] | None = None,
        same: Callable[[Any, Any], bool] = _same_exact,
        setup: Callable[[Any], Callable[[], object]] | None = None,
        precheck: Callable[[Any], None] | None = None,
    ) -> None:
        unknown = set(cases) - set(PROFILES)
        if unknown:
            raise ValueError(f"{name}: unknown profiles {sorted(unknown)}; known: {PROFILES}")
        self.name, self.doc = name, doc
        self._cases = cases
        self._inputs, self._check = inputs, check
        self.nbytes, self.flops, self.same = nbytes, flops, same
        self.setup = setup  # untimed per-call restore of an in-place kernel's operand (inputs -> fn)
        self.precheck = precheck  # kernel-level checks beyond the variants' outputs (inputs -> None)
        self.variants: dict[str, Variant] = {}
        if name in _REGISTRY:
            raise ValueError(f"kernel benchmark {name!r} declared twice")
        _REGISTRY[name] = self

    def variant(
        self,
        fn: Callable[[Any], Callable[[], Any]] | None = None,
        *,
        name: str | None = None,
        baseline: bool = False,
        gate: bool = True,
        graph: bool | Callable[[Any], bool] = True,
        doc: str = "",
    ):
        """Register ``fn`` (inputs -> call) as a variant; usable bare or with arguments."""

        def register(f: Callable[[Any], Callable[[], Any]]) -> Callable[[Any], Callable[[], Any]]:
            vname = name or f.__name__
            if vname in self.variants:
                raise ValueError(f"{self.name}: variant {vname!r} registered twice")
            if baseline and any(v.baseline for v in self.variants.values()):
                raise ValueError(f"{self.name}: a second baseline {vname!r} (already {self.baseline.name!r})")
            g = graph if callable(graph) else (lambda inp, _g=bool(graph): _g)
            text = doc or (f.__doc__ or "").strip().splitlines()[0] if (doc or f.__doc__) else ""
            self.variants[vname] = Variant(vname, f, baseline, text, gate, g)
            return f

        return register(fn) if fn is not None else register

    @property
    def baseline(self) -> Variant:
        for v in self.variants.values():
            if v.baseline:
                return v
        raise ValueError(f"{self.name}: no baseline variant registered")

    def cases(self, profile: str) -> list[Case]:
        if profile not in self._cases:
            raise ValueError(f"{self.name}: no cases for profile {profile!r} (has {sorted(self._cases)})")
        return list(self._cases[profile])

    def inputs(self, case: Case, device: torch.device, generator: torch.Generator | None = None) -> Any:
        """The inputs of ``case``; ``generator``: the caller's (a suite draws its cases in
        sequence from one), else a fresh one seeded 0 (each benchmark on its own)."""
        gen = generator if generator is not None else torch.Generator(device=device).manual_seed(0)
        return self._inputs(case, device, gen)

    def check(self, inp: Any, variant: str, out: Any) -> dict[str, float]:
        """Quality metrics of ``out`` (variant ``variant`` on ``inp``); :class:`CheckFailed` if wrong."""
        return self._check(inp, variant, out) or {}

    def gate_params(self, profile: str) -> Iterator[tuple[Case, Variant]]:
        """(case, variant) pairs of the pytest-benchmark regression set of ``profile``."""
        for case in self.cases(profile):
            if case.gate:
                for v in self.variants.values():
                    if v.gate:
                        yield case, v


def registry() -> dict[str, KernelBench]:
    return dict(_REGISTRY)


def all_benches() -> dict[str, KernelBench]:
    """Every declaration (imports the modules listed in :data:`DECLARATIONS`)."""
    for mod in DECLARATIONS:
        importlib.import_module(f"repro.kbench.{mod}")
    return registry()


def require(ok: bool, what: str) -> None:
    """Raise :class:`CheckFailed` unless ``ok`` (the declarations' check helper)."""
    if not ok:
        raise CheckFailed(what)
