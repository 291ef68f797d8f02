"""tessera: a deep-learning compiler in Python.

Submodules load lazily (PEP 562 module `__getattr__`): `import tessera.runtime` must not import
the compiler, so that a compiled artifact runs with numpy alone.
"""

import importlib

from tessera import logging as _logging

_logging.install()  # a NullHandler: the library prints nothing unless asked

__version__ = "0.1.0"

_SUBMODULES = {
    "ir",
    "arith",
    "tir",
    "te",
    "graph",
    "transform",
    "topi",
    "codegen",
    "runtime",
    "frontend",
    "target",
    "driver",
    "logging",
    "models",
    "autotune",
}
# public name -> (module, attribute)
_ATTRS = {
    "lower": ("tessera.driver", "lower"),
    "build": ("tessera.driver", "build"),
    "Target": ("tessera.target", "Target"),
    "cpu": ("tessera.runtime", "cpu"),
    "cuda": ("tessera.runtime", "cuda"),  # GPU (issue 17)
    "opencl": ("tessera.runtime", "opencl"),
    "device": ("tessera.runtime", "device"),
    "nd": ("tessera.runtime", "nd"),
    "register_func": ("tessera.runtime", "register_func"),
    "get_global_func": ("tessera.runtime", "get_global_func"),
}


def __getattr__(name):
    if name in _SUBMODULES:
        return importlib.import_module(f"tessera.{name}")
    if name in _ATTRS:
        module, attr = _ATTRS[name]
        return getattr(importlib.import_module(module), attr)
    raise AttributeError(f"module 'tessera' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | _SUBMODULES | set(_ATTRS))
