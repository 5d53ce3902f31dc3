"""The HTTP API's routes, one module per resource: search (/search, /ask), chat, ingest (/ingest, /sources),
query (/query, /fields), ops (/healthz, /metrics, /openapi.json)."""
