"""Readable per-stage artifact files under the data dir: <stage>/<shard>/<sha>.<suffix>, written atomically.

A private store (the unredacted raw snapshots and Markdown) keeps its folders 0700 and its files 0600. A dropped
document leaves an empty <sha>.dropped behind, so the stages and the shard plan still count it as present."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from rag_pipeline.atomic_file import write_atomically

DROPPED = "dropped"


class ArtifactStore:
    """One stage's files. A document is present when any file named <sha>.* exists in its shard folder."""

    def __init__(self, root: Path, stage: str, *, private: bool = False) -> None:
        self.dir = root / stage
        self.private = private

    def path(self, shard: str, sha: str, suffix: str) -> Path:
        return self.dir / shard / f"{sha}.{suffix}"

    def shas(self, shard: str, suffix: str | None = None) -> set[str]:
        """Documents with an artifact in the shard (only those with this suffix, when given)."""
        ending = f".{suffix}" if suffix else "."
        try:
            names = os.listdir(self.dir / shard)
        except (FileNotFoundError, NotADirectoryError):
            return set()
        return {name.split(".", 1)[0] for name in names
                if not name.startswith(".") and (name.endswith(ending) if suffix else ending in name)}

    def exists(self, shard: str, sha: str, suffix: str) -> bool:
        return self.path(shard, sha, suffix).is_file()

    def write_bytes(self, shard: str, sha: str, suffix: str, data: bytes) -> Path:
        target = self.path(shard, sha, suffix)
        target.parent.mkdir(parents=True, exist_ok=True)
        if self.private:
            self.dir.chmod(0o700)
            target.parent.chmod(0o700)
        write_atomically(target, data)  # mode 0600
        return target

    def write_text(self, shard: str, sha: str, suffix: str, text: str) -> Path:
        return self.write_bytes(shard, sha, suffix, text.encode("utf-8"))

    def write_json(self, shard: str, sha: str, suffix: str, value: Any) -> Path:
        return self.write_text(shard, sha, suffix, json.dumps(value, ensure_ascii=False, indent=1))

    def read_text(self, shard: str, sha: str, suffix: str) -> str:
        return self.path(shard, sha, suffix).read_text(encoding="utf-8")

    def read_json(self, shard: str, sha: str, suffix: str) -> Any:
        return json.loads(self.read_text(shard, sha, suffix))

    def files_of(self, shard: str, shas: Iterable[str]) -> dict[str, list[Path]]:
        """The files (<sha>.<suffix>) of each of `shas` in the shard, from one listing of its folder: a glob per
        document would read the whole folder each time (quadratic in the shard's size)."""
        wanted: dict[str, list[Path]] = {sha: [] for sha in shas}
        if not wanted:
            return wanted
        try:
            names = os.listdir(self.dir / shard)
        except (FileNotFoundError, NotADirectoryError):
            return wanted
        for name in names:
            sha, dot, _ = name.partition(".")
            if dot and sha in wanted:
                wanted[sha].append(self.dir / shard / name)
        return wanted

    def delete_documents(self, shard: str, shas: Iterable[str]) -> None:
        """Remove every artifact of these documents in this stage."""
        for paths in self.files_of(shard, shas).values():
            for path in paths:
                path.unlink(missing_ok=True)

    def drop_documents(self, shard: str, shas: Iterable[str], keep: tuple[str, ...] = ()) -> None:
        """Mark each of these documents <sha>.dropped, then remove its files except those with a suffix in keep."""
        files = self.files_of(shard, shas)
        for sha in files:
            self.write_bytes(shard, sha, DROPPED, b"")
        for paths in files.values():
            for path in paths:
                if path.name.split(".", 1)[1] not in (*keep, DROPPED):
                    path.unlink(missing_ok=True)
