"""The web page at / in real headless Chromium (driven through its DevTools protocol, dagster_ui.DevTools) against a
real uvicorn server over a copy of the sample index with API keys and an upload source: the key asked for, a real
question answered with the answer streamed into the DOM, a citation that opens the sources panel, an exact answer
with its operation and the documents counted, the conversation list, an upload with an ingester key whose document
then answers (cited by the name it was uploaded under; its name and text shown as text, never as markup), keyboard
use, and a phone-sized viewport.

Screenshots go to `<tmp_path>/screenshots` and, when `$RAG_UI_SCREENSHOTS` is set, to that folder as well.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import httpx
import pytest

from rag_pipeline.components import load_settings
from rag_pipeline.serve.keys import create_key
from rag_pipeline_tests.dagster_ui import DevTools, png_size
from rag_pipeline_tests.test_api import running_api

pytestmark = pytest.mark.slow
SEV1 = "who do I page for a SEV1 outage?"
LAST_TURN = "document.querySelector('#turns > li:last-child')"
ANSWERED = f"{LAST_TURN} && {LAST_TURN}.querySelector('.answer').getAttribute('aria-busy') === 'false'"
BUDGET = "The travel budget for 2027 is 4200 euros per person. <b>Not bold</b> <img src=x onerror=alert(1)>\n"
BUDGET_NAME = "<img src=x onerror=alert(2)> Travel budget.txt"  # the name it is uploaded under: text, never markup


def ask(browser: DevTools, question: str, turns: int) -> None:
    """Type the question and send it with Enter, as a keyboard user would; wait for the answer to finish."""
    browser.type("#message", question)
    browser.press("Enter", 13)
    browser.wait_for(f"the answer to {question!r}",
                     f"document.querySelectorAll('#turns > li').length === {turns} && {ANSWERED}")


def test_the_page(sample_index: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    corpus, data_dir = sample_index
    data = tmp_path / "data"
    shutil.copytree(data_dir, data)  # an upload writes the index
    sources = tmp_path / "sources.yaml"
    sources.write_text(f"sources:\n  default: {{roots: [{corpus}]}}\n  inbox: {{uploads: true}}\n")
    monkeypatch.setenv("RAG_SOURCES_FILE", str(sources))  # the server's ingests read it too
    keys_file = tmp_path / "api_keys.yaml"
    reader = create_key(keys_file, "reader")[1]
    loader = create_key(keys_file, "loader", role="ingester")[1]
    budget = tmp_path / BUDGET_NAME
    budget.write_text(BUDGET)
    shots = tmp_path / "screenshots"
    stable = Path(os.environ["RAG_UI_SCREENSHOTS"]) if os.environ.get("RAG_UI_SCREENSHOTS") else None
    settings = load_settings(data_dir=data, api_keys_file=keys_file, sources_file=sources)

    with running_api(settings) as url, DevTools(tmp_path) as browser:
        page = httpx.get(f"{url}/")
        assert page.status_code == 200 and "default-src 'none'" in page.headers["content-security-policy"]
        assert httpx.get(f"{url}/static/page.js").headers["content-type"].startswith("text/javascript")
        assert httpx.get(f"{url}/static/..%2Fapp.py").status_code == 404

        browser.viewport(1280, 900)
        browser.navigate(f"{url}/")
        # the server has keys: the page asks for one, and focuses its field
        browser.wait_for("the key field", "!document.querySelector('#key-section').hidden")
        assert browser.evaluate("document.activeElement.id") == "api-key"
        browser.type("#api-key", reader)
        browser.press("Enter", 13)
        browser.wait_for("the key to be taken", "document.querySelector('#status').textContent === ''")
        assert browser.evaluate("sessionStorage.getItem('rag_pipeline.api_key')") == reader

        # a real question, the answer streamed in; a citation opens the sources panel at its passage
        ask(browser, SEV1, 1)
        answer = browser.evaluate(f"{LAST_TURN}.querySelector('.answer').textContent")
        assert "incident commander" in answer and "[1]" in answer
        assert browser.evaluate(f"{LAST_TURN}.querySelector('.answer').getAttribute('aria-live')") == "polite"
        browser.click("#turns > li:last-child .answer button.cite")
        browser.wait_for("the sources panel", "!document.querySelector('#sources-panel').hidden")
        focused = browser.evaluate("""(() => { const item = document.activeElement;
            return {key: item.dataset.key, text: item.innerText}; })()""")
        assert focused["key"] == "1" and "default/ops/incident-runbook.md" in focused["text"]
        assert "incident commander" in focused["text"] and "score " in focused["text"] and "line " in focused["text"]
        browser.screenshot(shots / "page-answer.png")
        browser.press("Escape", 27)
        browser.wait_for("the panel to close", "document.querySelector('#sources-panel').hidden")

        # a follow-up in the same session: an exact answer with its operation and the documents it counted
        ask(browser, "How many documents are there per type?", 2)
        exact = browser.evaluate(f"{LAST_TURN}.querySelector('.exact').innerText")
        assert "Exact answer: group_by type" in exact and "Documents counted: [D1]" in exact
        conversations = browser.evaluate("[...document.querySelectorAll('#conversations button')]"
                                          ".map(button => button.textContent)")
        assert conversations == [SEV1]  # one conversation: the follow-up continued it
        session = json.loads(browser.evaluate("sessionStorage.getItem('rag_pipeline.sessions')"))[0]["id"]
        saved = httpx.get(f"{url}/chat/{session}", headers={"Authorization": f"Bearer {reader}"}).json()
        assert [turn["message"] for turn in saved["turns"]] == [SEV1, "How many documents are there per type?"]
        browser.screenshot(shots / "page-exact.png")

        # an upload needs an ingester key: the reader's is refused, the loader's stores and ingests the file
        browser.evaluate("document.querySelector('#upload-section').open = true")
        browser.wait_for("the upload sources", "document.querySelector('#upload-source').value === 'inbox'")
        browser.choose_files("#upload-files", [budget])
        browser.click("#upload-form button[type=submit]")
        browser.wait_for("the refusal", "document.querySelector('#upload-status').textContent.includes('ingester')")
        browser.type("#api-key", loader)
        browser.click("#key-form button[type=submit]")
        browser.click("#upload-form button[type=submit]")
        browser.wait_for("the upload's ingest", "document.querySelector('#upload-status').textContent"
                                                ".includes('Ingest succeeded')", timeout=300)
        assert "budget.txt" in browser.evaluate("document.querySelector('#upload-status').textContent")

        # the new document answers; its text is shown as text in the sources panel, never as markup
        browser.click("#new-chat")
        ask(browser, "What is the travel budget for 2027?", 1)
        assert "4200" in browser.evaluate(f"{LAST_TURN}.querySelector('.answer').textContent")
        browser.click("#turns > li:last-child .answer button.cite")
        panel = browser.evaluate("document.querySelector('#sources').innerText")
        assert "inbox/" in panel and "<b>Not bold</b>" in panel
        heading = browser.evaluate("document.querySelector('#sources li.focused h3').textContent")
        assert heading.endswith(f"] {BUDGET_NAME}")  # cited by the name it was uploaded under, as text
        assert browser.evaluate("document.querySelectorAll('main b, main img, aside b, aside img').length") == 0
        assert browser.evaluate("document.querySelectorAll('#conversations button').length") == 2
        browser.screenshot(shots / "page-upload.png")

        # one question (POST /ask): passages only, cited the same way, and no conversation kept
        browser.click("input[name=mode][value=ask]")
        ask(browser, SEV1, 2)
        browser.click("#turns > li:last-child .answer button.cite")
        assert "incident-runbook.md" in browser.evaluate("document.querySelector('#sources li.focused').innerText")
        assert browser.evaluate("document.querySelectorAll('#conversations button').length") == 2

        # keyboard: the first Tab reaches the skip link, which leads to the question
        browser.evaluate("document.activeElement.blur()")
        browser.press("Tab", 9)
        assert browser.evaluate("document.activeElement.className") == "skip"

        # a phone-sized window: one column, nothing wider than the screen, the panel over the lower part
        browser.viewport(390, 844, mobile=True)
        browser.navigate(f"{url}/")
        browser.wait_for("the page", "document.querySelector('#message') !== null")
        ask(browser, SEV1, 1)
        browser.click("#turns > li:last-child .answer button.cite")
        assert browser.evaluate("document.documentElement.scrollWidth") <= 390
        assert browser.evaluate("getComputedStyle(document.querySelector('#sources-panel')).position") == "fixed"
        assert browser.evaluate("Math.round(document.querySelector('#sources-panel').getBoundingClientRect().bottom)"
                                " === innerHeight")  # the panel covers the lower part, the answer stays in view
        browser.screenshot(shots / "page-phone.png")

    for name, size in (("page-answer.png", (1280, 900)), ("page-exact.png", (1280, 900)),
                       ("page-upload.png", (1280, 900)), ("page-phone.png", (390, 844))):
        assert png_size(shots / name) == size, name
        if stable is not None:
            stable.mkdir(parents=True, exist_ok=True)
            shutil.copy(shots / name, stable / name)
    print(f"[test_page] screenshots: {shots}" + (f" and {stable}" if stable else ""), flush=True)
