"""A corpus of planted secrets and benign look-alikes in every ingested format (md, txt, html, docx, pdf, pptx).

Secrets sit in prose, table rows, code blocks and `.env`-style lines, in the fields every format states (front
matter, HTML meta, DOCX/PPTX core properties, PDF info), in roster cells and in file names; the benign strings
(commit SHAs, UUIDs, digests, versions, identifiers, placeholders, "password policy" prose) sit beside them, in
the same places. Token bodies come from a seeded generator, so the corpus is the same on every run and no string is
a real credential. `build(root)` writes the files (and a sources file with the roster) and returns what it planted.
"""

from __future__ import annotations

import html
import os
import random
import string
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

_UPPER32 = string.ascii_uppercase + "234567"
_ALNUM = string.ascii_letters + string.digits
_HEX = "0123456789abcdef"
_B64 = _ALNUM + "+/"


@dataclass(frozen=True)
class Planted:
    kind: str
    value: str  # the exact string that must not survive (secret) or must survive (benign)
    line: str  # the line it is planted in ("name: value" for a field or a roster cell)
    where: str = "body"  # body | field | roster | name (a file name)


def _body(rng: random.Random, alphabet: str, length: int) -> str:
    """A random body with at least one digit and one letter (real tokens have both)."""
    while True:
        body = "".join(rng.choice(alphabet) for _ in range(length))
        if any(c.isdigit() for c in body) and any(c.isalpha() for c in body):
            return body


def _password(rng: random.Random) -> str:
    words = ["Wombat", "Lantern", "Copper", "Falcon", "Meadow", "Harbor", "Quartz", "Juniper", "Tundra", "Saffron"]
    return f"{rng.choice(words)}-{rng.choice(words).lower()}-{rng.randint(1000, 9999)}{rng.choice('!#%&*')}"


