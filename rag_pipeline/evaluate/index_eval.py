"""Evaluate the configured index on a golden set: the CLI's `eval` and the eval_report asset both call this."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rag_pipeline import components
from rag_pipeline.errors import ConfigError
from rag_pipeline.evaluate.golden import load_golden
from rag_pipeline.evaluate.golden_run import Granularity, evaluate_golden
from rag_pipeline.evaluate.judge import Judge
from rag_pipeline.llm import build_llm
from rag_pipeline.settings import Settings
from rag_pipeline.sidecar import ChatStore, Sidecar
from rag_pipeline.structured.query import QueryRunner

HEADLINE = ("recall@5", "recall@10", "ndcg@10", "mrr@10", "map", "precision@5", "success@1")


def evaluate_index(settings: Settings, golden_path: str | Path | None = None, *, top_k: int = 10,
                   granularity: Granularity = "file", with_answers: bool = True) -> dict[str, Any]:
    """The report of the golden set against the current index (`index_version` says which one was measured)."""
    sidecar = Sidecar(settings.sidecar_location)
    documents = sidecar.documents()
    known_paths = [path for row in documents.values() if row["status"] != "failed" for path in row["paths"]]
    golden = load_golden(golden_path or settings.eval_golden_path, known_paths)
    retriever = components.open_retriever(settings, semantic_cache=False)
    try:
        llm = build_llm(settings)
        judge = Judge(llm) if llm is not None and settings.eval_judge and with_answers else None
        report = evaluate_golden(
            golden, components.answerer(settings, retriever), top_k=top_k, granularity=granularity,
            documents={sha: (row["paths"], row["chunks"] or 0) for sha, row in documents.items()},
            with_answers=with_answers, judge=judge, query_runner=QueryRunner(settings, sidecar),
        )
        report.update(index_version=retriever.store.index_version(), collection=retriever.store.collection,
                      golden_path=str(golden.path))
    finally:
        retriever.close()
    return report


def evaluate_chat_on_index(settings: Settings, golden_path: str | Path, paraphrases: str | Path | None = None,
                           conversations: str | Path | None = None) -> dict[str, Any]:
    """/chat next to /ask on the golden set (and its paraphrases and conversations) over the current index."""
    import yaml

    from rag_pipeline.chat.memory import ChatMemory
    from rag_pipeline.chat.turn import ChatService
    from rag_pipeline.evaluate.chat_eval import evaluate_chat

    sidecar = Sidecar(settings.sidecar_location)
    golden = load_golden(golden_path)
    try:
        phrasings = yaml.safe_load(Path(paraphrases).read_text()) if paraphrases else {}
    except (OSError, yaml.YAMLError) as error:
        raise ConfigError(f"{paraphrases}: cannot read the paraphrases: {error}") from error
    retriever = components.open_retriever(settings, semantic_cache=False)
    try:
        answerer = components.answerer(settings, retriever)
        chat = ChatService(settings, answerer, sidecar,
                           ChatMemory(ChatStore.beside(settings.sidecar_location), settings.chat_retention_days),
                           build_llm(settings))
        return evaluate_chat(golden.questions, chat, answerer, QueryRunner(settings, sidecar), phrasings,
                             Path(conversations) if conversations else None)
    finally:
        retriever.close()


def headline(report: dict[str, Any]) -> dict[str, float]:
    """The figures tracked over time: retrieval means, plus answer means when answers were evaluated."""
    figures = {name: value for name, value in report["retrieval"]["metrics"].items() if name in HEADLINE}
    figures.update({f"answer_{name}": value for name, value in report.get("answers", {}).items()})
    figures.update({f"judge_{name}": value for name, value in report.get("judge", {}).get("metrics", {}).items()})
    if report.get("aggregation", {}).get("accuracy") is not None:
        figures["aggregation_accuracy"] = report["aggregation"]["accuracy"]
    return figures


def format_report(report: dict[str, Any], previous: dict[str, float] | None = None) -> str:
    """The report as Markdown; with `previous` (an earlier run's headline figures) the change per figure."""
    retrieval = report["retrieval"]
    lines = [f"## Evaluation of {report['golden']} ({report['questions']} questions, {report['granularity']} "
             f"granularity, top {report['top_k']})", "",
             f"Index version `{report.get('index_version', '?')}`, collection `{report.get('collection', '?')}`.", ""]
    lines += [f"> {warning}" for warning in retrieval.get("warnings", [])]
    lines += ["| metric | value | 95% CI | change |", "|---|---|---|---|"]
    for name, value in headline(report).items():
        ci = retrieval["ci95"].get(name)
        interval = f"{ci['low']:.3f}-{ci['high']:.3f}" if ci else ""
        change = f"{value - previous[name]:+.3f}" if previous and name in previous else ""
        lines.append(f"| {name} | {value:.3f} | {interval} | {change} |")
    if report.get("retrieval_by_kind"):
        lines += ["", "| kind | recall@5 | ndcg@10 | mrr@10 |", "|---|---|---|---|"]
        for kind, metrics in report["retrieval_by_kind"].items():
            lines.append(f"| {kind} | {metrics['recall@5']:.3f} | {metrics['ndcg@10']:.3f} | {metrics['mrr@10']:.3f} |")
    aggregation = report.get("aggregation")
    if aggregation and aggregation.get("accuracy") is not None:
        lines += ["", f"Aggregation questions (exact answers through the metadata query tool, not scored as "
                      f"retrieval): {aggregation['accuracy']:.3f} accuracy over {aggregation['questions']}.", "",
                  "| op | questions | accuracy |", "|---|---|---|"]
        lines += [f"| {op} | {item['questions']} | {item['accuracy']:.3f} |"
                  for op, item in aggregation["by_op"].items()]
        lines += [f"- missed `{miss['id']}`: got {miss['got']!r}, expected {miss['expected']!r}"
                  + (f" ({miss['error']})" if miss["error"] else "") for miss in aggregation["misses"][:20]]
    chat = report.get("chat")
    if chat:
        lines += ["", f"/chat next to /ask ({chat['questions']} phrasings, {chat['average_tool_calls']:.2f} tool calls "
                      f"per question, turn p50 {chat['turn_ms_p50']:.0f} ms, p95 {chat['turn_ms_p95']:.0f} ms):", "",
                  "| kind | questions | chat routing | chat answers | ask answers |", "|---|---|---|---|---|"]
        lines += [f"| {kind} | {item['questions']} | {item['chat_routing_accuracy']:.3f} | "
                  f"{item['chat_answer_accuracy']:.3f} | {item['ask_answer_accuracy']:.3f} |"
                  for kind, item in chat["by_kind"].items()]
        if "conversations" in chat:
            talk = chat["conversations"]
            lines.append(f"\nConversations: {talk['passed']}/{talk['turns']} turns passed, routing "
                         f"{talk['routing_accuracy']:.3f}.")
    if report.get("generator"):
        lines += ["", f"Answers by `{report['generator']}`."]
    return "\n".join(lines)
