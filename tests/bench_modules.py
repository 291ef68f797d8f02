"""A script of bench/ loaded as a module by a test (bench/ is not a package, and its scripts
import their neighbours by plain name). tests/conftest.py puts tests/ on sys.path, so any test
imports it: `from bench_modules import load_bench`."""

import importlib.util
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent.parent / "bench"


def load_bench(name: str, module_name: str | None = None):
    """bench/<name>.py as the module `module_name` (default bench_<name>), registered in
    sys.modules while it loads (its dataclasses look their module up), with bench/ on sys.path
    meanwhile (for its neighbours)."""
    spec = importlib.util.spec_from_file_location(module_name or f"bench_{name}",
                                                  BENCH / f"{name}.py")  # fmt: skip
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    sys.path.insert(0, str(BENCH))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(BENCH))
    return module
