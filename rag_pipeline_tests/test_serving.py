"""The answer_question Dagster job and the `search` / `ask` commands on the ingested sample corpus."""

from __future__ import annotations

import json
from pathlib import Path

import dagster as dg
import pytest

from rag_pipeline.defs.resources import RetrievalResource
from rag_pipeline.defs.serving import answer_question
from rag_pipeline.serve.cli import main
from rag_pipeline.serve.cli.questions import parse_filters


def run_answer_question(data_dir: Path, **config) -> dg.ExecuteInProcessResult:
    return answer_question.execute_in_process(
        run_config={"ops": {"answer_question_op": {"config": config}}},
        resources={"retrieval": RetrievalResource(data_dir=str(data_dir))},
    )


def test_answer_question_job_records_sources_and_timings(sample_index: tuple[Path, Path]) -> None:
    _, data_dir = sample_index
    result = run_answer_question(data_dir, question="What do ducks eat?", top_k=3)
    assert result.success
    output = result.output_for_node("answer_question_op")
    assert [source["number"] for source in output["sources"]] == [1, 2, 3]
    assert output["sources"][0]["path"].endswith("duck.html") and output["citations"]
    [event] = [e for e in result.all_node_events if e.event_type_value == "STEP_OUTPUT"]
    metadata = event.event_specific_data.metadata
    assert metadata["sources_count"].value == 3
    assert "duck.html" in metadata["sources"].value and metadata["sources"].value.startswith("| # |")
    assert metadata["total_ms"].value > 0 and metadata["search_ms"].value > 0
    assert metadata["answer"].value.startswith("Ducks eat") and metadata["generator"].value == "extractive"
    assert metadata["quarantined_chunks"].value == 0 and metadata["refused"].value is False


def test_answer_question_job_retrieval_only_with_filters(sample_index: tuple[Path, Path]) -> None:
    _, data_dir = sample_index
    result = run_answer_question(data_dir, question="duck", top_k=4, generate=False,
                                 filters={"doc_type": ["pdf", "docx"]})
    output = result.output_for_node("answer_question_op")
    assert output["results"] and {item["doc_type"] for item in output["results"]} <= {"pdf", "docx"}


def test_answer_question_job_rejects_a_bad_filter(sample_index: tuple[Path, Path]) -> None:
    _, data_dir = sample_index
    result = answer_question.execute_in_process(
        run_config={"ops": {"answer_question_op": {"config": {"question": "x", "filters": {"colour": ["red"]}}}}},
        resources={"retrieval": RetrievalResource(data_dir=str(data_dir))}, raise_on_error=False,
    )
    assert not result.success
    failure = next(e for e in result.all_events if e.is_step_failure)
    assert "invalid request: unknown filter field 'colour'" in failure.step_failure_data.error.message


def test_definitions_include_the_serving_job() -> None:
    from rag_pipeline.definitions import defs

    loaded = defs()
    assert loaded.resolve_job_def("answer_question").name == "answer_question"
    assert {"rag", "retrieval"} <= set(loaded.resources)


def test_cli_search_json_contract(sample_index: tuple[Path, Path], capsys: pytest.CaptureFixture) -> None:
    _, data_dir = sample_index
    code = main(["search", "how do I rotate credentials", "--top-k", "4", "--json", "--data-dir", str(data_dir),
                 "--filter", "doc_type=md"])
    assert code == 0
    output = json.loads(capsys.readouterr().out)
    assert len(output["results"]) == 4
    for item in output["results"]:
        assert {"path", "header", "line_start", "chunk_id", "sha", "score", "text"} <= set(item)
        assert item["doc_type"] == "md"
    assert output["timings_ms"]["total"] > 0


def test_cli_ask_json_and_errors(sample_index: tuple[Path, Path], capsys: pytest.CaptureFixture) -> None:
    _, data_dir = sample_index
    assert main(["ask", "who is on call?", "--json", "--data-dir", str(data_dir)]) == 0
    output = json.loads(capsys.readouterr().out)
    assert {"answer", "citations", "sources", "guardrails", "generator"} <= set(output)
    assert main(["search", "x", "--filter", "colour=red", "--data-dir", str(data_dir)]) == 2
    assert "unknown filter field 'colour'" in capsys.readouterr().err
    assert main(["search", "x", "--filter", "nonsense", "--data-dir", str(data_dir)]) == 2


def test_parse_filters() -> None:
    assert parse_filters(["doc_type=pdf", "doc_type=md", "path_prefix=/a=b"]) == {
        "doc_type": ["pdf", "md"], "path_prefix": "/a=b"}
    assert parse_filters([]) is None
    with pytest.raises(ValueError, match="KEY=VALUE"):
        parse_filters(["doc_type"])


def test_retrieval_settings_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from rag_pipeline.components import retrieval_settings
    from rag_pipeline.settings import Settings

    monkeypatch.setenv("RAG_RETRIEVAL_MODE", "blend")
    monkeypatch.setenv("RAG_FUSION_WEIGHTS", "1.0,0.5")
    monkeypatch.setenv("RAG_BLEND_ALPHA", "0.6")
    monkeypatch.setenv("RAG_MMR_LAMBDA", "0.8")
    monkeypatch.setenv("RAG_QUERY_FRAGMENTS", "false")
    settings = retrieval_settings(Settings())
    assert (settings.mode, settings.weights, settings.alpha, settings.mmr_lambda, settings.fragments) == (
        "blend", (1.0, 0.5), 0.6, 0.8, False)
    monkeypatch.setenv("RAG_FUSION", "dbsf")
    with pytest.raises(ValueError, match="leg weights apply to RRF"):
        retrieval_settings(Settings())


def test_open_retriever_configuration_errors(sample_index: tuple[Path, Path], tmp_path: Path) -> None:
    from rag_pipeline.components import open_retriever
    from rag_pipeline.retrieve.rerank import RerankerUnavailable
    from rag_pipeline.settings import Settings

    _, data_dir = sample_index
    with pytest.raises(ValueError, match="RAG_OLLAMA_URL"):
        open_retriever(Settings(data_dir=data_dir, hyde="standard"))
    with pytest.raises(RerankerUnavailable, match="RAG_RERANK_MODEL_PATH"):
        open_retriever(Settings(data_dir=data_dir, rerank_model_path=str(tmp_path / "missing")))


def test_shard_digits_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from pydantic import ValidationError

    from rag_pipeline.settings import Settings

    monkeypatch.setenv("RAG_SHARD_HEX_DIGITS", "2")
    assert Settings().shard_count == 256
    monkeypatch.setenv("RAG_SHARD_HEX_DIGITS", "3")
    with pytest.raises(ValidationError):
        Settings()
