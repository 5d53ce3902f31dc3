"""The HTTP API's routes, one module per resource: search (/search, /ask), conversation (/chat), documents (/ingest,
/sources and their documents), metadata (/query, /fields), keys (/keys), ops (/healthz, /metrics, /openapi.json)."""
