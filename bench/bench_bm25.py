"""BM25 leg study on a BEIR dataset, without an ingest: the corpus chunked in process with the current chunk
settings (the same chunker, tokenizer and context line as an ingest), every chunk encoded as the index encodes it
(its own BM25 weights for each configuration (k, b, avg_len), plus --context-weight times the weights of its
neighbourhood under index/sparse.py's context configuration), then scored the way Qdrant's sparse search with the
IDF modifier scores it (sum over query tokens of query weight x idf x document weight, idf = ln(1 + (N - n + 0.5)
/ (n + 0.5)) over N chunks) and ranked by document (a document's best chunk). Prints nDCG@10 and Recall@100 per
configuration and the mean chunk length in BM25 tokens (what avg_len should be). Tune on train; report test once.

    .venv/bin/python bench/bench_bm25.py [../shared/datasets/scifact] [--split train] [--k 0.9,1.2]
        [--b 0.4,0.75] [--avg-len 50,auto] [--context-weight 0,4]
"""

from __future__ import annotations

import argparse
import os
import time
from itertools import product
from pathlib import Path

import numpy as np
import qdrant_edge
from scipy.sparse import csr_matrix

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from rag_pipeline.evaluate.beir import corpus_records, load_beir  # noqa: E402
from rag_pipeline.evaluate.metrics import evaluate_run, summarise  # noqa: E402
from rag_pipeline.ingest.chunk import chunk_budget  # noqa: E402
from rag_pipeline.index.sparse import CONTEXT_BM25_CONFIG, CONTEXT_RADIUS  # noqa: E402
from rag_pipeline.ingest.chunkers import chunk_document, contextual_text, neighbourhood_texts  # noqa: E402
from rag_pipeline.settings import Settings  # noqa: E402

DATASET = Path(__file__).resolve().parents[2] / "shared" / "datasets" / "scifact"


def corpus_chunks(dataset_dir: Path, split: str, settings: Settings) -> tuple[list[str], list[str], list[str]]:
    """(text as indexed: context line and chunk, its neighbourhood, its document id) for every chunk of the
    corpus."""
    tokenizer, size = chunk_budget(settings)
    texts, contexts, owners = [], [], []
    for record in corpus_records(load_beir(dataset_dir, split)):
        name = f"{record['_id']}.txt"
        markdown = f"{record.get('title', '')}\n\n{record['text']}\n"
        chunks = chunk_document("0" * 64, markdown, chunker=settings.chunker, chunk_size=size,
                                chunk_overlap=settings.chunk_overlap, tokenizer=tokenizer, document_name=name)
        texts += [contextual_text(name, chunk) for chunk in chunks]
        contexts += neighbourhood_texts(chunks, CONTEXT_RADIUS)
        owners += [record["_id"]] * len(chunks)
    return texts, contexts, owners


def matrix(vectors: list[qdrant_edge.SparseVector], vocabulary: dict[int, int]) -> csr_matrix:
    """Rows of sparse vectors over column ids from vocabulary (token hash -> column; new hashes are added)."""
    indptr, columns, values = [0], [], []
    for vector in vectors:
        columns += [vocabulary.setdefault(index, len(vocabulary)) for index in vector.indices]
        values += list(vector.values)
        indptr.append(len(columns))
    return csr_matrix((np.array(values, dtype=np.float32), np.array(columns), np.array(indptr)))


def score(config: qdrant_edge.Bm25Config, texts: list[str], contexts: list[str], context_weight: float,
          owners: list[str], queries: dict[str, str]) -> dict[str, list[str]]:
    """Query id -> document ids ranked by their best chunk's BM25 score (top 100)."""
    model = qdrant_edge.Bm25(config)
    vocabulary: dict[int, int] = {}
    chunks = matrix([model.embed_document(text) for text in texts], vocabulary)
    if context_weight:
        context_model = qdrant_edge.Bm25(CONTEXT_BM25_CONFIG)
        around = matrix([context_model.embed_document(text) for text in contexts], vocabulary)
        for part in (chunks, around):
            part.resize((part.shape[0], len(vocabulary)))
        chunks = (chunks + context_weight * around).tocsr()
    asked = matrix([model.embed_query(text) for text in queries.values()], vocabulary)
    size = len(vocabulary)
    chunks.resize((chunks.shape[0], size))
    asked.resize((asked.shape[0], size))
    holders = np.bincount(chunks.indices, minlength=size)
    idf = np.log(1 + (chunks.shape[0] - holders + 0.5) / (holders + 0.5)).astype(np.float32)
    scores = (asked.multiply(idf[None, :]).tocsr() @ chunks.T).toarray()
    owner_ids = np.array(owners)
    run = {}
    for row, query_id in enumerate(queries):
        best = np.argsort(-scores[row], kind="stable")[:300]
        run[query_id] = list(dict.fromkeys(owner_ids[best[scores[row][best] > 0]]))[:100]
    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dataset", type=Path, nargs="?", default=DATASET)
    parser.add_argument("--split", default="train")
    parser.add_argument("--k", default="1.2")
    parser.add_argument("--b", default="0.75")
    parser.add_argument("--avg-len", default="50,auto", help="comma-separated; auto: the mean chunk length")
    parser.add_argument("--context-weight", default="0,4",
                        help="comma-separated weights of the neighbourhood's BM25 weights (the index uses 4)")
    args = parser.parse_args()
    dataset = load_beir(args.dataset, args.split)
    started = time.perf_counter()
    texts, contexts, owners = corpus_chunks(args.dataset, args.split, Settings())
    plain = qdrant_edge.Bm25(qdrant_edge.Bm25Config(k=1.2, b=0.0, avg_len=1.0, language="english"))
    mean_length = float(np.mean([len(plain.embed_document(text).indices) for text in texts]))  # distinct tokens
    print(f"{len(texts)} chunks in {time.perf_counter() - started:.1f} s; mean distinct BM25 tokens per chunk "
          f"{mean_length:.1f}")
    print("| k | b | avg_len | context weight | nDCG@10 | 95% CI | Recall@100 |\n|---|---|---|---|---|---|---|")
    for k, b, avg_len, weight in product(args.k.split(","), args.b.split(","), args.avg_len.split(","),
                                         args.context_weight.split(",")):
        length = mean_length if avg_len == "auto" else float(avg_len)
        config = qdrant_edge.Bm25Config(k=float(k), b=float(b), avg_len=length, language="english")
        run = score(config, texts, contexts, float(weight), owners, dataset.queries)
        summary = summarise(evaluate_run(dataset.qrels, run, ("ndcg@10", "recall@100")), ci_metrics=("ndcg@10",))
        ci = summary["ci95"]["ndcg@10"]
        print(f"| {k} | {b} | {length:.1f} | {weight} | {summary['metrics']['ndcg@10']:.4f} | "
              f"{ci['low']:.3f}-{ci['high']:.3f} | {summary['metrics']['recall@100']:.4f} |")


if __name__ == "__main__":
    main()
