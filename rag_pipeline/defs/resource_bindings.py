"""Resources of the code location (assets, checks, jobs and sensors are picked up from their modules)."""

import dagster as dg

from rag_pipeline.defs.resources import RagResource, RetrievalResource

defs = dg.Definitions(resources={"rag": RagResource(), "retrieval": RetrievalResource()})
