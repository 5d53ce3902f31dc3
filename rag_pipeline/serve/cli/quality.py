"""`rag-pipeline eval`, `beir` and `guard-eval`: the quality of retrieval, answers and the guardrails."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from rag_pipeline.errors import InputError
from rag_pipeline.serve.cli.data_dir import require_index
from rag_pipeline.settings import Settings

if TYPE_CHECKING:
    pass


def run_eval(args: argparse.Namespace, settings: Settings) -> int:
    """Metrics of a golden set on the current index; with --gate, exit 1 when the quality gate fails."""
    from rag_pipeline.evaluate.gate import previous_metrics, quality_gate
    from rag_pipeline.evaluate.index_eval import evaluate_index, format_report, headline

    require_index(settings)
    report = evaluate_index(settings, args.golden, top_k=args.top_k, granularity=args.granularity,
                            with_answers=not args.no_answers)
    if args.chat:
        from rag_pipeline.evaluate.index_eval import evaluate_chat_on_index

        report["chat"] = evaluate_chat_on_index(settings, report["golden_path"], args.paraphrases, args.conversations)
    gate = quality_gate(headline(report), previous_metrics(settings, report["golden"]), settings) if args.gate else None
    if gate is not None:
        report["gate"] = {"passed": gate.passed, "details": gate.details}
    print(json.dumps(report) if args.json else format_report(report))
    if gate is not None and not args.json:
        print(f"\nquality gate: {'passed' if gate.passed else 'FAILED'}: {gate.details}")
    return 1 if gate is not None and not gate.passed else 0


def run_beir(args: argparse.Namespace, settings: Settings) -> int:
    """Write the corpus as files under <data dir>/beir/<name>/corpus, ingest it into <data dir>/beir/<name>/data
    (its own collection and sidecar), then score each retrieval mode on the split's queries."""
    from rag_pipeline.components import load_settings, open_retriever
    from rag_pipeline.defs.ingest_runner import ingest
    from rag_pipeline.evaluate.beir import BEIR_MODES, evaluate_modes, format_table, load_beir, write_corpus

    try:
        dataset = load_beir(args.dataset_dir, args.split)
    except OSError as error:
        raise InputError(str(error)) from error
    work = settings.data_dir / "beir" / dataset.name
    documents = write_corpus(dataset, work / "corpus")
    summary = ingest([work / "corpus"], work / "data", progress=not args.json)
    settings = load_settings(data_dir=work / "data", semantic_cache=False)  # the dataset's own deployment
    variants = dict(BEIR_MODES)
    modes = [mode.strip() for mode in args.modes.split(",") if mode.strip()]
    unknown = [mode for mode in modes if mode not in variants]
    if unknown:
        raise InputError(f"unknown mode(s) {', '.join(unknown)}; allowed: {', '.join(variants)}")
    if settings.rerank_model_path:
        variants["hybrid-rerank"] = {"retrieval_mode": "hybrid"}
        modes.append("hybrid-rerank")

    def open_mode(mode: str):
        overrides = {**variants[mode], "rerank_model_path": settings.rerank_model_path if mode.endswith("rerank")
                     else None}
        return open_retriever(settings.model_copy(update=overrides), semantic_cache=False)

    report = evaluate_modes(dataset, open_mode, modes, depth=args.depth,
                            progress=None if args.json else lambda mode: print(f"scoring {mode}", file=sys.stderr))
    report["ingest"] = {"documents": documents, "seconds": summary["seconds"], "added": summary["added"],
                        "chunks": summary["chunks"], "failed": len(summary["failed"])}
    print(json.dumps(report) if args.json else format_table(report))
    return 0


def run_guard_eval(args: argparse.Namespace, settings: Settings) -> int:
    """Ingest the attack corpus into <data dir>/guard_eval (its own collection and sidecar), run the ablation."""
    from rag_pipeline.components import answerer, load_settings, open_retriever
    from rag_pipeline.defs.ingest_runner import ingest
    from rag_pipeline.evaluate.guardrail_ablation import evaluate, format_table, load_cases

    cases_path = Path(args.cases)
    try:
        cases = load_cases(cases_path)
    except OSError as error:
        raise InputError(f"{cases_path}: {error.strerror or error}") from error
    data_dir = settings.data_dir / "guard_eval"
    summary = ingest([cases_path.parent / "docs"], data_dir, progress=not args.json)
    if summary["failed"]:
        print(f"rag-pipeline: {len(summary['failed'])} attack documents failed to ingest: {summary['failed']}",
              file=sys.stderr)
    settings = load_settings(data_dir=data_dir, semantic_cache=False)  # the attack corpus's own deployment
    retriever = open_retriever(settings, semantic_cache=False)
    try:
        report = evaluate(answerer(settings, retriever), cases, top_k=args.top_k,
                          progress=None if args.json else lambda name: print(f"running: {name}", file=sys.stderr))
    finally:
        retriever.close()
    print(json.dumps(report) if args.json else format_table(report))
    return 0
