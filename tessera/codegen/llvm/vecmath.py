"""Inline vector math for float32 vectors (filled in below)."""

VECTOR_FUNCTIONS: dict = {}
