"""Exact answers over document fields: the roster join and its reconciliation (roster), enrichment of fields
documents do not state (enrich), and the typed metadata query tool (query). The field registry is in fields/."""
