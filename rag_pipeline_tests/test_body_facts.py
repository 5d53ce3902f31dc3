"""Facts from document bodies (ingest/body_facts.py): what each rule reads, what it leaves alone, that stated
fields win, and that a source's `body_facts` switch decides at the next sync whether they are in use, on a real
ingest into DuckDB."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from rag_pipeline.components import load_settings
from rag_pipeline.fields.values import DocumentFields, FieldValue
from rag_pipeline.ingest.body_facts import body_facts, with_body_facts
from rag_pipeline.sidecar import Sidecar
from rag_pipeline_tests.sidecar_sql import sql_rows

CITY = """# Austin

Austin is a city in the U.S. state of Texas.

- Population: 961855
- Area: 827 km²
- Founded: 1839-12-27
- Mayor: Kirk Watson

## Neighbouring cities

Round Rock, Georgetown, San Marcos

## Rivers

| River | Length |
|---|---|
| Colorado River | 1387 km |
| Pedernales | 171 km |

Elevation
: 149 m
"""


def values(facts: DocumentFields) -> dict[str, object]:
    return {name: value.value for name, value in facts.values.items()}


def test_the_rules_read_key_values_lists_tables_definitions_and_the_first_sentence() -> None:
    facts = body_facts(CITY, "Austin")
    assert all(value.origin == "body" for value in facts.values.values())
    found = values(facts)
    assert found["population"] == 961855 and facts.values["population"].kind == "number"
    assert found["area_km2"] == 827  # the unit said after the number names the field
    assert facts.values["founded"].kind == "date" and found["mayor"] == "Kirk Watson"
    assert found["neighbouring_cities"] == ["Round Rock", "Georgetown", "San Marcos"]
    assert found["rivers"] == ["Colorado River", "Pedernales"]  # a table of things with a measure: its first column
    assert found["elevation_m"] == 149  # a definition list
    assert found["kind"] == "city" and found["name"] == "Austin"


def test_prose_and_long_lists_are_not_facts() -> None:
    prose = "# Notes\n\nThe team met twice. It rained. Then: we went home and wrote this down at length today.\n"
    assert "kind" not in values(body_facts(prose, "Notes"))
    assert values(body_facts("# Town\n\nSpringfield is a town.\n", "Austin")) == {}  # not the title's subject
    long = "# Names\n\n## Players\n\n" + "\n".join(f"- player number {i} of the league" for i in range(80))
    assert "players" not in values(body_facts(long, "Names"))


def test_the_first_sentence_names_a_noun_not_the_verb_of_its_clause() -> None:
    for sentence, kind in [("Yuzu Yard is a cosy garden game set in a citrus orchard.", "game"),
                           ("Fold is a puzzle game made entirely of paper.", "game"),
                           ("Kite Season is a breezy platformer in which a child chases a kite.", "platformer")]:
        title = sentence.split(" is ")[0]
        assert values(body_facts(f"# {title}\n\n{sentence}\n", title))["kind"] == kind, sentence


def test_stated_fields_win_and_front_matter_documents_get_no_definitional_guess() -> None:
    stated = DocumentFields({"population": FieldValue("number", 1000, "front_matter"),
                             "genre": FieldValue("string", "civic", "front_matter")})
    merged = with_body_facts(stated, CITY, "Austin")
    assert merged.values["population"] == FieldValue("number", 1000, "front_matter")  # the stated value stays
    assert merged.values["mayor"].origin == "body"  # a name the document does not state
    assert "kind" not in merged.values and "name" not in merged.values  # it declared what it is in front matter
    properties = DocumentFields({"author": FieldValue("string", "Ada", "docx")})
    assert with_body_facts(properties, CITY, "Austin").values["kind"].value == "city"


@pytest.mark.slow
def test_a_sources_body_facts_switch_applies_at_the_next_sync(tmp_path: Path) -> None:
    from rag_pipeline.defs.ingest_runner import ingest

    corpus = tmp_path / "cities"
    corpus.mkdir()
    (corpus / "austin.md").write_text(CITY)
    (corpus / "notes.md").write_text("---\ntitle: Notes\n---\n\nOwner: Dana Whitlock\n")
    sources = tmp_path / "sources.yaml"

    def sync(body_facts_on: bool) -> dict[str, set[str]]:
        sources.write_text(yaml.safe_dump({"sources": {"cities": {"roots": [str(corpus)],
                                                                  "body_facts": body_facts_on}}}))
        settings = load_settings(data_dir=tmp_path / "data", sources_file=sources)
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("RAG_SOURCES_FILE", str(sources))
            summary = ingest(data_dir=settings.data_dir)
        assert not summary["failed"]
        rows = sql_rows(Sidecar(settings.sidecar_path), "SELECT d.paths[1] AS path, f.name FROM fields_in_use f "
                                                        "JOIN documents d USING (sha) WHERE f.origin = 'body'")
        found: dict[str, set[str]] = {}
        for row in rows:
            found.setdefault(Path(row["path"]).name, set()).add(row["name"])
        return found

    on = sync(True)
    assert {"population", "mayor", "kind"} <= on["austin.md"] and on["notes.md"] == {"owner"}
    assert sync(False) == {}  # the facts stay stored; the views hide them
    assert sync(True) == on
