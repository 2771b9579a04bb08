"""Lowering passes, one per file, each a function ``(stmt, ctx) -> stmt``."""
