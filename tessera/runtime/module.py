"""Module: compiled kernels, callable from Python, exportable to one shared library.

    mod = Module.from_addresses({"myadd": addr}, [info], {"ll": text}, objects=[obj])  # LLVM JIT
    mod = Module.from_library("k.so", [info], {"c": src}, c_sources=[src])           # C codegen
    mod["myadd"](a, b, c);  mod(a, b, c)                # the entry function: the first one
    mod.export_library("x.so");  load_module("x.so")    # needs numpy only, no compiler

An exported library holds the kernels and `const char tessera_metadata[]`: the JSON of
`function_info.dumps` (every FunctionInfo, plus {"format": "tessera", "version": 1} and any
extra metadata), from which `load_module` rebuilds the Module. It ends with a trailer (Note
[artifact trailer] in artifact.py: version, target, checksum, optional signature) that
`load_module` checks before anything is opened. The runtime library is loaded (RTLD_GLOBAL)
before any kernel, so kernels resolve `tessera_parallel_for` & co. against it.
"""

from __future__ import annotations

import ctypes
import json
import shutil
import sys
import tempfile
import threading
import weakref
from collections.abc import Callable
from pathlib import Path

from tessera.runtime import artifact, cc, function_info, native
from tessera.runtime.function_info import FunctionInfo
from tessera.runtime.ndarray import Device
from tessera.runtime.packed_func import KERNEL_TYPE, PackedFunc
from tessera.runtime.profiling import make_timer

METADATA_SYMBOL = "tessera_metadata"
FORMAT_VERSION = 1


