"""Artifact integrity: the sealed trailer of an exported library, checked before any dlopen.

    seal(built_so, "model.so", target=..., key=b"secret")    # append the trailer, atomically
    path, header = open_verified("model.so", key=b"secret")  # a private, verified copy to dlopen

Note [artifact trailer]
A shared library runs code as soon as it is opened (constructors), and a damaged one can crash
the dynamic loader itself (SIGBUS on a truncated file, SIGSEGV on flipped bytes). So nothing is
opened before its bytes are checked. An exported library is the linked ELF (or Mach-O) file
followed by a trailer that the loader ignores:

    [library bytes][header JSON][sha256 of the header JSON: 32 bytes][its length: u64 LE][MAGIC]

The header says who wrote it (tessera's version, the format number), what it needs (the
target: triple, CPU, features) and what it holds (`payload_nbytes` and the `sha256` of the
library bytes: code, executor plan and weights), and, when the writer had a key, an HMAC-SHA256
`signature` over the header. `open_verified` reads the trailer, hashes the library bytes while
copying them into a private folder of this process (so nobody can change or truncate them
between the check and the dlopen), refuses an artifact built for another machine (naming the
CPU feature this one lacks), and only then returns the copy's path. A checksum finds damage, not
malice: whoever can write the file can recompute it. Artifacts from elsewhere need a signature
(`key=`), checked against the key the user gives; see docs/trust.md.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import platform
import shutil
import struct
import sys
import tempfile
import threading
from pathlib import Path

from tessera.runtime.private_dirs import private_dir

MAGIC = b"TESSERA-ARTIFACT"  # the last 16 bytes of every sealed artifact
FORMAT = "tessera-artifact"
FORMAT_VERSION = 2
TESSERA_VERSION = "0.1.0"  # tessera/__init__.py's __version__ (the runtime imports no compiler)
_TAIL = struct.Struct("<32sQ16s")  # header sha256, header length, MAGIC
_MAX_HEADER = 1 << 20
_CHUNK = 1 << 20


class ArtifactError(ValueError):
    """A file that is not a whole, untampered tessera artifact for this machine."""


# -- writing -------------------------------------------------------------------------------------


def _key_bytes(key) -> bytes:
    if isinstance(key, str):
        key = key.encode("utf-8")
    if not isinstance(key, bytes | bytearray) or not key:
        raise TypeError(f"a signing key is non-empty bytes or str, got {type(key).__name__}")
    return bytes(key)


def _signed_part(header: dict) -> bytes:
    """The canonical bytes a signature covers: the header without its signature."""
    rest = {k: v for k, v in header.items() if k != "signature"}
    return json.dumps(rest, sort_keys=True, separators=(",", ":")).encode()


def _sign(header: dict, key) -> str:
    return hmac.new(_key_bytes(key), _signed_part(header), hashlib.sha256).hexdigest()


def trailer(payload_sha256: str, payload_nbytes: int, target: dict | None, key=None) -> bytes:
    """The trailer (Note [artifact trailer]) of a library of these bytes."""
    header = {
        "format": FORMAT,
        "version": FORMAT_VERSION,
        "tessera": TESSERA_VERSION,
        "target": target,
        "payload_nbytes": int(payload_nbytes),
        "sha256": payload_sha256,
        "signature": None,
    }
    if key is not None:
        header["signature"] = {"alg": "hmac-sha256", "value": _sign(header, key)}
    text = json.dumps(header, sort_keys=True).encode()
    return text + _TAIL.pack(hashlib.sha256(text).digest(), len(text), MAGIC)


def seal(library, output, target: dict | None = None, key=None) -> Path:
    """Write `library` plus its trailer to `output`, atomically (a temporary file renamed)."""
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    digest, nbytes = hashlib.sha256(), 0
    fd, tmp = tempfile.mkstemp(prefix=f".{output.name}.", suffix=".tmp", dir=output.parent)
    try:
        with open(fd, "wb") as out, open(library, "rb") as src:
            while chunk := src.read(_CHUNK):
                digest.update(chunk)
                nbytes += len(chunk)
                out.write(chunk)
            out.write(trailer(digest.hexdigest(), nbytes, target, key))
        os.chmod(tmp, 0o755 & ~_umask())
        os.replace(tmp, output)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return output


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


# -- reading ---------------------------------------------------------------------------------------


def read_header(path) -> dict:
    """The checked header of the artifact at `path` (its library bytes are not hashed here)."""
    with open(path, "rb") as f:
        return _read_header(f, str(path))


def _read_header(f, name: str) -> dict:
    size = os.fstat(f.fileno()).st_size
    if size < _TAIL.size:
        raise ArtifactError(f"{name!r} is not a tessera artifact: it has only {size} bytes")
    f.seek(size - _TAIL.size)
    header_sha, length, magic = _TAIL.unpack(f.read(_TAIL.size))
    if magic != MAGIC:
        raise ArtifactError(_no_trailer(f, name))
    if length > min(_MAX_HEADER, size - _TAIL.size):
        raise ArtifactError(f"{name!r} is damaged: its trailer gives an impossible header length")
    f.seek(size - _TAIL.size - length)
    text = f.read(length)
    if hashlib.sha256(text).digest() != header_sha:
        raise ArtifactError(f"{name!r} is damaged: its header does not match its checksum")
    try:
        header = json.loads(text)
    except ValueError:
        raise ArtifactError(f"{name!r} is damaged: its header is not JSON") from None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise ArtifactError(f"{name!r} is not a tessera artifact (its trailer has no format)")
    if header.get("version") != FORMAT_VERSION:
        raise ArtifactError(
            f"{name!r} was written by tessera {header.get('tessera')!r} in artifact format "
            f"{header.get('version')!r}; this runtime (tessera {TESSERA_VERSION}) reads format "
            f"{FORMAT_VERSION}: compile the model again"
        )
    expected = size - _TAIL.size - length
    if header.get("payload_nbytes") != expected or not isinstance(header.get("sha256"), str):
        raise ArtifactError(
            f"{name!r} is damaged: its header describes {header.get('payload_nbytes')!r} bytes "
            f"of library, the file holds {expected}"
        )
    return header


def _no_trailer(f, name: str) -> str:
    f.seek(0)
    start = f.read(4)
    if start in (b"\x7fELF", b"\xcf\xfa\xed\xfe", b"\xce\xfa\xed\xfe"):
        return (
            f"{name!r} is a shared library without a tessera trailer: it is truncated, "
            "was changed after export, or was not written by tessera's export_library"
        )
    if start == b"PK\x03\x04":
        return (
            f"{name!r} is a zip archive without a tessera trailer: a GPU module written by an "
            "older tessera (export it again), or one changed after export"
        )
    return f"{name!r} is not a tessera artifact (no tessera trailer at its end)"


def check_signature(header: dict, name: str, key) -> None:
    """Refuse an artifact whose signature is missing or was not made with `key`."""
    signature = header.get("signature")
    if not isinstance(signature, dict) or signature.get("alg") != "hmac-sha256":
        raise ArtifactError(f"{name!r} is not signed, and a key was given: refusing to load it")
    if not hmac.compare_digest(str(signature.get("value")), _sign(header, key)):
        raise ArtifactError(f"{name!r}: its signature does not match the key given")


# Note [private copies]: a verified artifact is opened from a copy in a folder only this process
# knows (mode 0700, removed at exit or, if the process is killed, by the next one: Note [private
# dirs] in private_dirs.py), named by its sha256: the bytes dlopen maps are the bytes
# that were checked, and a file that is truncated while loaded cannot SIGBUS its reader. Loading
# the same bytes again reuses the copy (and dlopen's handle); new bytes at the same path get a
# copy of their own, so a model exported again to one path and loaded again runs the new code.
_lock = threading.Lock()
_copies: dict[tuple[str, str], str] = {}  # (sha256, header) -> the private copy
_copy_dir: str | None = None


def _private_dir() -> str:
    global _copy_dir
    if _copy_dir is None:
        _copy_dir = private_dir("tessera-artifacts-")
    return _copy_dir


def open_verified(path, key=None, check_host: bool = True) -> tuple[str, dict]:
    """(path of a private verified copy of the artifact at `path`, its header).

    Raises ArtifactError naming what is wrong: not an artifact, truncated, damaged, written by
    another format, signed with another key (when `key` is given), built for CPU features or a
    machine this one lacks (when `check_host`)."""
    name = str(path)
    if not Path(path).is_file():
        raise FileNotFoundError(f"no such library file: {name!r}")
    with _lock, open(path, "rb") as f:
        header = _read_header(f, name)
        if key is not None:
            check_signature(header, name, key)
        if check_host:
            check_host_can_run(header, name)
        f.seek(0)
        fd, tmp = tempfile.mkstemp(suffix=".so", dir=_private_dir())
        try:
            digest = _copy_and_hash(f, fd, header["payload_nbytes"])
            if not hmac.compare_digest(digest, header["sha256"]):
                raise ArtifactError(
                    f"{name!r} is damaged: the checksum of its code, plan and weights does not "
                    "match its header (a partial copy, a disk error or an edit)"
                )
            known = (digest, json.dumps(header, sort_keys=True))  # the same bytes and trailer
            if known in _copies:
                return _copies[known], header
            final = os.path.join(_private_dir(), f"{len(_copies)}-{Path(name).name}")
            os.replace(tmp, final)
            tmp = None
            _copies[known] = final
            return final, header
        finally:
            if tmp is not None and os.path.exists(tmp):
                os.unlink(tmp)


def _copy_and_hash(f, fd: int, nbytes: int) -> str:
    """Copy `f` to `fd`; the sha256 of its first `nbytes` (the library, before the trailer)."""
    digest, left = hashlib.sha256(), nbytes
    with open(fd, "wb") as out:
        while left > 0:
            chunk = f.read(min(_CHUNK, left))
            if not chunk:
                break
            digest.update(chunk)
            out.write(chunk)
            left -= len(chunk)
        shutil.copyfileobj(f, out)  # the trailer too: the copy re-exports sealed
    return digest.hexdigest()


def cached_library(path, build, target: dict | None = None) -> Path:
    """A library kept in the compile cache at `path`: used when it verifies against the cache's
    secret, else `build(tmp_path)` writes it afresh and it is sealed with that secret."""
    from tessera.runtime import config

    path, key = Path(path), config.cache_secret()
    if path.exists():
        try:
            open_verified(path, key=key, check_host=False)  # the copy is reused by the load
            return path
        except (ArtifactError, OSError):
            pass  # damaged, foreign or from an older tessera: built again below
    with tempfile.TemporaryDirectory(prefix="tessera-build-") as tmp:
        built = Path(tmp) / path.name
        build(built)
        return seal(built, path, target=target, key=key)


# -- the host ------------------------------------------------------------------------------------

# LLVM's names of the x86 and Arm features that change which instructions code uses -> the
# names Linux gives them in /proc/cpuinfo. Features not listed are not checked.
_CPUINFO_NAME = {
    **{f: f for f in ("sse", "sse2", "ssse3", "sse4a", "fma", "fma4", "xop", "avx", "avx2")},
    **{f: f for f in ("f16c", "popcnt", "aes", "movbe", "bmi2", "adx", "gfni", "vaes")},
    **{f: f for f in ("avx512f", "avx512dq", "avx512cd", "avx512bw", "avx512vl", "vpclmulqdq")},
    **{f: f for f in ("avx512ifma", "avx512vbmi", "sve", "sve2")},
    "sse3": "pni",
    "sse4.1": "sse4_1",
    "sse4.2": "sse4_2",
    "bmi": "bmi1",
    "lzcnt": "abm",
    "pclmul": "pclmulqdq",
    "sha": "sha_ni",
    "avx512bf16": "avx512_bf16",
    "avx512vbmi2": "avx512_vbmi2",
    "avx512vnni": "avx512_vnni",
    "avx512bitalg": "avx512_bitalg",
    "avx512vpopcntdq": "avx512_vpopcntdq",
    "avx512fp16": "avx512_fp16",
    "avx512vp2intersect": "avx512_vp2intersect",
    "avxvnni": "avx_vnni",
    "amx-tile": "amx_tile",
    "amx-int8": "amx_int8",
    "amx-bf16": "amx_bf16",
    "neon": "asimd",
    "dotprod": "asimddp",
    "i8mm": "i8mm",
    "bf16": "bf16",
}
_ARCH = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "aarch64", "arm64": "aarch64"}


def host_cpu_flags() -> frozenset[str] | None:
    """The CPU flags of this machine from /proc/cpuinfo, or None where it cannot be read."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return frozenset(value.split())
    return None


