"""Readable per-stage artifact files under the data dir: <stage>/<shard>/<sha>.<suffix>, written atomically.

A private store (the unredacted raw snapshots and Markdown) keeps its folders 0700 and its files 0600. A dropped
document leaves an empty <sha>.dropped behind, so the stages and the shard plan still count it as present."""

from __future__ import annotations

import json
import os
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

    def delete(self, shard: str, sha: str) -> None:
        """Remove every artifact of the document in this stage."""
        for path in (self.dir / shard).glob(f"{sha}.*"):
            path.unlink(missing_ok=True)

    def drop(self, shard: str, sha: str, keep: tuple[str, ...] = ()) -> None:
        """Remove the document's files except those with a suffix in keep, and mark it <sha>.dropped."""
        self.write_bytes(shard, sha, DROPPED, b"")
        for path in (self.dir / shard).glob(f"{sha}.*"):
            if path.name.split(".", 1)[1] not in (*keep, DROPPED):
                path.unlink(missing_ok=True)
