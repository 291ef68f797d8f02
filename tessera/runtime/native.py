"""The runtime library (native/tessera_rt.c): built on first use, loaded once, process-wide.

    lib = native.load()          # compiles into config.cache_dir() if needed, RTLD_GLOBAL
    native.set_num_threads(4)

The library file name holds a hash of the C source and the compiler command, so editing the
source rebuilds it; it is written to a temporary file and renamed, so processes may race. It is
sealed with the cache's secret and verified before it is opened (Note [a private cache]).
It is loaded with RTLD_GLOBAL before any kernel, so that JIT code and exported libraries
resolve `tessera_parallel_for` and friends against this one copy (one thread pool).
"""

from __future__ import annotations

import ctypes
import hashlib
import threading
from pathlib import Path

from tessera.runtime import artifact, cc, config

_SOURCE_DIR = Path(__file__).parent / "native"
_SOURCES = ("tessera_rt.c", "tessera_rt.h")
_FLAGS = ("-std=gnu11", "-pthread")

_lock = threading.Lock()
_lib: ctypes.CDLL | None = None


def include_dir() -> Path:
    """The directory holding tessera_rt.h (for C code that calls the runtime)."""
    return _SOURCE_DIR


def library_path() -> Path:
    """The compiled runtime library, built into the cache directory if it is not there yet."""
    digest = hashlib.sha256()
    for name in _SOURCES:
        digest.update((_SOURCE_DIR / name).read_bytes())
    digest.update(" ".join([*cc.compiler_command(), *cc.SHARED_FLAGS, *_FLAGS]).encode())
    path = config.cache_dir() / f"tessera_rt-{digest.hexdigest()[:16]}.so"

    def build(output):
        cc.compile_shared(output, sources=[_SOURCE_DIR / "tessera_rt.c"], flags=_FLAGS)

    return artifact.cached_library(path, build)  # sealed with the cache's secret


def load() -> ctypes.CDLL:
    """Load the runtime library once (RTLD_GLOBAL) and set its thread count from the config."""
    global _lib
    with _lock:
        if _lib is None:
            verified, _ = artifact.open_verified(
                library_path(), key=config.cache_secret(), check_host=False
            )
            lib = ctypes.CDLL(verified, mode=ctypes.RTLD_GLOBAL)
            _declare(lib)
            lib.tessera_set_num_threads(config.num_threads())
            _lib = lib
        return _lib


SYMBOLS = (
    "tessera_parallel_for",
    "tessera_set_num_threads",
    "tessera_get_num_threads",
    "tessera_alloc",
    "tessera_free",
)


def symbol_addresses() -> dict[str, int]:
    """Address of every runtime function, e.g. for `llvmlite.binding.add_symbol` in a JIT."""
    lib = load()
    return {name: ctypes.cast(getattr(lib, name), ctypes.c_void_p).value for name in SYMBOLS}


def _declare(lib: ctypes.CDLL) -> None:
    lib.tessera_parallel_for.restype = ctypes.c_int32
    lib.tessera_parallel_for.argtypes = [ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p]
    lib.tessera_set_num_threads.restype = None
    lib.tessera_set_num_threads.argtypes = [ctypes.c_int32]
    lib.tessera_get_num_threads.restype = ctypes.c_int32
    lib.tessera_get_num_threads.argtypes = []
    lib.tessera_alloc.restype = ctypes.c_void_p
    lib.tessera_alloc.argtypes = [ctypes.c_int64]
    lib.tessera_free.restype = None
    lib.tessera_free.argtypes = [ctypes.c_void_p]


def set_num_threads(n: int) -> None:
    """Threads used by parallel loops (the calling thread included), from the next call on."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"set_num_threads: expected a positive int, got {n!r}")
    load().tessera_set_num_threads(min(n, 512))


def get_num_threads() -> int:
    """Threads used by parallel loops."""
    return load().tessera_get_num_threads()
