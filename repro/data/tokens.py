"""Token files: ``train.bin`` / ``val.bin`` hold GPT-2 ids as flat ``uint16`` (each document followed by
the end-of-text token) beside a ``manifest.json`` that says where the text came from and what the files
must hash to. One format for every corpus (the offline default and Hugging Face datasets), so a training
run reads any of them through :func:`token_batches`.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from repro.results import InputError

FORMAT = "repro-tokens-v1"
SPLITS = ("train", "val")
SPLIT_SALT = "repro-data-split-v1"
DEFAULT_REBUILD = "python -m repro data build --out DIR (or, for data/offline-en: snakemake data)"
_ENCODE_BATCH = 256  # documents per tokenizer call: enough for its threads, small enough for progress


class DataError(InputError):
    """A token file that cannot be used (missing, truncated, corrupt): the message names the command
    that rebuilds it, and the CLI prints it on one line."""


@dataclass(frozen=True)
class Document:
    """One document: ``id`` (``source/name``, stable across builds: it decides the split) and its text."""

    id: str
    text: str


def split_of(doc_id: str, val_fraction: float, salt: str = SPLIT_SALT) -> str:
    """``"val"`` for about ``val_fraction`` of documents, by a hash of the id: fixed for a document
    whatever else the corpus holds, so adding a source never moves a document between splits."""
    h = int.from_bytes(hashlib.sha256(f"{salt}:{doc_id}".encode()).digest()[:8], "big")
    return "val" if h < val_fraction * 2**64 else "train"


def sha256_file(path: Path, chunk: int = 1 << 22) -> str:
    """sha256 of a file, read in chunks (token files can be many GB)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


class Progress:
    """One stderr line at most every ``every`` seconds, so long steps show they are moving."""

    def __init__(self, every: float = 2.0, stream=None) -> None:
        self.every, self.stream, self.last = every, stream or sys.stderr, 0.0

    def __call__(self, msg: str, force: bool = False) -> None:
        now = time.monotonic()
        if force or now - self.last >= self.every:
            print(msg, file=self.stream, flush=True)
            self.last = now


