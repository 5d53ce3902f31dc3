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