def host_arch() -> str:
    machine = platform.machine().lower()
    return _ARCH.get(machine, machine)


def check_host_can_run(header: dict, name: str) -> None:
    """Refuse an artifact for another architecture, OS or for CPU features this host lacks."""
    target = header.get("target")
    if not isinstance(target, dict):
        return  # written without a target description: nothing to check
    triple = str(target.get("triple") or "")
    arch = _ARCH.get(triple.split("-")[0], triple.split("-")[0])
    if arch and arch != host_arch():
        raise ArtifactError(
            f"{name!r} was built for {arch} ({triple}); this machine is {host_arch()}"
        )
    wants_os = "linux" if "linux" in triple else None
    wants_os = "darwin" if "darwin" in triple or "macos" in triple else wants_os
    if wants_os is not None and wants_os != sys.platform:
        raise ArtifactError(f"{name!r} was built for {triple}; this machine runs {sys.platform}")
    flags = host_cpu_flags()
    if flags is None:
        return
    wanted = [f for f in target.get("features") or () if f in _CPUINFO_NAME]
    missing = sorted(f for f in wanted if _CPUINFO_NAME[f] not in flags)
    if missing:
        raise ArtifactError(
            f"{name!r} was built for target {target.get('target')!r} and needs the CPU "
            f"feature(s) {', '.join(missing)}, which this machine lacks: compile it here "
            "(or for a target without them)"
        )
