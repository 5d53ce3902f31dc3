"""The server's logs as JSON lines: one object per record on stderr with time, level, logger and message (a message
that is itself a JSON object, like the access log's, is merged in rather than quoted)."""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime


class JsonLines(logging.Formatter):
    """A record as one JSON object: time, level, logger, then the message's fields (or `message`), then
    `exception` (the formatted traceback) when the record carries one."""

    def format(self, record: logging.LogRecord) -> str:
        line = {"time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
                "level": record.levelname, "logger": record.name}
        message = record.getMessage()
        try:
            fields = json.loads(message) if message.startswith("{") else None
        except ValueError:
            fields = None
        line.update(fields if isinstance(fields, dict) else {"message": message})
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str)


def log_json_lines(*loggers: str) -> None:
    """Send these loggers' records to stderr as JSON lines (and not on to the root logger's plain handler)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonLines())
    for name in loggers:
        logger = logging.getLogger(name)
        logger.handlers = [handler]
        logger.propagate = False
