"""export_library / load_module: one shared library that runs with numpy alone."""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tessera.runtime import Module, load_module, nd
from tessera.runtime.function_info import FunctionInfo, ParamInfo, VarInfo
from tessera.runtime.module import metadata_c_source

KERNEL_SOURCE = (Path(__file__).parent / "kernels" / "module_kernels.c").read_text()
REPO = Path(__file__).resolve().parents[2]

CHILD = """
import sys
import numpy as np
import tessera.runtime as rt

lib = rt.load_module(sys.argv[1])
a = np.arange(10001, dtype="float32")
b = rt.nd.empty((10001,), "float32")
rt.set_num_threads(3)
lib["par_double"](a, b)
assert (b.numpy() == 2 * a).all()
c = np.zeros(8, "float32")
lib(a[:8], a[:8], c)
assert (c == 2 * a[:8]).all()
try:
    lib(a[:8], a[:8], np.zeros(9, "float32"))
    raise SystemExit("no error for a wrong shape")
except ValueError as err:
    assert "argument 'C' of myadd" in str(err), err
assert lib.metadata == {"model": "test"}, lib.metadata
loaded = sorted(m for m in ("tessera.te", "tessera.tir", "tessera.codegen", "tessera.ir",
                            "tessera.arith", "tessera.driver", "llvmlite") if m in sys.modules)
assert not loaded, loaded
print("child ok")
"""


@pytest.fixture(scope="module")
def c_module(module_lib_path, module_infos):
    return Module.from_library(
        module_lib_path,
        module_infos,
        {"c": KERNEL_SOURCE},
        c_sources=[KERNEL_SOURCE],
        metadata={"model": "test"},
    )


def test_exported_library_runs_without_the_compiler(c_module, tmp_path):
    path = c_module.export_library(tmp_path / "exported.so")
    assert path.is_file()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert "child ok" in proc.stdout


def test_objects_are_linked_and_a_loaded_module_reexports(
    module_lib_path, module_infos, module_object, tmp_path
):
    import ctypes

    lib = ctypes.CDLL(str(module_lib_path))
    addresses = {
        i.name: ctypes.cast(getattr(lib, i.name), ctypes.c_void_p).value for i in module_infos
    }
    jit = Module.from_addresses(
        addresses, module_infos, {"ll": "; ir"}, objects=[module_object], keepalive=lib
    )
    first = load_module(jit.export_library(tmp_path / "from_objects.so"))
    assert first.function_names == jit.function_names
    again = load_module(first.export_library(tmp_path / "copy.so"))  # a loaded library is copied
    x = np.ones((3, 4), "float32")
    y = nd.empty((3, 4), "float32")
    again["scale"](x, 2.0, 1, y)
    np.testing.assert_array_equal(y.numpy(), 3 * x)
    with pytest.raises(ValueError, match="available formats: none"):
        again.get_source("ll")


def test_metadata_with_awkward_text_round_trips(module_lib_path, tmp_path):
    name = 'A"\\?é\n\t*/ ??='  # quotes, backslashes, trigraph, non-ASCII, comment end
    info = FunctionInfo(
        "myadd",
        [
            ParamInfo(name, "buffer", "float32", ["n"]),
            ParamInfo("B", "buffer", "float32", ["n"]),
            ParamInfo("C", "buffer", "float32", ["n"]),
        ],
        [VarInfo("n", "int64")],
    )
    extra = {"note": 'ünïcode \\ " ??/', "big": "x" * 20000}
    mod = Module.from_library(module_lib_path, [info], {}, [KERNEL_SOURCE], metadata=extra)
    loaded = load_module(mod.export_library(tmp_path / "awkward.so"))
    assert loaded["myadd"].info == info
    assert loaded.metadata == extra


def test_metadata_source_is_plain_c():
    text = metadata_c_source('{"a": "\\"?"}')
    assert "const char tessera_metadata[] =" in text
    assert '"{\\"a\\": \\"\\\\\\"\\?\\"}"' in text


