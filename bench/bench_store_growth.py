"""Embedded store growth: what the embedded store's writes cost per document as its collection grows.

Ingests the first N SciFact abstracts through the pipeline (into an embedded store and a DuckDB sidecar of its
own), builds their points as vector_index builds them (dense vector, passage BM25, payload), then for each size in
--copies writes that many copies of them into a fresh embedded store (qdrant-edge), in vector_index's batches, and
times the upserts and the optimize that vector_index runs after them (segment merging, HNSW and payload indexes).
The rest of vector_index (reading the artifacts, building the points, the check against the chunks) is not timed.
Copy 0 is the points themselves; every other copy gets new point ids and document SHAs, and its dense vectors get
Gaussian noise of sigma 0.02 per dimension, renormalised (cosine ~0.93 to the original, ~0.87 between two copies),
so that no two points are identical; texts, paths and BM25 vectors are the originals'. Prints the load average and
the cores the process may use, then per size: points, upsert points/s, optimize seconds and points/s, and the
writes' milliseconds per document.

    .venv/bin/python bench/bench_store_growth.py [--limit N] [--copies 1,19] [--corpus FILE] [--work DIR]
                                                 [--json PATH]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import tempfile
import time
import uuid
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
for _name in ("RAG_SIDECAR_URL", "RAG_QDRANT_URL"):  # the bench ingests into a deployment of its own
    os.environ.pop(_name, None)

import numpy as np  # noqa: E402
from bench_ingest import CORPUS, write_corpus  # noqa: E402

from rag_pipeline.defs.ingest_runner import ingest  # noqa: E402
from rag_pipeline.index.edge_store import open_edge_store  # noqa: E402
from rag_pipeline.index.generations import load_settings  # noqa: E402
from rag_pipeline.index.vector_store import HnswSettings, IndexPoint  # noqa: E402
from rag_pipeline.ingest.chunk import read_chunks  # noqa: E402
from rag_pipeline.ingest.stage import stores  # noqa: E402
from rag_pipeline.ingest.vector_index import UPSERT_BATCH, build_points, labelled_rows  # noqa: E402
from rag_pipeline.settings import Settings  # noqa: E402
from rag_pipeline.sidecar import Sidecar  # noqa: E402

NOISE = 0.02
INGESTED_AT = "2026-01-01T00:00:00+00:00"  # the payload's ingest time: any fixed value


def ingested_points(settings: Settings) -> tuple[list[IndexPoint], int]:
    """Every point of the ingested documents that have vectors, built as vector_index builds them, in its order
    (shards, then SHAs), and the number of those documents."""
    vectors, sidecar = stores(settings)["embeddings"], Sidecar(settings.sidecar_location)
    by_shard = {shard: sorted(vectors.shas(shard)) for shard in sorted(sidecar.shas_by_shard())}
    rows = labelled_rows(settings, sidecar, [sha for shas in by_shard.values() for sha in shas])
    points = [point for shard, shas in by_shard.items() for sha in shas
              for point in build_points(settings, shard, sha, rows[sha], read_chunks(settings, shard, sha),
                                        INGESTED_AT)]
    return points, sum(len(shas) for shas in by_shard.values())


def copy_of(points: list[IndexPoint], dense: np.ndarray, copy: int) -> list[IndexPoint]:
    """Copy number `copy` (at least 1) of the points: new ids and document SHAs, the dense vectors `dense`."""
    return [dataclasses.replace(point, id=str(uuid.uuid5(uuid.NAMESPACE_OID, f"{point.id}/{copy}")),
                                dense=vector.tolist(),
                                payload={**point.payload, "sha": f"{point.payload['sha']}-{copy}"})
            for point, vector in zip(points, dense, strict=True)]


def time_store(settings: Settings, points: list[IndexPoint], copies: int, work: Path) -> dict[str, float]:
    """Upsert `copies` copies of the points into a fresh embedded store, then optimize it; the seconds of each."""
    folder = work / f"store_{copies}"
    shutil.rmtree(folder, ignore_errors=True)  # a killed run's store would be loaded, not rebuilt
    store = open_edge_store(folder, "bench", len(points[0].dense),
                            HnswSettings(m=settings.hnsw_m, ef_construct=settings.hnsw_ef_construct,
                                         ef=settings.hnsw_ef))
    original = np.array([point.dense for point in points], dtype=np.float32)
    rng = np.random.default_rng(copies)
    upsert = 0.0
    try:
        for copy in range(copies):
            if copy == 0:
                batch = points
            else:
                dense = original + rng.normal(0, NOISE, original.shape).astype(np.float32)
                batch = copy_of(points, dense / np.linalg.norm(dense, axis=1, keepdims=True), copy)
            started = time.perf_counter()
            for first in range(0, len(batch), UPSERT_BATCH):
                store.upsert(batch[first:first + UPSERT_BATCH])
            upsert += time.perf_counter() - started
        started = time.perf_counter()
        store.optimize()
        optimize = time.perf_counter() - started
    finally:
        store.drop()
    return {"upsert_seconds": upsert, "optimize_seconds": optimize}


def parse_sizes(text: str) -> list[int] | None:
    """"1,4,19" -> [1, 4, 19]; None unless every part is a whole number of at least 1."""
    try:
        sizes = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        return None
    return sizes if sizes and min(sizes) >= 1 else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--limit", type=int, default=None, help="first N abstracts only (default: all 5,183)")
    parser.add_argument("--copies", default="1,19", help="collection sizes to time, in copies of the ingested points")
    parser.add_argument("--corpus", type=Path, default=CORPUS, help=f"SciFact's corpus.jsonl (default: {CORPUS})")
    parser.add_argument("--work", type=Path, default=None,
                        help="work directory (default: a temporary one, removed after)")
    parser.add_argument("--json", type=Path, default=None, help="write every figure to this JSON file")
    args = parser.parse_args()
    sizes = parse_sizes(args.copies)
    if sizes is None:
        parser.error(f"--copies takes whole numbers of at least 1 separated by commas, e.g. 1,19 (got {args.copies!r})")
    if args.limit is not None and args.limit < 1:
        parser.error(f"--limit must be at least 1 (got {args.limit})")
    work = args.work or Path(tempfile.mkdtemp(prefix="bench_store_growth_"))
    try:
        run(args, sizes, work)
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)


def run(args: argparse.Namespace, sizes: list[int], work: Path) -> None:
    corpus, data_dir = work / "scifact", work / "data"
    shutil.rmtree(corpus, ignore_errors=True)
    shutil.rmtree(data_dir, ignore_errors=True)
    write_corpus(corpus, args.limit, args.corpus)
    ingest([corpus], data_dir, progress=True)
    settings = load_settings(data_dir=data_dir)
    points, documents = ingested_points(settings)
    if not points:
        raise SystemExit(f"the ingest of {corpus} indexed no points: nothing to copy")
    load, cores = os.getloadavg()[0], len(os.sched_getaffinity(0))
    print(f"ingested {documents} documents, {len(points)} points; load average {load:.1f}, {cores} cores")
    runs = []
    for copies in sizes:
        timed = time_store(settings, points, copies, work)
        count, docs = len(points) * copies, documents * copies
        result = {"copies": copies, "points": count, "documents": docs, **timed,
                  "upsert_points_per_s": count / timed["upsert_seconds"],
                  "optimize_points_per_s": count / timed["optimize_seconds"],
                  "writes_ms_per_document": 1000 * (timed["upsert_seconds"] + timed["optimize_seconds"]) / docs}
        runs.append(result)
        print(f"{count:>9} points ({docs} documents): upsert {timed['upsert_seconds']:.1f} s "
              f"({result['upsert_points_per_s']:.0f} points/s), optimize {timed['optimize_seconds']:.1f} s "
              f"({result['optimize_points_per_s']:.0f} points/s), {result['writes_ms_per_document']:.2f} ms per "
              "document", flush=True)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        report = {"documents": documents, "points": len(points), "load_average": load, "cores": cores, "runs": runs}
        args.json.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
