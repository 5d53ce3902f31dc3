"""Golden sets, answer metrics, the LLM judge, golden-set evaluation on the sample index, the eval_report asset
with its quality gate and schedule, and the BEIR command."""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime
from pathlib import Path

import dagster as dg
import pytest

from rag_pipeline.components import load_settings
from rag_pipeline.defs.evaluation import eval_quality_gate, eval_report, eval_schedule, golden_set
from rag_pipeline.defs.resources import RetrievalResource
from rag_pipeline.evaluate.answers import citation_scores, contains, exact_match, normalise, token_f1
from rag_pipeline.evaluate.beir import BEIR_MODES, load_beir
from rag_pipeline.evaluate.gate import quality_gate
from rag_pipeline.evaluate.golden import GoldenSetError, load_golden, matches
from rag_pipeline.evaluate.index_eval import evaluate_index
from rag_pipeline.evaluate.judge import Judge, average_precision
from rag_pipeline.llm import OllamaLLM
from rag_pipeline.serve.cli import main
from rag_pipeline.settings import Settings
from rag_pipeline.sidecar import Sidecar
from rag_pipeline_tests.fake_ollama import FakeOllama

from .conftest import REPO, SAMPLE_CORPUS

SAMPLE_GOLDEN = REPO / "golden" / "sample_golden.yaml"


def corpus_paths() -> list[str]:
    return [str(path) for path in SAMPLE_CORPUS.rglob("*") if path.is_file()]


# --- golden sets ------------------------------------------------------------------------------------------------


def test_sample_golden_set_covers_the_corpus() -> None:
    golden = load_golden(SAMPLE_GOLDEN, corpus_paths())
    questions = golden.questions
    assert len(questions) >= 40
    kinds = {kind: sum(q.kind == kind for q in questions) for kind in ("semantic", "aggregation", "out_of_scope")}
    assert kinds["out_of_scope"] >= 5 and kinds["aggregation"] == 0  # its counting questions are answered from text
    assert sum("listing" in q.tags or "counting" in q.tags for q in questions) >= 3
    doc_types = {q.tags[0] for q in questions if q.kind != "out_of_scope"}
    assert doc_types >= {"md", "txt", "pdf", "docx", "html", "pptx"}
    answered = {key for q in questions for key, grade in q.relevance.items() if grade == 3}
    assert len(answered) == 14  # every document answers some question


def test_suffix_matching() -> None:
    assert matches("/docs/math/trig.md", "math/trig.md") and matches("math/trig.md", "math/trig.md")
    assert not matches("/docs/bmath/trig.md", "math/trig.md") and not matches("/docs/math/trig.md.bak", "trig.md")


def write_golden(tmp_path: Path, questions: list[dict]) -> Path:
    path = tmp_path / "golden.yaml"
    path.write_text(json.dumps({"name": "t", "questions": questions}))
    return path


def test_golden_loader_reports_every_problem(tmp_path: Path) -> None:
    good = {"id": "a", "question": "What?", "relevance": {"ops/incident-runbook.md": 3}}
    path = write_golden(tmp_path, [
        good,
        {**good, "relevance": {"ops/incident-runbok.md": 2}},  # a typo: no such document
        {"id": "b", "question": "Why?", "relevance": {"guides/configuration.md": 5}},
        {"id": "c", "question": "", "kind": "semantic", "expected_files": ["faq.txt"]},
        {"id": "d", "question": "Out?", "kind": "out_of_scope", "relevance": {"faq.txt": 1}},
        {"id": "e", "question": "None?"},
        {"id": "f", "question": "Kind?", "kind": "opinion", "expected_files": ["faq.txt"], "colour": "red"},
    ])
    with pytest.raises(GoldenSetError) as raised:
        load_golden(path, corpus_paths())
    message = str(raised.value)
    for expected in ("question a: duplicate id", "'ops/incident-runbok.md' matches no indexed document",
                     "grade of 'guides/configuration.md' must be an integer 0-3", "question c: missing question text",
                     "question d: an out_of_scope question has no relevant files", "question e: needs 'relevance'",
                     "unknown kind 'opinion'", "unknown field(s) colour"):
        assert expected in message
    binary = load_golden(write_golden(tmp_path, [{"id": "x", "question": "q", "expected_files": ["faq.txt"]}]))
    assert binary.questions[0].relevance == {"faq.txt": 1}


