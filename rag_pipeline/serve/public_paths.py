"""What the HTTP API shows of the server's filesystem: never an absolute path.

A document's path is shown as `<source>/<path under the source's root>` (a source with several roots:
`<source>/<root folder>/<path>`; an upload: `<source>/<yyyy/mm/dd/...>`), the data dir as `<data dir>`, and a path
outside both as its file name. The answers' path keys (PATH_KEYS) are shown that way, every other string has its
known folders replaced, and a message (an error's, MESSAGE_KEYS') also has any other absolute path cut to
`…/<last part>`. The path
filters a client sends (`path`, `paths`, `path_prefix`, the metadata field `path`) are read back the same way, so a
path an answer showed filters as before. An upload's documents and passages also get the name its client gave it
(serve/upload_names.py). The CLI runs on the server and shows the real paths.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Mapping
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rag_pipeline.ingest.sources import configured_sources
from rag_pipeline.serve.upload_names import with_upload_names
from rag_pipeline.settings import Settings
from rag_pipeline.sidecar import Sidecar
from rag_pipeline.structured.query import file_state

log = logging.getLogger(__name__)
DATA_DIR = "<data dir>"
BUSY_WAIT_S = 1.0  # how long a request waits for a re-read of the paths when it has older ones to show
# keys whose values are paths
PATH_KEYS = frozenset({"path", "paths", "all_paths", "removed_paths", "purged_paths", "roots"})
MESSAGE_KEYS = frozenset({"error", "reason"})  # keys whose values are messages (a failed document's, a refusal's)
PATH_FILTERS = ("path", "paths", "path_prefix")  # search filters whose values are paths
# An absolute path of two parts or more that is not part of a URL or of a shown name ("<data dir>/...").
ANY_PATH = re.compile(r"(?<![\w.:/~>-])/(?:[^\s/'\"(),;:<>\[\]]+/)+[^\s/'\"(),;:<>\[\]]*")
WHERE_PATH = re.compile(r"^(\s*path\s*(?:=|~)\s*)(.*)$", re.DOTALL)  # a CLI-form where clause on `path`


@dataclass(frozen=True)
class PublicPaths:
    """The folders a server path may lie in and the names they are shown as, and the uploads' names."""

    folders: tuple[tuple[str, str], ...]  # (absolute folder, shown name), the longest folder first
    upload_names: Mapping[str, str] = field(default_factory=dict)  # stored path -> the name its client gave it

    def show(self, path: str) -> str:
        """A path as the API shows it (a string that is no absolute path stays as it is)."""
        for folder, name in self.folders:
            if path == folder or path.startswith(folder + "/"):
                return name + path[len(folder):]
        return path.rstrip("/").rsplit("/", 1)[-1] if path.startswith("/") else path

    def find(self, shown: str) -> str:
        """The server path a shown one stands for; any other string as it is (it matches no document)."""
        for folder, name in sorted(self.folders, key=lambda entry: -len(entry[1])):
            if shown == name or shown.startswith(name + "/"):
                return folder + shown[len(name):]
        return shown

    def text(self, text: str) -> str:
        """`text` with every known folder replaced by its name (nothing else changes: it may be a document's)."""
        for folder, name in self.folders:
            if folder in text:
                text = re.sub(re.escape(folder) + r"(?=[/\s'\"),;:\]]|$)", lambda _: name, text)
        return text

    def message(self, text: str) -> str:
        """An error message: known folders by name, any other absolute path cut to its last part."""
        return ANY_PATH.sub(lambda match: "…/" + match.group().rstrip("/").rsplit("/", 1)[-1], self.text(text))

    def json(self, data: Any) -> Any:
        """An answer (JSON data) as the API shows it: uploads named, PATH_KEYS' values shown, other strings' folders
        replaced."""
        return self._shown(with_upload_names(data, self.upload_names))

    def _shown(self, data: Any) -> Any:
        if isinstance(data, Mapping):
            return {key: self._paths(value) if key in PATH_KEYS else
                    self.message(value) if key in MESSAGE_KEYS and isinstance(value, str) else self._shown(value)
                    for key, value in data.items()}
        if isinstance(data, (list, tuple)):
            return [self._shown(item) for item in data]
        return self.text(data) if isinstance(data, str) else data

    def _paths(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.show(value)
        if isinstance(value, list):
            return [self._paths(item) for item in value]
        return self._shown(value)

    def filters(self, filters: Mapping[str, Any] | None) -> dict[str, Any] | None:
        """A request's search filters with the path filters read back to server paths."""
        if not filters:
            return None
        return {key: self._found(value) if key in PATH_FILTERS else value for key, value in filters.items()}

    def where(self, where: Any) -> Any:
        """A metadata query's where clauses (either form) with the values of `path` read back to server paths."""
        if isinstance(where, Mapping):
            return {key: self._found(value) if key == "path" else value for key, value in where.items()}
        if isinstance(where, list):
            return [self._where_text(item) if isinstance(item, str) else item for item in where]
        return where

    def query(self, body: Any) -> Any:
        """A metadata query's JSON form with its path values read back, in nested queries (set operations,
        semi-joins) too."""
        if not isinstance(body, Mapping):
            return body
        read = dict(body)
        if "where" in read:
            where = self.where(read["where"])
            if isinstance(where, Mapping):
                where = {key: self._subqueries(clause) for key, clause in where.items()}
            read["where"] = where
        if isinstance(read.get("queries"), list):
            read["queries"] = [self.query(part) for part in read["queries"]]
        return read

    def _subqueries(self, clause: Any) -> Any:
        if not isinstance(clause, Mapping):
            return clause
        return {key: self.query(value) if key in ("in", "contains") and isinstance(value, Mapping) else value
                for key, value in clause.items()}

    def _where_text(self, clause: str) -> str:
        match = WHERE_PATH.match(clause)
        if match is None:
            return clause
        return match.group(1) + "|".join(self.find(value) for value in match.group(2).split("|"))

    def _found(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.find(value)
        if isinstance(value, list):
            return [self._found(item) for item in value]
        if isinstance(value, Mapping):
            return {key: self._found(item) for key, item in value.items()}
        return value


def public_names(data_dir: Path, roots: Mapping[str, list[str]],
                 upload_names: Mapping[str, str] | None = None) -> PublicPaths:
    """The shown names of the sources' roots (source -> its roots) and of the data dir, with the uploads' names
    (stored path -> name)."""
    folders = [(str(data_dir.resolve()), DATA_DIR)]
    for source, paths in roots.items():
        if len(paths) == 1:
            folders.append((paths[0], source))
            continue
        seen: dict[str, int] = {}
        for path in paths:
            name = Path(path).name or "root"
            seen[name] = seen.get(name, 0) + 1
            folders.append((path, f"{source}/{name}" + (f"-{seen[name]}" if seen[name] > 1 else "")))
    folders = [(folder.rstrip("/") or "/", name) for folder, name in folders if folder.startswith("/")]
    return PublicPaths(tuple(sorted(folders, key=lambda entry: -len(entry[0]))), dict(upload_names or {}))


class ServerPaths:
    """The PublicPaths of one server: its sources' roots as synced (else as configured) and its uploads' names,
    re-read when the sidecar or the sources file changes, by one thread at a time. When the read takes longer than
    BUSY_WAIT_S (an ingest holds the sidecar), a request is shown with the paths read before, so a status poll or
    /healthz does not wait on an ingest; the read goes on in the background for the requests after it."""

    def __init__(self, settings: Settings, sidecar: Sidecar) -> None:
        self.settings, self.sidecar = settings, sidecar
        self._last: tuple[Any, PublicPaths] | None = None  # (the state they were read at, the paths)
        self._reading: tuple[Any, Future[PublicPaths]] | None = None  # the latest read, of that state
        self._lock = threading.Lock()

    def current(self) -> PublicPaths:
        sources_file = Path(self.settings.sources_file) if self.settings.sources_file else None
        state = (self.sidecar.data_state(), file_state(sources_file) if sources_file else None)
        last = self._last
        if last is not None and last[0] == state:
            return last[1]
        with self._lock:  # a read under way serves this request too, even if it reads an older state
            if self._reading is None or (self._reading[1].done() and self._reading[0] != state):
                self._reading = (state, Future())
                threading.Thread(target=self._read_into, args=self._reading, name="public-paths",
                                 daemon=True).start()
            reading = self._reading[1]
        if last is None:  # nothing to show meanwhile
            return reading.result()
        try:
            return reading.result(timeout=BUSY_WAIT_S)
        except FutureTimeout:
            return last[1]

    def _read_into(self, state: Any, reading: Future[PublicPaths]) -> None:
        """Read the paths (of `state`) into `reading`, and keep them."""
        last = self._last
        try:
            paths = self._read(fallback=last[1] if last is not None else None)
        except BaseException as error:  # not a read's error (those leave the fallback): the requests waiting see it
            reading.set_exception(error)
            raise
        self._last = (state, paths)
        reading.set_result(paths)

    def _read(self, fallback: PublicPaths | None) -> PublicPaths:
        """The paths; when the sidecar or the sources file cannot be read, `fallback` (the paths read before) or,
        without one, what could be read."""
        roots: dict[str, list[str]] = {}
        names: dict[str, str] = {}
        try:  # an error's answer uses this too: a sidecar or sources file that cannot be read leaves what can be
            roots = {name: list(row["roots"] or []) for name, row in self.sidecar.sources().items()}
            names = self.sidecar.upload_names()
            for name, spec in configured_sources(self.settings).items():
                roots.setdefault(name, [str(root) for root in spec.roots])
        except Exception as error:
            log.warning("the API shows paths by the roots it could read: %s", error)
            if fallback is not None:
                return fallback
            roots.setdefault("default", [str(Path(root).resolve()) for root in self.settings.roots])
        return public_names(self.settings.data_dir, roots, names)
