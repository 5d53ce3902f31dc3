"""Ingest, one module per stage of the asset graph; each stage is a function over shards that returns a typed
StageReport (ingest/stage.py), so the Dagster assets, the in-process runner and a notebook all call the same code:

    discover (+ rules: corpus rules, ignore globs; hash cache)  ->  raw: snapshot the bytes
    -> convert (+ pdf_layout): Markdown  ->  redact: secrets and PII  ->  chunk  ->  embed: vectors
    -> index: Qdrant points  ->  catalogue: chunk and redaction rows in the sidecar

plan.py says which shards differ from the sources, manifest.py is the dry-run report, summary.py adds the stage
totals of an ingest up. No module here imports Dagster.
"""
