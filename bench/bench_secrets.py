"""Secrets recall and benign false-redaction rate of a real ingest of the planted-secrets corpus
(rag_pipeline_tests/secrets_corpus.py: md, txt, html, docx, pdf and pptx with secrets in prose, tables, code
blocks and .env lines, and benign look-alikes). Prints the counts, both figures and the leaks per surface.

    .venv/bin/python bench/bench_secrets.py [--work .bench/secrets]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from rag_pipeline_tests.secrets_corpus import ingest_and_measure  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, default=REPO / ".bench" / "secrets")
    work = parser.parse_args().work
    shutil.rmtree(work, ignore_errors=True)
    measured = ingest_and_measure(work / "corpus", work / "data")
    print(measured.report())
    for name, found in measured.leaks.items():
        for planted in found:
            print(f"leak in {name}: {planted.kind}: {planted.line}")
    for planted in measured.benign_redacted:
        print(f"benign redacted: {planted.kind}: {planted.line}")


if __name__ == "__main__":
    main()
