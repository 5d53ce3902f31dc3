"""Document fields read at conversion: Markdown front matter, DOCX/PPTX core properties, PDF info, HTML meta; their
types, declared types, redaction and errors. Real files of the bundled catalog corpus, real docling conversion."""

from __future__ import annotations

from pathlib import Path

import pytest

from rag_pipeline.fields.registry import FieldSpec, declared_values, parse_field_spec
from rag_pipeline.fields.values import FieldValue, coerce, field_name
from rag_pipeline.ingest.converters import DocumentConverter
from rag_pipeline.ingest.stated_fields import front_matter_fields, split_front_matter
from rag_pipeline.structured.enrich import lead, validate_reply

CATALOG = Path(__file__).resolve().parents[1] / "golden" / "catalog" / "docs"


@pytest.fixture(scope="module")
def converter() -> DocumentConverter:
    return DocumentConverter()


def values(fields) -> dict:
    return {name: (value.kind, value.value, value.origin) for name, value in fields.values.items()}


def test_front_matter_is_typed_and_not_part_of_the_text(tmp_path: Path, converter: DocumentConverter) -> None:
    path = tmp_path / "note.md"
    path.write_text("---\nproject_id: P-9\nYear: 2024\nbudget k: 12.5\nsigned: 2025-03-14\nthemes: [citrus, 7]\n"
                    "draft: true\nowner: {name: x}\n---\n# Note\n\nThe body.\n")
    converted = converter.convert(path, "md")
    assert converted.markdown == "# Note\n\nThe body."
    assert values(converted.fields) == {
        "project_id": ("string", "P-9", "front_matter"), "year": ("number", 2024.0, "front_matter"),
        "budget_k": ("number", 12.5, "front_matter"), "signed": ("date", "2025-03-14", "front_matter"),
        "themes": ("list", ["citrus", "7"], "front_matter"), "draft": ("string", "true", "front_matter")}
    assert converted.fields.errors == ["front_matter: field 'owner': a nested mapping is not a field value"]


@pytest.mark.parametrize("block", ["title: [broken\n", "- just\n- a list\n"])
def test_malformed_front_matter_is_an_error_and_the_text_is_kept(block: str, tmp_path: Path,
                                                                  converter: DocumentConverter) -> None:
    path = tmp_path / "bad.md"
    path.write_text(f"---\n{block}---\n# Still here\n\nText.\n")
    converted = converter.convert(path, "md")
    assert converted.markdown == "# Still here\n\nText."  # the broken block is not embedded either
    assert converted.fields.values == {} and len(converted.fields.errors) == 1
    assert converted.fields.errors[0].startswith("front_matter: ")


def test_no_front_matter_without_the_opening_line() -> None:
    assert split_front_matter("# Title\n---\nkey: value\n---\n") == (None, "# Title\n---\nkey: value\n---\n")
    assert split_front_matter("---\nkey: value\n") == (None, "---\nkey: value\n")  # never closed: plain text
    assert values(front_matter_fields("")) == {}


def test_docx_and_pptx_core_properties(converter: DocumentConverter) -> None:
    docx = converter.convert(CATALOG / "contracts" / "marmalade-circuit-publishing.docx", "docx").fields
    assert {name: value.origin for name, value in docx.values.items()}.items() >= dict.fromkeys(
        ["title", "subject", "author", "keywords", "category", "created", "modified"], "docx").items()
    assert docx.values["category"].value == "contract" and docx.values["keywords"].kind == "list"
    assert docx.values["created"].kind == "date" and docx.values["created"].value.startswith("20")
    pptx = converter.convert(CATALOG / "pitches" / "yuzu-yard-pitch.pptx", "pptx").fields
    assert pptx.values["category"].value == "pitch" and pptx.values["title"].origin == "pptx"


def test_pdf_info_and_html_meta(converter: DocumentConverter) -> None:
    pdf = next((CATALOG / "reports").glob("*.pdf"))
    info = converter.convert(pdf, "pdf").fields
    assert {"title", "author", "subject", "keywords", "creator"} <= set(info.values)
    assert info.values["keywords"].kind == "list" and info.values["title"].origin == "pdf"
    html = converter.convert(CATALOG / "press" / "deepwater-patience-launch.html", "html").fields
    assert html.values["project_id"].value == "P-005"
    assert html.values["published"].kind == "date" and html.values["keywords"].kind == "list"
    assert html.values["title"].origin == "html"


FRONT_MATTER_SECRET = "FmPw-Tr0ub4dor-7731"