def _secret_lines(rng: random.Random, style: str) -> list[Planted]:
    """One secret of every kind, each in a line of the given style: prose, table, code or env."""
    aws_id = "AKIA" + _body(rng, _UPPER32, 16)
    aws_secret = _body(rng, _B64, 40)
    github = "ghp_" + _body(rng, _ALNUM, 36)
    gitlab = "glpat-" + _body(rng, _ALNUM, 20)
    slack = f"xoxb-{rng.randint(10**11, 10**12)}-{rng.randint(10**12, 10**13)}-{_body(rng, _ALNUM, 24)}"
    stripe = "sk_live_" + _body(rng, _ALNUM, 24)
    google = "AIza" + _body(rng, _ALNUM, 35)
    openai = "sk-proj-" + _body(rng, _ALNUM, 40)
    jwt = "eyJhbGciOiJIUzI1NiJ9." + "eyJ" + _body(rng, _ALNUM, 30) + "." + _body(rng, _ALNUM, 43)
    sendgrid = "SG." + _body(rng, _ALNUM, 22) + "." + _body(rng, _ALNUM, 43)
    twilio = "SK" + _body(rng, _HEX, 32)
    npm = "npm_" + _body(rng, _ALNUM, 36)
    password = _password(rng)
    db_password = _body(rng, _ALNUM, 14)
    api_key = _body(rng, _ALNUM, 28)
    webhook = f"https://hooks.slack.com/services/T{_body(rng, _UPPER32, 8)}/B{_body(rng, _UPPER32, 8)}/{_body(rng, _ALNUM, 24)}"
    forms = {
        "prose": [
            ("aws_access_key", aws_id, f"The deploy job signs in with key id {aws_id} on every release."),
            ("aws_secret_key", aws_secret, f"Its secret access key is {aws_secret} and it rotates yearly."),
            ("github_token", github, f"The release bot pushes tags with {github} since March."),
            ("gitlab_token", gitlab, f"Mirroring uses the project token {gitlab} for pulls."),
            ("slack_token", slack, f"Alerts post through the bot {slack} in the ops channel."),
            ("stripe_key", stripe, f"Billing charges cards with {stripe} in production."),
            ("google_api_key", google, f"The map widget loads with {google} on the contact page."),
            ("openai_key", openai, f"Summaries call the model with {openai} at night."),
            ("jwt", jwt, f"A support engineer pasted the session {jwt} into the ticket."),
            ("sendgrid_key", sendgrid, f"Newsletters go out via {sendgrid} every Friday."),
            ("twilio_key", twilio, f"SMS codes are sent with {twilio} from the EU region."),
            ("npm_token", npm, f"Packages are published with {npm} by the CI runner."),
            ("password", password, f"the password: {password} for the admin account"),
            ("db_password", db_password, f"The admin password is {db_password}."),
            ("api_key", api_key, f"The partner API key is {api_key}, do not share it."),
            ("slack_webhook", webhook, f"Build results are posted to {webhook} by Jenkins."),
        ],
        "table": [
            ("aws_access_key", aws_id, f"| aws | access key id | {aws_id} |"),
            ("aws_secret_key", aws_secret, f"| aws | secret access key | {aws_secret} |"),
            ("github_token", github, f"| github | token | {github} |"),
            ("gitlab_token", gitlab, f"| gitlab | token | {gitlab} |"),
            ("stripe_key", stripe, f"| stripe | live key | {stripe} |"),
            ("google_api_key", google, f"| maps | api key | {google} |"),
            ("sendgrid_key", sendgrid, f"| sendgrid | key | {sendgrid} |"),
            ("password", password, f"| admin | password | {password} |"),
            ("db_password", db_password, f"| reporting db | password | {db_password} |"),
            ("npm_token", npm, f"| npm | token | {npm} |"),
        ],
        "code": [
            ("aws_access_key", aws_id, f'client = boto3.client("s3", aws_access_key_id="{aws_id}")'),
            ("github_token", github, f"git clone https://{github}@github.com/acme/infra.git"),
            ("slack_token", slack, f"curl -H 'Authorization: Bearer {slack}' https://slack.com/api/chat.postMessage"),
            ("openai_key", openai, f'openai.api_key = "{openai}"'),
            ("jwt", jwt, f"curl -H 'Authorization: Bearer {jwt}' https://api.acme.test/v1/me"),
            ("db_password", db_password, f"psql postgresql://report:{db_password}@db.acme.internal:5432/report"),
            ("twilio_key", twilio, f'twilio_client = Client("{twilio}", auth)'),
        ],
        "env": [
            ("aws_secret_key", aws_secret, f"AWS_SECRET_ACCESS_KEY={aws_secret}"),
            ("stripe_key", stripe, f"STRIPE_SECRET_KEY={stripe}"),
            ("google_api_key", google, f"GOOGLE_MAPS_KEY={google}"),
            ("password", password, f"ADMIN_PASSWORD={password}"),
            ("api_key", api_key, f"PARTNER_API_KEY={api_key}"),
            ("slack_webhook", webhook, f"SLACK_WEBHOOK_URL={webhook}"),
            ("gitlab_token", gitlab, f"GITLAB_TOKEN={gitlab}"),
        ],
    }
    return [Planted(kind, value, line) for kind, value, line in forms[style]]


