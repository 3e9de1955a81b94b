"""Downstream evaluation of our models: zero-shot tasks through lm-eval on local copies of the
evaluation sets (``evaluate``, ``ReproLM``), the sets themselves (``python -m repro data evalsets``),
and GLUE fine-tuning with a classification head (``repro.eval.glue``).

lm-eval is optional (``pip install 'sparse-train-repro[eval]'``, or ``scripts/install_eval.sh`` from
local wheels); importing this package does not need it.
"""

from repro.eval.evalsets import GLUE_SETS, SETS, ZERO_SHOT, build_evalsets, read_evalsets_manifest
from repro.eval.harness import DEFAULT_TASKS, bootstrap_ci, evaluate, write_task_configs
from repro.eval.lm import ReproLM, gpt2_tokenizer

__all__ = [
    "DEFAULT_TASKS",
    "GLUE_SETS",
    "SETS",
    "ZERO_SHOT",
    "ReproLM",
    "bootstrap_ci",
    "build_evalsets",
    "evaluate",
    "gpt2_tokenizer",
    "read_evalsets_manifest",
    "write_task_configs",
]
