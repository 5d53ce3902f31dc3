"""A second opinion on redacted text (and on fields, read as "name: value"): a document in which it still finds a
secret is withheld, and the blocking check `no_secret_survives` reads what was released with it.

It must be able to disagree, so it shares no rule with the redactor (ingest/redaction_rules.py, our rules plus
detect-secrets' token formats): a secret that slips through the redactor's rules can still trip these.

- Token formats: provider prefixes with their documented body lengths, a list kept apart from the redactor's.
  A body needs at least 10 distinct characters, so masks (``hf_xxxxxxxx...``) and placeholders pass. A format is
  only scanned for in a text holding one of its literal prefixes (a tenth of the time).
- Credential lines: on a line that names a credential (password, passphrase, secret, token, API key,
  credential), any word of 8+ characters built like a password (``Kx7#pW2q!mZ``, ``s3cr3tPa55``; see
  `_looks_like_password`: strict, because a false alarm withholds a document), wherever it stands on the line.
  Hex digests, UUIDs, versions, dates, host:port, paths, URLs and e-mail addresses are not, and
  ``[REDACTED:<kind>]`` markers are neither credential words nor words.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Leak:
    kind: str
    text: str
    line: int  # 1-based


# name -> (literals one of which every match holds, the format): a text without any of them is not scanned for it.
_TOKEN_FORMATS: dict[str, tuple[tuple[str, ...], re.Pattern[str]]] = {
    name: (hints, re.compile(rf"(?<![A-Za-z0-9])(?:{pattern})(?![A-Za-z0-9])"))
    for name, (hints, pattern) in {
        "aws_access_key_id": (("AKIA", "ASIA", "AGPA", "AIDA", "AROA", "ANPA"),
                              r"(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA)[A-Z2-7]{16}"),
        "github": (("gh", "github_pat_"), r"gh[pousr]_[A-Za-z0-9]{36}|github_pat_[A-Za-z0-9_]{82}"),
        "gitlab": (("gl",), r"gl(?:pat|dt|rt|ptt)-[A-Za-z0-9_-]{20}"),
        "slack": (("xox", "hooks.slack.com"),
                  r"xox[abposr]-[0-9A-Za-z-]{10,}|hooks\.slack\.com/(?:services|workflows)/[A-Za-z0-9/]{20,}"),
        "stripe": (("k_live_", "k_test_"), r"[rsp]k_(?:live|test)_[0-9A-Za-z]{24,}"),
        "google_api": (("AIza",), r"AIza[0-9A-Za-z_-]{35}"),
        "openai_or_anthropic": (("sk-",), r"sk-(?:proj-|ant-(?:api|admin)\d\d-)?[A-Za-z0-9_-]{32,}"),
        "hugging_face": (("hf_",), r"hf_[A-Za-z]{34}"),
        "sendgrid": (("SG.",), r"SG\.[A-Za-z0-9_-]{22}\.[A-Za-z0-9_-]{43}"),
        "npm": (("npm_",), r"npm_[A-Za-z0-9]{36}"),
        "pypi": (("pypi-AgE",), r"pypi-AgE[A-Za-z0-9_-]{50,}"),
        "shopify": (("shp",), r"shp(?:at|ca|pa|ss)_[a-fA-F0-9]{32}"),
        "digitalocean": (("_v1_",), r"do[opr]_v1_[a-f0-9]{64}"),
        "postman": (("PMAK-",), r"PMAK-[a-f0-9]{24}-[a-f0-9]{34}"),
        "jwt": (("eyJ",), r"eyJ[A-Za-z0-9_-]{10,}\.eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}"),
        "private_key": (("-----BEGIN",),
                        r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----\s*[A-Za-z0-9+/=]{16,}"),
    }.items()
}

_CREDENTIAL_WORD = re.compile(
    r"(?<![A-Za-z])(?:pass(?:word|wd|phrase|code)|secret|token|api[ _-]?key|credential)s?(?![A-Za-z])", re.I
)
_MARKER = re.compile(r"\[REDACTED:\w+\]")
_WORD = re.compile(r"[^\s|`'\"()<>\[\]{},;]{8,}")
_NOT_A_PASSWORD = re.compile(
    r"""[0-9a-fA-F]{8,}                                      # hex ids and digests
      | [0-9a-fA-F]{8}-(?:[0-9a-fA-F]{4}-){3}[0-9a-fA-F]{12}  # UUIDs
      | v?\d+(?:[.-]\d+)+(?:[-+.]?[A-Za-z]\w*)?              # versions and dates
      | [\w.-]*:\d+ | .*/.* | [\w.+-]+@[\w-]+(?:\.[\w-]+)+  # host:port, paths and URLs, e-mail addresses
      | .*[A-Za-z]\.[A-Za-z].* | .*(?:a-z|A-Z|0-9).*          # dotted names, regex character ranges""",
    re.X,
)


def _looks_like_password(word: str) -> bool:
    """Lower case, upper case and digits, and either a symbol other than a separator (Kx7#pW2q!mZ) or letters
    and digits swapping at least three times with no run of 4+ lower-case letters (s3cr3tPa55). Not code
    identifiers (Qwen2_5OmniToken2WavConfig, urllib3.util.Url), escapes or Argon2id."""
    word = word.rstrip(".:!?")
    if len(word) < 8 or "\\" in word or _NOT_A_PASSWORD.fullmatch(word):
        return False
    if not all(re.search(chars, word) for chars in ("[a-z]", "[A-Z]", r"\d")):
        return False
    if re.search(r"[!#$%^&*?~@]", word):
        return True
    swaps = len(re.findall(r"[A-Za-z](?=\d)|\d(?=[A-Za-z])", word))
    return word.isalnum() and swaps >= 3 and re.search(r"[a-z]{4}", word) is None


def find_leaks(text: str) -> list[Leak]:
    """Every secret this checker recognises in text (the redactor's output should give none)."""
    leaks = [
        Leak(kind, match.group(), text.count("\n", 0, match.start()) + 1)
        for kind, (hints, pattern) in _TOKEN_FORMATS.items() if any(hint in text for hint in hints)
        for match in pattern.finditer(text)
        if len(set(match.group())) >= 10
    ]
    for number, line in enumerate(_MARKER.sub(" ", text).split("\n"), start=1):
        if _CREDENTIAL_WORD.search(line):
            leaks += [Leak("credential", m.group(), number) for m in _WORD.finditer(line)
                      if _looks_like_password(m.group())]
    return leaks
