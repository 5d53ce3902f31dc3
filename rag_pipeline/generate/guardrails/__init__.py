"""Prompt-injection guardrails: scan retrieved text before generation, validate the answer after.

``rules`` is the catalogue: the injection patterns and how a match gets its severity and payload.
``scan`` applies it to a question or a retrieved chunk: ``scan_text`` reports rule findings,
``quarantined`` says whether they are severe enough to drop it, ``reveal_hidden`` exposes triggers
hidden with invisible characters. ``output`` validates the generated answer: ``validate_output``
cleans it or refuses it with ``REFUSAL``.
"""

from rag_pipeline.generate.guardrails.injection_rules import RULES
from rag_pipeline.generate.guardrails.output import REFUSAL, validate_output
from rag_pipeline.generate.guardrails.scan import Finding, quarantined, reveal_hidden, scan_text

__all__ = ["REFUSAL", "RULES", "Finding", "quarantined", "reveal_hidden", "scan_text", "validate_output"]
