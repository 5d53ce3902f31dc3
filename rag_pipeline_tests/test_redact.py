"""Redaction of secrets and PII: what must go, the near misses that must stay, line-count safety."""

from __future__ import annotations

import dataclasses
import time

import pytest

from rag_pipeline.ingest.redaction_rules import RedactionResult, find_secrets, redact
from rag_pipeline.ingest.secret_check import Leak, find_leaks

RSA_KEY = """-----BEGIN RSA PRIVATE KEY-----
MIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gun
VTLw7onLRnrq0/IzW7yWR7QkrmBL7jTKEn5u+qKhbwKfBstIs+bMY2Zkp18gnTxK
-----END RSA PRIVATE KEY-----"""

# (text, kind, secret): the secret must be gone and replaced by [REDACTED:kind].
SECRETS = [
    ("key id AKIAIOSFODNN7EXAMPLE in a sentence", "aws_access_key", "AKIAIOSFODNN7EXAMPLE"),
    ("session ASIAY34FZKBOKMUTVV7A", "aws_access_key", "ASIAY34FZKBOKMUTVV7A"),
    ("aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "aws_secret_key",
     "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"),
    ('"SecretAccessKey": "je7MtGbClwBF/2Zp9Utk/h3yCo8nvbEXAMPLEKEY",', "aws_secret_key",
     "je7MtGbClwBF/2Zp9Utk/h3yCo8nvbEXAMPLEKEY"),
    ("GITHUB_TOKEN ghp_1234567890abcdefghijABCDEFGHIJ123456", "github_token",
     "ghp_1234567890abcdefghijABCDEFGHIJ123456"),
    ("oauth gho_16C7e42F292c6912E7710c838347Ae178B4a", "github_token", "gho_16C7e42F292c6912E7710c838347Ae178B4a"),
    ("pat github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyzABCDEFGH", "github_token",
     "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyzABCDEFGH"),
    ("bot xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx", "slack_token",
     "xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx"),
    ("user xoxp-123456789012-123456789012-123456789012-abcdef0123456789abcdef0123456789", "slack_token",
     "xoxp-123456789012-123456789012-123456789012-abcdef0123456789abcdef0123456789"),
    ("post to https://hooks.slack.com/services/T00000000/B00000000/XXXXXXXXXXXXXXXXXXXXXXXX now", "slack_webhook",
     "T00000000/B00000000/XXXXXXXXXXXXXXXXXXXXXXXX"),
    ("jwt eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIn0"
     ".SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c", "jwt", "SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"),
    ("curl -H 'Authorization: Bearer 8f2a9c1e7b3d4f60a5e9c2b1d7f3a8e4c6b0d9f2'", "bearer_token",
     "8f2a9c1e7b3d4f60a5e9c2b1d7f3a8e4c6b0d9f2"),
    ("send Bearer mF_9.B5f-4.1JqM in the header", "bearer_token", "mF_9.B5f-4.1JqM"),
    ("Authorization: Basic dXNlcjpwYXNzd29yZA==", "basic_auth", "dXNlcjpwYXNzd29yZA=="),
    ("stripe sk_live_4eC39HqLyjWDarjtT1zdp7dc", "stripe_key", "sk_live_4eC39HqLyjWDarjtT1zdp7dc"),
    ("restricted rk_live_51H8xYzAbCdEfGhIjKlMnOp", "stripe_key", "rk_live_51H8xYzAbCdEfGhIjKlMnOp"),
    ("maps AIzaSyA1b2C3d4E5f6G7h8I9j0KlMnOpQrStUvW", "google_api_key", "AIzaSyA1b2C3d4E5f6G7h8I9j0KlMnOpQrStUvW"),
    ("OPENAI sk-proj-Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4z", "openai_key", "sk-proj-Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4z"),
    ("DSN postgres://app:s3cretPass@db.internal:5432/app", "password", "s3cretPass"),
    (RSA_KEY, "private_key", "MIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gun"),
    ("-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmU=\n-----END OPENSSH PRIVATE KEY-----",
     "private_key", "b3BlbnNzaC1rZXktdjEAAAAABG5vbmU="),
    ("-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIBkg4LVWM9nuwNSk3yByxZpYRTBnVJk5\n-----END EC PRIVATE KEY-----",
     "private_key", "MHcCAQEEIBkg4LVWM9nuwNSk3yByxZpYRTBnVJk5"),
    ("-----BEGIN PRIVATE KEY-----\nMIGHAgEAMBMGByqGSM49AgEGCCqGSM49\n-----END PRIVATE KEY-----",
     "private_key", "MIGHAgEAMBMGByqGSM49AgEGCCqGSM49"),
    ("-----BEGIN PGP PRIVATE KEY BLOCK-----\nVersion: GnuPG v2\n\nlQOYBF0nCmgBCADHx1\n=ab12\n"
     "-----END PGP PRIVATE KEY BLOCK-----", "private_key", "lQOYBF0nCmgBCADHx1"),
    # Context secrets: the label stays, the value goes.
    ("password: hunter2", "password", "hunter2"),
    ("passwd=Tr0ub4dor&3", "password", "Tr0ub4dor&3"),
    ("DB_PASSWORD=pa55w0rd!", "password", "pa55w0rd!"),
    ('"password": "correct horse battery staple",', "password", "correct horse battery staple"),
    ("**Password:** s3cr3t-Value", "password", "s3cr3t-Value"),
    ('api_key = "abc"', "api_key", "abc"),
    ("apiKey: a1b2c3d4e5", "api_key", "a1b2c3d4e5"),
    ("export API_KEY=0123456789abcdef", "api_key", "0123456789abcdef"),
    ("x-api-key: ZmFrZS1rZXk", "api_key", "ZmFrZS1rZXk"),
    ("secret=swordfish", "secret", "swordfish"),
    ("client_secret: 'Qx7-v2~Lp.9z'", "secret", "Qx7-v2~Lp.9z"),
    ("SECRET_KEY = 'django-insecure-0x9f'", "secret", "django-insecure-0x9f"),
    ("token: t0k3n-value", "token", "t0k3n-value"),
    ("access_token=ya29.a0AfH6SMBx", "token", "ya29.a0AfH6SMBx"),
    ("refreshToken: 'def50200abc'", "token", "def50200abc"),
    ("private_key: mysecretkeymaterial", "private_key", "mysecretkeymaterial"),
    # Secrets in prose and table rows (issue 13): the value a sentence gives a credential.
    ("The password is `Winter2024!`", "password", "Winter2024!"),
    ("the password: Wombat-Lantern-5567 for the admin account", "password", "Wombat-Lantern-5567"),
    ("The admin password is Tr0ub4dor&3x.", "password", "Tr0ub4dor&3x"),
    ("The password for the staging database is Zq8!vPl2.", "password", "Zq8!vPl2"),
    ("Her passphrase was set to blue-Otter-91 yesterday.", "password", "blue-Otter-91"),
    ("| admin | password | Xk9#mPq2vL |", "password", "Xk9#mPq2vL"),
    ("The API key is 7Gh2kLq9Zx41, rotate it monthly.", "api_key", "7Gh2kLq9Zx41"),
    ("Our webhook secret is wh-8841-prod-Kq, keep it safe.", "secret", "wh-8841-prod-Kq"),
    ("The deploy token is 'pl4ceKeep' for now.", "token", "pl4ceKeep"),
    # detect-secrets' provider formats that our own rules do not know.
    ("gitlab glpat-Xy7aBc9dEf2gHi4jKl6m in CI", "gitlab_token", "glpat-Xy7aBc9dEf2gHi4jKl6m"),
    ("hub 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 read", "huggingface_token", "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"),
    ("npm npm_TYBDOOh6YYdolYcyLSg55JaSAfuuCKU4JQan publish", "npm_token", "npm_TYBDOOh6YYdolYcyLSg55JaSAfuuCKU4JQan"),
    ("Its secret access key is ES3/hANDKsstDzno6AYEISy6s6OFx05VTV+ogdrw yearly", "secret",
     "ES3/hANDKsstDzno6AYEISy6s6OFx05VTV+ogdrw"),
    ("twilio SK2b7c9f0e1d3a4b5c6d7e8f9a0b1c2d3e sid", "twilio_api_key", "SK2b7c9f0e1d3a4b5c6d7e8f9a0b1c2d3e"),
    ("mail 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 sent", "sendgrid_api_key",
     "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"),
    # High-entropy fallback: random-looking standalone tokens without a known shape.
    ("session id Zx8Qw3Lk9Vb2Nm7Pq4Rt6Yu1 expired", "high_entropy", "Zx8Qw3Lk9Vb2Nm7Pq4Rt6Yu1"),
    ("DATADOG=8Hq2LmX7vR4kP9zN3wT6yB1c", "high_entropy", "8Hq2LmX7vR4kP9zN3wT6yB1c"),
    ('cookie "q8Vn3+Jk2Lw/Pz7XyR4tB9mE1cH6sD0a=="', "high_entropy", "q8Vn3+Jk2Lw/Pz7XyR4tB9mE1cH6sD0a=="),
]