class Module:
    """Compiled functions by name, with their sources and what `export_library` links."""

    def __init__(
        self,
        functions: dict[str, PackedFunc],
        sources: dict[str, str | Callable[[], str]] | None = None,
        objects=(),
        c_sources=(),
        metadata: dict | None = None,
        library_path: str | None = None,
        compiler: list[str] | Callable[[], list[str]] | None = None,
    ):
        # Internal: use from_addresses, from_library or load_module.
        if not functions:
            raise ValueError("a Module needs at least one function")
        self._functions = dict(functions)
        self._entry = next(iter(self._functions.values()))
        self._sources = dict(sources or {})
        self._objects = [bytes(o) for o in objects]
        self._c_sources = [str(s) for s in c_sources]
        self.metadata = dict(metadata or {})
        self.library_path = library_path  # the file this module was loaded from, if any
        # the C compiler argv that export_library links with: None is this machine's; code for
        # another architecture carries its cross compiler (tessera/cross/link.py), as a function
        # that finds it (and says how to install it) when export_library asks
        self.compiler = compiler

    @staticmethod
    def from_addresses(
        addresses: dict[str, int],
        infos: list[FunctionInfo],
        sources: dict[str, str],
        objects: list[bytes] = (),
        c_sources: list[str] = (),
        keepalive=None,
        *,
        metadata: dict | None = None,
    ) -> Module:
        """Wrap JIT-compiled functions at `addresses`; `keepalive` owns their code (an engine).

        `objects` (position-independent object files) and `c_sources` are what export_library
        links. A source may be given as a function returning the text, called on first use.
        """
        native.load()
        functions = {}
        for info in infos:
            if info.name not in addresses:
                raise ValueError(f"from_addresses: no address for function {info.name!r}")
            cfunc = KERNEL_TYPE(addresses[info.name])
            functions[info.name] = PackedFunc(cfunc, info, keepalive)
        return Module(functions, sources, objects, c_sources, metadata)

    @staticmethod
    def from_library(
        path,
        infos: list[FunctionInfo],
        sources: dict[str, str],
        c_sources: list[str] = (),
        *,
        metadata: dict | None = None,
        objects: list[bytes] = (),
        key=None,
    ) -> Module:
        """Wrap the functions of a sealed shared library (artifact.seal) built from `c_sources`
        and `objects` (the C codegen); export_library links those again. `key`: the key it was
        signed with (the compile cache's), checked before it is opened."""
        lib, opened = _open_library(path, key)
        functions = {info.name: _bind(lib, info, path) for info in infos}
        return Module(functions, sources, objects, c_sources, metadata, library_path=opened)

    # -- functions -------------------------------------------------------------------------

    @property
    def entry_name(self) -> str:
        """The function `mod(...)` calls: the only one, or the first."""
        return self._entry.name

    @property
    def function_names(self) -> list[str]:
        return list(self._functions)

    def get_function(self, name: str) -> PackedFunc:
        try:
            return self._functions[name]
        except KeyError:
            raise KeyError(
                f"module has no function {name!r} (it has: {', '.join(self._functions)})"
            ) from None

    def __getitem__(self, name: str) -> PackedFunc:
        return self.get_function(name)

    def __contains__(self, name: str) -> bool:
        return name in self._functions

    def __call__(self, *args) -> None:
        self._entry(*args)

    def __repr__(self) -> str:
        return f"<tessera.runtime.Module functions=[{', '.join(self._functions)}]>"

    # -- sources ---------------------------------------------------------------------------

    def get_source(self, fmt: str = "") -> str:
        """The source in format `fmt` ("ll", "asm", "c"); "" gives the first one there is."""
        if not fmt and self._sources:
            fmt = next(iter(self._sources))
        if fmt not in self._sources:
            have = ", ".join(repr(k) for k in self._sources) or "none (a loaded library)"
            raise ValueError(f"this module has no {fmt!r} source; available formats: {have}")
        source = self._sources[fmt]
        if callable(source):  # produced on first use (assembly is slow to make)
            source = self._sources[fmt] = source()
        return source

    # -- export ----------------------------------------------------------------------------

    def has_code_to_link(self) -> bool:
        """Whether export_library links objects or sources (False: it copies a loaded file)."""
        return bool(self._objects or self._c_sources)

    def export_library(
        self, path, options=(), *, extra_files=(), extra_metadata: dict | None = None, key=None
    ) -> Path:
        """Write one shared library holding every function and the metadata load_module reads,
        sealed with a trailer (tessera's version, the target, a checksum: artifact.py).

        `options`: extra flags for the C compiler. Needs the system C compiler (or, for code
        of another architecture, the cross compiler the module was linked for).
        `extra_files`: more files for the compiler to build in (C or assembly sources, objects:
        e.g. a model's weights); `extra_metadata`: more JSON-able entries for the metadata.
        `key` (bytes or str): sign the artifact (HMAC-SHA256), for `load_module(path, key=)`.
        """
        path = Path(path)
        if not self.has_code_to_link():
            if self.library_path is None:
                raise RuntimeError("export_library: this module holds no objects or C sources")
            if key is None:  # a loaded library is already complete and sealed: copy it
                _copy_atomically(self.library_path, path)
            else:
                _reseal(self.library_path, path, key)
            return path
        infos = [f.info for f in self._functions.values()]
        extra = {"format": "tessera", "version": FORMAT_VERSION, **self.metadata}
        extra.update(extra_metadata or {})
        with tempfile.TemporaryDirectory(prefix="tessera-export-") as tmp:
            files = _write_inputs(Path(tmp), self._c_sources, self._objects)
            meta = Path(tmp) / "tessera_metadata.c"
            meta.write_text(metadata_c_source(function_info.dumps(infos, extra)))
            sources = [meta] + [f for f in files if f.suffix == ".c"]
            sources += [Path(f) for f in extra_files if Path(f).suffix != ".o"]
            objects = [f for f in files if f.suffix == ".o"]
            objects += [Path(f) for f in extra_files if Path(f).suffix == ".o"]
            flags = ["-I", str(native.include_dir()), *options]
            built = Path(tmp) / "library.so"
            compiler = self.compiler() if callable(self.compiler) else self.compiler
            cc.compile_shared(
                built, sources=sources, objects=objects, flags=flags, compiler=compiler
            )
            artifact.seal(built, path, target=self.metadata.get("target"), key=key)
        return path

    # -- timing ----------------------------------------------------------------------------

    def time_evaluator(self, name: str, dev, number: int = 10, repeat: int = 1, min_repeat_ms=0):
        """A function that runs `name` on its arguments and returns a ProfileResult (seconds)."""
        if not isinstance(dev, Device) or dev.device_type != "cpu":
            raise ValueError(f"time_evaluator: expected a cpu Device, got {dev!r}")
        return make_timer(self.get_function(name), number, repeat, min_repeat_ms)


