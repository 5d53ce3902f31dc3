"""Local embeddings: the Embedder interface (embedder), the packaged model on PyTorch (torch_embedder) or ONNX Runtime
(onnx_embedder, exported offline by onnx_export), the model's files (model_files), the embedding cache (cache) and
the query batcher of the API (batcher). Embeddings from model servers live with their chat clients in llm/."""