# (text, kind, pii): personal data redacted under the default policy.
PII = [
    ("mail john.doe@example.com today", "email", "john.doe@example.com"),
    ("<jane+news@mail.example.co.uk>", "email", "jane+news@mail.example.co.uk"),
    ("call +44 20 7946 0958", "phone", "+44 20 7946 0958"),
    ("call +1 (555) 123-4567", "phone", "+1 (555) 123-4567"),
    ("tel: +49 30 1234567", "phone", "+49 30 1234567"),
    ("US (555) 123-4567", "phone", "(555) 123-4567"),
    ("US 555-123-4567", "phone", "555-123-4567"),
    ("US 555.123.4567", "phone", "555.123.4567"),
    ("toll free 1-800-555-0199", "phone", "1-800-555-0199"),
    ("UK 020 7946 0958", "phone", "020 7946 0958"),
    ("FR 06 12 34 56 78", "phone", "06 12 34 56 78"),
    ("IBAN GB82 WEST 1234 5698 7654 32.", "iban", "GB82 WEST 1234 5698 7654 32"),
    ("IBAN DE89 3704 0044 0532 0130 00", "iban", "DE89 3704 0044 0532 0130 00"),
    ("compact DE89370400440532013000", "iban", "DE89370400440532013000"),
    ("visa 4111 1111 1111 1111", "credit_card", "4111 1111 1111 1111"),
    ("mc 5555-5555-5555-4444", "credit_card", "5555-5555-5555-4444"),
    ("amex 378282246310005", "credit_card", "378282246310005"),
    ("amex 3782 822463 10005", "credit_card", "3782 822463 10005"),
    ("visa 4111 1111 1111 1111 exp 2027", "credit_card", "4111 1111 1111 1111"),
]

