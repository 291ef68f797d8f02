"""The compile cache: compiled kernels on disk, so that recompiling a model skips lowering,
the tir passes and code generation of every kernel it compiled before.

    key = cache_key("group", digest_of_the_group, target_fingerprint(target), ...)
    kernel = cached(key, lambda: compile_kernel(lower(...), target))   # a CompiledKernel
    cache_stats()   # {"hits": 2, "misses": 31}: since the process started (or reset_cache_stats)

A key is a sha256 of plain data (str, int, float, bool, None, bytes, tuples and lists, dicts of
those) that callers build from what decides the code: the kernel's own description, the target
(`target_fingerprint`: its string, triple, CPU, features, cores) and `compiler_fingerprint()`,
a hash of the tessera source files that decide code (not the CLI, frontends, graph
passes or Python runtime), llvmlite's version and the C compiler's identity, so
that any change of the compiler makes new keys. An entry (`<cache_dir>/kernels/ab/<key>.tk`)
holds the kernel's name, FunctionInfo, object code and source, behind a header with their
sizes and an HMAC-SHA256 under the cache's secret (`runtime.config.cache_secret`, Note [a private
cache]): it is written to a temporary file and renamed (atomic), and an entry that does not read
back whole and verified (damaged, copied from another cache, or edited with its checksum
recomputed) is ignored, recompiled and overwritten, before any of its code is loaded. A cache
directory that cannot be written is not an error: the kernel is compiled, just not kept.

The cache is on by default; `PassContext(config={"codegen.cache": False})` turns it off.
`lookup` / `keep` split `cached` for callers that compile the misses together (in parallel).
The directory is `runtime.config.cache_dir()` (TESSERA_CACHE_DIR).
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import json
import os
import sys
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

from tessera.logging import get_logger

log = get_logger(__name__)

MAGIC = b"TESSERA-KERNEL 2\n"
CONFIG_KEY = "codegen.cache"

_lock = threading.Lock()
_stats = {"hits": 0, "misses": 0}


class Unkeyable(ValueError):
    """A value has no stable description (e.g. an object printed with its address)."""


# -- statistics ----------------------------------------------------------------------------------


def cache_stats() -> dict[str, int]:
    """{"hits": int, "misses": int}: kernels taken from the cache, and compiled, so far."""
    with _lock:
        return dict(_stats)


def reset_cache_stats() -> None:
    with _lock:
        _stats.update(hits=0, misses=0)


def _count(what: str) -> None:
    with _lock:
        _stats[what] += 1


# -- keys ------------------------------------------------------------------------------------------


def _plain(x, out: list[bytes]) -> None:
    """A stable, unambiguous byte description of plain data."""
    if x is None or isinstance(x, bool | int | float | str):
        out.append(f"{type(x).__name__}:{x!r};".encode())
    elif isinstance(x, bytes | bytearray):
        out.append(b"bytes:%d:" % len(x) + hashlib.sha256(x).digest())
    elif isinstance(x, tuple | list):
        out.append(b"(%d" % len(x))
        for item in x:
            _plain(item, out)
        out.append(b")")
    elif isinstance(x, dict):
        _plain(sorted((str(k), v) for k, v in x.items()), out)
    else:
        raise Unkeyable(f"a cache key cannot hold a {type(x).__name__} ({x!r:.60})")


def cache_key(*parts) -> str:
    """The hex sha256 of `parts` (plain data, see the module docstring)."""
    out: list[bytes] = []
    _plain(parts, out)
    return hashlib.sha256(b"".join(out)).hexdigest()


# Parts of tessera that do not decide a kernel's code: the graph passes run before a kernel's
# key is taken (the key describes their result), the rest is around the compiler.
_NOT_CODE = ("cli/", "frontend/", "transform/", "models.py", "logging.py", "runtime/")


def _decides_code(rel: str) -> bool:
    if rel.startswith("runtime/native/"):  # the runtime's C API the kernels call
        return True
    return not rel.startswith(_NOT_CODE)


@functools.cache
def _source_digest() -> str:
    """sha256 of tessera's sources that decide code: a change of the compiler changes every key."""
    root = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256()
    files = sorted(
        p
        for p in root.rglob("*")
        if p.suffix in (".py", ".c", ".h")
        and p.is_file()
        and _decides_code(p.relative_to(root).as_posix())
    )
    for path in files:
        digest.update(str(path.relative_to(root)).encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()


@functools.cache
def c_compiler_identity() -> str:
    import subprocess

    from tessera.runtime import cc

    cmd = cc.compiler_command()
    try:
        proc = subprocess.run([*cmd, "--version"], capture_output=True, text=True, timeout=30)
        return " ".join(cmd) + "\n" + proc.stdout
    except (OSError, subprocess.SubprocessError):
        return " ".join(cmd)


def compiler_fingerprint(kind: str = "llvm") -> str:
    """What, besides a kernel's description and the target, decides its code: tessera's source,
    Python's version, and the kind's toolchain (the target table's `toolchain` entry: llvmlite's
    version for "llvm", the C compiler's identity for "c")."""
    from tessera.target import target_kind

    parts = [_source_digest(), sys.version]
    row = target_kind(kind)
    if row.toolchain is not None:
        parts.append(row.resolve("toolchain")())
    return cache_key(*parts)


def target_fingerprint(target) -> tuple:
    """What of a Target the generated code may depend on (plain data for `cache_key`): its
    string, kind and cores, and the target table's `fingerprint` entry for its kind."""
    parts = [str(target), target.kind, int(target.num_cores)]
    if target.kind_info.fingerprint is not None:
        parts += target.kind_info.resolve("fingerprint")(target)
    return tuple(parts)


def _cpu_parts(target) -> list:
    parts = [target.llvm_triple, target.llvm_cpu, target.llvm_features]
    parts += [sorted(target.features), target.vector_width_bits]
    # code for a fixed SVE length (vscale_range) differs from the same width's NEON code
    return parts + [["sve", target.sve_vector_bits]] if target.sve_vector_bits else parts


def cpu_fingerprint(target) -> list:
    """An llvm target: the CPU, and the cache sizes (CPU schedules size their blocks by them,
    read from sysfs for the host)."""
    from tessera.topi.x86.cpu import target_cache_sizes

    return [*_cpu_parts(target), sorted(target_cache_sizes(target).items())]


def c_fingerprint(target) -> list:
    """A c target: the CPU and the C compiler's flags."""
    from tessera.codegen.c import compile_flags

    return [*_cpu_parts(target), compile_flags(target)]


def enabled() -> bool:
    """Whether the current PassContext lets kernels come from (and go to) the cache."""
    from tessera.transform.pass_context import PassContext

    return bool(PassContext.current().config.get(CONFIG_KEY, True))


# -- entries ---------------------------------------------------------------------------------------


def entry_path(key: str) -> Path:
    from tessera.runtime import config

    return config.cache_dir() / "kernels" / key[:2] / f"{key}.tk"


def _mac(header: dict, payload: bytes) -> str:
    """HMAC-SHA256 of an entry (its header without the MAC, and its payload)."""
    from tessera.runtime import config

    rest = {k: v for k, v in header.items() if k != "hmac"}
    digest = hmac.new(config.cache_secret(), digestmod=hashlib.sha256)
    digest.update(json.dumps(rest, sort_keys=True).encode() + b"\0" + payload)
    return digest.hexdigest()


def _encode(kernel) -> bytes:
    source = kernel.source.encode("utf-8")
    payload = kernel.object + source
    header = {
        "name": kernel.name,
        "info": kernel.info.to_json(),
        "object_nbytes": len(kernel.object),
        "source_nbytes": len(source),
    }
    header["hmac"] = _mac(header, payload)
    return MAGIC + json.dumps(header).encode() + b"\n" + payload


def _decode(data: bytes):
    """The CompiledKernel of an entry's bytes, or None when they are not a whole, valid entry."""
    from tessera.codegen.aot import CompiledKernel
    from tessera.runtime.function_info import FunctionInfo

    if not data.startswith(MAGIC):
        return None
    end = data.find(b"\n", len(MAGIC))
    if end < 0:
        return None
    try:
        header = json.loads(data[len(MAGIC) : end])
        payload = data[end + 1 :]
        n_obj, n_src = int(header["object_nbytes"]), int(header["source_nbytes"])
        if len(payload) != n_obj + n_src:
            return None
        if not hmac.compare_digest(str(header["hmac"]), _mac(header, payload)):
            return None
        info = FunctionInfo.from_json(header["info"])
        source = payload[n_obj:].decode("utf-8")
        return CompiledKernel(str(header["name"]), info, bytes(payload[:n_obj]), source)
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        return None


def load(key: str):
    """The cached kernel of `key`, or None (absent, unreadable or corrupted)."""
    path = entry_path(key)
    try:
        data = path.read_bytes()
    except OSError:
        return None
    kernel = _decode(data)
    if kernel is None:
        log.warning("compile cache: ignoring the corrupted entry %s", path)
    return kernel


def store(key: str, kernel) -> None:
    """Write the entry of `key` atomically; a cache that cannot be written is skipped."""
    path = entry_path(key)
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        with open(fd, "wb") as f:
            f.write(_encode(kernel))
        os.replace(tmp, path)
        tmp = None
    except OSError as err:
        log.info("compile cache: cannot write %s (%s); the kernel is not kept", path, err)
    finally:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)


def lookup(key: str | None):
    """The cached kernel of `key` (counted as a hit), or None (a miss: compile it, then `keep`).
    A None key, or a PassContext with config["codegen.cache"] False, always misses."""
    kernel = load(key) if key is not None and enabled() else None
    _count("hits" if kernel is not None else "misses")
    return kernel


def keep(key: str | None, kernel) -> None:
    """Store a kernel compiled after a miss of `lookup(key)` (unless the cache is off)."""
    if key is not None and enabled():
        store(key, kernel)


def cached(key: str | None, compile_fn: Callable[[], object]):
    """The kernel of `key` from the cache, else `compile_fn()` (then stored)."""
    kernel = lookup(key)
    if kernel is None:
        kernel = compile_fn()
        keep(key, kernel)
    return kernel