def write_corpus(
    docs: Iterable[Document],
    out: Path | str,
    encoding: Any,
    *,
    tokenizer: dict[str, Any],
    sources: list[dict[str, Any]],
    val_fraction: float = 0.01,
    split_fn: Callable[[str], str] | None = None,
    split_method: str | None = None,
    rebuild: str = DEFAULT_REBUILD,
    extra: dict[str, Any] | None = None,
    progress: Callable[..., None] | None = None,
    accept: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Tokenise ``docs`` (in the order given) into ``out/{train,val}.bin`` + ``manifest.json``.

    Exact duplicates (same text) and empty documents are dropped (counted per source as
    ``duplicates_dropped`` and ``empty_dropped``), the split is :func:`split_of` the id (or ``split_fn``
    of it, described in the manifest by ``split_method``), and every
    document is followed by the end-of-text token. Files are written under temporary names and
    renamed at the end, so an interrupted build never leaves files that look complete.
    ``accept(manifest)`` runs before they replace an existing corpus and may raise to keep it (the
    CLI's ``--expected`` check: a corpus that differs from its committed summary never lands).
    Returns the manifest.
    """
    if not 0.0 <= val_fraction < 1.0:
        raise InputError(f"val_fraction must be in [0, 1), got {val_fraction}")
    if encoding.n_vocab > np.iinfo(np.uint16).max + 1:
        raise InputError(f"tokenizer has {encoding.n_vocab} ids; uint16 token files hold at most 65536")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    progress = progress or Progress()
    eot = encoding.eot_token
    tmp = {s: out / f"{s}.bin.tmp" for s in SPLITS}
    files = {s: open(tmp[s], "wb") for s in SPLITS}  # noqa: SIM115 - closed in finally
    hashes = {s: hashlib.sha256() for s in SPLITS}
    stats = {s: {"file": f"{s}.bin", "documents": 0, "characters": 0, "tokens": 0} for s in SPLITS}
    per_source: dict[str, dict[str, Any]] = {}
    seen: set[bytes] = set()
    t0 = time.monotonic()

    def flush(batch: list[Document]) -> None:
        for doc, ids in zip(batch, encoding.encode_ordinary_batch([d.text for d in batch]), strict=True):
            split = split_fn(doc.id) if split_fn else split_of(doc.id, val_fraction)
            arr = np.asarray([*ids, eot], dtype=np.uint16)
            data = arr.tobytes()
            files[split].write(data)
            hashes[split].update(data)
            st = stats[split]
            st["documents"] += 1
            st["characters"] += len(doc.text)
            st["tokens"] += arr.size
            src = per_source.setdefault(doc.id.split("/", 1)[0], {"duplicates_dropped": 0})
            for key, n in (("documents", 1), ("characters", len(doc.text)), ("tokens", arr.size)):
                src.setdefault(split, {"documents": 0, "characters": 0, "tokens": 0})[key] += n
        n_tok = stats["train"]["tokens"] + stats["val"]["tokens"]
        n_doc = stats["train"]["documents"] + stats["val"]["documents"]
        rate = n_tok / max(time.monotonic() - t0, 1e-9)
        progress(f"  tokenised {n_doc} documents, {n_tok:,} tokens ({rate / 1e6:.2f} M tokens/s)")

    try:
        batch: list[Document] = []
        for doc in docs:
            digest = hashlib.sha256(doc.text.encode()).digest()
            if digest in seen or not doc.text.strip():  # an empty document is no duplicate: counted apart
                src = per_source.setdefault(doc.id.split("/", 1)[0], {"duplicates_dropped": 0})
                key = "duplicates_dropped" if doc.text.strip() else "empty_dropped"
                src[key] = src.get(key, 0) + 1
                continue
            seen.add(digest)
            batch.append(doc)
            if len(batch) >= _ENCODE_BATCH:
                flush(batch)
                batch = []
        if batch:
            flush(batch)
    finally:
        for f in files.values():
            f.close()
    for s in SPLITS:
        stats[s]["bytes"] = stats[s]["tokens"] * 2
        stats[s]["sha256"] = hashes[s].hexdigest()
    for src in sources:
        src.setdefault("stats", per_source.get(src["name"], {}))
    manifest = {
        "format": FORMAT,
        "dtype": "uint16",
        "eot_token": eot,
        "document_separator": "each document is followed by eot_token",
        "split": {"method": split_method or f"sha256('{SPLIT_SALT}:' + document id)", "val_fraction": val_fraction},
        "splits": stats,
        "sources": sources,
        "tokenizer": tokenizer,
        "rebuild": rebuild,
        **(extra or {}),
    }
    n_docs = stats["train"]["documents"] + stats["val"]["documents"]
    if val_fraction > 0 and n_docs > 1 and not stats["val"]["documents"]:  # every run evaluates on val
        for s in SPLITS:
            Path(tmp[s]).unlink(missing_ok=True)
        raise InputError(
            f"the split by hash put none of {n_docs} documents in val at val_fraction {val_fraction:g}; nothing "
            f"was written: build again with a larger one (--val-fraction {min(0.5, max(0.05, 10 / n_docs)):.2g})"
        )
    if accept is not None:
        try:
            accept(manifest)
        except BaseException:
            for s in SPLITS:
                Path(tmp[s]).unlink(missing_ok=True)
            raise
    # The old manifest goes first: a build stopped between the two steps below leaves no manifest
    # (the folder is refused: "rebuild"), never new token files under the old files' hashes.
    (out / "manifest.json").unlink(missing_ok=True)
    for s in SPLITS:
        os.replace(tmp[s], out / f"{s}.bin")
    part = out / "manifest.json.partial"
    part.write_text(json.dumps(manifest, indent=2, sort_keys=False) + "\n")
    os.replace(part, out / "manifest.json")
    total = stats["train"]["tokens"] + stats["val"]["tokens"]
    progress(
        f"  wrote {out}: train {stats['train']['tokens']:,} tokens ({stats['train']['documents']} documents), "
        f"val {stats['val']['tokens']:,} tokens ({stats['val']['documents']} documents), {total:,} in all",
        force=True,
    )
    return manifest


def corpus_dir(path: Path | str) -> Path:
    """The corpus folder of ``path``: the folder itself, its ``manifest.json`` or a split's ``.bin``."""
    p = Path(path)
    return p.parent if p.suffix == ".bin" or p.name == "manifest.json" else p


def read_manifest(path: Path | str) -> dict[str, Any]:
    """The manifest of a token directory (or of the directory of a ``.bin`` file); DataError if it is
    missing or unreadable."""
    folder = corpus_dir(path)
    mpath = folder / "manifest.json"
    build = rebuild_here(DEFAULT_REBUILD, folder)
    if not mpath.exists():
        raise DataError(f"no token corpus at {folder} (manifest.json is missing); build it with: {build}")
    try:
        manifest = json.loads(mpath.read_text())
    except (OSError, ValueError) as exc:
        raise DataError(f"{mpath} is unreadable ({exc}); rebuild it with: {build}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise DataError(f"{mpath} is not a {FORMAT} manifest; rebuild it with: {build}")
    return manifest


def rebuild_here(recorded: str, folder: Path) -> str:
    """The manifest's rebuild command, writing to ``folder`` where the corpus lies now: a corpus moved
    or copied since its build (a shared cache, another user's checkout) keeps the ``--out`` it was
    built with, and following that would rebuild the old folder and leave this one broken."""
    here = shlex.quote(str(folder))
    return re.sub(r"--out ('[^']*'|\S+)", lambda _: f"--out {here}", recorded, count=1)


class TokenFile:
    """One split of a token corpus, memory-mapped: checked against the manifest's size on open (a
    truncated or missing file fails here, not mid-run) and against its sha256 by :meth:`verify`."""

    def __init__(self, path: Path | str, split: str | None = None, verify: bool = False) -> None:
        """``path``: the corpus folder, its ``manifest.json`` or a split's ``.bin`` file (which names
        the split); ``split``: train (the default) or val, refused where it contradicts the file."""
        path = Path(path)
        if path.name == "manifest.json":
            path = path.parent
        elif path.suffix == ".bin":
            if split is not None and split != path.stem:
                raise InputError(f"{path} is the {path.stem!r} split's file, not the {split!r} split's")
            path, split = path.parent, path.stem
        split = "train" if split is None else split
        if split not in SPLITS:
            raise InputError(f"split must be one of {SPLITS}, got {split!r}")
        self.dir, self.split = path, split
        self.manifest = read_manifest(path)
        self.rebuild = rebuild_here(self.manifest.get("rebuild", DEFAULT_REBUILD), path)
        splits = self.manifest.get("splits")
        if not isinstance(splits, dict) or not isinstance(splits.get(split), dict):
            raise DataError(f"{path}/manifest.json describes no {split!r} split; rebuild it with: {self.rebuild}")
        self.info = splits[split]
        if self.info.get("file") != f"{split}.bin":  # a manifest never points outside its folder
            raise DataError(
                f"{path}/manifest.json names {self.info.get('file')!r} as the {split} file, not {split}.bin; "
                f"rebuild it with: {self.rebuild}"
            )
        self.path = path / self.info["file"]
        if not self.path.exists():
            raise DataError(f"token file {self.path} is missing; rebuild it with: {self.rebuild}")
        size, want = self.path.stat().st_size, self.info["tokens"] * 2
        if size != want:
            raise DataError(
                f"token file {self.path} is truncated or stale ({size} bytes, manifest says {want}); "
                f"rebuild it with: {self.rebuild}"
            )
        self.tokens = np.memmap(self.path, dtype=np.uint16, mode="r") if want else np.zeros(0, np.uint16)
        if verify:
            self.verify()

    def identity(self) -> dict[str, Any]:
        """What names this split's tokens (its manifest's sha256 and count): a run records it, so a
        resume on a rebuilt corpus with other tokens is refused."""
        return {"sha256": self.info["sha256"], "tokens": int(self.info["tokens"])}

    def __len__(self) -> int:
        return int(self.tokens.size)

    def verify(self) -> None:
        """Hash the file (slow on big corpora, hence on demand) and compare with the manifest."""
        got = sha256_file(self.path)
        if got != self.info["sha256"]:
            raise DataError(
                f"token file {self.path} is corrupt (sha256 {got[:12]}..., manifest says "
                f"{self.info['sha256'][:12]}...); rebuild it with: {self.rebuild}"
            )

    def batch(self, batch: int, seq_len: int, *, step: int = 0, seed: int = 0, generator: Any = None):
        """Inputs and next-token targets, ``(batch, seq_len)`` int64 tensors, from random windows.

        The windows depend only on ``(seed, step)``, so a run resumed at step k draws exactly what
        the uninterrupted run drew; pass a ``torch.Generator`` instead to draw from its state."""
        import torch

        for name, v, lo in (("batch", batch, 1), ("seq_len", seq_len, 1), ("step", step, 0), ("seed", seed, 0)):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < lo:
                raise InputError(f"{name} must be an int >= {lo}, got {v!r}")
        high = len(self) - seq_len  # a window needs seq_len + 1 tokens
        if high <= 0:
            raise InputError(f"{self.path} holds {len(self)} tokens, too few for windows of {seq_len} + 1")
        if generator is not None:
            starts = torch.randint(high, (batch,), generator=generator).numpy()
        else:
            starts = np.random.default_rng([seed, step]).integers(0, high, size=batch)
        win = np.stack([self.tokens[s : s + seq_len + 1] for s in starts]).astype(np.int64)
        win = torch.from_numpy(win)
        return win[:, :-1], win[:, 1:]


def token_batches(
    path: Path | str,
    batch: int,
    seq_len: int,
    split: str | None = None,
    generator: Any = None,
    *,
    seed: int = 0,
    start: int = 0,
    device: Any = None,
) -> Iterator[tuple[Any, Any]]:
    """Endless ``(x, y)`` batches of random windows from a token corpus. Without a generator, batch
    i depends only on ``(seed, start + i)``: a run resumed with ``start=step`` continues exactly.
    ``split``: train (the default) or val, or the one a ``.bin`` ``path`` names."""
    tf = TokenFile(path, split)
    step = start
    while True:
        x, y = tf.batch(batch, seq_len, step=step, seed=seed, generator=generator)
        if device is not None:
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        yield x, y
        step += 1
