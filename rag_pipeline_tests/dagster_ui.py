"""Helpers for the end-to-end test of the Dagster UI (`test_ui.py`).

- `running_dagster_dev()` starts `dagster dev` (webserver, daemon, code server) on a free 127.0.0.1 port in a
  session of its own, waits until its GraphQL API answers and the code location is loaded, and on exit stops
  every process of that session by PID: SIGTERM to the process group, a grace period, then SIGKILL to the group
  and to every process that still belongs to the session (run workers included), checked through /proc.
- `GraphQL` posts queries to the UI's own API and keeps the last response for failure messages.
- `render()` loads a page in headless Chromium (`--dump-dom` and `--screenshot` in one call, with a virtual time
  budget so the React app renders) and parses the DOM into text, tables and title attributes.
- `DevTools` drives one headless Chromium through its DevTools protocol (a websocket) for pages that must be used,
  not only loaded (the API's own page, test_page.py): run script, type, press keys, choose files, resize the
  viewport, take screenshots.

Chromium is Debian's `chromium` (`/usr/bin/chromium`, or `$RAG_CHROMIUM`); missing is an error, never a skip:
`apt-get install -y chromium`.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
CHROMIUM_HINT = "headless Chromium not found: install it with `apt-get install -y chromium` (or set $RAG_CHROMIUM)"
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-dev-shm-usage",
    "--hide-scrollbars",
)


# --------------------------------------------------------------------------------------------------- processes


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _default_signals() -> None:
    """In the child before exec: SIGINT/SIGTERM back to their defaults.

    A process started in the background by a non-interactive shell (as CI runners do) inherits SIGINT ignored;
    Python then installs no KeyboardInterrupt handler and `dagster dev` (which maps SIGTERM to SIGINT) would
    ignore the SIGTERM sent to stop it.
    """
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


@dataclass(frozen=True)
class ProcInfo:
    pid: int
    ppid: int
    pgid: int
    sid: int
    state: str
    start: int  # start time in clock ticks since boot: tells a process from a later one with the same PID
    cmdline: str


def _proc_info(pid: int) -> ProcInfo | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    fields = stat[stat.rindex(")") + 2 :].split()  # the command name may contain spaces and parentheses
    return ProcInfo(pid, int(fields[1]), int(fields[2]), int(fields[3]), fields[0], int(fields[19]), cmdline)


def processes() -> list[ProcInfo]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (info := _proc_info(int(entry))) is not None:
            found.append(info)
    return found


def session_processes(leader: int, known: Mapping[int, ProcInfo] | None = None) -> dict[int, ProcInfo]:
    """Live (non-zombie) processes started from `leader`'s session: same session or process group, a descendant
    of it, or one of `known` (same PID and start time) that has since been re-parented."""
    table = {info.pid: info for info in processes()}
    children: dict[int, list[int]] = {}
    for info in table.values():
        children.setdefault(info.ppid, []).append(info.pid)
    found: dict[int, ProcInfo] = {}
    stack = [leader]
    while stack:
        for child in children.get(stack.pop(), []):
            found[child] = table[child]
            stack.append(child)
    for info in table.values():
        if info.pid == leader or info.sid == leader or info.pgid == leader:
            found[info.pid] = info
    for pid, old in (known or {}).items():
        if pid in table and table[pid].start == old.start:
            found[pid] = table[pid]
    return {pid: info for pid, info in found.items() if info.state != "Z"}


def stop_session(process: subprocess.Popen, grace_seconds: float = 30.0) -> list[str]:
    """Stop `process` (a session leader) and everything it started, by PID. Returns the survivors' command lines
    (an empty list when everything is gone)."""
    leader = process.pid
    known = session_processes(leader)
    try:
        os.killpg(leader, signal.SIGTERM)
    except ProcessLookupError:
        pass
    deadline = time.monotonic() + grace_seconds
    while time.monotonic() < deadline:
        process.poll()  # reap the leader as soon as it exits
        known.update(session_processes(leader, known))
        if process.returncode is not None and not session_processes(leader, known):
            break
        time.sleep(0.5)
    for attempt in range(3):
        left = session_processes(leader, known)
        if not left:
            break
        try:
            os.killpg(leader, signal.SIGKILL)
        except ProcessLookupError:
            pass
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        time.sleep(0.5 * (attempt + 1))
    return [f"{info.pid} {info.cmdline}" for info in session_processes(leader, known).values()]


def log_tail(path: Path, lines: int = 80) -> str:
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])


# ----------------------------------------------------------------------------------------------------- GraphQL


class GraphQL:
    """The webserver's GraphQL endpoint. `last` holds the last response (or error) for failure messages."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.last: str = "(no request yet)"

    def __call__(self, query: str, variables: Mapping[str, Any] | None = None, timeout: float = 60) -> dict:
        body = json.dumps({"query": query, "variables": dict(variables or {})}).encode()
        request = urllib.request.Request(self.url, data=body, headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                self.last = response.read().decode()
        except urllib.error.HTTPError as error:
            self.last = f"HTTP {error.code}: {error.read().decode(errors='replace')[:4000]}"
            raise AssertionError(f"GraphQL request failed: {self.last}") from error
        payload = json.loads(self.last)
        if payload.get("errors"):
            raise AssertionError(f"GraphQL errors: {json.dumps(payload['errors'])[:4000]}\nquery: {query}")
        return payload["data"]

    def answers(self) -> bool:
        try:
            return "version" in self("{ version }", timeout=5)
        except (OSError, AssertionError, ValueError):
            return False


def wait_for(what: str, check: Callable[[], Any], timeout: float, interval: float = 1.0,
             describe: Callable[[], str] = lambda: "") -> Any:
    """Poll `check` until it returns something truthy; AssertionError naming `what` (and `describe()`) otherwise."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}\n{describe()}")
        time.sleep(interval)


@dataclass
class DagsterDev:
    process: subprocess.Popen
    port: int
    log_path: Path
    graphql: GraphQL
    location: str = ""
    repository: str = ""
    survivors: list[str] = field(default_factory=list)

    def url(self, path: str = "") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def log_tail(self, lines: int = 80) -> str:
        return f"--- dagster dev log ({self.log_path}), last {lines} lines ---\n{log_tail(self.log_path, lines)}"

    def alive(self) -> bool:
        return self.process.poll() is None


WORKSPACE_QUERY = """{ workspaceOrError { __typename
  ... on Workspace { locationEntries { name loadStatus
    locationOrLoadError { __typename ... on RepositoryLocation { name repositories { name } }
                                     ... on PythonError { message stack } } } }
  ... on PythonError { message } } }"""


@contextmanager
def running_dagster_dev(home: Path, env: Mapping[str, str], log_path: Path, location_prefix: str = "rag_pipeline",
                        startup_timeout: float = 180) -> Iterator[DagsterDev]:
    """`dagster dev -w workspace.yaml` from the repository, DAGSTER_HOME=`home`, with `env` added to a clean
    environment (no inherited RAG_*/DAGSTER_* variables). Yields once the code location is loaded."""
    dagster = Path(sys.executable).with_name("dagster")
    port = free_port()
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("RAG_", "DAGSTER_"))}
    environment.update(env, DAGSTER_HOME=str(home), PYTHONUNBUFFERED="1")
    log = open(log_path, "wb")  # closed in the finally below
    process = subprocess.Popen(
        [str(dagster), "dev", "-h", "127.0.0.1", "-p", str(port), "-w", "workspace.yaml"],
        cwd=REPO, env=environment, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
        start_new_session=True, preexec_fn=_default_signals,
    )
    dev = DagsterDev(process, port, log_path, GraphQL(f"http://127.0.0.1:{port}/graphql"))
    try:
        def answering() -> bool:
            if not dev.alive():
                raise AssertionError(f"dagster dev exited with {process.returncode}\n{dev.log_tail()}")
            return dev.graphql.answers()

        wait_for("the GraphQL API of dagster dev", answering, startup_timeout, 0.5, dev.log_tail)

        def loaded() -> tuple[str, str] | None:
            data = dev.graphql(WORKSPACE_QUERY)["workspaceOrError"]
            assert data["__typename"] == "Workspace", dev.graphql.last
            for entry in data["locationEntries"]:
                if not entry["name"].startswith(location_prefix):
                    continue
                location = entry["locationOrLoadError"] or {}
                if location.get("__typename") == "PythonError":
                    raise AssertionError(f"code location {entry['name']} failed to load:\n"
                                         f"{location['message']}\n{location.get('stack')}")
                if entry["loadStatus"] == "LOADED" and location.get("__typename") == "RepositoryLocation":
                    return location["name"], location["repositories"][0]["name"]
            return None

        dev.location, dev.repository = wait_for(
            f"the code location {location_prefix}* to load", loaded, startup_timeout, 1.0,
            lambda: f"last GraphQL response: {dev.graphql.last}\n{dev.log_tail()}")
        yield dev
    finally:
        dev.survivors = stop_session(process)
        log.close()


# ---------------------------------------------------------------------------------------------------- Chromium


def chromium() -> str:
    candidates = [os.environ.get("RAG_CHROMIUM"), "/usr/bin/chromium", shutil.which("chromium"),
                  shutil.which("chromium-browser")]
    for candidate in candidates:
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    raise AssertionError(CHROMIUM_HINT)


class _DomParser(HTMLParser):
    """Visible text, tables (rows of cell texts, nested tables included on their own) and title attributes."""

    SKIP = {"script", "style", "noscript", "template"}

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.texts: list[str] = []
        self.titles: list[str] = []
        self.page_title = ""
        self.tables: list[list[list[str]]] = []
        self._open_tables: list[list[list[str]]] = []
        self._open_cells: list[list[str]] = []  # text parts of every open cell, innermost last
        self._skip = 0
        self._in_title = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in self.SKIP:
            self._skip += 1
        elif tag == "title":
            self._in_title = True
        elif tag == "table":
            table: list[list[str]] = []
            self.tables.append(table)
            self._open_tables.append(table)
        elif tag == "tr" and self._open_tables:
            self._open_tables[-1].append([])
        elif tag in ("td", "th") and self._open_tables:
            self._open_cells.append([])
        for name, value in attrs:
            if name == "title" and value:
                self.titles.append(value)

    def handle_endtag(self, tag: str) -> None:
        if tag in self.SKIP:
            self._skip = max(0, self._skip - 1)
        elif tag == "title":
            self._in_title = False
        elif tag == "table" and self._open_tables:
            self._open_tables.pop()
        elif tag in ("td", "th") and self._open_cells and self._open_tables:
            cell = " ".join(" ".join(self._open_cells.pop()).split())
            table = self._open_tables[-1]
            if not table:
                table.append([])
            table[-1].append(cell)

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self.page_title += data
            return
        if self._skip or not data.strip():
            return
        text = " ".join(data.split())
        self.texts.append(text)
        for cell in self._open_cells:
            cell.append(text)


@dataclass
class Page:
    url: str
    html: str
    title: str
    texts: list[str]
    titles: list[str]
    tables: list[list[list[str]]]
    screenshot: Path
    seconds: float

    @property
    def text(self) -> str:
        return " ".join(self.texts)

    def table_with_header(self, header: list[str]) -> list[list[str]]:
        """The first table whose first row starts with `header`; its other rows."""
        for table in self.tables:
            if table and table[0][: len(header)] == header:
                return table[1:]
        shown = "\n".join(" | ".join(table[0]) for table in self.tables if table)
        raise AssertionError(f"no table with header {header} on {self.url}; table headers shown:\n{shown}")

    def metadata_value(self, key: str) -> str:
        """The value cell of a metadata row: the asset overview's Key | Timestamp | Value table, or a partition's
        metadata table (Key | Value | (empty) rows under no header): the last non-empty cell after the key."""
        for table in self.tables:
            for row in table:
                if len(row) >= 2 and row[0] == key:
                    return next((cell for cell in reversed(row[1:]) if cell), "")
        raise AssertionError(f"no metadata entry {key!r} on {self.url}")


def parse_dom(html: str) -> _DomParser:
    parser = _DomParser()
    parser.feed(html)
    parser.close()
    return parser


def render(url: str, screenshot: Path, work_dir: Path, budget_ms: int = 10_000, timeout: float = 120,
           window: tuple[int, int] = (1600, 1000)) -> Page:
    """Load `url` in a fresh headless Chromium profile: the rendered DOM (after `budget_ms` of virtual time) and a
    screenshot, from one browser run. The browser runs in a process group of its own, killed afterwards."""
    profile = Path(tempfile.mkdtemp(prefix="chromium-", dir=work_dir))
    screenshot.parent.mkdir(parents=True, exist_ok=True)
    command = [chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={profile}", f"--virtual-time-budget={budget_ms}",
               f"--window-size={window[0]},{window[1]}", f"--screenshot={screenshot}", "--dump-dom", url]
    env = {**os.environ, "HOME": str(profile)}  # keeps ~/.pki, crash dumps and caches out of the real home
    started = time.monotonic()
    browser = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               env=env, start_new_session=True)
    try:
        stdout, stderr = browser.communicate(timeout=timeout)
    except subprocess.TimeoutExpired as error:
        raise AssertionError(f"chromium did not finish {url} within {timeout:.0f}s") from error
    finally:
        try:
            os.killpg(browser.pid, signal.SIGKILL)  # renderer/zygote helpers left behind, if any
        except ProcessLookupError:
            pass
        browser.wait()
        shutil.rmtree(profile, ignore_errors=True)
    html = stdout.decode(errors="replace")
    if browser.returncode != 0 or "<html" not in html:
        raise AssertionError(f"chromium failed on {url} (exit {browser.returncode}):\n"
                             f"{stderr.decode(errors='replace')[-3000:]}")
    parsed = parse_dom(html)
    return Page(url, html, parsed.page_title.strip(), parsed.texts, parsed.titles, parsed.tables, screenshot,
                time.monotonic() - started)


def png_size(path: Path) -> tuple[int, int]:
    """(width, height) from a PNG's IHDR chunk."""
    header = path.read_bytes()[:24]
    assert header[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    return int.from_bytes(header[16:20], "big"), int.from_bytes(header[20:24], "big")


# ------------------------------------------------------------------------------------------ the DevTools protocol


class DevTools:
    """One headless Chromium driven through its DevTools protocol: a page target, commands over its websocket
    (`send`), and the few interactions a page test needs. A context manager: the browser runs in a process group
    of its own, killed on exit, and its profile is removed."""

    def __init__(self, work_dir: Path, window: tuple[int, int] = (1280, 900), startup_timeout: float = 60) -> None:
        from websockets.sync.client import connect

        self.profile = Path(tempfile.mkdtemp(prefix="chromium-", dir=work_dir))
        port = free_port()
        command = [chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={self.profile}", f"--remote-debugging-port={port}",
                   "--remote-allow-origins=*", f"--window-size={window[0]},{window[1]}", "about:blank"]
        self.log = open(self.profile.parent / f"{self.profile.name}.log", "wb")  # closed in close()
        self.browser = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT,
                                        env={**os.environ, "HOME": str(self.profile)}, start_new_session=True)
        self._id = 0
        try:
            def page_target() -> str | None:
                if self.browser.poll() is not None:
                    raise AssertionError(f"chromium exited with {self.browser.returncode}")
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=5) as response:
                        targets = json.loads(response.read())
                except OSError:
                    return None
                return next((target["webSocketDebuggerUrl"] for target in targets if target["type"] == "page"), None)

            self.socket = connect(wait_for("chromium's DevTools endpoint", page_target, startup_timeout, 0.2),
                                  max_size=None, open_timeout=30)
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> DevTools:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if getattr(self, "socket", None) is not None:
            self.socket.close()
        try:
            os.killpg(self.browser.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.browser.wait()
        self.log.close()
        shutil.rmtree(self.profile, ignore_errors=True)

    def send(self, method: str, timeout: float = 60, **params: Any) -> dict[str, Any]:
        """The result of one DevTools command (the events that arrive meanwhile are dropped)."""
        self._id += 1
        self.socket.send(json.dumps({"id": self._id, "method": method, "params": params}))
        deadline = time.monotonic() + timeout
        while True:
            message = json.loads(self.socket.recv(timeout=max(0.1, deadline - time.monotonic())))
            if message.get("id") == self._id:
                if "error" in message:
                    raise AssertionError(f"DevTools {method} failed: {message['error']}")
                return message["result"]

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (a promise is awaited)."""
        result = self.send("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise AssertionError(f"script failed: {result['exceptionDetails']}\n{expression}")
        return result["result"].get("value")

    def wait_for(self, what: str, expression: str, timeout: float = 120) -> Any:
        """The truthy value of `expression`, polled; AssertionError naming `what` (and the page's text) otherwise."""
        return wait_for(what, lambda: self.evaluate(expression), timeout, 0.25,
                        lambda: f"page text: {self.evaluate('document.body.innerText')[-3000:]}")

    def navigate(self, url: str) -> None:
        self.send("Page.navigate", url=url)
        self.wait_for(f"{url} to load", "document.readyState === 'complete' && location.href !== 'about:blank'")

    def viewport(self, width: int, height: int, mobile: bool = False) -> None:
        self.send("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1,
                  mobile=mobile)

    def type(self, selector: str, text: str) -> None:
        """Focus the element and type `text` into it, as a keyboard would insert it."""
        self.evaluate(f"document.querySelector({json.dumps(selector)}).focus()")
        self.send("Input.insertText", text=text)

    def press(self, key: str, code: int, shift: bool = False) -> None:
        """One key press (down and up) on the focused element, e.g. ("Enter", 13) or ("Tab", 9)."""
        text = "\r" if key == "Enter" else ""
        for kind in ("keyDown", "keyUp"):
            self.send("Input.dispatchKeyEvent", type=kind, key=key, code=key, windowsVirtualKeyCode=code,
                      text=text if kind == "keyDown" else "", modifiers=8 if shift else 0)

    def click(self, selector: str) -> None:
        self.evaluate(f"document.querySelector({json.dumps(selector)}).click()")

    def choose_files(self, selector: str, files: list[Path]) -> None:
        """Set a file input's files, as the file chooser would."""
        root = self.send("DOM.getDocument", depth=0)["root"]["nodeId"]
        node = self.send("DOM.querySelector", nodeId=root, selector=selector)["nodeId"]
        assert node, f"no element {selector}"
        self.send("DOM.setFileInputFiles", nodeId=node, files=[str(path) for path in files])
        self.evaluate(f"document.querySelector({json.dumps(selector)}).dispatchEvent(new Event('change'))")

    def screenshot(self, path: Path) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(self.send("Page.captureScreenshot", format="png")["data"]))
        return path
