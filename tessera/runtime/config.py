"""The one place tessera reads environment variables.

    TESSERA_NUM_THREADS  threads of the parallel runtime (default: the cores this process may use)
    TESSERA_CACHE_DIR    where compiled helpers are kept (default: ~/.cache/tessera)
    TESSERA_LOG_LEVEL    DEBUG | INFO | WARNING | ERROR (default: WARNING)
    CC                   the system C compiler (default: cc)

Every value is read when asked for, so a test may change the environment between calls.
"""

from __future__ import annotations

import os
from pathlib import Path

_LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def num_threads() -> int:
    """Threads the runtime uses for parallel loops."""
    text = os.environ.get("TESSERA_NUM_THREADS", "").strip()
    if not text:
        return _available_cores()
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"TESSERA_NUM_THREADS must be a positive integer, got {text!r}") from None
    if value < 1:
        raise ValueError(f"TESSERA_NUM_THREADS must be a positive integer, got {text!r}")
    return value


def _available_cores() -> int:
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def cache_dir() -> Path:
    """The cache directory, created if missing."""
    text = os.environ.get("TESSERA_CACHE_DIR", "").strip()
    path = Path(text).expanduser() if text else Path.home() / ".cache" / "tessera"
    path.mkdir(parents=True, exist_ok=True)
    return path


def log_level() -> str:
    """The logging level name, upper case."""
    text = os.environ.get("TESSERA_LOG_LEVEL", "").strip().upper() or "WARNING"
    if text not in _LOG_LEVELS:
        raise ValueError(f"TESSERA_LOG_LEVEL must be one of {', '.join(_LOG_LEVELS)}, got {text!r}")
    return text


def c_compiler() -> str:
    """The command that runs the system C compiler (may hold flags, e.g. 'ccache gcc')."""
    return os.environ.get("CC", "").strip() or "cc"
