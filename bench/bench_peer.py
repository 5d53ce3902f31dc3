"""Same-run comparison with the LlamaIndex peer on BEIR SciFact: rag_pipeline first, then the peer's own script
(../shared/peers/llamaindex/run_scifact.py), one after the other on the same machine, then their ratios.

rag_pipeline: the corpus written as one text file per abstract, ingested through the Dagster path into a fresh
data dir (wall time, pure embedding time), where the embedded word pieces went (document text, context line,
overlap, padding), a no-change re-ingest, then every query of the split in the dense, sparse and hybrid (default
fusion) modes. The peer runs in its own virtualenv (--peer-python; see the peer's README for its pinned
versions); --skip-peer --peer-result JSON reuses a stored result of its script instead. Only ratios measured in
one run mean anything on a shared machine; the load average is printed with each part.

    .venv/bin/python bench/bench_peer.py [--dataset DIR] [--split test] [--work DIR] [--limit N]
        [--peer-python PATH] [--skip-peer --peer-result JSON] [--json PATH]

--limit N writes a smaller BEIR dataset (the first N documents, the split's queries that judge one of them) that
both sides run on, for a quick same-run ratio on a busy machine.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from rag_pipeline.components import load_settings, open_retriever  # noqa: E402
from rag_pipeline.defs.ingest_runner import ingest  # noqa: E402
from rag_pipeline.embed.model_files import model_dir, model_tokenizer  # noqa: E402
from rag_pipeline.embed.openvino_embedder import DOCUMENT_BATCH, WIDTH_STEP  # noqa: E402
from rag_pipeline.evaluate.beir import BEIR_MODES, evaluate_modes, load_beir, write_corpus  # noqa: E402
from rag_pipeline.ingest.chunk import document_name  # noqa: E402
from rag_pipeline.ingest.chunkers import Chunk, context_line, contextual_text  # noqa: E402
from rag_pipeline.ingest.stage import stores  # noqa: E402
from rag_pipeline.settings import Settings  # noqa: E402
from rag_pipeline.sidecar import Sidecar  # noqa: E402

SHARED = Path(__file__).resolve().parents[2] / "shared"
DATASET = SHARED / "datasets" / "scifact"
PEER_SCRIPT = SHARED / "peers" / "llamaindex" / "run_scifact.py"
PEER_PYTHON = Path(__file__).resolve().parents[2] / "tmp" / "peer-venv" / "bin" / "python"
MODES = ("dense", "sparse", "hybrid")
PEER_MODES = {"dense": "dense", "sparse": "bm25", "hybrid": "fusion_rrf"}  # ours -> the peer's name


def load() -> str:
    return " ".join(f"{value:.2f}" for value in os.getloadavg())


def piece_shares(settings: Settings) -> dict[str, Any]:
    """Where the embedded word pieces of the index's chunks go: special tokens, context line, overlap (chunk text
    beyond the document's own pieces) and the document text; padding is 0 with onnx-int8 (one text per pass),
    counted for passes of DOCUMENT_BATCH texts sorted by length with widths rounded up to WIDTH_STEP with
    openvino-bf16, and for batches of embedding_batch_size texts sorted by length otherwise."""
    tokenizer = model_tokenizer(model_dir(settings.embedding_model_path))
    chunk_store, redacted = stores(settings)["chunks"], stores(settings)["redacted"]
    shards = sorted(path.name for path in chunk_store.dir.iterdir() if path.is_dir())
    known = Sidecar(settings.sidecar_path).documents_by_sha([sha for shard in shards for sha in chunk_store.shas(shard)])
    totals = {"embedded": 0, "special": 0, "context_line": 0, "overlap": 0, "padding": 0}
    lengths = []
    for shard in shards:
        for sha in sorted(chunk_store.shas(shard)):
            name = document_name(settings, known.get(sha), sha)
            chunks = [Chunk.from_dict(json.loads(line)) for line in chunk_store.read_text(shard, sha, "jsonl")
                      .splitlines() if line]
            embedded = [len(e.ids) for e in tokenizer.encode_batch([contextual_text(name, c) for c in chunks])]
            lengths += embedded
            totals["embedded"] += sum(embedded)
            totals["special"] += sum(len(e.ids) for e in tokenizer.encode_batch([""] * len(chunks)))
            contexts = [context_line(name, chunk.heading_path) for chunk in chunks]
            totals["context_line"] += sum(len(e.ids) for e in tokenizer.encode_batch(contexts,
                                                                                      add_special_tokens=False))
            texts = sum(len(e.ids) for e in tokenizer.encode_batch([c.text for c in chunks], add_special_tokens=False))
            own = len(tokenizer.encode(redacted.read_text(shard, sha, "md"), add_special_tokens=False).ids)
            totals["overlap"] += max(texts - own, 0)
    if settings.embedding_runtime != "onnx-int8":
        bf16 = settings.embedding_runtime == "openvino-bf16"
        size, step = (DOCUMENT_BATCH, WIDTH_STEP) if bf16 else (settings.embedding_batch_size, 1)
        ordered = sorted(lengths)
        for start in range(0, len(ordered), size):
            batch = ordered[start:start + size]
            totals["padding"] += -(-max(batch) // step) * step * len(batch) - sum(batch)
    processed = totals["embedded"] + totals["padding"]
    document = totals["embedded"] - totals["special"] - totals["context_line"] - totals["overlap"]
    return {"processed": processed, "chunks": len(lengths),
            "shares": {"document": document / processed, "overlap": totals["overlap"] / processed,
                       "context_line": totals["context_line"] / processed,
                       "special": totals["special"] / processed, "padding": totals["padding"] / processed}}


def subset(dataset_dir: Path, split: str, limit: int, target: Path) -> Path:
    """A BEIR dataset of the first `limit` documents and the queries of `split` that judge one of them."""
    (target / "qrels").mkdir(parents=True, exist_ok=True)
    kept = []
    with (dataset_dir / "corpus.jsonl").open() as source, (target / "corpus.jsonl").open("w") as corpus:
        for line in source:
            if len(kept) >= limit:
                break
            kept.append(json.loads(line)["_id"])
            corpus.write(line)
    kept_ids = set(kept)
    lines = (dataset_dir / "qrels" / f"{split}.tsv").read_text().splitlines()
    judged = [line for line in lines[1:] if line.split("\t")[1] in kept_ids]
    (target / "qrels" / f"{split}.tsv").write_text("\n".join([lines[0], *judged]) + "\n")
    asked = {line.split("\t")[0] for line in judged}
    with (dataset_dir / "queries.jsonl").open() as source, (target / "queries.jsonl").open("w") as queries:
        queries.writelines(line for line in source if json.loads(line)["_id"] in asked)
    return target


def run_ours(dataset_dir: Path, split: str, work: Path) -> dict[str, Any]:
    dataset = load_beir(dataset_dir, split)
    corpus, data_dir = work / "corpus", work / "data"
    shutil.rmtree(data_dir, ignore_errors=True)
    documents = write_corpus(dataset, corpus)
    loads = [load()]
    started = time.perf_counter()
    summary = ingest([corpus], data_dir, progress=True)
    wall = time.perf_counter() - started
    again = ingest([corpus], data_dir)
    loads.append(load())
    settings = load_settings(data_dir=data_dir, semantic_cache=False)
    shares = piece_shares(settings)

    def open_mode(mode: str):
        return open_retriever(settings.model_copy(update=BEIR_MODES[mode]), semantic_cache=False)

    report = evaluate_modes(dataset, open_mode, MODES, depth=100)
    loads.append(load())
    return {"documents": documents, "chunks": summary["chunks"], "ingest_wall_s": wall,
            "embed_s": summary["embed_seconds"], "chunks_per_s_embed": summary["chunks"] / summary["embed_seconds"],
            "stage_seconds": summary["stage_seconds"], "no_change_reingest_s": again["seconds"],
            "word_pieces": shares, "fusion": settings.fusion, "chunking": settings.chunking_id,
            "embedding_runtime": settings.embedding_runtime, "load_average": loads,
            "modes": {mode: {"ndcg@10": result["metrics"]["ndcg@10"], "ci95": result["ci95"]["ndcg@10"],
                             "recall@100": result["metrics"]["recall@100"],
                             "latency_ms_p50": result["latency_ms"]["p50"]}
                      for mode, result in report["modes"].items()}}


def run_peer(python: Path, dataset_dir: Path, out: Path) -> dict[str, Any]:
    loads = [load()]
    subprocess.run([str(python), str(PEER_SCRIPT), str(dataset_dir), "--out", str(out)], check=True,
                   stdout=subprocess.DEVNULL, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    result = json.loads(out.read_text())
    result["load_average"] = loads + [load()]
    return result


def ratios(ours: dict[str, Any], peer: dict[str, Any]) -> dict[str, float]:
    found = {"ingest_wall": ours["ingest_wall_s"] / peer["ingest"]["ingest_wall_s"],
             "embedding_chunks_per_s": ours["chunks_per_s_embed"] / peer["ingest"]["chunks_per_s_embed"]}
    for mode, peer_mode in PEER_MODES.items():
        found[f"{mode}_ndcg@10"] = ours["modes"][mode]["ndcg@10"] / peer["results"][peer_mode]["ndcg@10"]
        found[f"{mode}_query_p50"] = (ours["modes"][mode]["latency_ms_p50"]
                                      / peer["results"][peer_mode]["latency_ms_p50"])
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", type=Path, default=DATASET, help=f"BEIR SciFact directory (default: {DATASET})")
    parser.add_argument("--split", default="test")
    parser.add_argument("--work", type=Path, default=None, help="work directory (default: a temporary one)")
    parser.add_argument("--limit", type=int, default=None, help="both sides on the first N documents only")
    parser.add_argument("--peer-python", type=Path, default=PEER_PYTHON, help="the peer virtualenv's python")
    parser.add_argument("--skip-peer", action="store_true", help="do not run the peer (needs --peer-result)")
    parser.add_argument("--peer-result", type=Path, default=None, help="a stored result JSON of the peer's script")
    parser.add_argument("--json", type=Path, default=None, help="write both results and the ratios here")
    args = parser.parse_args()
    if args.skip_peer and args.peer_result is None:
        parser.error("--skip-peer needs --peer-result JSON")
    work = args.work or Path(tempfile.mkdtemp(prefix="bench_peer_"))
    work.mkdir(parents=True, exist_ok=True)

    dataset = args.dataset if args.limit is None else subset(args.dataset, args.split, args.limit, work / "dataset")
    ours = run_ours(dataset, args.split, work)
    print(f"rag_pipeline  ingest {ours['ingest_wall_s']:.1f} s ({ours['chunks']} chunks, embedding "
          f"{ours['embed_s']:.1f} s, {ours['chunks_per_s_embed']:.1f} chunks/s), no-change re-ingest "
          f"{ours['no_change_reingest_s']:.2f} s; load {' -> '.join(ours['load_average'])}")
    for stage, seconds in ours["stage_seconds"].items():
        print(f"  {stage:20} {seconds:.1f} s")
    pieces = ours["word_pieces"]
    print(f"  word pieces processed {pieces['processed']:,}: " + ", ".join(
        f"{name} {share:.1%}" for name, share in pieces["shares"].items()))
    if args.skip_peer:
        peer = json.loads(args.peer_result.read_text())
        print(f"peer result reused from {args.peer_result}")
    else:
        peer = run_peer(args.peer_python, dataset, work / "peer_result.json")
        print(f"peer          ingest {peer['ingest']['ingest_wall_s']:.1f} s ({peer['ingest']['chunks']} chunks); "
              f"load {' -> '.join(peer['load_average'])}")
    found = ratios(ours, peer)
    print("\n| mode | ours nDCG@10 (95% CI) | peer nDCG@10 | ours p50 ms | peer p50 ms |\n|---|---|---|---|---|")
    for mode, peer_mode in PEER_MODES.items():
        mine, theirs = ours["modes"][mode], peer["results"][peer_mode]
        print(f"| {mode} / {peer_mode} | {mine['ndcg@10']:.4f} ({mine['ci95']['low']:.3f}-{mine['ci95']['high']:.3f})"
              f" | {theirs['ndcg@10']:.4f} | {mine['latency_ms_p50']:.1f} | {theirs['latency_ms_p50']:.1f} |")
    print("\nratios (ours / peer): " + ", ".join(f"{name} {value:.2f}x" for name, value in found.items()))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"ours": ours, "peer": peer, "ratios": found}, indent=2) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
