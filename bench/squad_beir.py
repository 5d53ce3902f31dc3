"""A second BEIR-format retrieval set, from SQuAD 2.0 dev: every distinct paragraph is a document (titled by its
article), every answerable question a query whose one relevant document is its paragraph. The questions split
by article (the titles ordered by their SHA-256, the first half train), so tuning on train never sees a test
article; each split keeps at most --limit questions, picked by the SHA-256 of their ids (deterministic, spread
over the split's articles).

    .venv/bin/python bench/squad_beir.py [../shared/datasets/squad/dev-v2.0.cs224n.json] --out DIR [--limit 300]
    rag-pipeline beir DIR --split train --data-dir D
"""

from __future__ import annotations

import argparse
import hashlib
import json
from pathlib import Path

SQUAD = Path(__file__).resolve().parents[2] / "shared" / "datasets" / "squad" / "dev-v2.0.cs224n.json"


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def build(squad_file: Path, out: Path, limit: int) -> dict[str, int]:
    """Write corpus.jsonl, queries.jsonl and qrels/{train,test}.tsv under `out`; counts per part."""
    articles = json.loads(squad_file.read_text())["data"]
    titles = sorted((article["title"] for article in articles), key=digest)
    split_of = {title: "train" if position < len(titles) // 2 else "test" for position, title in enumerate(titles)}
    corpus: dict[str, dict[str, str]] = {}  # paragraph text -> its record
    questions: dict[str, list[tuple[str, str, str]]] = {"train": [], "test": []}  # (question id, text, doc id)
    for article in articles:
        title = article["title"].replace("_", " ")
        for paragraph in article["paragraphs"]:
            record = corpus.setdefault(paragraph["context"], {"_id": f"p{len(corpus):04d}", "title": title,
                                                              "text": paragraph["context"]})
            for qa in paragraph["qas"]:
                if not qa.get("is_impossible") and qa.get("answers"):
                    questions[split_of[article["title"]]].append((qa["id"], qa["question"].strip(), record["_id"]))
    (out / "qrels").mkdir(parents=True, exist_ok=True)
    with (out / "corpus.jsonl").open("w") as handle:
        for record in corpus.values():
            handle.write(json.dumps(record) + "\n")
    counts = {"documents": len(corpus)}
    with (out / "queries.jsonl").open("w") as queries:
        for split, items in questions.items():
            chosen = sorted(items, key=lambda item: digest(item[0]))[:limit]
            with (out / "qrels" / f"{split}.tsv").open("w") as qrels:
                qrels.write("query-id\tcorpus-id\tscore\n")
                for question_id, text, document in chosen:
                    queries.write(json.dumps({"_id": question_id, "text": text}) + "\n")
                    qrels.write(f"{question_id}\t{document}\t1\n")
            counts[f"{split} queries"] = len(chosen)
            counts[f"{split} articles"] = sum(1 for value in split_of.values() if value == split)
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("squad_file", nargs="?", type=Path, default=SQUAD)
    parser.add_argument("--out", type=Path, required=True, help="the BEIR directory to write")
    parser.add_argument("--limit", type=int, default=300, help="questions kept per split")
    args = parser.parse_args()
    print(json.dumps(build(args.squad_file, args.out, args.limit)))


if __name__ == "__main__":
    main()