def test_load_errors(module_lib_path, tmp_path):
    with pytest.raises(FileNotFoundError, match="no such library file"):
        load_module(tmp_path / "missing.so")
    not_a_library = tmp_path / "text.so"
    not_a_library.write_text("hello")
    with pytest.raises(ValueError, match="is not a tessera artifact"):
        load_module(not_a_library)
    with pytest.raises(ValueError, match="is not a tessera library: it has no tessera_metadata"):
        load_module(module_lib_path)


def test_export_errors(c_module, module_lib_path, module_infos, tmp_path):
    loaded = Module.from_library(module_lib_path, module_infos, {})
    copy = loaded.export_library(tmp_path / "copy.so")  # a library without sources: copied
    assert copy.read_bytes() == module_lib_path.read_bytes()
    copy.unlink()
    bare = Module({f: loaded[f] for f in loaded.function_names})  # no file, no code to link
    with pytest.raises(RuntimeError, match="holds no objects or C sources"):
        bare.export_library(tmp_path / "bare.so")
    broken = Module.from_library(module_lib_path, module_infos, {}, ["this is not C"])
    with pytest.raises(RuntimeError, match="C compiler failed"):
        broken.export_library(tmp_path / "broken.so")
    assert not (tmp_path / "broken.so").exists()
    assert [p.name for p in tmp_path.iterdir()] == []  # no temporary files left behind


def test_a_library_rewritten_at_the_same_path_loads_anew(
    c_module, module_lib_path, module_infos, tmp_path
):
    # dlopen finds a library already open by its name: without care, loading a file exported
    # again to the same path (a notebook, a test) would silently run the old code.
    path = tmp_path / "same.so"
    c_module.export_library(path)
    first = load_module(path)
    assert first.metadata == {"model": "test"}
    other = Module.from_library(
        module_lib_path,
        module_infos,
        {"c": KERNEL_SOURCE},
        c_sources=[KERNEL_SOURCE],
        metadata={"model": "second"},
    )
    other.export_library(path)
    second = load_module(path)
    assert second.metadata == {"model": "second"}
    assert load_module(path).metadata == {"model": "second"}  # unchanged file: loads as it was
    x = np.ones((3, 4), "float32")
    for lib in (first, second):  # both stay usable, each with its own code
        y = nd.empty((3, 4), "float32")
        lib["scale"](x, 2.0, 1, y)
        np.testing.assert_array_equal(y.numpy(), 3 * x)
    copy = load_module(second.export_library(tmp_path / "copy.so"))  # the code it runs
    assert copy.metadata == {"model": "second"}
    # a module runs (and re-exports) its private verified copy, whatever happens to the file
    assert load_module(first.export_library(tmp_path / "first.so")).metadata == {"model": "test"}


@pytest.mark.parametrize(
    "plan, what",
    [
        ({"version": 1}, "params_nbytes is not a size"),
        ({"version": 1, "params_nbytes": "weights", "arena_nbytes": 0}, "params_nbytes"),
        (
            {"version": 1, "params_nbytes": 0, "arena_nbytes": 0, "inputs": [], "outputs": [],
             "params": [], "calls": [{"kernel": "myadd", "args": [["input", -1]]}]},
            "a call's arguments",
        ),
    ],
)  # fmt: skip
def test_a_malformed_plan_is_one_clear_error(module_lib_path, module_infos, tmp_path, plan, what):
    # a plan that does not say what the runtime needs (an older or foreign writer): a
    # ValueError naming it, never a bare KeyError or "invalid literal for int()"
    mod = Module.from_library(
        module_lib_path, module_infos, {}, [KERNEL_SOURCE], metadata={"graph_executor": plan}
    )
    path = mod.export_library(tmp_path / "plan.so")
    with pytest.raises(ValueError, match=f"executor plan is malformed \\({what}"):
        load_module(path)
