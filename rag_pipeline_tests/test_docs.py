"""The documentation stays true: the generated references match the code, every link resolves inside the
repository (no link leaves it), the README stays a front page, and no program hides among the data."""

from __future__ import annotations

import importlib
import os
import re
import subprocess
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from urllib.parse import urlsplit

import pytest

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1"}

FENCE = re.compile(r"^ {0,3}(```|~~~).*?^ {0,3}\1[^\n]*$", re.MULTILINE | re.DOTALL)
CODE_SPAN = re.compile(r"(`+).+?\1", re.DOTALL)
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
AUTOLINK = re.compile(r"<([a-z][a-z0-9+.-]*:[^>\s]*)>", re.IGNORECASE)
BARE_URL = re.compile(r"\b(?:https?|ftp)://[^\s<>()\]]+", re.IGNORECASE)
HEADING = re.compile(r"^ {0,3}#{1,6}\s+(.+?)\s*#*\s*$", re.MULTILINE)


@pytest.fixture
def tools(monkeypatch) -> Callable[[str], ModuleType]:
    """Import a tool of tools/ as its script does (the folder on the path)."""
    monkeypatch.syspath_prepend(str(REPO / "tools"))
    return importlib.import_module


GENERATED = [("cli_reference", "docs/cli.md"), ("settings_reference", "docs/settings.md")]


@pytest.mark.parametrize("tool, page", GENERATED)
def test_generated_reference_is_current(tools, tool, page):
    if tools(tool).render() != (REPO / page).read_text(encoding="utf-8"):
        pytest.fail(f"{page} is stale: run python tools/{tool}.py")


def test_module_map_is_current(tools):
    page = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    if tools("module_map").updated(page) != page:
        pytest.fail("the module map of docs/architecture.md is stale: run python tools/module_map.py")


def test_cli_reference_holds_every_command(tools):
    """The generator walks the whole parser: every sub-command and sub-sub-command has its help on the page."""
    from rag_pipeline.serve.cli import build_parser

    page = (REPO / "docs" / "cli.md").read_text(encoding="utf-8")
    paths = [path for path, _ in tools("cli_reference").command_parsers(build_parser())]
    assert ("keys", "create") in paths and ("inspect", "collection") in paths
    for path in paths:
        title = " ".join(("rag-pipeline", *path))
        assert f"\n## {title}\n" in page and f"usage: {title} " in page, title


def prose(markdown: str) -> str:
    """The text outside fenced code blocks and code spans, where links live."""
    return CODE_SPAN.sub("", FENCE.sub("", markdown))


def anchors(markdown: str) -> set[str]:
    """The anchors GitHub gives the headings of a page (repeated headings get -1, -2, ...)."""
    found: set[str] = set()
    for heading in HEADING.findall(FENCE.sub("", markdown)):
        text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading counts by its text
        slug = re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")
        candidate, number = slug, 0
        while candidate in found:
            number += 1
            candidate = f"{slug}-{number}"
        found.add(candidate)
    return found


def is_local(url: str) -> bool:
    parts = urlsplit(url)
    return parts.scheme in ("http", "https") and parts.hostname in LOCAL_HOSTS


def link_problems(page: Path, markdown: str) -> list[str]:
    """Every link of a page that leaves the repository or does not resolve, with why."""
    text = prose(markdown)
    bare = BARE_URL.findall(AUTOLINK.sub("", LINK.sub("", text)))
    problems = [f"{url}: leaves the repository" for url in [*AUTOLINK.findall(text), *bare] if not is_local(url)]
    for target in LINK.findall(text):
        parts = urlsplit(target)
        if parts.scheme or parts.netloc:
            if not is_local(target):
                problems.append(f"{target}: leaves the repository")
            continue
        linked = (page.parent / parts.path).resolve()
        if not linked.is_relative_to(REPO):
            problems.append(f"{target}: leaves the repository")
        elif parts.path and not linked.exists():
            problems.append(f"{target}: no such file")
        elif parts.fragment and (linked.suffix == ".md" or not parts.path):
            headings = anchors(linked.read_text(encoding="utf-8") if parts.path else markdown)
            if parts.fragment not in headings:
                problems.append(f"{target}: no heading #{parts.fragment}")
    return problems


def test_the_link_check_finds_what_it_must():
    markdown = ("# Title\n## Two words (`code`)\n## Two words (code)\n"
                "[ok](#two-words-code) [again](#two-words-code-1) [readme](../README.md#contents)\n"
                "[out](../../shared/DESIGN.md) [gone](missing.md) [web](https://example.com/x) <https://a.example>\n"
                "see http://example.org/page or http://127.0.0.1:8000/healthz, [ui](http://localhost:3000)\n"
                "[anchor](#nowhere) [stale](cli.md#no-such-command) `[code](https://in.code.span)`\n"
                "```\nhttps://in.a.fence\n```\n")
    assert sorted(link_problems(REPO / "docs" / "example.md", markdown)) == sorted([
        "../../shared/DESIGN.md: leaves the repository", "missing.md: no such file",
        "https://example.com/x: leaves the repository", "https://a.example: leaves the repository",
        "http://example.org/page: leaves the repository", "#nowhere: no heading #nowhere",
        "cli.md#no-such-command: no heading #no-such-command"])


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.relative_to(REPO).as_posix())
def test_links_resolve_inside_the_repository(page):
    assert link_problems(page, page.read_text(encoding="utf-8")) == []


def test_readme_is_a_front_page():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 200
    for step in ("make demo", "make test", "rag-pipeline ingest", "rag-pipeline ask", "rag-pipeline chat",
                 "rag-pipeline serve", "make dev", "RAG_LLM_BASE_URL"):
        assert step in readme, step
    linked = {Path(target.split("#")[0]).name for target in LINK.findall(prose(readme))}
    assert {page.name for page in PAGES[1:]} <= linked, "every docs/ page is reachable from the README"


def test_no_program_in_the_data_folder():
    assert not list((REPO / "golden").rglob("*.py")), "generators and tools go to tools/ (or bench/), not golden/"


def test_make_bench_needs_a_dataset_inside_or_named():
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    assert "../" not in makefile, "the Makefile names no path outside the repository"
    environment = {key: value for key, value in os.environ.items() if key != "SCIFACT"}
    missing = subprocess.run(["make", "-n", "bench"], cwd=REPO, env=environment, capture_output=True, text=True)
    assert missing.returncode != 0 and "make bench needs SCIFACT=" in missing.stderr
    named = subprocess.run(["make", "-n", "bench", "SCIFACT=/data/scifact"], cwd=REPO, env=environment,
                           capture_output=True, text=True)
    assert named.returncode == 0 and "rag-pipeline beir /data/scifact --split test" in named.stdout
