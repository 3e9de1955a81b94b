"""process_docs of the offline HellaSwag task: the stock lm-eval task's own function, so the prompts
are exactly the stock ones (lm-eval's ``!function`` loader imports this file next to the YAML)."""

from lm_eval.tasks.hellaswag.utils import process_docs

__all__ = ["process_docs"]
