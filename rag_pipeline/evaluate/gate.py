"""The quality gate: Recall@5 and NDCG@10 not below their floors (RAG_EVAL_MIN_RECALL_AT_5,
RAG_EVAL_MIN_NDCG_AT_10) and not more than RAG_EVAL_MAX_DROP below the previous evaluation. The eval_report
asset's blocking check and `rag-pipeline eval --gate` both call it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from rag_pipeline.settings import Settings
from rag_pipeline.sidecar import Sidecar

GATED = ("recall@5", "ndcg@10")


@dataclass(frozen=True)
class GateResult:
    passed: bool
    details: str  # every failure, or a one-line all-clear
    metrics: dict[str, float]  # the gated metrics of the evaluation that was judged


def quality_gate(latest: Mapping[str, float], previous: Mapping[str, float] | None, settings: Settings) -> GateResult:
    """Judge `latest` (an evaluation's headline metrics) against the floors and, when given, `previous`."""
    failures = []
    floors = {"recall@5": settings.eval_min_recall_at_5, "ndcg@10": settings.eval_min_ndcg_at_10}
    for name in GATED:
        value, floor = latest.get(name, 0.0), floors[name]
        if value < floor:
            failures.append(f"{name} {value:.3f} is below the floor {floor:.3f}")
        if previous and name in previous and previous[name] - value > settings.eval_max_drop:
            failures.append(f"{name} dropped {previous[name] - value:.3f} (from {previous[name]:.3f} to {value:.3f}), "
                            f"more than {settings.eval_max_drop:.3f}")
    details = "; ".join(failures) or "Recall@5 and NDCG@10 within the floors and the allowed drop"
    return GateResult(not failures, details, {name: latest.get(name, 0.0) for name in GATED})


def recorded_gate(settings: Settings, golden: str) -> GateResult:
    """The gate over the two latest evaluations of the golden set recorded in the sidecar."""
    history = Sidecar(settings.sidecar_location).eval_history(golden, limit=2)
    if not history:
        return GateResult(False, "no evaluation recorded yet", {})
    return quality_gate(history[0]["metrics"], history[1]["metrics"] if len(history) > 1 else None, settings)


def previous_metrics(settings: Settings, golden: str) -> dict[str, float] | None:
    """The headline metrics of the latest recorded evaluation of the golden set, or None."""
    history = Sidecar(settings.sidecar_location).eval_history(golden, limit=1)
    return history[0]["metrics"] if history else None