def _benign_lines(rng: random.Random) -> list[Planted]:
    """Strings that look like secrets but are not; each must survive redaction."""
    sha1 = _body(rng, _HEX, 40)
    sha256 = _body(rng, _HEX, 64)
    md5 = _body(rng, _HEX, 32)
    uuid = "-".join(_body(rng, _HEX, n) for n in (8, 4, 4, 4, 12))
    items = [
        ("commit_sha", sha1, f"The fix landed in commit {sha1} last week."),
        ("sha256", sha256, f"The installer checksum is sha256 {sha256}."),
        ("md5", md5, f"Legacy mirrors still publish md5 {md5} for the archive."),
        ("uuid", uuid, f"Request {uuid} failed with a timeout."),
        ("docker_digest", f"sha256:{sha256}", f"Pin the image to nginx@sha256:{sha256} in production."),
        ("short_sha", sha1[:12], f"Reverted {sha1[:12]} because it broke the build."),
        ("version", "2.14.1-rc3", "Upgrade the agent to 2.14.1-rc3 before the freeze."),
        ("policy", "at least 12 characters", "The password policy requires at least 12 characters."),
        ("policy", "password is stored hashed", "Every password is stored hashed with Argon2id."),
        ("policy", "rotate the API key every 90 days", "Teams must rotate the API key every 90 days."),
        ("policy", "tokens expire after 3600 seconds", "Access tokens expire after 3600 seconds."),
        ("policy", "Never paste a secret into a ticket", "Never paste a secret into a ticket or a chat."),
        ("placeholder", "<your-password>", "password: <your-password>"),
        ("placeholder", "${DB_PASSWORD}", "DB_PASSWORD=${DB_PASSWORD}"),
        ("placeholder", "your_api_key_here", "API_KEY=your_api_key_here"),
        ("placeholder", "changeme", "ADMIN_PASSWORD=changeme"),
        ("placeholder", "{{ vault_token }}", "token: {{ vault_token }}"),
        ("placeholder", "$GITHUB_TOKEN", "GITHUB_TOKEN=$GITHUB_TOKEN"),
        ("identifier", "get_password()", "password = get_password()"),
        ("identifier", "AbstractSingletonProxyFactoryBean", "See AbstractSingletonProxyFactoryBean for the wiring."),
        ("identifier", "Wav2Vec2ForSequenceClassification", "The classifier is Wav2Vec2ForSequenceClassification."),
        ("identifier", "max_tokens", "Set max_tokens to 512 for summaries."),
        ("identifier", "token_budget_v2", "The token_budget_v2 flag is off by default."),
        ("path", "/var/lib/acme/keys/README", "Key files live under /var/lib/acme/keys/README only."),
        ("url", "https://docs.acme.test/security/passwords", "Read https://docs.acme.test/security/passwords first."),
        ("ip", "10.20.30.40", "The bastion host is 10.20.30.40 on port 22."),
        ("date", "2024-05-01", "The password was changed on 2024-05-01."),
        ("isbn", "978-3-16-148410-0", "The handbook has ISBN 978-3-16-148410-0."),
        ("role_email", "security@acme.test", "Report leaks to security@acme.test at once."),
        ("secret_name", "db-credentials", "secret_name: db-credentials"),
        ("prose", "The token is valid", "The token is valid for one hour."),
        ("prose", "Bearer tokens are short-lived", "Bearer tokens are short-lived by design."),
        ("prose", "the secret is out", "After the launch the secret is out."),
        ("hex_color", "#1f2937", "Headers use the colour #1f2937."),
        ("semver", "v3.11.2", "Python v3.11.2 is the minimum."),
        ("order_id", "ORD-2024-000187", "Order ORD-2024-000187 shipped."),
        ("serial", "SN-4F7A-22B9", "Device SN-4F7A-22B9 was replaced."),
        ("base64_word", "SGVsbG8=", "The sample payload SGVsbG8= decodes to Hello."),
        ("masked", "sk_live_****", "The dashboard shows the key as sk_live_**** only."),
        ("masked", "ghp_xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx", "Example: ghp_xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"),
        ("env_name", "AWS_SECRET_ACCESS_KEY", "Export AWS_SECRET_ACCESS_KEY from the vault, never a file."),
        ("build_id", "build-20240501-1432", "Artifacts of build-20240501-1432 are kept."),
    ]
    return [Planted(kind, value, line) for kind, value, line in items]


