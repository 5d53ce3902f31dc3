"""The CLI's error handling: every deliberate error (RagError) maps to one exit code, and with --json stdout still
gets one JSON object naming it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rag_pipeline import errors
from rag_pipeline.evaluate.golden import GoldenSetError
from rag_pipeline.ingest.converters import ConversionError
from rag_pipeline.serve.cli import exit_code, main


@pytest.mark.parametrize(("error", "code"), [
    (errors.InputError("bad"), 2), (errors.NotFound("none"), 2), (errors.ConfigError("bad file"), 2),
    (GoldenSetError("bad golden"), 2), (ConversionError("not a PDF"), 2),
    (errors.StoreUnavailable("down"), 1), (errors.StoreLocked("held"), 1), (errors.ModelUnavailable("gone"), 1),
    (errors.IngestFailed("check failed"), 1), (errors.Conflict("busy"), 1), (errors.RagError("other"), 1),
])
def test_exit_codes(error: errors.RagError, code: int) -> None:
    assert exit_code(error) == code


def test_error_codes_follow_the_kind() -> None:
    assert errors.StoreLocked("x").code == "store_locked" and errors.NotFound("x").code == "not_found"
    assert errors.InputError("x", code="empty_query").code == "empty_query"
    assert errors.InputError("x").code == "invalid_request"  # an instance's code does not leak to its class
    assert isinstance(errors.InputError("x"), ValueError) and isinstance(errors.StoreUnavailable("x"), RuntimeError)


def test_json_errors_on_stdout(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    missing = tmp_path / "missing"
    assert main(["manifest", str(missing), "--json", "--data-dir", str(tmp_path / "data")]) == 2
    captured = capsys.readouterr()
    assert json.loads(captured.out) == {"error": {"code": "invalid_request", "message": f"not a directory: {missing}"}}
    assert f"rag-pipeline: not a directory: {missing}" in captured.err
    assert main(["search", "anything", "--filter", "colour", "--json", "--data-dir", str(tmp_path / "data")]) == 2
    assert "--filter takes KEY=VALUE" in json.loads(capsys.readouterr().out)["error"]["message"]


def test_inspect_unknown_document(sample_index: tuple[Path, Path], capsys: pytest.CaptureFixture) -> None:
    assert main(["inspect", "chunks", "no-such-file.md", "--json", "--data-dir", str(sample_index[1])]) == 2
    error = json.loads(capsys.readouterr().out)["error"]
    assert error == {"code": "not_found", "message": "no documents match 'no-such-file.md'"}


READING_COMMANDS = [["search", "duck"], ["ask", "who is on call?"], ["chat", "who is on call?"], ["query", "count"],
                    ["fields"], ["eval", "--no-answers"], ["serve", "--keyless-loopback"]]


@pytest.mark.parametrize("command", READING_COMMANDS, ids=lambda command: command[0])
def test_commands_that_read_an_index_refuse_a_missing_or_empty_data_dir(
        command: list[str], tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """A wrong folder or a mistyped --data-dir is refused (exit 2, the directory named with the way to create an
    index), and nothing is created: not the directory, not a store, a sidecar or a model in it."""
    missing, empty = tmp_path / "missing", tmp_path / "empty"
    empty.mkdir()
    for data_dir, why in ((missing, "the directory does not exist"), (empty, "no ingest has completed there")):
        assert main([*command, "--json", "--data-dir", str(data_dir)]) == 2
        captured = capsys.readouterr()
        error = json.loads(captured.out)["error"]
        assert error["code"] == "no_index"
        assert error["message"].startswith(f"no index in {data_dir}: {why}; create one with `rag-pipeline ingest "
                                           f"FOLDER --data-dir {data_dir}` (or `make demo`")
        assert f"rag-pipeline: no index in {data_dir}" in captured.err
    assert not missing.exists() and list(empty.iterdir()) == []


def test_inspect_and_sources_refuse_a_missing_data_dir(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    missing = tmp_path / "missing"
    for command in (["inspect", "documents"], ["sources"]):
        assert main([*command, "--data-dir", str(missing)]) == 2
        assert f"no index in {missing}: the directory does not exist" in capsys.readouterr().err
    assert not missing.exists()


def test_version(capsys: pytest.CaptureFixture) -> None:
    from importlib.metadata import version

    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0 and capsys.readouterr().out == f"rag-pipeline {version('rag_pipeline')}\n"


def test_parsing_a_command_imports_no_component() -> None:
    """Every command builds the whole parser first: it must not import the configured components (the embedder,
    the LLM clients: ~0.4 s), so that `rag-pipeline ingest` starts docling's workers before anything heavy and a
    short command starts fast. Checked in a fresh interpreter."""
    import subprocess
    import sys

    code = ("import sys\nfrom rag_pipeline.serve.cli import build_parser\n"
            "from rag_pipeline.index.generations import load_settings\n"
            "build_parser().parse_args(['inspect', 'documents'])\nload_settings()\n"
            "print(sorted(m for m in ('rag_pipeline.components', 'rag_pipeline.llm', 'dagster', 'docling') "
            "if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.strip() == "[]"
