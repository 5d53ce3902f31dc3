"""Embedded store growth: what the embedded store's single writer costs per document as the collection grows.

Ingests the first N SciFact abstracts through the pipeline, builds their points as vector_index builds them (dense
vector, passage BM25, payload), then for each size in --copies writes that many copies of them into a fresh
embedded store (qdrant-edge), in vector_index's batches, and times the upserts and the optimize that vector_index
runs after them (segment merging and HNSW building). Each copy gets new point ids and documents, and its dense
vectors get Gaussian noise (sigma 0.02 per dimension, renormalised) so that no two points are identical; texts,
payloads and BM25 vectors are the originals'. Prints, per size: points, upsert points/s, optimize seconds and
points/s, and the writer's milliseconds per document (upsert and optimize). The ingest's own embedding is not
timed here (bench_ingest.py does that).

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

import numpy as np  # noqa: E402
from bench_ingest import CORPUS, write_corpus  # noqa: E402

from rag_pipeline.components import load_settings  # noqa: E402
from rag_pipeline.defs.ingest_runner import ingest  # noqa: E402
from rag_pipeline.index.edge_store import open_edge_store  # noqa: E402
from rag_pipeline.index.vector_store import HnswSettings, IndexPoint  # noqa: E402
from rag_pipeline.ingest.chunk import read_chunks  # noqa: E402
from rag_pipeline.ingest.vector_index import UPSERT_BATCH, build_points, labelled_rows  # noqa: E402
from rag_pipeline.settings import Settings  # noqa: E402
from rag_pipeline.sidecar import Sidecar  # noqa: E402

NOISE = 0.02


def ingested_points(settings: Settings) -> tuple[list[IndexPoint], int]:
    """Every point of the ingested documents, built as vector_index builds them, and the number of documents."""
    sidecar = Sidecar(settings.sidecar_location)
    by_shard = {shard: sorted(shas) for shard, shas in sorted(sidecar.shas_by_shard().items())}
    rows = labelled_rows(settings, sidecar, [sha for shas in by_shard.values() for sha in shas])
    points = [point for shard, shas in by_shard.items() for sha in shas
              for point in build_points(settings, shard, sha, rows[sha], read_chunks(settings, shard, sha),
                                        "2026-01-01T00:00:00+00:00")]
    return points, len(rows)


def copy_of(points: list[IndexPoint], dense: np.ndarray, copy: int) -> list[IndexPoint]:
    """Copy number `copy` (0: the points themselves): new ids and documents, the dense vectors `dense`."""
    if copy == 0:
        return points
    return [dataclasses.replace(point, id=str(uuid.uuid5(uuid.NAMESPACE_OID, f"{point.id}/{copy}")),
                                dense=vector.tolist(),
                                payload={**point.payload, "sha": f"{point.payload['sha']}-{copy}"})
            for point, vector in zip(points, dense, strict=True)]


def time_store(settings: Settings, points: list[IndexPoint], copies: int, work: Path) -> dict[str, float]:
    """Upsert `copies` copies of the points into a fresh embedded store, then optimize it; the seconds of each."""
    store = open_edge_store(work / f"store_{copies}", "bench", len(points[0].dense),
                            HnswSettings(m=settings.hnsw_m, ef_construct=settings.hnsw_ef_construct,
                                         ef=settings.hnsw_ef))
    original = np.array([point.dense for point in points], dtype=np.float32)
    noise = np.random.default_rng(copies)
    upsert = 0.0
    try:
        for copy in range(copies):
            dense = original + noise.normal(0, NOISE, original.shape).astype(np.float32) if copy else original
            batch = copy_of(points, dense / np.linalg.norm(dense, axis=1, keepdims=True), copy)
            started = time.perf_counter()
            for first in range(0, len(batch), UPSERT_BATCH):
                store.upsert(batch[first:first + UPSERT_BATCH])
            upsert += time.perf_counter() - started
        started = time.perf_counter()
        store.optimize()
        optimize = time.perf_counter() - started
    finally:
        store.close()
        shutil.rmtree(work / f"store_{copies}", ignore_errors=True)
    return {"upsert_seconds": upsert, "optimize_seconds": optimize}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--limit", type=int, default=None, help="first N abstracts only (default: all 5,183)")
    parser.add_argument("--copies", default="1,19", help="collection sizes to time, in copies of the ingested points")
    parser.add_argument("--corpus", type=Path, default=CORPUS, help=f"SciFact's corpus.jsonl (default: {CORPUS})")
    parser.add_argument("--work", type=Path, default=None,
                        help="work directory (default: a temporary one, removed after)")
    parser.add_argument("--json", type=Path, default=None, help="write every figure to this JSON file")
    args = parser.parse_args()
    parts = [part.strip() for part in args.copies.split(",") if part.strip()]
    if not parts or not all(part.isdigit() and int(part) >= 1 for part in parts):
        parser.error(f"--copies takes positive whole numbers separated by commas, e.g. 1,19 (got {args.copies!r})")
    sizes = [int(part) for part in parts]
    work = args.work or Path(tempfile.mkdtemp(prefix="bench_store_growth_"))
    corpus, data_dir = work / "scifact", work / "data"
    shutil.rmtree(data_dir, ignore_errors=True)
    write_corpus(corpus, args.limit, args.corpus)
    ingest([corpus], data_dir, progress=True)
    settings = load_settings(data_dir=data_dir)
    points, documents = ingested_points(settings)
    print(f"ingested {documents} documents, {len(points)} points")
    runs = []
    for copies in sizes:
        timed = time_store(settings, points, copies, work)
        count, docs = len(points) * copies, documents * copies
        run = {"copies": copies, "points": count, "documents": docs, **timed,
               "upsert_points_per_s": count / timed["upsert_seconds"],
               "optimize_points_per_s": count / timed["optimize_seconds"],
               "writer_ms_per_document": 1000 * (timed["upsert_seconds"] + timed["optimize_seconds"]) / docs}
        runs.append(run)
        print(f"{count:>9} points ({docs} documents): upsert {timed['upsert_seconds']:.1f} s "
              f"({run['upsert_points_per_s']:.0f} points/s), optimize {timed['optimize_seconds']:.1f} s "
              f"({run['optimize_points_per_s']:.0f} points/s), {run['writer_ms_per_document']:.2f} ms per document",
              flush=True)
    if args.json:
        args.json.write_text(json.dumps({"documents": documents, "points": len(points), "runs": runs}, indent=2))
    if args.work is None:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
