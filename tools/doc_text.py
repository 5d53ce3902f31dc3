"""Text taken from the code (comments, docstrings) as Markdown that shows it as written."""

from __future__ import annotations

import re

CODE_SPAN = re.compile(r"(`+[^`]*`+)")
URL = re.compile(r"(\b[a-z][a-z0-9+.-]*://[^\s)]+)")


def markdown_text(text: str) -> str:
    """`text` with the characters Markdown would act on escaped, and URLs as code (an example, not a link); code
    spans are kept as they are."""
    return "".join(part if CODE_SPAN.fullmatch(part) else prose(part) for part in CODE_SPAN.split(text))


def prose(text: str) -> str:
    """Text outside code spans: URLs as code, the rest escaped."""
    return "".join(f"`{part}`" if URL.fullmatch(part) else escaped(part) for part in URL.split(text))


def escaped(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("*", r"\*")
