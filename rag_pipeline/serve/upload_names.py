"""Uploads cited by the names their clients gave them: an answer's documents and passages (JSON objects with a
`path` and an `id` or `chunk_id`) whose path is an upload's stored file also get `upload_name` (the sidecar's
record, ingest/uploads.py `upload_name`). Additive: `path` stays the real path, so path filters keep working;
other documents get no such key. The API (serve/public_paths.py) and the CLI show answers through this.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

UPLOAD_NAME = "upload_name"
IDENTITY_KEYS = ("id", "chunk_id")  # what marks an object as a document or passage (not a filter or a where clause)


def with_upload_names(data: Any, names: Mapping[str, str]) -> Any:
    """`data` (JSON data) with `upload_name` beside each cited upload's path; `names`: stored path -> name."""
    if not names:
        return data
    if isinstance(data, Mapping):
        named = {key: with_upload_names(value, names) for key, value in data.items()}
        path = data.get("path")
        if isinstance(path, str) and path in names and any(key in data for key in IDENTITY_KEYS):
            named.setdefault(UPLOAD_NAME, names[path])
        return named
    if isinstance(data, (list, tuple)):
        return [with_upload_names(item, names) for item in data]
    return data

