"""The redaction rules: what counts as a secret or PII in Markdown text, and how it is replaced.

Every document type (md, txt, html, docx, pdf, pptx) is Markdown by the time it gets here. Every rule is a
named regex plus an optional validator. Rules run in priority order over the original text and a match is
dropped when its span overlaps one claimed by an earlier rule: our token shapes (private key blocks, AWS,
GitHub, Slack, Stripe, Google, OpenAI, JWT), then every provider format of detect-secrets' regex detectors
(GitLab, Twilio, SendGrid, npm, PyPI, Discord, Telegram, Azure, IBM, ...), then credentials in URLs and
headers, ``key: value`` context, credentials named in prose and table rows (``the admin password is X``,
``| password | X |``), PII and, last, the high-entropy fallback. detect-secrets' keyword and entropy
detectors are not used: the keyword one takes the rest of a prose line as the value and the entropy ones
need quotes; ours are calibrated below.
Matches become ``[REDACTED:<kind>]`` followed by as many newlines as they spanned, so the line
numbers of later text never move. No rule matches a marker, so redacting is idempotent and
``find_secrets`` finds nothing in ``redact`` output. The blocking check uses another detector
(ingest/secret_check.py), so it can catch what these rules miss.

Calibration decisions:
- Context values (``password: x``) are redacted only when they look like values: quoted, the
  whole rest of the line, or ``label=value`` (env/CLI style). Placeholders are kept: ``$VAR``,
  ``${VAR}``, ``{{ var }}``, ``<your-password>``, masks (``***``, ``xxxx``), well-known dummies
  (``changeme``, ``null``, ``true``, ...), ``your_...``/``..._here``, and unquoted code
  references (``get_password()``, ``self.password``). An unquoted value stops at ``)`` so that
  ``f(password=pw)`` keyword arguments parse.
- Prose values (after ``is``, ``was``, ``set to``, ``:``, ``=`` or a table cell bar, up to four qualifying
  words after the credential word: ``the password for the staging database is X``) are redacted when quoted
  (4+ characters, not a plain word) or when they look like credentials: 6+ characters with a digit and a letter or symbol, or
  three of lower/upper/digit/symbol. Plain words (``the password is stored hashed``), versions, dates, URLs,
  placeholders and code (``tokens: list[Token]``, ``token is Number.Oct``) stay. Trailing sentence punctuation is not part of the value.
- Lowercase hex strings of 32, 40 or 64 characters are MD5 / git SHA-1 / SHA-256 digests: kept.
- High-entropy tokens: Shannon entropy alone does not separate secrets from code identifiers
  (``Qwen3OmniMoeTalkerText`` scores like a random 20-character key), so a token is redacted only
  when its entropy is at least 3.0 bits/char AND it has the structure of random text: a piece of at
  least 16 characters between ``-_/+`` separators (rules out paths, UUIDs, snake_case names),
  frequent character-class changes (at least 0.3 per adjacent pair) and under 40% of it covered
  by vowel-bearing word runs (rules out CamelCase identifiers). On random base62/base64 keys this
  catches ~80-90% of 20-40 character tokens (fewer for lowercase-only ones: the shaped and
  context rules are the main line). Of ~15k letter+digit tokens from installed packages' docs and
  sources it flags mostly hex ids and base64 blobs, plus a few dense names like ``cuTexRefSetAddress2D``.
"""

from __future__ import annotations

import functools
import math
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class
from detect_secrets.plugins.base import RegexBasedDetector

from rag_pipeline.settings import DEFAULT_ROLE_EMAIL_PREFIXES, Settings


@dataclass(frozen=True)
class RedactionResult:
    text: str
    counts: dict[str, int]  # kind -> number redacted, e.g. {"aws_access_key": 1, "email": 2}


def _value_span(match: re.Match[str]) -> tuple[int, int]:
    """The group "value", when the pattern has one; else the whole match."""
    return match.span("value") if "value" in match.re.groupindex else match.span()


