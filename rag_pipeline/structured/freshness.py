"""Whether the field assets (document_enrichment, roster) have work: the runner and the sensor ask before they
launch a run, so an ingest that changed nothing stays cheap."""

from __future__ import annotations

from rag_pipeline.fields.registry import filterable_fields
from rag_pipeline.ingest.vector_index import FIELD_LABELS, field_labels_digest
from rag_pipeline.llm import build_llm
from rag_pipeline.settings import Settings
from rag_pipeline.sidecar import Sidecar
from rag_pipeline.structured.enrich import stale_enrichments
from rag_pipeline.structured.roster import stale_rosters


def stale_fields(settings: Settings, sidecar: Sidecar) -> list[str]:
    """Why the field assets need a run (empty: they do not): rosters to load or drop, enrichments to compute, and
    point labels that no longer match the documents' filterable fields."""
    reasons = [f"roster {name} changed" for name in stale_rosters(settings, sidecar)]
    reasons += [f"field {name} has documents to enrich" for name in
                stale_enrichments(settings, sidecar, build_llm(settings))]
    synced = sidecar.get_state(FIELD_LABELS)
    if (filterable_fields(settings) or synced is not None) and synced != field_labels_digest(settings, sidecar):
        reasons.append("filterable field labels changed")
    return reasons
