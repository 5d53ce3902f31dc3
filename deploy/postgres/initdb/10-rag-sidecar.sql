-- Run by the postgres image on its first start (an empty data volume): the database of the rag_pipeline sidecar
-- (RAG_SIDECAR_URL in docker-compose.yml), beside Dagster's own, owned by the same user.
CREATE DATABASE rag_sidecar;