@dataclass(frozen=True)
class _Rule:
    """A named pattern; `span` says which part of a match is the secret."""

    kind: str
    pattern: re.Pattern[str]
    valid: Callable[[re.Match[str]], bool] = lambda _match: True
    pii: bool = False
    span: Callable[[re.Match[str]], tuple[int, int]] = _value_span
    requires: re.Pattern[str] | None = None  # a part every match contains: a text without it is not scanned


# --- validators -----------------------------------------------------------------------------

_PLACEHOLDER = re.compile(
    r"""\$\{[^}]*\}|\$\(.*\)|(?-i:\$[A-Z_][A-Z0-9_]*)  # ${VAR}, $(cmd), $VAR (not $ecret1)
      | \{\{.*\}\} | <[^<>]*> | %\(\w+\)s  # {{ template }}, <your-password>, %(name)s
      | [\W_]+ | x+                        # masks without letters or digits (****, ...), xxxx
      | \[REDACTED:\w+\]                   # already redacted
      | change[-_]?me|placeholder|redacted|dummy|example|todo|tbd|none|null|nil|undefined
      | true|false|secret|password|token|your[-_ ].*|.*[-_]here""",
    re.X | re.I,
)
_VALUE_END = re.compile(r"[ \t]*(?:$|[,;|`#])", re.M)
_CALL = re.compile(r"[A-Za-z_][\w.]*\(.*")
_NAME = re.compile(r"[A-Za-z_][A-Za-z_.]*")


def _squash(name: str) -> str:
    return re.sub(r"[-_]", "", name.lower())


def _is_placeholder(value: str) -> bool:
    return _PLACEHOLDER.fullmatch(value) is not None


def _is_assigned_literal(match: re.Match[str]) -> bool:
    """A context value that is a real literal, not prose, a placeholder or a code reference."""
    value = match["value"]
    if _is_placeholder(value):
        return False
    if match["quote"]:
        return True
    if _CALL.fullmatch(value) or (_NAME.fullmatch(value) and _squash(match["key"]) in _squash(value)):
        return False  # get_password(), os.getenv(, self.password, api_key=api_key
    return match["sep"] == "=" or _VALUE_END.match(match.string, match.end()) is not None


def _is_token(match: re.Match[str]) -> bool:
    return len(match["value"]) >= 8 and re.search(r"\d", match["value"]) is not None


def _has_digit(match: re.Match[str]) -> bool:
    return re.search(r"\d", match.group()) is not None


def _luhn(digits: str) -> bool:
    total = 0
    for i, char in enumerate(reversed(digits)):
        n = int(char) * (2 if i % 2 else 1)
        total += n - 9 if n > 9 else n
    return total % 10 == 0


# Issuer prefixes: Visa, Mastercard, Amex, Diners, Discover, JCB, UnionPay.
_CARD_IIN_RANGES = (
    (4, 4), (51, 55), (2221, 2720), (34, 34), (37, 37), (300, 305), (36, 36), (38, 39),
    (6011, 6011), (644, 649), (65, 65), (3528, 3589), (62, 62),
)


def _is_card(match: re.Match[str]) -> bool:
    digits = re.sub(r"\D", "", match.group())
    known = any(lo <= int(digits[: len(str(lo))]) <= hi for lo, hi in _CARD_IIN_RANGES)
    return 13 <= len(digits) <= 19 and known and _luhn(digits)


def _is_iban(match: re.Match[str]) -> bool:
    iban = match.group().replace(" ", "")
    rearranged = iban[4:] + iban[:4]
    return 15 <= len(iban) <= 34 and int("".join(str(int(c, 36)) for c in rearranged)) % 97 == 1


def _is_phone(match: re.Match[str]) -> bool:
    """10-15 digits: E.164 allows 15; fewer is more often a ZIP+4 code (02111-1307) or a date."""
    return 10 <= sum(c.isdigit() for c in match.group()) <= 15


def _entropy(token: str) -> float:
    n = len(token)
    return -sum(c / n * math.log2(c / n) for c in Counter(token).values())