# --- answer metrics and the judge ----------------------------------------------------------------------------


def test_answer_metrics() -> None:
    assert normalise("The  Quick, brown fox!") == "quick brown fox"
    assert exact_match("The answer is 42 [1].", "the answer is 42") == 1.0
    assert contains("After review, 24 months [2] apply.", "24 months") == 1.0
    assert contains("After review, 2 years apply.", "24 months") == 0.0
    assert token_f1("the seals are checked monthly", "seals checked every month") == pytest.approx(
        2 * (2 / 4) * (2 / 4) / (2 / 4 + 2 / 4))
    assert citation_scores(["a.md", "x.md"], {"a.md": 3, "b.md": 1}) == {"citation_precision": 0.5,
                                                                        "citation_recall": 0.5}
    assert citation_scores([], {"a.md": 3}) == {"citation_precision": 0.0, "citation_recall": 0.0}


def test_judge_against_a_fake_ollama(fake_ollama: FakeOllama) -> None:
    def reply(messages: list[dict]) -> str:
        prompt = messages[-1]["content"]
        if prompt.startswith("Break the answer"):
            return 'Sure: {"statements": ["Seals are checked monthly.", "Pumps are red."]}'
        if prompt.startswith("For each statement"):
            return '{"verdicts": [1, 0]}'
        if prompt.startswith("How directly"):
            return '{"score": 0.8}'
        return '{"verdicts": [0, 1, 1]}'

    fake_ollama.reply = reply
    judge = Judge(OllamaLLM(fake_ollama.url, retries=0))
    result = judge.evaluate("How often are seals checked?", "Monthly; pumps are red.", ["a", "b", "c"], "monthly")
    assert result["faithfulness"] == 0.5 and result["answer_relevance"] == 0.8
    assert result["context_precision"] == pytest.approx((1 / 2 + 2 / 3) / 2) == average_precision([0, 1, 1])
    assert result["context_recall"] == 0.5 and result["errors"] == {}
    assert "statements" in result["raw"]["faithfulness_statements"]
    fake_ollama.reply = lambda messages: "no JSON here"
    broken = judge.evaluate("q", "a", ["c"], None)
    assert broken["faithfulness"] is None and "faithfulness" in broken["errors"] and broken["context_recall"] is None


# --- golden-set evaluation on the sample index -------------------------------------------------------------


def test_evaluate_index_on_the_sample_corpus(sample_index: tuple[Path, Path]) -> None:
    _, data_dir = sample_index
    report = evaluate_index(load_settings(data_dir=data_dir))
    retrieval = report["retrieval"]
    assert report["questions"] >= 40 and retrieval["n"] >= 35 and retrieval["warnings"] == []
    assert retrieval["metrics"]["recall@5"] > 0.8 and retrieval["metrics"]["ndcg@10"] > 0.8
    ci = retrieval["ci95"]["ndcg@10"]
    assert ci["low"] <= retrieval["metrics"]["ndcg@10"] <= ci["high"]
    assert {"semantic", "out_of_scope"} >= set(report["retrieval_by_kind"]) and "aggregation" not in report
    assert {"md", "pdf", "pptx"} <= set(report["retrieval_by_tag"])
    answers = report["answers"]
    assert report["generator"] == "extractive" and 0 <= answers["out_of_scope_abstention"] <= 1
    assert answers["citation_precision"] > 0.5 and "token_f1" in answers
    assert report["index_version"] != "0"
    chunked = evaluate_index(load_settings(data_dir=data_dir), granularity="chunk", with_answers=False)
    assert 0 < chunked["retrieval"]["metrics"]["ndcg@10"] <= 1 and "answers" not in chunked


# --- Dagster: eval_report, its gate, the schedule ---------------------------------------------------------------


