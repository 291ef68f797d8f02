"""The one place tessera reads environment variables.

    TESSERA_NUM_THREADS  threads of the parallel runtime (default: the cores this process may use)
    TESSERA_CACHE_DIR    where compiled helpers are kept (default: ~/.cache/tessera)
    TESSERA_LOG_LEVEL    DEBUG | INFO | WARNING | ERROR (default: WARNING)
    CC                   the system C compiler (default: cc)

Every value is read when asked for, so a test may change the environment between calls.
"""

from __future__ import annotations

import logging
import os
import secrets
import stat
import tempfile
import threading
from pathlib import Path

from tessera.runtime.private_dirs import private_dir

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
    """The cache directory, created private to this user (mode 0700) if missing.

    Code in it is loaded into the process, so a folder that another user may write into (or
    owns) is refused: a warning, and a fresh private folder for this process instead. See
    Note [a private cache]."""
    text = os.environ.get("TESSERA_CACHE_DIR", "").strip()
    path = Path(text).expanduser() if text else Path.home() / ".cache" / "tessera"
    with _lock:
        if path in _refused:
            return _refused[path]
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        problem = _not_private(path)
        if problem is None:
            return path
        fresh = Path(private_dir("tessera-cache-"))
        logging.getLogger("tessera.runtime.config").warning(
            "the cache directory %s %s; anything in it could be code another user planted, so "
            "it is not used: this process caches in %s instead (make it private: chmod 700, "
            "or set TESSERA_CACHE_DIR)",
            path,
            problem,
            fresh,
        )
        _refused[path] = fresh
        return fresh


# Note [a private cache]
# The cache holds machine code that tessera loads (kernels into the JIT, libraries by dlopen).
# Whoever can write into it can run code in every process that uses it, so it must belong to
# this user and be writable by no one else. Its entries are also signed with a secret of the
# cache (`cache_secret`, a file readable by this user alone): an entry copied from elsewhere,
# or edited with its checksum recomputed, is found and recompiled before any of it is loaded.
_lock = threading.Lock()
_refused: dict[Path, Path] = {}  # a cache directory refused -> the private one used instead


def _not_private(path: Path) -> str | None:
    """Why `path` is not private to this user (None: it is; then it is made 0700)."""
    info = path.stat()
    if hasattr(os, "getuid") and info.st_uid != os.getuid():
        return f"belongs to another user (uid {info.st_uid})"
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"is writable by others (mode {stat.filemode(info.st_mode)})"
    if info.st_mode & 0o077:
        try:  # readable by others: harmless to safety, but ours, so made private
            path.chmod(0o700)
        except OSError:
            pass
    return None


def cache_secret() -> bytes:
    """The cache's secret (32 random bytes in `<cache_dir>/secret`, mode 0600, made on first
    use): the key that signs its entries (Note [a private cache])."""
    path = cache_dir() / "secret"
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        data = b""
    if len(data) == 32:
        return data
    fd, tmp = tempfile.mkstemp(prefix=".secret.", dir=path.parent)  # mode 0600
    with open(fd, "wb") as f:
        f.write(secrets.token_bytes(32))
    try:
        if data:  # damaged: replaced (the entries it signed are recompiled)
            os.replace(tmp, path)
        else:
            os.link(tmp, path)  # fails if another process made it first: then use theirs
    except FileExistsError:
        pass
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    data = path.read_bytes()
    if len(data) != 32:
        raise RuntimeError(f"the cache secret {path} is damaged: delete it")
    return data


def log_level() -> str:
    """The logging level name, upper case."""
    text = os.environ.get("TESSERA_LOG_LEVEL", "").strip().upper() or "WARNING"
    if text not in _LOG_LEVELS:
        raise ValueError(f"TESSERA_LOG_LEVEL must be one of {', '.join(_LOG_LEVELS)}, got {text!r}")
    return text


def c_compiler() -> str:
    """The command that runs the system C compiler (may hold flags, e.g. 'ccache gcc')."""
    return os.environ.get("CC", "").strip() or "cc"
