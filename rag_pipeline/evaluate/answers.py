"""Answer metrics that need no LLM: exact match, containment and token F1 against an expected answer (SQuAD
normalisation), citation precision/recall against the relevant files, and abstention ("I don't know")."""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Iterable, Mapping

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = str.maketrans("", "", string.punctuation)
_CITATION_MARKER = re.compile(r"\[\d+(?:\s*[,–-]\s*\d+)*\]")


def normalise(text: str) -> str:
    """SQuAD's answer normalisation: lower case, no punctuation, no articles, single spaces."""
    return " ".join(_ARTICLES.sub(" ", text.lower().translate(_PUNCTUATION)).split())


def exact_match(prediction: str, expected: str) -> float:
    return float(normalise(_CITATION_MARKER.sub("", prediction)) == normalise(expected))


def contains(prediction: str, expected: str) -> float:
    """1.0 when the normalised expected answer occurs in the normalised prediction (a long answer that states
    it still counts)."""
    wanted = normalise(expected)
    return float(bool(wanted) and wanted in normalise(_CITATION_MARKER.sub("", prediction)))


def token_f1(prediction: str, expected: str) -> float:
    """SQuAD token F1 between the prediction (citation markers removed) and the expected answer."""
    predicted = normalise(_CITATION_MARKER.sub("", prediction)).split()
    wanted = normalise(expected).split()
    common = sum((Counter(predicted) & Counter(wanted)).values())
    if not predicted or not wanted or not common:
        return float(predicted == wanted)
    precision, recall = common / len(predicted), common / len(wanted)
    return 2 * precision * recall / (precision + recall)


def abstained(answer: str) -> bool:
    return answer.strip().lower().startswith(("i don't know", "i do not know", "i can't provide"))


def citation_scores(cited_files: Iterable[str], relevant: Mapping[str, int]) -> dict[str, float]:
    """Precision: share of cited files that are relevant; recall: share of relevant files cited. `cited_files`
    are already mapped to the relevance keys (or to a non-matching id)."""
    cited = set(cited_files)
    wanted = {key for key, grade in relevant.items() if grade > 0}
    hits = len(cited & wanted)
    return {"citation_precision": hits / len(cited) if cited else 0.0,
            "citation_recall": hits / len(wanted) if wanted else 0.0}
