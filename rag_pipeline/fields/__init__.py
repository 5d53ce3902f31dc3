"""Document fields, below every layer that stores, filters or queries them: the field kinds and typed values with
their coercion (values), and the registry of built-in, declared and stored fields (registry)."""
