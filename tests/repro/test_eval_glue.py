"""repro.eval.glue: the classification head and fine-tuning loop learn a toy task; the k-fold
protocol, the metrics, and the data loaders (offline fixtures, a local dataset through datasets)."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
import torch

from repro.eval.evalsets import SMOKE_SETS as FIXTURES  # noqa: E402
from repro.eval.glue import (
    FineTuneConfig,
    SequenceClassifier,
    cross_validate,
    encode_examples,
    finetune,
    glue_metrics,
    hidden_states,
    load_glue_hub,
    load_glue_offline,
    predict,
    stratified_folds,
)
from repro.models.gpt2 import GPT2Config, build_gpt2
from repro.models.llama import LlamaConfig, LlamaModel


def byte_tokenizer():
    import tiktoken

    ranks = {bytes([i]): i for i in range(256)}
    return tiktoken.Encoding(
        name="bytes", pat_str=r"[\s\S]", mergeable_ranks=ranks, special_tokens={"<|endoftext|>": 256}
    )


def tiny_gpt2(seed: int = 0):
    torch.manual_seed(seed)
    return build_gpt2(GPT2Config(d_model=32, n_layer=2, n_head=2, vocab_size=257, vocab_multiple=1, seq_len=64))


GOOD = ["good", "great", "lovely", "superb", "fine", "nice"]
BAD = ["awful", "bad", "poor", "dull", "boring", "weak"]
NOUNS = ["film", "movie", "show", "story", "play", "book"]


def toy_rows(n: int, seed: int, pair: bool = False) -> list[dict]:
    """Sentiment by one word: label 1 for a GOOD word, 0 for a BAD one (linearly separable)."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        label = i % 2
        word = rng.choice(GOOD if label else BAD)
        s = f"the {rng.choice(NOUNS)} was {word}"
        rows.append(
            {"sentence1": s, "sentence2": f"a {rng.choice(NOUNS)}", "label": label}
            if pair
            else {"sentence": s, "label": label}
        )
    return rows


@pytest.mark.parametrize(("pooling", "floor"), [("last", 0.9), ("mean", 0.7)])
def test_finetune_learns_a_separable_toy_task(pooling, floor):
    """Chance is 0.5; mean pooling dilutes the one informative byte-level word, so its floor is lower."""
    enc = byte_tokenizer()
    train, test = toy_rows(96, seed=1), toy_rows(60, seed=2)
    cfg = FineTuneConfig(epochs=10, lr=5e-3, batch_size=16, max_len=32, pooling=pooling, seed=0, warmup_fraction=0.05)
    backbone = tiny_gpt2()
    before = predict(SequenceClassifier(tiny_gpt2(), pooling=pooling).eval(), test, enc, 32)
    clf = finetune(backbone, train, enc, cfg, device="cpu")
    acc = glue_metrics("sst2", [r["label"] for r in test], predict(clf, test, enc, 32))["acc"]
    assert acc >= floor, (pooling, acc)
    assert glue_metrics("sst2", [r["label"] for r in test], before)["acc"] < 0.8  # not solved by the init


def test_hidden_states_are_the_lm_forward_without_its_head():
    model = tiny_gpt2().eval()
    toks = torch.randint(0, 257, (2, 9))
    with torch.no_grad():
        assert torch.allclose(model.lm_head(hidden_states(model, toks)), model(toks), atol=1e-5)
    torch.manual_seed(0)
    llama = LlamaModel(LlamaConfig(hidden=32, ffn=64, layers=2, heads=2, vocab=100, seq_len=16)).eval()
    toks = torch.randint(0, 100, (2, 7))
    with torch.no_grad():
        assert torch.allclose(llama.lm_head(hidden_states(llama, toks)), llama(toks), atol=1e-5)
    with pytest.raises(TypeError):
        hidden_states(torch.nn.Linear(2, 2), toks)


def test_encode_examples_fits_max_len_and_ends_with_eot():
    enc = byte_tokenizer()
    rows = [{"sentence1": "x" * 50, "sentence2": "y" * 10, "label": 1}, {"sentence": "short", "label": 0}]
    ids, labels = encode_examples(rows, enc, max_len=20)
    assert labels == [1, 0]
    assert len(ids[0]) == 20 and ids[0][-1] == 256 and ids[0].count(256) == 2
    # the longer sentence is cut first, then both in turn: 9 + eot + 9 + eot
    assert ids[0] == [ord("x")] * 9 + [256] + [ord("y")] * 9 + [256]
    assert ids[1] == [*b"short", 256]


def test_stratified_folds_partition_and_balance():
    labels = [0] * 30 + [1] * 10
    folds = stratified_folds(labels, 5, seed=3)
    allidx = np.concatenate(folds)
    assert sorted(allidx.tolist()) == list(range(40))
    for f in folds:
        assert len(f) == 8 and sum(labels[i] for i in f) == 2
    assert [f.tolist() for f in folds] == [f.tolist() for f in stratified_folds(labels, 5, seed=3)]
    with pytest.raises(ValueError):
        stratified_folds([0, 1], 5)


