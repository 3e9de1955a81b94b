"""One module per paper table or figure. Each defines NAME, PAPER, ARTIFACT, TITLE and

- ``run(ctx: repro.suite.RunContext) -> None``: check correctness, then time, adding rows;
- ``compare(df: DataFrame) -> DataFrame``: paper vs ours, from the stored rows;
- ``plot(df: DataFrame, stem: Path) -> list[Path]``: the figure, paper beside ours.
"""

from __future__ import annotations

import importlib
from types import ModuleType

SUITES: dict[str, str] = {
    "table2": "suites.table2",
    "table3": "suites.table3",
    "figure3": "suites.figure3",
    "pivot_comm": "suites.pivot_comm",
    "fast_figure3_e2e": "suites.fast_figure3_e2e",
    "figure6": "suites.figure6",
    "table8": "suites.table8",
    # Hu et al.'s training dynamics and losses (pretraining runs, suites/_pretrain.py)
    "figure1": "suites.figure1",
    "figure2": "suites.figure2",
    "hu_figure3": "suites.hu_figure3",
    "figure10": "suites.figure10",
    "hu_table1": "suites.hu_table1",
    "table5": "suites.table5",
    "table7": "suites.table7",
    # downstream accuracy (issue 23)
    "fast_table1": "suites.fast_table1",
    "hu_table4": "suites.hu_table4",
    "hu_table5_glue": "suites.hu_table5_glue",
    "hu_table7_glue": "suites.hu_table7_glue",
}


# Suites whose smoke profile runs the PyTorch references on a CPU instead of the Triton
# interpreter (their kernels are large; the interpreter would take minutes; the tests cover them).
NO_SMOKE_INTERPRETER = frozenset(
    {
        "figure3",
        "fast_figure3_e2e",
        "figure6",
        "table8",
        "figure1",
        "figure2",
        "hu_figure3",
        "figure10",
        "hu_table1",
        "table5",
        "table7",
        "fast_table1",
        "hu_table4",
        "hu_table5_glue",
        "hu_table7_glue",
    }
)


def get_suite(name: str) -> ModuleType:
    if name not in SUITES:
        raise SystemExit(f"unknown suite {name!r}; known suites: {', '.join(SUITES)}")
    return importlib.import_module(SUITES[name])
