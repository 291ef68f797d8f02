"""The global function registry: Python (or compiled) functions found by name.

    @register_func("tessera.example.add_one")
    def add_one(x):
        return x + 1

    get_global_func("tessera.example.add_one")(1)   # 2

Names are dotted strings; registering a name twice raises unless `override=True`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

_lock = threading.Lock()
_functions: dict[str, Callable] = {}


def register_func(name_or_func=None, f: Callable | None = None, override: bool = False):
    """Register `f` under a name. Forms:

    register_func("name", f);   @register_func("name");   @register_func (named f.__name__)
    """
    if callable(name_or_func) and f is None:
        return _register(name_or_func.__name__, name_or_func, override)
    if not isinstance(name_or_func, str) or not name_or_func:
        raise TypeError(f"register_func: expected a name or a function, got {name_or_func!r}")
    name = name_or_func
    if f is not None:
        return _register(name, f, override)

    def decorate(func: Callable) -> Callable:
        return _register(name, func, override)

    return decorate


def _register(name: str, func: Callable, override: bool) -> Callable:
    if not callable(func):
        raise TypeError(f"register_func({name!r}): expected a callable, got {func!r}")
    with _lock:
        if name in _functions and not override:
            raise ValueError(
                f"global function {name!r} is already registered (pass override=True to replace it)"
            )
        _functions[name] = func
    return func


def get_global_func(name: str, allow_missing: bool = False) -> Callable | None:
    """The function registered under `name`; None if missing and `allow_missing`."""
    with _lock:
        func = _functions.get(name)
    if func is None and not allow_missing:
        raise ValueError(f"no global function named {name!r}")
    return func


def list_global_func_names() -> list[str]:
    with _lock:
        return sorted(_functions)


def remove_global_func(name: str) -> None:
    with _lock:
        if name not in _functions:
            raise ValueError(f"no global function named {name!r}")
        del _functions[name]