# Near misses: must come out unchanged with no counts.
KEEP = [
    "card 4111 1111 1111 1112 fails Luhn",
    "number 1234 5678 9012 3456 has no issuer prefix",
    "IBAN GB82 WEST 1234 5698 7654 33 has a bad checksum",
    "commit 3f786850e387550fdab836ed7e6dc881de23001b fixed it",
    "sha256 e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    "request 123e4567-e89b-12d3-a456-426614174000 failed",
    "released on 2024-01-15 at 10:30",
    "on 15.01.2024 and 01/15/2024",
    "dagster==1.13.27 and version 1.13.27",
    "host 192.168.1.10 port 5432",
    "he lived 1960-1970 in Paris",
    "row count 12345678901234",
    "Boston, MA 02111-1307, USA",
    "samples 46 97 53 96 51 84 18 42 30 52 82 77 72 59 1 67",
    "the password is stored hashed",
    "The password policy is 12 characters, one digit and one symbol.",
    "Bearer tokens are short-lived",
    "The token is valid for 3600 seconds.",
    "The API key is in the vault, version 2.14.1.",
    "The password is your_password_here",
    "The password was changed on 2024-05-01.",
    "max_tokens is 512",
    "reset your password: click the link we sent",
    "Bearer tokens are short-lived",
    "Authorization: Bearer <token>",
    "password: <your-password>",
    "password: ***",
    "password: changeme",
    "password: ${DB_PASSWORD}",
    "token: $GITHUB_TOKEN",
    "api_key: {{ vault_api_key }}",
    "API_KEY=your_api_key_here",
    "password = get_password()",
    "client(password=self.password)",
    "max_tokens: 512",
    "token_count = 5",
    "secret_name: db-credentials",
    "write to support@example.com or info@example.org",
    "class AbstractSingletonProxyFactoryBean",
    "def test_chunk_overlap_is_word_aligned():",
    "model Wav2Vec2ForSequenceClassification and Qwen/Qwen3-30B-A3B-Base",
    "layer sha256_checksum_v2_20240115 in snake_case",
    "a Donaudampfschifffahrtsgesellschaftskapitaen is long",
    "md5 10aa4ff7691c548d68d7b79d6bd1ace2 of the archive",
    "Example: ghp_xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
    "see https://github.com/example-org/rag-pipeline/blob/main/src/rag_pipeline/settings_v2.py",
    "path /usr/lib/python3.11/site-packages/pytest_asyncio-0.23.5.dist-info",
    "clone git@github.com:example-org/rag-pipeline.git",
    "[REDACTED:aws_access_key] and password: [REDACTED:password]",
    'js {"csrfToken":"+\\\\"}',
]