@pytest.fixture
def small_golden(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Eight sample questions (two out of scope) as RAG_EVAL_GOLDEN_PATH: the asset tests stay quick."""
    import yaml

    raw = yaml.safe_load(SAMPLE_GOLDEN.read_text())
    in_scope = [q for q in raw["questions"] if q.get("kind", "semantic") == "semantic"][:6]
    out_of_scope = [q for q in raw["questions"] if q.get("kind") == "out_of_scope"][:2]
    path = tmp_path / "small_golden.yaml"
    path.write_text(yaml.safe_dump({"name": "small-sample", "questions": in_scope + out_of_scope}))
    monkeypatch.setenv("RAG_EVAL_GOLDEN_PATH", str(path))
    return path


def test_eval_report_materialises_with_history(sample_index: tuple[Path, Path], tmp_path: Path,
                                               small_golden: Path) -> None:
    data_dir = tmp_path / "data"
    shutil.copytree(sample_index[1], data_dir)  # eval history is written to the sidecar
    resources = {"retrieval": RetrievalResource(data_dir=str(data_dir))}
    first = dg.materialize([eval_report, eval_quality_gate], resources=resources)
    assert first.success
    metadata = first.asset_materializations_for_node("eval_report")[0].metadata
    assert isinstance(metadata["ndcg@10"], dg.FloatMetadataValue) and metadata["recall@5"].value > 0.8
    assert metadata["index_version"].value != "0" and metadata["previous_index_version"].value == "none"
    assert "| recall@5 |" in metadata["report"].value
    assert len(metadata["questions_table"].value.records) == 8
    assert metadata["golden_set"].value == str(small_golden)
    [check] = first.get_asset_check_evaluations()
    assert check.passed
    second = dg.materialize([eval_report], resources=resources)
    again = second.asset_materializations_for_node("eval_report")[0].metadata
    assert again["previous_index_version"].value == metadata["index_version"].value
    assert "+0.000" in again["report"].value  # the change since the previous run (same index: none)
    history = Sidecar(data_dir / "sidecar.duckdb").eval_history("small-sample")
    assert len(history) == 2 and history[0]["metrics"]["ndcg@10"] == pytest.approx(metadata["ndcg@10"].value)


def test_quality_gate_floors_and_drop() -> None:
    settings = Settings(eval_min_recall_at_5=0.5, eval_min_ndcg_at_10=0.4, eval_max_drop=0.05)
    assert quality_gate({"recall@5": 0.9, "ndcg@10": 0.8}, {"recall@5": 0.92, "ndcg@10": 0.82}, settings).passed
    low = quality_gate({"recall@5": 0.3, "ndcg@10": 0.8}, None, settings)
    assert not low.passed and "below the floor" in low.details
    dropped = quality_gate({"recall@5": 0.9, "ndcg@10": 0.7}, {"recall@5": 0.9, "ndcg@10": 0.8}, settings)
    assert not dropped.passed and "ndcg@10 dropped 0.100" in dropped.details


def test_quality_gate_blocks_a_bad_run(sample_index: tuple[Path, Path], tmp_path: Path, small_golden: Path,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    data_dir = tmp_path / "data"
    shutil.copytree(sample_index[1], data_dir)
    monkeypatch.setenv("RAG_EVAL_MIN_NDCG_AT_10", "0.999")
    result = dg.materialize([eval_report, eval_quality_gate],
                            resources={"retrieval": RetrievalResource(data_dir=str(data_dir))}, raise_on_error=False)
    [check] = result.get_asset_check_evaluations()
    assert not check.passed and "below the floor 0.999" in check.metadata["details"].value


def test_cli_eval_gate(sample_index: tuple[Path, Path], tmp_path: Path, small_golden: Path,
                      monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    """`eval --gate` passes on the sample index, fails (exit 1, reason given) under an unreachable floor, and
    judges the drop against the latest evaluation eval_report recorded."""
    data_dir = tmp_path / "data"
    shutil.copytree(sample_index[1], data_dir)
    args = ["eval", "--gate", "--no-answers", "--json", "--data-dir", str(data_dir)]
    assert main(args) == 0
    assert json.loads(capsys.readouterr().out)["gate"] == {
        "passed": True, "details": "Recall@5 and NDCG@10 within the floors and the allowed drop"}
    monkeypatch.setenv("RAG_EVAL_MIN_NDCG_AT_10", "0.999")
    assert main(args) == 1
    gate = json.loads(capsys.readouterr().out)["gate"]
    assert not gate["passed"] and "ndcg@10" in gate["details"] and "below the floor 0.999" in gate["details"]
    monkeypatch.delenv("RAG_EVAL_MIN_NDCG_AT_10")
    # an earlier evaluation above any possible score: this run is a drop of more than RAG_EVAL_MAX_DROP
    Sidecar(data_dir / "sidecar.duckdb").record_eval("earlier-run", "small-sample", "v0", "chunks", 8,
                                                     {"recall@5": 2.0, "ndcg@10": 2.0})
    assert main(args[:-3] + ["--data-dir", str(data_dir)]) == 1  # readable output this time
    output = capsys.readouterr().out
    assert "quality gate: FAILED" in output and "dropped" in output


def test_nightly_schedule_tick() -> None:
    context = dg.build_schedule_context(scheduled_execution_time=datetime(2026, 11, 23, 2, 0, tzinfo=UTC))
    [request] = eval_schedule.evaluate_tick(context).run_requests
    assert eval_schedule.cron_schedule == "0 2 * * *" and eval_schedule.job_name == "eval_job"
    assert request.run_key is None or isinstance(request.run_key, str)
    assert eval_schedule.default_status == dg.DefaultScheduleStatus.RUNNING
    assert golden_set.key == dg.AssetKey("golden_set")


# --- BEIR -----------------------------------------------------------------------------------------------------


def write_beir(directory: Path) -> None:
    topics = {"d1": ("Pump seals", "Pump seals are inspected every month for leaks."),
              "d2": ("Duck diet", "Ducks eat grasses, aquatic plants, fish and insects."),
              "d3": ("Solar firmware", "The approved inverter firmware is version 3.8.2."),
              "d4": ("Parking", "Parking permits expire on 31 March every year.")}
    directory.mkdir(parents=True)
    with (directory / "corpus.jsonl").open("w") as handle:
        for doc_id, (title, text) in topics.items():
            handle.write(json.dumps({"_id": doc_id, "title": title, "text": text}) + "\n")
    queries = {"q1": "how often are pump seals checked", "q2": "what do ducks eat", "q3": "when do permits expire"}
    (directory / "queries.jsonl").write_text("".join(json.dumps({"_id": q, "text": t}) + "\n" for q, t in queries.items()))
    (directory / "qrels").mkdir()
    (directory / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td2\t1\nq3\td4\t1\n")


def test_load_beir_errors(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="corpus.jsonl is missing"):
        load_beir(tmp_path)
    write_beir(tmp_path / "tiny")
    dataset = load_beir(tmp_path / "tiny")
    assert dataset.name == "tiny" and dataset.qrels["q3"] == {"d4": 1} and len(dataset.queries) == 3


@pytest.mark.slow
def test_beir_command(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    write_beir(tmp_path / "tiny")
    code = main(["beir", str(tmp_path / "tiny"), "--data-dir", str(tmp_path / "data"), "--json",
                 "--modes", "dense,sparse,hybrid", "--depth", "20"])
    assert code == 0
    report = json.loads(capsys.readouterr().out)
    assert report["queries"] == 3 and report["ingest"]["documents"] == 4 and report["ingest"]["failed"] == 0
    for mode in ("dense", "sparse", "hybrid"):
        assert report["modes"][mode]["metrics"]["ndcg@10"] == pytest.approx(1.0)
        assert report["modes"][mode]["metrics"]["recall@100"] == 1.0
    assert (tmp_path / "data" / "beir" / "tiny" / "data" / "sidecar.duckdb").is_file()


def test_beir_hybrid_mode_is_the_configured_fusion(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`beir --modes hybrid` scores the deployment's fusion; hybrid-rrf, hybrid-dbsf and hybrid-adaptive name one
    fusion each."""
    for configured in ("rrf", "dbsf", "adaptive"):
        monkeypatch.setenv("RAG_FUSION", configured)
        settings = Settings(data_dir=tmp_path)
        assert settings.model_copy(update=BEIR_MODES["hybrid"]).fusion == configured
        assert settings.model_copy(update=BEIR_MODES["hybrid-rrf"]).fusion == "rrf"
        assert settings.model_copy(update=BEIR_MODES["hybrid-dbsf"]).fusion == "dbsf"
        assert settings.model_copy(update=BEIR_MODES["hybrid-adaptive"]).fusion == "adaptive"
    assert Settings(data_dir=tmp_path).model_copy(update=BEIR_MODES["hybrid"]).retrieval_mode == "hybrid"
