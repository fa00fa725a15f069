"""The training replies a parameter file's run reads, written by vLLM ahead of it (hours on 2 cores):
the target's greedy replies to the run's training prompts, through elsi's reply step
(`corpus.training_conversations(..., engine="vllm")`, the call the run itself makes, so its cache is
the run's). For `notebooks/tables_strong.yaml` (the default) that is the whole request its
`reply_request` names: SmolLM2-135M's replies of up to 256 tokens to every training prompt
the pinned prompt sets offer (15,306, disjoint from the whole calibration mix and from SpecBench), of which
the run reads the first n_train. Resumable: rerun to continue from the replies already written, in
the cache or in the archive.

`--archive` runs no engine: it archives what is written so far (finished or not, while the engine
runs too) to `data/replies/` (gzip), which is committed, so that a new machine, whose cache is empty,
resumes from there instead of writing the replies again.

`--reuse-from PARAMS` runs no engine either: it gives this request the replies another parameter
file's archived request holds for the same prompts (the strong protocol's first 1,000 prompts are
Table 3's, so Qwen's `tables_qwen_strong.yaml` starts from `tables_qwen.yaml`'s 1,000 replies).

`--upgrade-archive` runs no engine either: it rewrites the request's archive written before archives
named the model and checked each record (format 1) in today's format, the same replies, once.

    .venv/bin/python engines/training_replies.py [--params FILE] [--archive | --upgrade-archive]
    (make replies-strong / replies-archive)
"""

import argparse
import time
from pathlib import Path

from elsi_lib.common.cachefiles import REPO_ROOT
from elsi_lib.draft import corpus
from elsi_lib.study.experiments.experiment_settings import from_parameters
from elsi_lib.hidden.engine_replies import archive_replies, upgrade_archive
from elsi_lib.hidden.reply_reuse import reuse_archived
from elsi_lib.inputs.models import load_model

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--params",
        type=Path,
        default=REPO_ROOT / "notebooks" / "tables_strong.yaml",
        help="the run's parameter file (notebooks/tables_*.yaml)",
    )
    parser.add_argument("--archive", action="store_true", help="archive the replies written so far; run no engine")
    parser.add_argument(
        "--upgrade-archive",
        metavar="VLLM_VERSION",
        help="rewrite the archive vLLM VLLM_VERSION wrote in today's format; run no engine",
    )
    parser.add_argument(
        "--reuse-from",
        type=Path,
        metavar="PARAMS",
        help="first give this request the replies another parameter file's archived request holds for the "
        "same prompts (the same target and settings; hidden.reply_reuse); runs no engine",
    )
    parser.add_argument(
        "--chunk",
        type=int,
        default=512,
        help="prompts per vLLM generate call, each kept (and archivable) as it finishes (default 512)",
    )
    args = parser.parse_args()
    if args.chunk < 1:
        parser.error(f"--chunk must be >= 1, got {args.chunk}")
    exp, _ = from_parameters(args.params)
    if exp.reply_engine != "vllm":
        raise SystemExit(f"{args.params}: its replies are written by {exp.reply_engine!r}, not by vLLM")
    n_prompts = exp.reply_request or exp.n_train
    settings = {"max_new_tokens": exp.train_max_new_tokens, "max_length": exp.max_length}
    start = time.time()
    model, tokenizer = load_model(exp.model)
    if args.upgrade_archive:
        path, count = upgrade_archive(
            model, tokenizer, corpus.training_prompt_list(n_prompts), **settings, version=args.upgrade_archive
        )
        print(f"{path}: {count} of {n_prompts} replies, in today's format")
        raise SystemExit(0)
    if args.reuse_from:
        other, _ = from_parameters(args.reuse_from)
        theirs = (other.model, other.reply_engine, other.train_max_new_tokens, other.max_length)
        if theirs != (exp.model, exp.reply_engine, *settings.values()):
            raise SystemExit(f"{args.reuse_from}: its replies answer another request (model, engine, lengths {theirs})")
        path, count = reuse_archived(
            model,
            tokenizer,
            corpus.training_prompt_list(n_prompts),
            corpus.training_prompt_list(other.reply_request or other.n_train),
            **settings,
        )
        print(f"{count} replies of {args.reuse_from.name}'s archived request given to {path.name}")
        raise SystemExit(0)
    if args.archive:
        path, count = archive_replies(model, tokenizer, corpus.training_prompt_list(n_prompts), **settings)
        if count:
            print(f"{count} of {n_prompts} replies archived in {path} ({path.stat().st_size / 1e6:.1f} MB)")
        else:
            print(f"{args.params.name}: no reply written yet for its {n_prompts} prompts: nothing archived")
        raise SystemExit(0)
    conversations = corpus.training_conversations(
        model, tokenizer, n_prompts, engine="vllm", chunk=args.chunk, **settings
    )
    print(f"{len(conversations)} conversations with replies in {time.time() - start:.0f} s")
    counts = corpus.reply_tokens_by_set(tokenizer, conversations, corpus.training_prompt_sets(n_prompts))
    for prompt_set, tokens in counts.items():
        print(f"  {prompt_set:<20} {tokens:>10,} reply tokens")