def _field_plants(rng: random.Random, suffix: str) -> dict[str, tuple[str, str, bool]]:
    """The fields one file of the format states: name -> (text, kind, secret?). Markdown and HTML name their own
    fields (the name is context: `db_password`), the other formats have fixed property names, so the context is in
    the value (`password: X`); plain text states none."""
    password, token, api_key = _password(rng), _body(rng, _ALNUM, 26), _body(rng, _ALNUM, 28)
    github, stripe = "ghp_" + _body(rng, _ALNUM, 36), "sk_live_" + _body(rng, _ALNUM, 24)
    sha1, uuid = _body(rng, _HEX, 40), "-".join(_body(rng, _HEX, n) for n in (8, 4, 4, 4, 12))
    plants = {
        "md": {"db_password": (password, "password", True), "api_token": (token, "token", True),
               "ci_bot": (github, "github_token", True), "token_budget": ("512", "identifier", False),
               "commit": (sha1, "commit_sha", False), "reviewer": ("security@acme.test", "role_email", False)},
        "html": {"api_key": (api_key, "api_key", True), "billing": (stripe, "stripe_key", True),
                 "description": (f"The admin password is {password}.", "password", True),
                 "generator": ("Hugo 0.123.4", "version", False), "build": (sha1, "commit_sha", False)},
        "docx": {"subject": (f"password: {password}", "password", True), "category": (f"token={token}", "token", True),
                 "identifier": (uuid, "uuid", False), "version": ("2.14.1-rc3", "version", False)},
        "pptx": {"subject": (f"api_key: {api_key}", "api_key", True), "category": (github, "github_token", True),
                 "identifier": (uuid, "uuid", False), "version": ("v3.11.2", "semver", False)},
        "pdf": {"subject": (f"api_key={api_key}", "api_key", True), "creator": (stripe, "stripe_key", True),
                "title": ("Operations handbook (pdf)", "title", False), "author": (sha1[:12], "short_sha", False)},
        "txt": {},
    }
    return plants[suffix]


def _planted_value(text: str, kind: str) -> str:
    """What must (not) survive of a planted field text: the secret after its context, or the whole text."""
    for separator in (": ", "=", " is "):
        if separator in text and kind not in ("title", "version", "uuid", "commit_sha", "short_sha"):
            return text.rsplit(separator, 1)[1].rstrip(".")
    return text


def _roster_plants(rng: random.Random) -> tuple[str, list[Planted]]:
    """A roster CSV whose columns name their cells' kind (api_token, password) or hold prose, and benign ones."""
    rows, planted = ["project_id,api_token,password,notes,sku,contact"], []
    for number in range(1, 4):
        token, password, key = "ghp_" + _body(rng, _ALNUM, 36), _password(rng), _body(rng, _ALNUM, 28)
        sku, notes = f"SKU-{rng.randint(1000, 9999)}-{_body(rng, _HEX, 4)}", f"api_key={key} rotates yearly"
        rows.append(f"P-{number},{token},{password},{notes},{sku},support@acme.test")
        planted += [Planted("github_token", token, f"api_token: {token}", "roster"),
                    Planted("password", password, f"password: {password}", "roster"),
                    Planted("api_key", key, f"notes: {notes}", "roster"),
                    Planted("sku", sku, f"sku: {sku}", "roster")]
    planted.append(Planted("role_email", "support@acme.test", "contact: support@acme.test", "roster"))
    return "\n".join(rows) + "\n", planted


def _name_plants(rng: random.Random) -> list[Planted]:
    """Files named after a secret (`api_key=<token>.md`) and benign names that look like one."""
    github, password = "ghp_" + _body(rng, _ALNUM, 36), _password(rng)
    sha1 = _body(rng, _HEX, 40)
    return [Planted("github_token", github, f"deploy api_key={github}.md", "name"),
            Planted("password", password, f"password={password}.txt", "name"),
            Planted("commit_sha", sha1, f"release-notes {sha1}.md", "name"),
            Planted("version", "2.14.1-rc3", "upgrade to 2.14.1-rc3.md", "name")]


@dataclass(frozen=True)
class Corpus:
    secrets: list[Planted]
    benign: list[Planted]
    files: dict[str, list[Planted]]  # file name -> what it holds (secrets and benign)


