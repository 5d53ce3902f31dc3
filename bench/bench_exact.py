"""Exact answers on GeoQuery: real questions people asked about US geography, over 565 documents, through `chat`.

Ingests the dataset's two corpora (corpus_fm: every fact also as typed front matter; corpus: facts in the bodies
only) into data dirs of their own under --work (kept between runs), then asks every question of
questions_dev.jsonl through the same chat service as `rag-pipeline chat` and POST /chat, with no LLM (the
deterministic planner) and, with --agent, through the agent loop with a fake OpenAI-compatible model that chooses
the operations (rag_pipeline_tests/fake_openai.py, speaking the real HTTP protocol). Prints right / said "can't
answer" / wrong per corpus and question type, and the latency per question (p50/p95).

The only configuration given is the user's: the dataset's README defines "major" (a city of more than 150,000
people, a river longer than 750 km), declared once as business terms in each corpus's sources file, with the names
of the whole collection ("in the us" filters nothing).

    .venv/bin/python bench/bench_exact.py --datasets ../shared/datasets [--corpus corpus_fm,corpus] [--limit N]
        [--work .bench/exact] [--json PATH] [--misses]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import yaml

from rag_pipeline import components
from rag_pipeline.chat.memory import LOCAL_OWNER, ChatMemory
from rag_pipeline.chat.planner import QUERY_METADATA, field_catalog, plan
from rag_pipeline.chat.turn import ChatService
from rag_pipeline.defs.ingest_runner import ingest
from rag_pipeline.llm import build_llm
from rag_pipeline.sidecar import ChatStore, Sidecar
from rag_pipeline.structured.query import QueryRunner

# The business terms of the dataset's README, as a user declares them (the field names each corpus states), and the
# names of the whole collection (its subject, the United States).
COLLECTION = {name: "all" for name in ("united states", "united states of america", "us", "usa", "america",
                                       "country", "nation")}
TERMS = {
    "corpus_fm": {"major city": "population > 150000", "major river": "length_km > 750", **COLLECTION},
    "corpus": {"major city": "population > 150000", "major river": "length_km > 750", **COLLECTION},
}
CANNOT = "I can't answer that exactly"


def prepare(dataset: Path, corpus: str, work: Path) -> Path:
    """The corpus ingested into <work>/<corpus>/data with its sources file (an ingest that changes nothing when it
    is already there); returns the sources file."""
    home = work / corpus
    home.mkdir(parents=True, exist_ok=True)
    sources = home / "sources.yaml"
    sources.write_text(yaml.safe_dump({"sources": {"default": {"roots": [str((dataset / corpus).resolve())]}},
                                       "terms": TERMS[corpus]}, sort_keys=False))
    os.environ["RAG_SOURCES_FILE"] = str(sources)  # the ingest's sources, as a user sets them
    began = time.perf_counter()
    summary = ingest(data_dir=home / "data")
    print(f"{corpus}: {summary['added']} added, {summary['unchanged']} unchanged, {len(summary['failed'])} failed "
          f"in {time.perf_counter() - began:.1f} s", file=sys.stderr)
    return sources


def normal(value: Any) -> Any:
    """A gold or given answer, comparable: names lower case without spaces at the ends, numbers as floats, lists
    as sets."""
    if isinstance(value, (list, tuple, set)):
        items = {normal(item) for item in value}
        return next(iter(items)) if len(items) == 1 else frozenset(items)
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, (int, float)):
        return float(value)
    text = str(value).strip().lower()
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return text


def same(got: Any, gold: Any) -> bool:
    """Names case-insensitive, numbers within 0.5%, lists as sets (no extra names)."""
    got, gold = normal(got), normal(gold)
    if isinstance(got, float) and isinstance(gold, float):
        return abs(got - gold) <= 0.005 * max(abs(gold), 1e-9) or got == gold
    if isinstance(got, frozenset) and isinstance(gold, frozenset):
        return len(got) == len(gold) and all(any(same(a, b) for b in gold) for a in got)
    return got == gold


def judge(done: dict[str, Any], gold: Any) -> str:
    """right, cannot (the answer says it cannot answer exactly) or wrong."""
    if done.get("exit_reason") == "cannot_answer" or done["answer"].startswith(CANNOT):
        return "cannot"
    exact = done.get("exact")
    if not exact:
        return "wrong"
    return "right" if same(exact.get("answer"), gold) else "wrong"


def planned_ms(settings: Any, sidecar: Sidecar, runner: QueryRunner, embedder: Any, question: str) -> float:
    """Milliseconds of the exact question alone, as a chat turn plans and runs it: the catalog, the plan, and
    every metadata query of it with its alternative readings (no answer composed, no session saved)."""
    began = time.perf_counter()
    for action in plan(question, field_catalog(settings, sidecar, None, embedder)):
        if action.tool == QUERY_METADATA:
            for args in (action.args, *action.alternatives):
                runner.run_json(args)
    return (time.perf_counter() - began) * 1000


def percentiles(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    if not ordered:
        return {}
    return {"p50": round(statistics.median(ordered), 1), "p95": round(ordered[int(0.95 * (len(ordered) - 1))], 1)}


def run(corpus: str, sources: Path, work: Path, questions: list[dict[str, Any]], agent: bool,
        misses: bool) -> dict[str, Any]:
    settings = components.load_settings(data_dir=work / corpus / "data", sources_file=sources)
    retriever = components.open_retriever(settings, semantic_cache=False)
    try:
        service = ChatService(settings, components.answerer(settings, retriever), Sidecar(settings.sidecar_location),
                              ChatMemory(ChatStore.beside(settings.sidecar_location), settings.chat_retention_days),
                              build_llm(settings) if agent else None)
        outcomes, latencies, by_type = Counter(), [], defaultdict(Counter)
        missed = []
        for question in questions:
            began = time.perf_counter()
            done = service.turn(question["question"], LOCAL_OWNER)
            latencies.append((time.perf_counter() - began) * 1000)
            verdict = judge(done, question["answer"])
            outcomes[verdict] += 1
            by_type[question["type"]][verdict] += 1
            if verdict != "right" and misses:
                missed.append({"id": question["id"], "type": question["type"], "verdict": verdict,
                               "question": question["question"], "gold": question["answer"],
                               "got": (done.get("exact") or {}).get("answer"), "answer": done["answer"][:300],
                               "trajectory": [step["args"] for step in done["trajectory"]]})
        runner = QueryRunner(settings, service.sidecar)
        planned = [planned_ms(settings, service.sidecar, runner, retriever.embedder, question["question"])
                   for question in questions] if not agent else []
    finally:
        retriever.close()
    total = len(questions)
    return {
        "corpus": corpus, "questions": total,
        **{verdict: round(outcomes[verdict] / total, 4) for verdict in ("right", "cannot", "wrong")},
        "by_type": {kind: {"questions": sum(counts.values()),
                           **{verdict: counts[verdict] for verdict in ("right", "cannot", "wrong")}}
                    for kind, counts in sorted(by_type.items())},
        "latency_ms": percentiles(latencies),  # a chat turn: plan, queries, answer, the session saved
        "exact_question_ms": percentiles(planned),  # the exact question alone: plan and its queries

        "misses": missed,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--datasets", type=Path, required=True, help="the folder holding geoquery/")
    parser.add_argument("--corpus", default="corpus_fm,corpus")
    parser.add_argument("--questions", default="questions_dev.jsonl")
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--work", type=Path, default=Path(".bench/exact"))
    parser.add_argument("--agent", action="store_true", help="through the agent loop with the fake LLM")
    parser.add_argument("--misses", action="store_true", help="list every question not answered right")
    parser.add_argument("--json", type=Path, default=None, help="write every figure to this file")
    args = parser.parse_args()
    dataset = args.datasets / "geoquery"
    questions = [json.loads(line) for line in (dataset / args.questions).read_text().splitlines() if line.strip()]
    questions = questions[: args.limit] if args.limit else questions
    reports = []
    for corpus in [name.strip() for name in args.corpus.split(",") if name.strip()]:
        sources = prepare(dataset, corpus, args.work)
        report = run(corpus, sources, args.work, questions, args.agent, args.misses)
        reports.append(report)
        print(f"{corpus}: {report['questions']} questions: right {report['right']:.1%}, can't answer "
              f"{report['cannot']:.1%}, wrong {report['wrong']:.1%}; p50 {report['latency_ms']['p50']} ms, "
              f"p95 {report['latency_ms']['p95']} ms per chat turn"
              + (f"; the exact question alone p50 {report['exact_question_ms']['p50']} ms, "
                 f"p95 {report['exact_question_ms']['p95']} ms" if report["exact_question_ms"] else ""))
        for kind, counts in report["by_type"].items():
            print(f"  {kind:12} {counts['questions']:4}  right {counts['right']:4}  cannot {counts['cannot']:4}  "
                  f"wrong {counts['wrong']:4}")
        for miss in report["misses"]:
            print(f"  [{miss['verdict']}] {miss['question']}  gold={miss['gold']!r:.80}  got={miss['got']!r:.80}  "
                  f"{json.dumps(miss['trajectory'])[:200]}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"reports": reports}, indent=1))


if __name__ == "__main__":
    main()
