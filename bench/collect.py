"""Merge the benchmarks' JSON files into one (`make bench` writes .bench/bench.json) and print the headline figures.

    .venv/bin/python bench/collect.py OUT.json NAME=PATH [NAME=PATH ...]

Each NAME=PATH is one benchmark's JSON (bench_ingest.py --json, bench_query.py --json, `rag-pipeline beir
--json`); OUT.json holds them under their names.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any


def headlines(report: dict[str, Any]) -> list[str]:
    """The figures worth a glance: ingest speed, query latency and its targets, nDCG@10 per mode."""
    lines = []
    if ingest := report.get("ingest"):
        lines.append(f"ingest: {ingest['wall_seconds']:.1f} s wall, {ingest['wall_per_embedding']:.2f}x embedding, "
                     f"{ingest['chunks_per_s']:.1f} chunks/s")
    if query := report.get("query"):
        for name, entry in query.get("targets", {}).items():
            lines.append(f"query: {name} {entry['measured']:.2f} (target {entry['target']:.0f}, "
                         f"ratio {entry['ratio']:.2f})")
        for run in query.get("http", []):
            lines.append(f"query: HTTP {run['clients']} clients p50 {run['latency_ms']['p50']:.1f} ms, "
                         f"p95 {run['latency_ms']['p95']:.1f} ms, {run['requests_per_s']:.1f} requests/s, "
                         f"{run['errors']} errors")
    if beir := report.get("beir"):
        scores = ", ".join(f"{mode} {summary['metrics']['ndcg@10']:.3f}" for mode, summary in beir["modes"].items())
        lines.append(f"beir {beir['dataset']} nDCG@10: {scores}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path)
    parser.add_argument("inputs", nargs="+", metavar="NAME=PATH")
    args = parser.parse_args()
    report = {}
    for item in args.inputs:
        name, _, path = item.partition("=")
        if not name or not path:
            parser.error(f"expected NAME=PATH, got {item!r}")
        report[name] = json.loads(Path(path).read_text())
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print("\n".join([*headlines(report), f"all figures: {args.out}"]))


if __name__ == "__main__":
    main()