def _char_class(char: str) -> str:
    return "d" if char.isdigit() else "u" if char.isupper() else "l" if char.islower() else "s"


def _class_change_rate(token: str) -> float:
    """Changes between lower/upper/digit per adjacent pair; Upper->lower (a capital word) is none."""
    pairs = [(_char_class(a), _char_class(b)) for a, b in zip(token, token[1:])]
    pairs = [(a, b) for a, b in pairs if "s" not in (a, b)]
    changes = sum(a != b and (a, b) != ("u", "l") for a, b in pairs)
    return changes / max(len(pairs), 1)


_WORD_RUN = re.compile(r"[A-Z]?[a-z]{3,}|[A-Z]{2,}(?![a-z])")


def _word_coverage(token: str) -> float:
    words = (m.group() for m in _WORD_RUN.finditer(token))
    return sum(len(w) for w in words if re.search("[aeiouyAEIOUY]", w)) / len(token)


_HEX_DIGEST = re.compile(r"[0-9a-f]{32}|[0-9a-f]{40}|[0-9a-f]{64}")


def _is_random_token(match: re.Match[str]) -> bool:
    token = match.group()
    return (
        _HEX_DIGEST.fullmatch(token) is None
        and re.search("[A-Za-z]", token) is not None
        and re.search(r"\d", token) is not None
        and max(len(piece) for piece in re.split(r"[-_/+]", token)) >= 16
        and _entropy(token) >= 3.0
        and _class_change_rate(token) >= 0.3
        and _word_coverage(token) < 0.4
    )


_EDGE = " \t\r\n\"'`=:"
# detect-secrets detectors we do not take: ours cover the same ground with placeholders filtered (basic auth in
# URLs) or whole key blocks (its private-key patterns match the header line only); a public IP is not a secret.
_LIBRARY_SKIPPED = {"Basic Auth Credentials", "Private Key", "Public IP (ipv4)"}


def _token_span(match: re.Match[str]) -> tuple[int, int]:
    """A detect-secrets match: its one captured group when that holds the secret (not just a prefix such as
    "ghp"), else the whole match; without the spaces, quotes and separators some patterns take at their edges."""
    captured = match.re.groups and len(match.group(1) or "") >= 8
    start, end = match.span(1) if captured else match.span()
    while start < end and match.string[start] in _EDGE:
        start += 1
    while end > start and match.string[end - 1] in _EDGE:
        end -= 1
    return start, end


def _is_standalone_token(match: re.Match[str]) -> bool:
    """A detect-secrets match with a digit, not cut out of a longer run of letters and digits (a base64 blob)."""
    start, end = _token_span(match)
    text = match.string
    inside = (start > 0 and text[start - 1].isalnum()) or (end < len(text) and text[end].isalnum())
    return not inside and _has_digit(match)


def _library_rules() -> tuple[_Rule, ...]:
    """Every provider token format of detect-secrets' regex detectors (GitLab, Twilio, SendGrid, npm, PyPI,
    Discord, Telegram, Mailchimp, Square, Azure storage, IBM, ...)."""
    return tuple(
        _Rule(re.sub(r"\W+", "_", secret_type.lower()).strip("_"), pattern, _is_standalone_token, span=_token_span)
        for secret_type, plugin in sorted(get_mapping_from_secret_type_to_class().items())
        if issubclass(plugin, RegexBasedDetector) and secret_type not in _LIBRARY_SKIPPED
        for pattern in plugin().denylist
    )


