"""Shared fixtures: the C test kernels, compiled once per session with the system compiler."""

import ctypes
from pathlib import Path

import pytest

from tessera.runtime import artifact, cc, native
from tessera.runtime.function_info import FunctionInfo, ParamInfo, VarInfo

KERNELS = Path(__file__).parent / "kernels"


def _build(tmp: Path, name: str) -> Path:
    """The kernels of `name`.c as a sealed library (artifact.seal), as Module.from_library and
    load_module take them."""
    flags = ["-I", str(native.include_dir()), "-std=gnu11"]
    raw = cc.compile_shared(tmp / f"{name}.raw.so", sources=[KERNELS / f"{name}.c"], flags=flags)
    return artifact.seal(raw, tmp / f"{name}.so")


@pytest.fixture(scope="session")
def kernel_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("kernels")


@pytest.fixture(scope="session")
def pool_lib(kernel_dir):
    native.load()  # the kernels resolve tessera_parallel_for against it
    lib = ctypes.CDLL(str(_build(kernel_dir, "pool_kernels")))
    i64, p = ctypes.c_int64, ctypes.c_void_p
    lib.fill.argtypes = [i64, p, p]
    lib.nested.argtypes = [i64, i64, p, p]
    lib.fail_at.argtypes = [i64, i64, ctypes.c_int32]
    lib.log_chunks.argtypes = [i64, p, p, p]
    lib.log_chunks.restype = i64
    lib.alloc_alignment.argtypes = [i64]
    lib.alloc_alignment.restype = i64
    return lib


@pytest.fixture(scope="session")
def module_lib_path(kernel_dir) -> Path:
    return _build(kernel_dir, "module_kernels")


@pytest.fixture(scope="session")
def module_object(kernel_dir) -> bytes:
    """module_kernels.c as a position-independent object file (what the LLVM codegen emits)."""
    out = kernel_dir / "module_kernels.o"
    flags = ["-c", "-fPIC", "-O2", "-I", str(native.include_dir())]
    cc.run_compiler(
        [*cc.compiler_command(), *flags, "-o", str(out), str(KERNELS / "module_kernels.c")]
    )
    return out.read_bytes()


def buf(name, dtype, shape):
    return ParamInfo(name, "buffer", dtype, list(shape))


def var(name, dtype):
    return ParamInfo(name, "var", dtype)


@pytest.fixture(scope="session")
def module_infos() -> list[FunctionInfo]:
    """Hand-written FunctionInfos for module_kernels.c (what codegen.common.function_info makes)."""
    return [
        FunctionInfo(
            "myadd",
            [buf("A", "float32", ["n"]), buf("B", "float32", ["n"]), buf("C", "float32", ["n"])],
            [VarInfo("n", "int32")],
        ),
        FunctionInfo(
            "scale",
            [
                buf("X", "float32", ["n", 4]),
                var("alpha", "float32"),
                var("k", "int32"),
                buf("Y", "float32", ["n", 4]),
            ],
            [VarInfo("alpha", "float32"), VarInfo("k", "int32"), VarInfo("n", "int32")],
        ),
        FunctionInfo("always_fails", [buf("X", "int32", [3])], []),
        FunctionInfo(
            "par_double",
            [buf("A", "float32", ["m"]), buf("B", "float32", ["m"])],
            [VarInfo("m", "int64")],
        ),
        FunctionInfo("bf16_copy", [buf("A", "bfloat16", [8]), buf("B", "bfloat16", [8])], []),
    ]