def test_a_field_name_is_context_for_its_value(tmp_path: Path) -> None:
    """`db_password: X` in front matter, an HTML meta `api_token`, a PDF keyword `password: X` and a DOCX property
    are redacted as `password: X` is in a body: the value's redaction is stored, its name is context; a number
    under a credential name is redacted too, and a field whose name is itself a token is dropped."""
    import docx
    from reportlab.pdfgen import canvas

    from rag_pipeline.components import load_settings
    from rag_pipeline.defs.ingest_runner import ingest
    from rag_pipeline.sidecar import Sidecar

    root = tmp_path / "docs"
    root.mkdir()
    token = "ghp_" + "a1B2c3D4e5" * 4
    (root / "note.md").write_text(f"---\ndb_password: {FRONT_MATTER_SECRET}\nadmin password: 84736251\n"
                                  f"vault pin: 84736251\nyear: 2024\nauthor: Ana\n{token}: yes\n---\n# Note\n\n"
                                  f"password: {FRONT_MATTER_SECRET}\n")
    (root / "page.html").write_text('<html><head><title>Page</title><meta name="api_token" content="Zq7vR2mK9xPw">'
                                    '<meta name="reviewed" content="2024-05-01"></head>'
                                    '<body><p>Body.</p></body></html>')
    pdf = canvas.Canvas(str(root / "report.pdf"))
    pdf.setKeywords(f"finance, password: {FRONT_MATTER_SECRET}")
    pdf.drawString(72, 720, "A quarterly report.")
    pdf.save()
    document = docx.Document()
    document.add_paragraph("Minutes of the review.")
    document.core_properties.comments = "unused"
    document.core_properties.category = f"password={FRONT_MATTER_SECRET}"
    document.save(root / "minutes.docx")

    summary = ingest([root], tmp_path / "data")

    assert summary["added"] == 4 and summary["failed"] == []
    sidecar = Sidecar(load_settings(data_dir=tmp_path / "data").sidecar_path)
    stored: dict[str, dict[str, str]] = {}
    for sha, row in sidecar.documents().items():
        for field in sidecar.effective_fields_of(sha):
            fields = stored.setdefault(Path(row["paths"][0]).name, {})
            fields[field["name"]] = "; ".join(filter(None, [fields.get(field["name"]), field["text_value"]]))
    assert stored["note.md"]["db_password"] == "[REDACTED:password]"
    assert stored["note.md"]["vault_pin"] == "84736251"  # a pin is no credential word of the rules: kept
    assert stored["note.md"]["admin_password"] == "[REDACTED:password]"  # a number, redacted as text
    assert stored["note.md"]["year"] == "2024" and stored["note.md"]["author"] == "Ana"
    assert not any(name.startswith("ghp_") for name in stored["note.md"])
    assert stored["page.html"]["api_token"] == "[REDACTED:token]" and stored["page.html"]["reviewed"] == "2024-05-01"
    assert stored["report.pdf"]["keywords"] == "finance; password: [REDACTED:password]"
    assert stored["minutes.docx"]["category"] == "password=[REDACTED:password]"
    everything = repr(stored) + repr([sidecar.field_errors_of(sha) for sha in sidecar.documents()])
    assert FRONT_MATTER_SECRET not in everything and "Zq7vR2mK9xPw" not in everything and token not in everything


def test_field_names_and_declared_types() -> None:
    assert field_name("Budget (k)") == "budget_k" and field_name("2nd") is None and field_name("---") is None
    assert coerce(FieldValue("string", "2025", "html"), "number").value == 2025.0
    assert coerce(FieldValue("string", "a, b; c", "docx"), "list").value == ["a", "b", "c"]
    with pytest.raises(ValueError, match="not a number"):
        coerce(FieldValue("string", "soon", "front_matter"), "number")
    from rag_pipeline.fields.values import DocumentFields

    stated = DocumentFields({"year": FieldValue("string", "n/a", "front_matter"),
                             "type": FieldValue("string", "memo", "front_matter"),
                             "mood": FieldValue("string", "sad", "front_matter")})
    specs = {"year": FieldSpec("year", "number"), "mood": FieldSpec("mood", method="classify",
                                                                  labels={"a": "x", "b": "y"})}
    result = declared_values(stated, specs)
    assert set(result.values) == {"year", "doc_type"}  # built-in names get doc_; enriched fields are not stated
    assert result.errors == ["front_matter: field 'year': declared number: 'n/a' is not a number"]


@pytest.mark.parametrize(("entry", "message"), [
    ({"type": "integer"}, "type must be one of"),
    ({"from": "magic"}, "from must be one of"),
    ({"from": "classify", "labels": {"only": "one"}}, "at least two labels"),
    ({"filterable": "yes"}, "filterable must be true or false"),
    ({"colour": 1}, "unknown key 'colour'"),
])
def test_bad_field_declarations_name_the_problem(entry: dict, message: str) -> None:
    spec, problems = parse_field_spec("genre", entry, "sources.yaml")
    assert spec is None and any(message in problem for problem in problems)
    assert parse_field_spec("path", {}, "sources.yaml")[1] == [
        "sources.yaml: field 'path': 'path' is a built-in field and cannot be declared"]


def test_lead_and_llm_reply_validation() -> None:
    markdown = "# Title\n\n| a | b |\n\nFirst sentence here. Second one! " + "Long filler. " * 40 + "\n\nNext para."
    summary = lead(markdown)
    assert summary.startswith("First sentence here. Second one!") and len(summary) <= 300
    assert lead("# Only a heading") is None
    spec = FieldSpec("mood", "string", method="llm", labels={"calm": "slow", "intense": "fast"})
    assert validate_reply('{"value": "calm"}', spec).value == "calm"
    for reply, reason in [("calm", "not JSON"), ('{"label": "calm"}', "no 'value'"),
                          ('{"value": "angry"}', "not in the declaration"), ('{"value": ""}', "no value")]:
        with pytest.raises(ValueError, match=reason):
            validate_reply(reply, spec)