_VERSION_OR_DATE = re.compile(r"v?\d+(?:[.-]\d+)+")
_CODE = re.compile(r"[()\[\]{}<>]")
_CODE_NAME = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+|_\w+|[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+")


def _is_prose_secret(match: re.Match[str]) -> bool:
    """A value named in prose that looks like a credential: quoted (4+ characters of two of lower/upper/digit/
    symbol: not `state`), or a 6+ character token
    with a digit and a letter or symbol, or with three of lower/upper/digit/symbol. Not a placeholder, a URL, a
    version, a date or (unquoted) code: brackets, calls, dotted, _private and CONSTANT_CASE names."""
    value = match["value"]
    if _is_placeholder(value) or _CALL.fullmatch(value) or "://" in value or _VERSION_OR_DATE.fullmatch(value):
        return False
    classes = {_char_class(char) for char in value}
    if match["quote"]:
        return len(value) >= 4 and len(classes) >= 2
    if _CODE.search(value) or _CODE_NAME.fullmatch(value):
        return False  # list[Token], f(x), Number.Oct, self.IMAGE_TOKEN, _StrPathToken, MAX_NEW_TOKENS: code
    return len(value) >= 6 and (("d" in classes and len(classes) >= 2) or len(classes) >= 3)


def _prose_rule(kind: str, key: str) -> _Rule:
    """`the <key> [for the admin account] is|was|set to|:|= <value>` and `| <key> | <value> |` table rows."""
    label = rf"(?<![\w.-])[\w.-]*?(?P<key>{key})(?![\w-])"
    qualifier = r"(?:[ \t]+(?:for|of|on)(?:[ \t]+[\w.@/-]+){1,4}?)?"
    link = r"(?:[ \t]*[:=|][ \t]*|[ \t]+(?:(?:is|was|are)(?:[ \t]+(?:set|changed|reset)[ \t]+to)?|(?:set|changed|reset)[ \t]+to|reads)[ \t]+)(?:\*\*)?"
    value = (r"""(?P<quote>["'`])?(?!\[REDACTED:)"""
             r"""(?P<value>(?(quote)[^\s"'`]{1,100}|[^\s"'`|]{1,100}?))"""
             r"""(?(quote)(?P=quote)|(?=[.,;:!?)\]]*(?:\s|$)))""")
    return _Rule(kind, re.compile(label + qualifier + link + value, re.I), _is_prose_secret,
                 requires=re.compile(key, re.I))


# --- rules, in priority order ---------------------------------------------------------------

_VALUE = (  # a quoted value (", ', `) or a bare single token
    r"""(?P<quote>["'`])?(?P<value>(?(quote)(?:(?!(?P=quote))[^\n])+|[^\s"'`,;|)]+))(?(quote)(?P=quote))"""
)


def _context_rule(kind: str, key: str) -> _Rule:
    """`<...key> <sep> <value>` in YAML/INI/env/JSON/Markdown forms; only the value is redacted."""
    label = rf"(?<![\w.-])[\w.-]*?(?P<key>{key})(?![\w-])[\"'*]*"
    sep = r"(?P<sep>[ \t]*(?::=|=>|[:=])[ \t]*)(?:\*\*[ \t]*)?"
    return _Rule(kind, re.compile(label + sep + _VALUE, re.I), _is_assigned_literal, requires=re.compile(key, re.I))


_SECRET_RULES: tuple[_Rule, ...] = (
    _Rule("private_key", re.compile(
        r"-----BEGIN[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----[\s\S]*?-----END[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----"
    )),
    _Rule("slack_webhook", re.compile(r"https://hooks\.slack\.com/(?:services|workflows)/[A-Za-z0-9/_-]+")),
    _Rule("jwt", re.compile(r"(?<![\w-])eyJ[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+")),
    _Rule("aws_access_key", re.compile(r"\b(?:AKIA|ASIA)[A-Z0-9]{16}\b")),
    _Rule("github_token", re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{22,})\b"), _has_digit),
    _Rule("npm_token", re.compile(r"\bnpm_[A-Za-z0-9]{36}\b"), _has_digit),
    _Rule("huggingface_token", re.compile(r"\bhf_[A-Za-z0-9]{34}\b"), lambda m: len(set(m.group())) >= 16),
    _Rule("slack_token", re.compile(r"\bxox[abprs]-[A-Za-z0-9-]{10,}")),
    _Rule("stripe_key", re.compile(r"\b[rs]k_(?:live|test)_[A-Za-z0-9]{16,}\b")),
    _Rule("google_api_key", re.compile(r"\bAIza[A-Za-z0-9_-]{35}(?![\w-])")),
    _Rule("openai_key", re.compile(r"(?<![\w-])sk-[A-Za-z0-9_-]{20,}"), _has_digit),
    *_library_rules(),
    _Rule(  # scheme://user:password@host
        "password", re.compile(r"(?<=://)[^\s:/@]+:(?P<value>[^\s/@]+)@"), lambda m: not _is_placeholder(m["value"])
    ),
    _Rule("basic_auth", re.compile(
        r"(?i:authorization)[\"']?[ \t]*[:=][ \t]*[\"']?Basic[ \t]+(?P<value>[A-Za-z0-9+/]{8,}=*)"
    )),
    _Rule("bearer_token", re.compile(r"\bBearer[ \t]+(?P<value>[A-Za-z0-9._~+/-]+=*)"), _is_token),
    _context_rule("aws_secret_key", r"secret[_-]?access[_-]?key"),
    _context_rule("password", r"pass(?:word|wd|phrase)"),
    _context_rule("api_key", r"api[_-]?key"),
    _context_rule("private_key", r"private[_-]?key"),
    _context_rule("secret", r"secret(?:[_-]?key)?"),
    _context_rule("token", r"token"),
    _prose_rule("password", r"pass(?:word|wd|phrase|code)s?"),
    _prose_rule("api_key", r"api[ _-]?keys?"),
    _prose_rule("secret", r"secrets?(?:[ _-]?keys?)?"),
    _prose_rule("secret", r"(?:secret[ _-]?)?access[ _-]?keys?"),
    _prose_rule("token", r"tokens?"),
)

_PII_RULES: tuple[_Rule, ...] = (
    # Not scp-style `user@host:path` (git remotes).
    _Rule("email", re.compile(
        r"(?<![\w.+%-])[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}(?![\w-]|\.[\w-]|:[\w~/])"
    ), pii=True, requires=re.compile("@")),
    _Rule("iban", re.compile(r"\b[A-Z]{2}\d{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,3})?\b"), _is_iban, pii=True),
    _Rule("credit_card", re.compile(
        r"""(?<![\w+.-])(?:
              \d{4}(?P<sep>[ -])\d{4}(?:(?P=sep)\d{4}){1,2}(?:(?P=sep)\d{1,3})?  # 4111 1111 1111 1111
            | \d{4}(?P<amex>[ -])\d{6}(?P=amex)\d{5}                            # 3782 822463 10005
            | \d{13,19}
            )(?!\w|[.-]\d)""",
        re.X,
    ), _is_card, pii=True),
    _Rule("phone", re.compile(
        r"""(?<![\w.+/-])(?:
              \+[1-9]\d{0,2}(?:[ .-]?(?:\(\d{1,4}\)|\d{1,5})){2,6}        # +CC international
            | (?:1[ .-])?\(\d{3}\)[ ]?\d{3}[ .-]\d{4}                   # (555) 123-4567
            | (?:1[ .-])?\d{3}(?P<nanp>[ .-])\d{3}(?P=nanp)\d{4}        # 555-123-4567
            | 0\d{1,4}(?P<trunk>[ ./-])\d{2,8}(?:(?P=trunk)\d{2,8}){0,4} # 020 7946 0958
            )(?!\w|[./-]\d)""",
        re.X,
    ), _is_phone, pii=True),
)

_FALLBACK_RULES: tuple[_Rule, ...] = (
    _Rule("high_entropy", re.compile(
        r"(?<![\w+/.:@?&%~#$\\-])[A-Za-z0-9+/_-]{20,}={0,2}(?![\w+/=-]|[.:@]\w)"
    ), _is_random_token),
)

_RULES = _SECRET_RULES + _PII_RULES + _FALLBACK_RULES


def _spans(text: str) -> list[tuple[int, int, _Rule]]:
    """Non-overlapping (start, end, rule) matches; earlier rules claim their spans first.

    PII rules always run, even when PII is kept, so a kept IBAN is never taken for a
    high-entropy secret.
    """
    claimed = bytearray(len(text))
    spans = []
    for rule in _RULES:
        if rule.requires is not None and not rule.requires.search(text):
            continue
        for match in rule.pattern.finditer(text):
            if not rule.valid(match):
                continue
            start, end = rule.span(match)
            if start == end:
                continue
            if claimed.find(1, start, end) == -1:
                claimed[start:end] = b"\x01" * (end - start)
                spans.append((start, end, rule))
    return sorted(spans, key=lambda span: span[0])


def _is_role_email(address: str, roles: set[str]) -> bool:
    """support@..., Support+EU@... when "support" is a role prefix."""
    return address.split("@", 1)[0].split("+", 1)[0].lower() in roles


def redact(
    text: str,
    *,
    pii_policy: Literal["redact", "keep"] = "redact",
    role_email_prefixes: Sequence[str] = DEFAULT_ROLE_EMAIL_PREFIXES,
) -> RedactionResult:
    """Replace secrets (always) and personal PII (unless pii_policy="keep") with markers."""
    roles = {prefix.lower() for prefix in role_email_prefixes}
    parts: list[str] = []
    counts: Counter[str] = Counter()
    position = 0
    for start, end, rule in _spans(text):
        found = text[start:end]
        if rule.pii and (pii_policy == "keep" or (rule.kind == "email" and _is_role_email(found, roles))):
            continue
        parts += [text[position:start], f"[REDACTED:{rule.kind}]" + "\n" * found.count("\n")]
        counts[rule.kind] += 1
        position = end
    parts.append(text[position:])
    return RedactionResult("".join(parts), dict(counts))


def find_secrets(text: str) -> list[tuple[str, str]]:
    """(kind, matched text) for every secret still present; [] on the output of redact()."""
    return [(rule.kind, text[start:end]) for start, end, rule in _spans(text) if not rule.pii]


def redact_with(settings: Settings, text: str) -> RedactionResult:
    """`text` redacted under the settings' PII policy."""
    return redact(text, pii_policy=settings.pii_policy, role_email_prefixes=settings.role_email_prefixes)


def redact_value(settings: Settings, key: str, text: str) -> str | None:
    """`text` redacted as the value of `key`: "key: text" goes through the rules, so the key is context as
    `password: X` is in a body (`db_password: X` redacts X), and the value's redaction is returned. None when a
    rule took part of the key itself (a key holding a secret)."""
    prefix = f"{key}: "
    redacted = redact_with(settings, prefix + text).text
    return redacted[len(prefix):] if redacted.startswith(prefix) else None




def redact_path(settings: Settings, path: str) -> str:
    """A file path as it is embedded and shown: secrets (and personal data, under the PII policy) redacted in each
    folder name and in the file name, its extension kept (`api_key=ghp_....md` shows as
    `api_key=[REDACTED:github_token].md`). The real path stays where the system finds the file by it."""
    return _redacted_path(path, settings.pii_policy, tuple(settings.role_email_prefixes))


@functools.lru_cache(maxsize=1 << 16)
def _redacted_path(path: str, pii_policy: Literal["redact", "keep"], roles: tuple[str, ...]) -> str:
    folder, slash, name = path.rpartition("/")
    stem, dot, extension = name.rpartition(".") if "." in name.lstrip(".") else (name, "", "")
    parts = [*folder.split("/"), stem] if slash else [stem]
    return "/".join(_redacted_part(part, pii_policy, roles) if part else part for part in parts) + dot + extension


@functools.lru_cache(maxsize=1 << 16)
def _redacted_part(part: str, pii_policy: Literal["redact", "keep"], roles: tuple[str, ...]) -> str:
    """One folder name or file stem redacted: the folders above a corpus's files repeat in every path."""
    return redact(part, pii_policy=pii_policy, role_email_prefixes=roles).text
