"""The runtime-only package: tessera's runtime as a wheel of its own, numpy its one dependency,
to load and run compiled artifacts on a board that has Python but not the compiler.

    path = build_runtime_wheel("dist")     # dist/tessera_runtime-0.1.0-py3-none-any.whl
    # on the board:  pip install tessera_runtime-0.1.0-py3-none-any.whl

The wheel holds `tessera/__init__.py` (whose submodules load lazily, so `import
tessera.runtime` imports nothing else), `tessera/logging.py` and `tessera/runtime/` with its C
sources (the thread pool is compiled on first use by the board's C compiler; a library
cross-linked here carries its own). It installs the same `tessera` package as the full one:
install one or the other. The wheel is written directly (a zip with its dist-info, PEP 427),
byte for byte the same for the same sources.
"""

from __future__ import annotations

import base64
import hashlib
import zipfile
from pathlib import Path

PACKAGE_ROOT = Path(__file__).resolve().parents[1]  # tessera/
NAME = "tessera_runtime"
# what the runtime imports: tessera/__init__.py imports tessera.logging, nothing else at import
RUNTIME_FILES = ("__init__.py", "logging.py", "runtime/**/*.py", "runtime/native/*.[ch]")
DEPENDENCIES = ("numpy>=1.24",)
_EPOCH = (1980, 1, 1, 0, 0, 0)  # fixed timestamps: the same sources give the same wheel


def runtime_sources() -> list[Path]:
    """The files of tessera/ the runtime-only wheel holds, sorted."""
    files = set()
    for pattern in RUNTIME_FILES:
        files.update(p for p in PACKAGE_ROOT.glob(pattern) if "__pycache__" not in p.parts)
    return sorted(files)


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def _metadata(version: str) -> str:
    lines = [
        "Metadata-Version: 2.1",
        "Name: tessera-runtime",
        f"Version: {version}",
        "Summary: tessera's runtime alone: load and run compiled models with numpy",
        "Requires-Python: >=3.11",
        *(f"Requires-Dist: {dep}" for dep in DEPENDENCIES),
    ]
    return "\n".join(lines) + "\n"


def build_runtime_wheel(folder) -> Path:
    """Write the runtime-only wheel into `folder`; its path."""
    from tessera import __version__

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{NAME}-{__version__}-py3-none-any.whl"
    info = f"{NAME}-{__version__}.dist-info"
    entries = [(f"tessera/{p.relative_to(PACKAGE_ROOT).as_posix()}", p.read_bytes())
               for p in runtime_sources()]  # fmt: skip
    wheel = "Wheel-Version: 1.0\nGenerator: tessera\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    entries += [
        (f"{info}/METADATA", _metadata(__version__).encode()),
        (f"{info}/WHEEL", wheel.encode()),
    ]
    record = [_record_line(name, data) for name, data in entries] + [f"{info}/RECORD,,"]
    entries.append((f"{info}/RECORD", ("\n".join(record) + "\n").encode()))
    tmp = path.with_suffix(".tmp")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in entries:
            entry = zipfile.ZipInfo(name, _EPOCH)
            entry.external_attr = 0o644 << 16  # -rw-r--r--
            zf.writestr(entry, data, zipfile.ZIP_DEFLATED)
    tmp.replace(path)
    return path