def _document(title: str, secrets: dict[str, list[Planted]], benign: list[Planted]) -> list[tuple[str, list[str]]]:
    """(block kind, lines) blocks: a heading, prose paragraphs, a table, a code block and env lines."""
    return [
        ("heading", [title]),
        ("prose", [p.line for p in secrets["prose"]] + [b.line for b in benign[: len(benign) // 2]]),
        ("table", [p.line for p in secrets["table"]]),
        ("code", [p.line for p in secrets["code"]]),
        ("code", [p.line for p in secrets["env"]] + [b.line for b in benign[len(benign) // 2:]]),
    ]


def _cells(row: str) -> list[str]:
    return [cell.strip() for cell in row.strip("|").split("|")]


def _write_md(path: Path, blocks: list[tuple[str, list[str]]], fields: dict[str, str]) -> None:
    out = ["---", *(f"{name}: '{text}'" for name, text in fields.items()), "---"] if fields else []
    for kind, lines in blocks:
        if kind == "heading":
            out += [f"# {lines[0]}", ""]
        elif kind == "table":
            out += ["| system | what | value |", "|---|---|---|", *lines, ""]
        elif kind == "code":
            out += ["```", *lines, "```", ""]
        else:
            out += [line for text in lines for line in (text, "")]
    path.write_text("\n".join(out), encoding="utf-8")


def _write_txt(path: Path, blocks: list[tuple[str, list[str]]], fields: dict[str, str]) -> None:
    path.write_text("\n\n".join("\n".join(lines) for _, lines in blocks) + "\n", encoding="utf-8")


def _write_html(path: Path, blocks: list[tuple[str, list[str]]], fields: dict[str, str]) -> None:
    meta = "".join(f'<meta name="{name}" content="{html.escape(text)}">' for name, text in fields.items())
    out = [f"<html><head>{meta}</head><body>"]
    for kind, lines in blocks:
        if kind == "heading":
            out.append(f"<h1>{html.escape(lines[0])}</h1>")
        elif kind == "table":
            rows = ["<tr><th>system</th><th>what</th><th>value</th></tr>"] + [
                "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in _cells(line)) + "</tr>" for line in lines]
            out.append("<table>" + "".join(rows) + "</table>")
        elif kind == "code":
            out.append("<pre><code>" + html.escape("\n".join(lines)) + "</code></pre>")
        else:
            out += [f"<p>{html.escape(line)}</p>" for line in lines]
    path.write_text("\n".join(out + ["</body></html>"]), encoding="utf-8")


def _write_docx(path: Path, blocks: list[tuple[str, list[str]]], fields: dict[str, str]) -> None:
    import docx

    document = docx.Document()
    for name, text in fields.items():
        setattr(document.core_properties, name, text)
    for kind, lines in blocks:
        if kind == "heading":
            document.add_heading(lines[0], level=1)
        elif kind == "table":
            table = document.add_table(rows=len(lines) + 1, cols=3)
            for row, line in zip(table.rows, ["| system | what | value |", *lines]):
                for cell, text in zip(row.cells, _cells(line)):
                    cell.text = text
        else:
            for line in lines:
                document.add_paragraph(line)
    document.save(path)


def _write_pptx(path: Path, blocks: list[tuple[str, list[str]]], fields: dict[str, str]) -> None:
    from pptx import Presentation
    from pptx.util import Inches, Pt

    deck = Presentation()
    for name, text in fields.items():
        setattr(deck.core_properties, name, text)
    for kind, lines in blocks:
        if kind == "heading":
            deck.slides.add_slide(deck.slide_layouts[5]).shapes.title.text = lines[0]
            continue
        slide = deck.slides.add_slide(deck.slide_layouts[6])
        if kind == "table":
            shape = slide.shapes.add_table(len(lines) + 1, 3, Inches(0.3), Inches(0.3), Inches(9.4), Inches(5))
            for row, line in zip(shape.table.rows, ["| system | what | value |", *lines]):
                for cell, text in zip(row.cells, _cells(line)):
                    cell.text = text
            continue
        frame = slide.shapes.add_textbox(Inches(0.3), Inches(0.3), Inches(9.4), Inches(7)).text_frame
        frame.word_wrap = True
        for index, line in enumerate(lines):
            paragraph = frame.paragraphs[0] if index == 0 else frame.add_paragraph()
            paragraph.text = line
            paragraph.font.size = Pt(9)
    deck.save(path)


def _write_pdf(path: Path, blocks: list[tuple[str, list[str]]], fields: dict[str, str]) -> None:
    from reportlab.lib.pagesizes import A4, landscape
    from reportlab.pdfgen import canvas

    width, height = landscape(A4)
    pdf = canvas.Canvas(str(path), pagesize=(width, height))
    for name, text in fields.items():  # the document information dictionary: subject, creator, ...
        getattr(pdf, f"set{name.title()}")(text)
    y = height - 40
    for kind, lines in blocks:
        size = 16 if kind == "heading" else 8
        for line in lines:
            if y < 40:
                pdf.showPage()
                y = height - 40
            pdf.setFont("Helvetica-Bold" if kind == "heading" else "Courier", size)
            pdf.drawString(30, y, line)
            y -= size + 6
        y -= 10
    pdf.save()


WRITERS = {"md": _write_md, "txt": _write_txt, "html": _write_html, "docx": _write_docx, "pdf": _write_pdf,
           "pptx": _write_pptx}


def build(root: Path, seed: int = 13) -> Corpus:
    """Write one document per format under root, each with its own secrets and a share of the benign strings."""
    rng = random.Random(seed)
    root.mkdir(parents=True, exist_ok=True)
    benign = _benign_lines(rng)
    share = -(-len(benign) // len(WRITERS))
    files: dict[str, list[Planted]] = {}
    field_rng = random.Random(seed + 1)  # the body's secrets stay those of the corpus before fields were planted
    fields: list[Planted] = []
    for index, (suffix, write) in enumerate(WRITERS.items()):
        styles = {style: _secret_lines(rng, style) for style in ("prose", "table", "code", "env")}
        mine = benign[index * share:(index + 1) * share]
        name = f"handbook-{suffix}.{suffix}"
        stated = _field_plants(field_rng, suffix)
        write(root / name, _document(f"Operations handbook ({suffix})", styles, mine),
              {field: text for field, (text, _, _) in stated.items()})
        planted = [Planted(kind, _planted_value(text, kind), f"{field}: {text}", "field")
                   for field, (text, kind, _) in stated.items()]
        fields += [plant for plant, (_, _, secret) in zip(planted, stated.values()) if not secret]
        files[name] = [p for planted in styles.values() for p in planted] + mine + planted
    table, roster = _roster_plants(field_rng)
    (root.parent / "roster.csv").write_text(table, encoding="utf-8")
    (root.parent / "sources.yaml").write_text(
        f"sources:\n  corpus: {{roots: [{root}]}}\nroster:\n  - {{path: roster.csv, key: project_id, "
        "document_key: project_id}\n", encoding="utf-8")
    names = _name_plants(field_rng)
    for plant in names:
        (root / plant.line).write_text("# Release notes\n\nThe release went out on Tuesday.\n", encoding="utf-8")
    benign_kinds = {"sku", "role_email", "commit_sha", "version"}
    benign = benign + fields + [p for p in roster + names if p.kind in benign_kinds]
    secrets = [p for planted in [*files.values(), roster, names] for p in planted if p not in benign]
    return Corpus(secrets=secrets, benign=benign, files=files)


@dataclass(frozen=True)
class Measurement:
    """What survived a real ingest of the corpus: secrets found per surface, benign strings redacted."""

    corpus: Corpus
    lost_in_conversion: list[Planted]  # planted strings the converted Markdown does not hold verbatim
    leaks: dict[str, list[Planted]]  # surface -> secrets found in it
    benign_redacted: list[Planted]

    @property
    def recall(self) -> float:
        leaked = {planted for found in self.leaks.values() for planted in found}
        return 1 - len(leaked) / len(self.corpus.secrets)

    @property
    def false_redaction_rate(self) -> float:
        return len(self.benign_redacted) / len(self.corpus.benign)

    def report(self) -> str:
        kinds = len({planted.kind for planted in self.corpus.secrets})
        leaked = {planted for found in self.leaks.values() for planted in found}
        places = ", ".join(
            f"{where} {sum(p.where == where for p in self.corpus.secrets)} secrets / "
            f"{sum(p.where == where for p in self.corpus.benign)} benign"
            f" (leaked {sum(p.where == where for p in leaked)}, benign redacted "
            f"{sum(p.where == where for p in self.benign_redacted)})" for where in ("body", "field", "roster", "name"))
        return (f"{len(self.corpus.secrets)} secrets of {kinds} kinds, {len(self.corpus.benign)} benign strings "
                f"in {len(self.corpus.files)} files ({', '.join(sorted(self.corpus.files))}), a roster and file names\n"
                f"by place: {places}\n"
                f"secrets recall: {self.recall:.3f}\n"
                f"benign false-redaction rate: {self.false_redaction_rate:.3f} "
                f"({[p.value for p in self.benign_redacted]})\n"
                f"leaks per surface: { {name: len(found) for name, found in self.leaks.items()} }")


def _texts(folder: Path, pattern: str) -> str:
    return "\n".join(path.read_text(encoding="utf-8") for path in sorted(folder.rglob(pattern)))


# Sidecar columns that keep a file's real path, by which the system finds it (and the built-in `path` and `name`
# fields derived from them); what is embedded and shown of a path has its secrets redacted.
PATH_COLUMNS = {"path", "paths", "rel_path", "root", "roots", "all_paths"}


@contextmanager
def _sources_file(path: Path) -> Iterator[None]:
    """RAG_SOURCES_FILE set to `path` for the duration."""
    before = os.environ.get("RAG_SOURCES_FILE")
    os.environ["RAG_SOURCES_FILE"] = str(path)
    try:
        yield
    finally:
        if before is None:
            del os.environ["RAG_SOURCES_FILE"]
        else:
            os.environ["RAG_SOURCES_FILE"] = before


def ingest_and_measure(root: Path, data_dir: Path) -> Measurement:
    """Ingest the corpus under root (its roster too) for real and look for every planted secret in what the ingest
    keeps after redaction: the redacted Markdown, the chunk artifacts, the sidecar tables (but the columns that
    keep real paths), the Qdrant payloads, and the results of searching for each secret's own line. A benign string
    must survive where it was planted: the redacted Markdown, the stored fields, the roster or the shown paths.
    Needs the unredacted Markdown kept (the default)."""
    from rag_pipeline import components
    from rag_pipeline.defs.ingest_runner import ingest
    from rag_pipeline.ingest.stage import stores
    from rag_pipeline.sidecar import Sidecar
    from rag_pipeline_tests.sidecar_sql import sql_rows

    corpus = build(root)
    with _sources_file(root.parent / "sources.yaml"):
        ingest(data_dir=data_dir)
        settings = components.load_settings(data_dir=data_dir)
    artifacts = stores(settings)
    markdown, redacted = _texts(artifacts["markdown"].dir, "*.md"), _texts(artifacts["redacted"].dir, "*.md")
    sidecar = Sidecar(settings.sidecar_path)
    tables = [row["name"] for row in sql_rows(sidecar, "SELECT table_name AS name FROM information_schema.tables "
                                                       "WHERE table_type = 'BASE TABLE'")]
    chunk_ids = [row["chunk_id"] for row in sql_rows(sidecar, "SELECT chunk_id FROM chunks")]
    with components.generations(settings).building() as store:
        payloads = [hit.payload for hit in store.get(chunk_ids)]
    retriever = components.open_retriever(settings)
    try:
        results = [hit.payload for planted in corpus.secrets for hit in retriever.search(planted.line, top_k=5).hits]
    finally:
        retriever.close()
    stored = {table: [{column: value for column, value in row.items() if column not in PATH_COLUMNS}
                      for row in sql_rows(sidecar, f"SELECT * FROM {table}")] for table in tables}
    surfaces = {
        "redacted_markdown": redacted,
        "chunk_artifacts": _texts(artifacts["chunks"].dir, "*.jsonl"),
        "sidecar": repr(stored),
        "qdrant_payload": repr(payloads),
        "search_results": repr(results),
    }
    kept = {"body": redacted, "field": repr(stored["document_fields"]), "roster": repr(stored["roster_values"]),
            "name": repr([payload["paths"] for payload in payloads])}
    return Measurement(
        corpus=corpus,
        lost_in_conversion=[p for p in corpus.secrets + corpus.benign if p.where == "body" and p.value not in markdown],
        leaks={name: [p for p in corpus.secrets if p.value in text] for name, text in surfaces.items()},
        benign_redacted=[p for p in corpus.benign if p.value not in kept[p.where]],
    )