def metadata_c_source(text: str) -> str:
    """C source defining `const char tessera_metadata[]` holding `text` (ASCII JSON)."""
    if not text.isascii():
        raise ValueError("metadata must be ASCII (function_info.dumps escapes the rest)")

    def escape(chunk: str) -> str:  # "?" too: "??=" would be a trigraph
        return chunk.replace("\\", "\\\\").replace('"', '\\"').replace("?", "\\?")

    # split before escaping, so that no escape sequence is cut in two
    chunks = [escape(text[i : i + 80]) for i in range(0, len(text), 80)] or [""]
    body = "\n".join(f'    "{c}"' for c in chunks)
    return (
        "/* Generated by tessera: the description of the functions in this library. */\n"
        f"const char {METADATA_SYMBOL}[] =\n{body};\n"
    )


def _write_inputs(tmp: Path, c_sources, objects) -> list[Path]:
    files = []
    for k, text in enumerate(c_sources):
        files.append(tmp / f"source{k}.c")
        files[-1].write_text(text)
    for k, data in enumerate(objects):
        files.append(tmp / f"object{k}.o")
        files[-1].write_bytes(data)
    return files


def _copy_atomically(source, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    with open(fd, "wb") as out, open(source, "rb") as src:
        shutil.copyfileobj(src, out)
    Path(tmp).replace(target)


def _reseal(source: str, target: Path, key) -> None:
    """Copy a sealed library to `target`, sealed again (signed with `key`)."""
    header = artifact.read_header(source)
    with tempfile.TemporaryDirectory(prefix="tessera-export-") as tmp:
        bare = Path(tmp) / "library.so"
        with open(source, "rb") as src, open(bare, "wb") as out:
            out.write(src.read(header["payload_nbytes"]))
        artifact.seal(bare, target, target=header.get("target"), key=key)


def _open_library(path, key=None) -> tuple[Library, str]:
    """dlopen a verified private copy of the sealed library at `path`, after the runtime
    library: (the handle, the copy's file name). Damage, another format, a wrong signature or a
    host that cannot run it raise a clear error before dlopen (Note [artifact trailer])."""
    verified, _ = artifact.open_verified(path, key=key)
    return _dlopen(verified, path)


# Note [library handles]: ctypes never closes a library it opened, and every loaded library
# keeps a handful of memory mappings (its text, data, relro and bss segments) for as long as
# it is open. A process that loads many models (a tuner, a test suite, a server that reloads)
# would keep every library it ever loaded mapped: Linux allows 65530 mappings per process
# (vm.max_map_count); past them mmap fails (allocations fail, C++ code aborts on that). So
# a kernel library is opened once per file (`library`: one shared handle for a module, its
# executor factory and its entry) and closed (dlclose) when the last object using it is
# collected. What uses a library's code or data holds its handle: a PackedFunc (keepalive),
# a ctypes function pointer made from it (ctypes keeps the handle in its _objects), a
# GraphExecutorFactory (keepalive, and the buffer its weights are viewed in place from). A
# raw address from a library must never outlive the object that holds the handle.
_handles_lock = threading.Lock()
_handles: weakref.WeakValueDictionary[str, Library] = weakref.WeakValueDictionary()


class Library(ctypes.CDLL):
    """A kernel library opened by `library`: dlclose'd when it is collected, or by `close()`
    (for an owner that knows no function of it is in use any more)."""

    _closed = False

    def close(self) -> None:
        """dlclose the library now, once; a function taken from it must not be called after."""
        if not self._closed:
            self._closed = True
            _dlclose(self._handle)

    def __del__(self):
        if not sys.is_finalizing():  # at exit the process unmaps everything anyway
            self.close()


def _dlclose(handle: int) -> None:
    from _ctypes import dlclose  # CPython's, on every POSIX system

    dlclose(handle)


def library(path: str) -> Library:
    """The open handle of the library file at `path` (a private verified copy), opened with
    dlopen if no live object holds it (Note [library handles]). Raises OSError as dlopen."""
    with _handles_lock:
        lib = _handles.get(path)
        if lib is None:
            lib = Library(path)
            _handles[path] = lib
        return lib


def open_libraries() -> int:
    """How many kernel libraries `library` holds open now."""
    with _handles_lock:
        return len(_handles)


def _dlopen(verified: str, path) -> tuple[Library, str]:
    native.load()
    try:
        return library(verified), verified
    except OSError as err:
        raise ValueError(f"cannot load {str(path)!r} as a shared library: {err}") from None


def _bind(lib: Library, info: FunctionInfo, path) -> PackedFunc:
    try:
        cfunc = KERNEL_TYPE((info.name, lib))
    except AttributeError:
        raise ValueError(f"library {str(path)!r} has no function {info.name!r}") from None
    return PackedFunc(cfunc, info, keepalive=lib)


def load_module(path, key=None):
    """Load a library written by `Module.export_library` (needs numpy and ctypes only): a
    Module, or for a compiled model a `graph_executor.GraphExecutorFactory`; for the GPU
    targets a `gpu_module.GPUModule` or `gpu_graph.GPUGraphFactory`.

    Its trailer is checked before the library is opened: a damaged or foreign file, or one
    built for CPU features this machine lacks, raises `artifact.ArtifactError` (a ValueError).
    With `key`, the artifact must be signed with that key (export_library(path, key=...)).
    Opening a library runs its code: load only artifacts you trust (docs/trust.md)."""
    verified, header = artifact.open_verified(path, key=key)
    from tessera.runtime import gpu_graph, gpu_module  # GPU (issue 17): device code + plans

    with open(verified, "rb") as f:
        if gpu_module.is_gpu_archive(f.read(4)):
            f.seek(0)
            with gpu_module.open_archive(f.read(header["payload_nbytes"])) as z:
                return gpu_graph.load_gpu_library(z, str(path))
    lib, opened = _dlopen(verified, path)
    try:
        symbol = ctypes.c_char.in_dll(lib, METADATA_SYMBOL)
    except ValueError:
        raise ValueError(
            f"{str(path)!r} is not a tessera library: it has no {METADATA_SYMBOL} symbol"
        ) from None
    text = ctypes.string_at(ctypes.addressof(symbol)).decode("ascii", errors="replace")
    try:
        infos, extra = function_info.loads(text)
    except (json.JSONDecodeError, KeyError, TypeError) as err:
        raise ValueError(f"{str(path)!r}: unreadable tessera metadata ({err})") from None
    if extra.pop("format", None) != "tessera":
        raise ValueError(f"{str(path)!r} is not a tessera library (its metadata has no format)")
    version = extra.pop("version", None)
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise ValueError(
            f"{str(path)!r} was written by another tessera (metadata version {version!r}; "
            f"this runtime reads version {FORMAT_VERSION})"
        )
    functions = {info.name: _bind(lib, info, path) for info in infos}
    module = Module(functions, metadata=extra, library_path=opened)
    if "graph_executor" in extra:  # a compiled model: kernels, executor plan and weights
        from tessera.runtime.graph_executor import GraphExecutorFactory

        return GraphExecutorFactory.from_library(module)
    return module
