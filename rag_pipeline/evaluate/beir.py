"""BEIR-format benchmarks: corpus.jsonl, queries.jsonl and qrels/<split>.tsv. The corpus is written out as one
text file per document (the document id as the file name) so it goes through the normal ingest; every query
of the split then runs in each retrieval mode, scored at file (document) granularity."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rag_pipeline.errors import InputError
from rag_pipeline.evaluate.metrics import dedupe_ranking, evaluate_run, summarise
from rag_pipeline.retrieve.retriever import Retriever

BEIR_METRICS = ("ndcg@10", "recall@10", "recall@100", "mrr@10", "map")
# Retrieval modes a BEIR run can score, as settings overrides: "hybrid" is the deployment's fusion (RAG_FUSION, by
# default DBSF); hybrid-rrf, hybrid-dbsf and hybrid-adaptive name one fusion each.
BEIR_MODES: dict[str, dict[str, Any]] = {
    "dense": {"retrieval_mode": "dense"},
    "sparse": {"retrieval_mode": "sparse"},
    "hybrid": {"retrieval_mode": "hybrid"},
    "hybrid-rrf": {"retrieval_mode": "hybrid", "fusion": "rrf"},
    "hybrid-dbsf": {"retrieval_mode": "hybrid", "fusion": "dbsf", "fusion_weights": None},
    "hybrid-adaptive": {"retrieval_mode": "hybrid", "fusion": "adaptive", "fusion_weights": None},
    "blend": {"retrieval_mode": "blend"},
}
# Published nDCG@10 on the test split (from ../shared/datasets/README.md and the papers it cites).
PUBLISHED = {
    "scifact": {
        "BM25 (BEIR paper)": 0.665,
        "BM25 flat (Anserini)": 0.679,
        "all-MiniLM-L6-v2 (dense)": 0.645,
        "BM25 top-100 + ms-marco-MiniLM-L-6-v2 cross-encoder": 0.688,
        "bge-small-en-v1.5 (dense)": 0.713,
        "LlamaIndex 0.14 RRF (peer, same machine)": 0.715,
    },
}


@dataclass
class BeirDataset:
    name: str
    directory: Path
    split: str
    queries: dict[str, str]  # query id -> text, only queries judged in the split
    qrels: dict[str, dict[str, int]]  # query id -> {document id: grade}


def load_beir(directory: str | Path, split: str = "test") -> BeirDataset:
    """The dataset at `directory`; FileNotFoundError / ValueError naming what is missing or malformed."""
    directory = Path(directory)
    for required in ("corpus.jsonl", "queries.jsonl", f"qrels/{split}.tsv"):
        if not (directory / required).is_file():
            raise FileNotFoundError(f"{directory}: not a BEIR dataset, {required} is missing")
    qrels: dict[str, dict[str, int]] = {}
    lines = (directory / "qrels" / f"{split}.tsv").read_text().splitlines()
    for number, line in enumerate(lines, start=1):
        parts = line.split("\t")
        if number == 1 and parts[0] == "query-id" or not line.strip():
            continue
        if len(parts) != 3:
            raise InputError(f"{directory}/qrels/{split}.tsv line {number}: expected 3 tab-separated fields")
        qrels.setdefault(parts[0], {})[parts[1]] = int(parts[2])
    queries = {}
    with (directory / "queries.jsonl").open() as handle:
        for line in handle:
            record = json.loads(line)
            if record["_id"] in qrels:
                queries[record["_id"]] = record["text"]
    return BeirDataset(directory.name, directory, split, queries, qrels)


def corpus_records(dataset: BeirDataset) -> Iterator[dict[str, Any]]:
    with (dataset.directory / "corpus.jsonl").open() as handle:
        for line in handle:
            yield json.loads(line)


def write_corpus(dataset: BeirDataset, target: Path) -> int:
    """One "<id>.txt" per document (title, a blank line, the text); unchanged files are not rewritten, so a
    second run re-ingests nothing."""
    target.mkdir(parents=True, exist_ok=True)
    count = 0
    for record in corpus_records(dataset):
        path = target / f"{record['_id']}.txt"
        content = f"{record.get('title', '')}\n\n{record['text']}\n"
        if not path.is_file() or path.read_text() != content:
            path.write_text(content)
        count += 1
    return count


def document_id(hit_payload: dict[str, Any]) -> str:
    return Path(hit_payload.get("path", "")).stem


def run_mode(retriever: Retriever, dataset: BeirDataset, depth: int = 300) -> tuple[dict[str, list[str]], list[float]]:
    """Per query the ranked document ids (chunk hits deduplicated to documents), and the latency per query."""
    run, latencies = {}, []
    for query_id, text in dataset.queries.items():
        started = time.perf_counter()
        hits = retriever.search(text, top_k=depth).hits
        latencies.append((time.perf_counter() - started) * 1000)
        run[query_id] = dedupe_ranking([document_id(hit.payload) for hit in hits])
    return run, latencies


def evaluate_modes(dataset: BeirDataset, open_mode: Callable[[str], Retriever], modes: Sequence[str],
                   depth: int = 300, progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Metrics per retrieval mode (`open_mode(mode)` returns a retriever, closed here after use)."""
    results = {}
    for mode in modes:
        if progress:
            progress(mode)
        retriever = open_mode(mode)
        try:
            run, latencies = run_mode(retriever, dataset, depth)
        finally:
            retriever.close()
        summary = summarise(evaluate_run(dataset.qrels, run, BEIR_METRICS), ci_metrics=("ndcg@10", "recall@100"))
        summary["latency_ms"] = {"p50": float(np.percentile(latencies, 50)), "p95": float(np.percentile(latencies, 95))}
        results[mode] = summary
    return {"dataset": dataset.name, "split": dataset.split, "queries": len(dataset.queries), "depth": depth,
            "modes": results, "published_ndcg@10": PUBLISHED.get(dataset.name.lower(), {})}


def format_table(report: dict[str, Any]) -> str:
    lines = [f"{report['dataset']} ({report['split']}, {report['queries']} queries)", "",
             "| mode | nDCG@10 | 95% CI | Recall@10 | Recall@100 | MRR@10 | MAP | p50 ms | p95 ms |",
             "|---|---|---|---|---|---|---|---|---|"]
    for mode, summary in report["modes"].items():
        m, ci = summary["metrics"], summary["ci95"]["ndcg@10"]
        lines.append(f"| {mode} | {m['ndcg@10']:.3f} | {ci['low']:.3f}-{ci['high']:.3f} | {m['recall@10']:.3f} | "
                     f"{m['recall@100']:.3f} | {m['mrr@10']:.3f} | {m['map']:.3f} | "
                     f"{summary['latency_ms']['p50']:.1f} | {summary['latency_ms']['p95']:.1f} |")
    if report["published_ndcg@10"]:
        lines += ["", "| published | nDCG@10 |", "|---|---|"]
        lines += [f"| {name} | {value:.3f} |" for name, value in report["published_ndcg@10"].items()]
    return "\n".join(lines)
