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