def test_glue_metrics_f1_for_mrpc():
    m = glue_metrics("mrpc", [1, 1, 0, 0, 1], [1, 0, 0, 1, 1])
    assert m["acc"] == pytest.approx(0.6) and m["f1"] == pytest.approx(2 * 2 / (2 * 2 + 1 + 1))
    assert set(glue_metrics("rte", [0, 1], [0, 1])) == {"acc"}


def test_cross_validate_reports_the_protocol():
    enc = byte_tokenizer()
    rows = toy_rows(24, seed=5, pair=True)
    cfg = FineTuneConfig(epochs=1, lr=1e-3, batch_size=8, max_len=32)
    backbone = tiny_gpt2()
    state = {k: v.clone() for k, v in backbone.state_dict().items()}
    df = cross_validate(backbone, "mrpc", rows, enc, cfg, k=3, seed=0, device="cpu")
    assert set(df.protocol) == {"kfold-validation"} and set(df.k) == {3}
    assert set(df.fold) == {"0", "1", "2", "mean", "pooled"} and set(df.metric) == {"acc", "f1"}
    assert df[df.fold.isin(["0", "1", "2"])].groupby("metric").n.sum().tolist() == [24, 24]
    assert all(torch.equal(state[k], v) for k, v in backbone.state_dict().items())  # the pretrained model is kept


def test_offline_glue_loader_on_the_fixtures():
    rows = load_glue_offline("mrpc", FIXTURES)
    assert len(rows) == 2 and {"sentence1", "sentence2", "label"} <= set(rows[0])
    with pytest.raises(ValueError, match="no offline GLUE data"):
        load_glue_offline("cola", FIXTURES)


def test_hub_loader_with_a_tiny_local_dataset(tmp_path, monkeypatch):
    pytest.importorskip("datasets")
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "cache"))
    src = tmp_path / "rte_train.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in toy_rows(6, seed=0, pair=True)))
    rows = load_glue_hub("rte", "train", path="json", data_files={"train": str(src)})
    assert len(rows) == 6 and rows[1]["label"] == 1 and "sentence2" in rows[0]


def test_glue_metrics_refuse_unpaired_or_empty_inputs_and_unsupported_tasks():
    with pytest.raises(ValueError, match="3 labels against 2 predictions"):
        glue_metrics("sst2", [0, 1, 1], [0, 1])
    with pytest.raises(ValueError, match="0 labels"):
        glue_metrics("rte", [], [])
    with pytest.raises(ValueError, match="against 4"):  # a [2, 2] prediction would broadcast against [2, 1]
        glue_metrics("sst2", [[0], [1]], [[0, 1], [1, 0]])
    with pytest.raises(ValueError, match="STS-B"):
        glue_metrics("stsb", [1, 2], [1, 2])


def test_cola_is_scored_by_matthews_correlation():
    t, p = [1, 1, 1, 0, 0, 1, 0, 1], [1, 0, 1, 0, 1, 1, 0, 1]
    tp, tn, fp, fn = 4, 2, 1, 1
    mcc = (tp * tn - fp * fn) / np.sqrt((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn))
    m = glue_metrics("cola", t, p)
    assert m["mcc"] == pytest.approx(mcc) and m["acc"] == pytest.approx(6 / 8)
    assert glue_metrics("cola", [1, 0, 1], [1, 1, 1])["mcc"] == 0.0  # a constant predictor


def test_fractional_labels_are_refused_never_truncated(tmp_path, monkeypatch):
    enc = byte_tokenizer()
    with pytest.raises(ValueError, match="not a class index"):
        encode_examples([{"sentence": "a", "label": 3.8}], enc)
    with pytest.raises(ValueError, match="STS-B"):
        cross_validate(tiny_gpt2(), "stsb", [{"sentence1": "a", "sentence2": "b", "label": 3.8}] * 4, enc, k=2)
    pytest.importorskip("datasets")
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "cache"))
    src = tmp_path / "stsb.jsonl"
    src.write_text("".join(json.dumps({"sentence1": "a", "sentence2": "b", "label": v}) + "\n" for v in (3.8, 1.0)))
    with pytest.raises(ValueError, match="not a class index"):
        load_glue_hub("stsb", "train", path="json", data_files={"train": str(src)})


def test_encode_examples_refuses_a_max_len_with_no_room_instead_of_hanging():
    enc = byte_tokenizer()
    with pytest.raises(ValueError, match="max_len=3"):
        encode_examples([{"sentence1": "abc", "sentence2": "de", "label": 0}], enc, max_len=3)
    ids, _ = encode_examples([{"sentence1": "abc", "sentence2": "de", "label": 0}], enc, max_len=4)
    assert ids == [[ord("a"), 256, ord("d"), 256]]


def test_offline_glue_loader_refuses_a_truncated_set(tmp_path):
    import shutil

    folder = tmp_path / "sets"
    shutil.copytree(FIXTURES, folder)
    path = folder / "glue_mrpc.jsonl"
    path.write_text(path.read_text().splitlines(keepends=True)[0])  # one of its two rows
    with pytest.raises(Exception, match="differs from the manifest"):
        load_glue_offline("mrpc", folder)
    assert len(load_glue_offline("rte", folder)) == 2  # the untouched sets still load
