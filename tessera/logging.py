"""tessera's one logger hierarchy: every module logs to `tessera.<package>`, nothing is printed
unless asked.

    log = tessera.logging.get_logger(__name__)     # "tessera.transform.fuse_ops"
    tessera.logging.configure(verbosity=1)          # INFO and up to stderr (the CLI's -v)

The library attaches only a `NullHandler` to the `tessera` logger (so Python's last-resort
handler never prints its warnings). Output appears when a program asks for it: by calling
`configure` (the `tessera` command does, from `-v`/`-q`), by setting `TESSERA_LOG_LEVEL`
(read in `tessera.runtime.config`), or by configuring the standard `logging` module itself.
"""

from __future__ import annotations

import logging
import os
import sys

ROOT = "tessera"
# -q, default, -v, -vv
_LEVELS = {-1: logging.ERROR, 0: logging.WARNING, 1: logging.INFO, 2: logging.DEBUG}
_FORMAT = "%(levelname)s %(name)s: %(message)s"
_handler: logging.Handler | None = None


def get_logger(name: str) -> logging.Logger:
    """The logger `name` inside the hierarchy (a module's `__name__` already is)."""
    if name != ROOT and not name.startswith(ROOT + "."):
        name = f"{ROOT}.{name}"
    return logging.getLogger(name)


def install() -> None:
    """Called on `import tessera`: silence by default, unless TESSERA_LOG_LEVEL asks for output."""
    root = logging.getLogger(ROOT)
    if not any(isinstance(h, logging.NullHandler) for h in root.handlers):
        root.addHandler(logging.NullHandler())
    # Only look for the variable here; its value is read and checked in runtime.config.
    if "TESSERA_LOG_LEVEL" in os.environ:
        configure()


def configure(verbosity: int | None = None, stream=None) -> logging.Logger:
    """Send tessera's log records to `stream` (default stderr) from a level: `verbosity` -1 (quiet:
    errors only), 0 (warnings), 1 (info), 2 or more (debug); None takes TESSERA_LOG_LEVEL
    (default WARNING). Calling it again replaces the handler it installed."""
    global _handler
    if verbosity is None:
        from tessera.runtime.config import log_level

        level = getattr(logging, log_level())
    else:
        level = _LEVELS[max(-1, min(2, int(verbosity)))]
    root = logging.getLogger(ROOT)
    if _handler is not None:
        root.removeHandler(_handler)
    _handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    _handler.setFormatter(logging.Formatter(_FORMAT))
    root.addHandler(_handler)
    root.setLevel(level)
    return root


__all__ = ["configure", "get_logger", "install"]
