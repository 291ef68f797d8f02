"""Code generators (llvm/, c.py) and what they share: the native executor of a compiled model
(aot.py) and the compile cache (cache.py: `cache_stats()`)."""

from tessera.codegen.cache import cache_stats, reset_cache_stats

__all__ = ["cache_stats", "reset_cache_stats"]
