"""Latency of the metadata query tool on a generated 10,000-document sidecar (and more or fewer with --documents).

The sidecar is filled the way ingest fills it (documents rows, typed field rows, a roster with authoritative
columns), without converting or embedding anything: the figure is the query tool's own cost. Prints p50/p95 per
query (each run opens its read-only connection, as the CLI and the API do): every operation, set operations,
semi-joins three levels deep, having, folded text matching; then one JSON line of all figures. The target of issue
25: p95 under 150 ms per exact question on a sidecar of about 600 documents (--documents 600).

    .venv/bin/python bench/bench_metadata_query.py [--documents 10000] [--runs 50]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from datetime import date, datetime, timedelta
from pathlib import Path

from rag_pipeline.components import load_settings
from rag_pipeline.fields.registry import field_rows
from rag_pipeline.fields.values import FieldValue
from rag_pipeline.sidecar import Sidecar
from rag_pipeline.structured.query import QueryRunner

PUBLISHERS = ["Brightfield", "Northwind", "Lantern House", "Copperleaf", "Harbor", "Juniper", "Moss", "Quill"]
GENRES = ["puzzle", "racing", "fishing", "strategy", "platformer", "simulation", "adventure", "roguelike"]
THEMES = ["citrus", "ocean", "forest", "night", "desert", "winter", "music", "space", "kitchen", "garden"]
QUERIES = {
    "count": {"op": "count"},
    "count_where_type": {"op": "count", "where": {"type": "pdf"}},
    "count_where_list_and_range": {"op": "count", "where": {"themes": "citrus", "year": {"gte": 2022, "lte": 2024}}},
    "count_where_date_year": {"op": "count", "where": {"signed": "2025"}},
    "list_where_roster_field": {"op": "list", "where": {"publisher": "Northwind", "genre": "puzzle"}, "limit": 100},
    "distinct_year": {"op": "distinct", "field": "year"},
    "group_by_publisher": {"op": "group_by", "by": "publisher"},
    "group_by_themes": {"op": "group_by", "by": "themes"},
    "top_n_budget": {"op": "top_n", "field": "budget_k", "limit": 10},
    "lookup_one": {"op": "lookup", "where": {"project_id": "P-04242"}},
    "count_where_folded_text": {"op": "count", "where": {"publisher": "LANTERN  house", "themes": "Deserts"}},
    "sum_budget": {"op": "sum", "field": "budget_k", "where": {"genre": "puzzle"}},
    "avg_budget": {"op": "avg", "field": "budget_k"},
    "min_signed": {"op": "min", "field": "signed", "where": {"status": "released"}},
    "max_year": {"op": "max", "field": "year"},
    "count_distinct_publisher": {"op": "count_distinct", "field": "publisher", "where": {"themes": "citrus"}},
    "argmax_budget_return_title": {"op": "argmax", "field": "budget_k", "return": "title"},
    "argmin_year_ties": {"op": "argmin", "field": "year", "return": "project_id", "where": {"genre": "racing"}},
    "argmax_list_length": {"op": "argmax", "field": "themes", "where": {"publisher": "Moss"}},
    "group_by_sum_having": {"op": "group_by", "by": "publisher", "aggregate": {"op": "sum", "field": "budget_k"},
                            "having": {"gt": 1000}},
    "group_by_count_having": {"op": "group_by", "by": "themes", "having": {"gte": 100}},
    "intersect_values": {"op": "intersect", "queries": [
        {"op": "distinct", "field": "themes", "where": {"genre": "puzzle", "year": 2020}},
        {"op": "distinct", "field": "themes", "where": {"genre": "racing", "year": 2020}}]},
    "except_documents": {"op": "except", "queries": [{"op": "list", "where": {"themes": "citrus"}},
                                                     {"op": "list", "where": {"status": "released"}}]},
    "semi_join": {"op": "list", "field": "title", "where": {"publisher": {"in": {
        "op": "group_by", "by": "publisher", "having": {"gt": 10}}}, "genre": "fishing"}},
    "semi_join_3_deep": {"op": "lookup", "field": "themes", "where": {"project_id": {"in": {
        "op": "distinct", "field": "project_id", "where": {"year": {"in": {
            "op": "lookup", "field": "year", "where": {"title": {"in": {
                "op": "argmax", "field": "budget_k", "return": "title"}}}}}, "genre": "puzzle"}}}}},
    "reconciliation_mismatch": {"op": "reconciliation", "where": {"status": "MISMATCH"}},
}


def build(sidecar: Sidecar, documents: int, seed: int = 0) -> int:
    """`documents` documents with about 9 stated fields each, and a roster of every project (publisher and genre
    authoritative, 5% of documents disagreeing); the number of field rows."""
    rng = random.Random(seed)
    rows, fields, roster = [], [], []
    start = datetime(2026, 1, 1)
    for index in range(documents):
        sha = f"{index:064x}"
        doc_type = rng.choice(["md", "md", "md", "pdf", "docx", "html", "pptx"])
        path = f"/corpus/{GENRES[index % len(GENRES)]}/{index:05d}.{doc_type}"
        rows.append({"sha": sha, "shard": sha[0], "paths": [path], "sources": ["bench"], "rel_path": path[8:],
                     "doc_type": doc_type, "tags": [], "status": "ok", "chars": rng.randint(500, 20000),
                     "pages": rng.randint(1, 30) if doc_type == "pdf" else None,
                     "ingested_at": start + timedelta(seconds=index)})
        key = f"P-{index:05d}"
        publisher, genre = rng.choice(PUBLISHERS), rng.choice(GENRES)
        stated = {
            "project_id": FieldValue("string", key, "front_matter"),
            "title": FieldValue("string", f"Project {index}", "front_matter"),
            "publisher": FieldValue("string", publisher if rng.random() > 0.05 else rng.choice(PUBLISHERS),
                                    "front_matter"),
            "genre": FieldValue("string", genre, "front_matter"),
            "themes": FieldValue("list", rng.sample(THEMES, rng.randint(1, 3)), "front_matter"),
            "year": FieldValue("number", float(rng.randint(2018, 2026)), "front_matter"),
            "budget_k": FieldValue("number", round(rng.uniform(10, 5000), 1), "front_matter"),
            "signed": FieldValue("date", (date(2019, 1, 1) + timedelta(days=rng.randint(0, 2500))).isoformat(),
                                 "front_matter"),
            "status": FieldValue("string", rng.choice(["released", "in development", "cancelled"]), "front_matter"),
        }
        fields += field_rows(sha, stated)
        for name, value in (("publisher", publisher), ("genre", genre), ("team", f"team-{index % 40}")):
            roster.append({"roster": "projects", "key": key, "name": name, "position": 0, "kind": "string",
                           "text_value": value, "number_value": None, "date_value": None,
                           "authoritative": name != "team"})
    sidecar.upsert(rows)
    sidecar.replace_fields(fields, [row["sha"] for row in rows])
    sidecar.replace_roster("projects", {"name": "projects", "path": "projects.csv", "key": "project_id",
                                        "document_key": "project_id", "authoritative": ["publisher", "genre"],
                                        "sha": "bench", "rows": documents, "problems": []}, roster)
    return len(fields)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--documents", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=50)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        settings = load_settings(data_dir=Path(folder))
        sidecar = Sidecar(settings.sidecar_path)
        begin = time.perf_counter()
        field_rows_built = build(sidecar, args.documents)
        print(f"built a sidecar of {args.documents:,} documents in {time.perf_counter() - begin:.1f} s "
              f"({field_rows_built:,} field rows)")
        runner = QueryRunner(settings, sidecar)
        figures: dict[str, dict[str, float]] = {}
        print(f"{'query':28} {'p50 ms':>8} {'p95 ms':>8}  result")
        for name, body in QUERIES.items():
            runner.run_json(body)  # warm the file cache
            timings = []
            for _ in range(args.runs):
                started = time.perf_counter()
                result = runner.run_json(body)
                timings.append((time.perf_counter() - started) * 1000)
            timings.sort()
            p50, p95 = statistics.median(timings), timings[int(0.95 * (len(timings) - 1))]
            figures[name] = {"p50_ms": round(p50, 2), "p95_ms": round(p95, 2)}
            shown = result.rows[0] if result.rows else {}
            print(f"{name:28} {p50:8.1f} {p95:8.1f}  {len(result.rows)} rows, {result.total_documents} documents, "
                  f"first {json.dumps(shown, default=str)[:60]}")
        worst = max(figures, key=lambda name: figures[name]["p95_ms"])
        print(f"slowest p95: {worst} {figures[worst]['p95_ms']:.1f} ms")
        print(json.dumps({"documents": args.documents, "runs": args.runs, "queries": figures}))


if __name__ == "__main__":
    main()