@pytest.mark.parametrize(("text", "kind", "secret"), SECRETS, ids=[c[1] + ":" + c[0][:30] for c in SECRETS])
def test_secret_is_redacted_and_found(text: str, kind: str, secret: str) -> None:
    result = redact(text)
    assert secret not in result.text
    assert f"[REDACTED:{kind}]" in result.text
    assert result.counts == {kind: 1}
    assert result.text.count("\n") == text.count("\n")
    assert any(found_kind == kind and secret in found for found_kind, found in find_secrets(text))
    assert find_secrets(result.text) == []


@pytest.mark.parametrize(("text", "kind", "pii"), PII, ids=[c[1] + ":" + c[0][:30] for c in PII])
def test_pii_is_redacted_unless_kept(text: str, kind: str, pii: str) -> None:
    result = redact(text)
    assert result.text == text.replace(pii, f"[REDACTED:{kind}]")
    assert result.counts == {kind: 1}
    kept = redact(text, pii_policy="keep")
    assert kept.text == text and kept.counts == {}
    assert find_secrets(text) == []


@pytest.mark.parametrize("text", KEEP)
def test_near_misses_are_kept(text: str) -> None:
    result = redact(text)
    assert (result.text, result.counts) == (text, {})
    assert find_secrets(text) == []


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("password: hunter2", "password: [REDACTED:password]"),
        ('"password": "x1"', '"password": "[REDACTED:password]"'),
        ("PASSWORD=x1", "PASSWORD=[REDACTED:password]"),
        ("export API_KEY=x1", "export API_KEY=[REDACTED:api_key]"),
        ("  apiKey: 'x1'  # prod", "  apiKey: '[REDACTED:api_key]'  # prod"),
        ("mysql --password=hunter2 -u root", "mysql --password=[REDACTED:password] -u root"),
        ("Password: `hunter2`", "Password: `[REDACTED:password]`"),
    ],
)
def test_context_secret_keeps_label_and_separator(text: str, expected: str) -> None:
    assert redact(text).text == expected


def test_private_key_block_keeps_line_numbers() -> None:
    text = f"# Deploy\n\nUse this key:\n\n```\n{RSA_KEY}\n```\n\nLast line mentions AKIAIOSFODNN7EXAMPLE.\n"
    result = redact(text)
    before, after = text.splitlines(), result.text.splitlines()
    assert len(after) == len(before)
    assert after[5] == "[REDACTED:private_key]"
    assert after[-1] == "Last line mentions [REDACTED:aws_access_key]."
    assert "MIIEow" not in result.text and "END RSA" not in result.text


def test_counts_per_kind() -> None:
    text = (
        "AKIAIOSFODNN7EXAMPLE and AKIAI44QH8DHBEXAMPLE\n"
        "mail john.doe@example.com, jane@corp.example and support@example.com\n"
        "password: hunter2\ncard 4111 1111 1111 1111\n"
    )
    assert redact(text).counts == {"aws_access_key": 2, "email": 2, "password": 1, "credit_card": 1}


def test_keep_policy_keeps_pii_but_redacts_secrets() -> None:
    pii = "john.doe@example.com +44 20 7946 0958 DE89370400440532013000"
    result = redact(f"{pii} token: ghp_1234567890abcdefghijABCDEFGHIJ123456", pii_policy="keep")
    assert result.text == f"{pii} token: [REDACTED:github_token]"
    assert result.counts == {"github_token": 1}
    assert find_secrets(result.text) == []


def test_role_email_prefixes_are_configurable() -> None:
    text = "jobs@example.com support@example.com Support+EU@example.com"
    result = redact(text, role_email_prefixes=["jobs"])
    assert result.text == "jobs@example.com [REDACTED:email] [REDACTED:email]"
    assert redact(text).text == "[REDACTED:email] support@example.com Support+EU@example.com"


def test_whole_table_leaves_no_secret_and_is_idempotent() -> None:
    text = "\n".join([c[0] for c in SECRETS] + [c[0] for c in PII] + KEEP)
    result = redact(text)
    assert find_secrets(result.text) == []
    assert redact(result.text) == RedactionResult(result.text, {})
    assert result.text.count("\n") == text.count("\n")
    assert not [secret for _, _, secret in SECRETS if secret in result.text]
    assert not [pii for _, _, pii in PII if pii in result.text]
    assert sum(result.counts.values()) == len(SECRETS) + len(PII)


def test_truncated_key_block_body_is_still_redacted() -> None:
    body = RSA_KEY.splitlines()[1:3]
    result = redact("-----BEGIN RSA PRIVATE KEY-----\n" + "\n".join(body) + "\n(truncated)")
    assert not any(line in result.text for line in body)
    assert result.counts == {"high_entropy": 2}


@pytest.mark.parametrize("text", ["a." * 50_000 + "@", "x@" + "a." * 50_000, "password: " * 20_000, "+" + "1" * 5_000])
def test_pathological_input_is_linear(text: str) -> None:
    start = time.perf_counter()
    redact(text)
    assert time.perf_counter() - start < 2


# The blocking check's detector (ingest/secret_check.py) is independent of the redactor.
MISSED_BY_REDACTOR = [
    ("Use Zq8!vPl2xK as the admin password.", "credential", "Zq8!vPl2xK"),
    ("Log in with Kx7#pW2q!mZ, the new root password.", "credential", "Kx7#pW2q!mZ"),
]


@pytest.mark.parametrize(("text", "kind", "secret"), MISSED_BY_REDACTOR)
def test_checker_finds_what_the_redactor_misses(text: str, kind: str, secret: str) -> None:
    assert redact(text) == RedactionResult(text, {})
    assert find_leaks(text) == [Leak(kind, secret, 1)]


def test_checker_passes_redacted_secrets_and_near_misses() -> None:
    text = "\n".join([c[0] for c in SECRETS] + [c[0] for c in PII] + KEEP)
    assert find_leaks(redact(text).text) == []
    assert find_leaks("\n".join(KEEP)) == []
    assert find_leaks("masked hf_xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx and ghp_" + "0" * 36) == []


def test_checker_reports_line_numbers() -> None:
    text = "intro\n\nThe new password: Kx7#pW2q!mZ for now\n\n" + RSA_KEY
    assert [(leak.kind, leak.line) for leak in find_leaks(text)] == [("private_key", 5), ("credential", 3)]


def test_rules_skip_texts_without_their_required_part_and_decide_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    """A rule's `requires` (its key word; `@` for e-mail) only spares scanning texts it cannot match: every case
    above gets the same spans with the shortcut as without it."""
    from rag_pipeline.ingest import redaction_rules

    texts = [case[0] for case in SECRETS + PII] + list(KEEP) + [RSA_KEY]
    with_shortcut = [redaction_rules._spans(text) for text in texts]
    assert sum(rule.requires is not None for rule in redaction_rules._RULES) >= 12
    plain = tuple(dataclasses.replace(rule, requires=None) for rule in redaction_rules._RULES)
    monkeypatch.setattr(redaction_rules, "_RULES", plain)
    without = [redaction_rules._spans(text) for text in texts]
    assert [[(start, end, rule.kind) for start, end, rule in spans] for spans in with_shortcut] == \
        [[(start, end, rule.kind) for start, end, rule in spans] for spans in without]
