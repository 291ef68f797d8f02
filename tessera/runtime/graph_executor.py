"""Run a compiled model: the executor plan's kernel calls over buffers allocated once.

    lib = tessera.build(mod, target="llvm", params=params)    # or runtime.load_module("model.so")
    m = GraphModule(lib["default"](cpu(0)))
    m.set_input("data", x);  m.run();  y = m.get_output(0).numpy()

`GraphExecutorFactory` (what a graph build returns) holds the kernels (a runtime `Module`), the
executor plan (JSON, below) and the weights (one 64-byte aligned byte blob). `factory["default"]
(dev)` creates a `GraphExecutor`: it allocates every input, output and the arena once, and
precomputes for each kernel call its `void*` and `int64` argument arrays, so that `run()` is a
loop of raw native calls: no allocation, no argument checks (they were done once, here).

Note [executor plan]
    {"version": 1,
     "inputs":  [{"name", "dtype", "shape"}],
     "outputs": [{"name", "dtype", "shape", "storage": [kind, index]}],
     "params":  [{"name", "dtype", "shape", "offset"}],    # offset: bytes into the blob
     "params_nbytes": int, "arena_nbytes": int,
     "calls":   [{"kernel": name, "args": [[kind, index], ...], "vars": [int, ...]}]}
An argument (or an output's storage) is [kind, index]: "input" j, "param" j, "output" j (the
output buffer j), or "arena" byte-offset (into the arena, 64-byte aligned, shared by values whose
lifetimes do not overlap). An output whose storage is not its own output buffer is a model input,
a weight, or a repeat of an earlier output. The plan is plain data so that a native executor
(issue 4) can run the same calls. Weights travel in an exported library as the symbol
`tessera_params` (written by `.incbin`, no C literal), read back zero-copy.

This module imports nothing from the compiler: a loaded artifact runs with numpy alone.
"""

from __future__ import annotations

import ctypes
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from tessera.runtime.module import Module
from tessera.runtime.ndarray import ALIGNMENT, STORAGE, Device, NDArray, device, empty
from tessera.runtime.profiling import ProfileResult

PLAN_KEY = "graph_executor"  # where the plan lives in an exported library's metadata
PARAMS_SYMBOL = "tessera_params"
PLAN_VERSION = 1
ARG_KINDS = ("input", "param", "output", "arena")


def _nbytes(dtype: str, shape) -> int:
    return int(np.prod(shape, dtype=np.int64)) * np.dtype(STORAGE[dtype]).itemsize


class GraphExecutorFactory:
    """A compiled model: kernels, executor plan and weights. `lib["default"](dev)` runs it."""

    def __init__(self, kernels: Module, plan: dict, params_blob: np.ndarray, keepalive=None):
        if plan.get("version") != PLAN_VERSION:
            raise ValueError(f"unsupported executor plan version {plan.get('version')!r}")
        self._kernels = kernels
        self.plan = plan
        params_blob = np.asarray(params_blob).view(np.uint8).reshape(-1)
        if params_blob.nbytes < int(plan["params_nbytes"]):
            raise ValueError(
                f"the weights blob has {params_blob.nbytes} bytes, the plan needs "
                f"{plan['params_nbytes']}"
            )
        if params_blob.ctypes.data % ALIGNMENT:  # weights are viewed in place: align them
            aligned = _empty((params_blob.nbytes,), "uint8", device("cpu"))._array
            aligned[...] = params_blob
            params_blob = aligned
        self._blob = params_blob  # uint8, 64-byte aligned; read-only when it is a library's
        self._keepalive = keepalive  # the loaded library that owns the blob's memory

    @staticmethod
    def from_library(kernels: Module) -> GraphExecutorFactory:
        """The factory of a library loaded by `load_module` (its metadata holds the plan)."""
        plan = kernels.metadata[PLAN_KEY]
        nbytes = int(plan["params_nbytes"])
        if nbytes == 0:
            return GraphExecutorFactory(kernels, plan, np.zeros(0, np.uint8))
        lib = ctypes.CDLL(kernels.library_path)  # the same handle load_module opened
        try:
            start = ctypes.c_uint8.in_dll(lib, PARAMS_SYMBOL)
        except ValueError:
            raise ValueError(
                f"{kernels.library_path!r}: its plan has weights but no {PARAMS_SYMBOL} symbol"
            ) from None
        raw = (ctypes.c_uint8 * nbytes).from_address(ctypes.addressof(start))
        blob = np.frombuffer(raw, dtype=np.uint8)
        blob.flags.writeable = False  # it is the library's read-only data: never written
        return GraphExecutorFactory(kernels, plan, blob, keepalive=lib)

    # -- what it holds ---------------------------------------------------------------------

    def __getitem__(self, name: str):
        if name != "default":
            raise KeyError(f"a compiled model has the function 'default', not {name!r}")
        return self.create

    def create(self, dev=None) -> GraphExecutor:
        """A new executor on `dev` (default cpu(0)) with its own inputs, outputs and arena."""
        return GraphExecutor(self, device(dev) if dev is not None else device("cpu"))

    def get_lib(self) -> Module:
        """The kernels, one function per distinct fused group."""
        return self._kernels

    @property
    def num_kernels(self) -> int:
        return len(self._kernels.function_names)

    def get_graph_json(self) -> str:
        """The executor plan as JSON (see Note [executor plan])."""
        return json.dumps(self.plan)

    def get_params(self) -> dict[str, np.ndarray]:
        """The weights by name (read-only views of the blob)."""
        return {p["name"]: self._param_array(p) for p in self.plan["params"]}

    def _param_array(self, p: dict) -> np.ndarray:
        storage = np.dtype(STORAGE[p["dtype"]])
        shape = tuple(p["shape"])
        count = int(np.prod(shape, dtype=np.int64))
        offset = int(p["offset"])
        if offset % storage.itemsize == 0:  # a view: no copy of the weights
            flat = self._blob[offset : offset + count * storage.itemsize].view(storage)
            return flat.reshape(shape)
        return np.frombuffer(self._blob, storage, count, offset).copy().reshape(shape)

    def get_source(self, fmt: str = "") -> str:
        return self._kernels.get_source(fmt)

    def __repr__(self) -> str:
        return (
            f"<tessera GraphExecutorFactory: {len(self.plan['calls'])} calls of "
            f"{self.num_kernels} kernels, {len(self.plan['params'])} weights>"
        )

    # -- export ----------------------------------------------------------------------------

    def export_library(self, path, options=()) -> Path:
        """Write one shared library holding the kernels, the plan and the weights."""
        if not self._kernels.has_code_to_link():
            return self._kernels.export_library(path, options)  # a loaded model: copy it
        with tempfile.TemporaryDirectory(prefix="tessera-params-") as tmp:
            files = []
            if self._blob.nbytes:
                files.append(write_blob_assembly(Path(tmp), self._blob))
            metadata = {PLAN_KEY: self.plan}
            return self._kernels.export_library(
                path, options, extra_files=files, extra_metadata=metadata
            )


def write_blob_assembly(folder: Path, blob: np.ndarray) -> Path:
    """An assembly file defining the 64-byte aligned read-only symbol tessera_params.

    `.incbin` makes the assembler copy the bytes: fast for 100 MB, unlike a C array literal.
    """
    data = folder / "params.bin"
    blob.tofile(data)
    symbol = ("_" if sys.platform == "darwin" else "") + PARAMS_SYMBOL
    section = ".const" if sys.platform == "darwin" else '.section .rodata.tessera_params,"a"'
    quoted = str(data).replace("\\", "\\\\").replace('"', '\\"')
    text = f'{section}\n.balign {ALIGNMENT}\n.globl {symbol}\n{symbol}:\n.incbin "{quoted}"\n'
    if sys.platform != "darwin":
        text += '.section .note.GNU-stack,"",@progbits\n'  # no executable stack
    source = folder / "params.S"
    source.write_text(text)
    return source


class GraphExecutor:
    """One instance of a compiled model on a device: its buffers and precomputed calls."""

    def __init__(self, factory: GraphExecutorFactory, dev: Device):
        if not isinstance(dev, Device) or dev.device_type != "cpu":
            raise ValueError(f"a compiled model runs on cpu devices here, got {dev!r}")
        plan = factory.plan
        self.factory, self.device = factory, dev
        self.input_specs = [(i["name"], i["dtype"], tuple(i["shape"])) for i in plan["inputs"]]
        self.input_index = {name: k for k, (name, _, _) in enumerate(self.input_specs)}
        self.inputs = [_empty(shape, dtype, dev) for _, dtype, shape in self.input_specs]
        self.params = [NDArray(factory._param_array(p), p["dtype"], dev) for p in plan["params"]]
        self.arena = _empty((int(plan["arena_nbytes"]),), "uint8", dev)
        self.outputs: list[NDArray] = []
        for k, out in enumerate(plan["outputs"]):
            kind, index = out["storage"]
            if (kind, index) == ("output", k):
                self.outputs.append(_empty(tuple(out["shape"]), out["dtype"], dev))
            else:
                self.outputs.append(self._storage(kind, index, out["dtype"], out["shape"]))
        self.calls = [self._prepare(call) for call in plan["calls"]]

    def _storage(self, kind: str, index: int, dtype: str, shape) -> NDArray:
        """The array behind an argument [kind, index] (a view into the arena for "arena")."""
        if kind == "input":
            return self.inputs[index]
        if kind == "param":
            return self.params[index]
        if kind == "output":
            return self.outputs[index]
        if kind == "arena":
            if index % ALIGNMENT or index + _nbytes(dtype, shape) > self.arena.nbytes:
                raise ValueError(f"executor plan: arena slot at {index} is out of the arena")
            storage = np.dtype(STORAGE[dtype])
            view = np.ndarray(tuple(shape), storage, buffer=self.arena._array, offset=index)
            return NDArray(view, dtype, self.device)
        raise ValueError(f"executor plan: unknown argument kind {kind!r} (known: {ARG_KINDS})")

    def _prepare(self, call: dict):
        """(native function, void* array, int64 array, name), checked once against its info."""
        name = call["kernel"]
        packed = self.factory.get_lib()[name]
        cfunc = getattr(packed, "_cfunc", None)
        if cfunc is None:
            packed()  # a kernel compiled for another machine: raises its own clear error
        info = packed.info
        values = [int(v) for v in call.get("vars", ())]
        if len(values) != len(info.vars):
            raise ValueError(f"executor plan: {name} takes {len(info.vars)} vars, got {values}")
        bound = {v.name: value for v, value in zip(info.vars, values, strict=True)}
        buffers = [p for p in info.params if p.kind == "buffer"]
        if len(buffers) != len(call["args"]):
            raise ValueError(
                f"executor plan: {name} takes {len(buffers)} buffers, "
                f"the plan passes {len(call['args'])}"
            )
        pointers = []
        for param, (kind, index) in zip(buffers, call["args"], strict=True):
            shape = tuple(d if isinstance(d, int) else bound.get(d) for d in param.shape)
            if None in shape:
                raise ValueError(f"executor plan: {name}: no value for a dim of {param.name!r}")
            array = self._storage(kind, index, param.dtype, shape)
            if array.dtype != param.dtype or tuple(array.shape) != shape:
                raise ValueError(
                    f"executor plan: argument {param.name!r} of {name} is "
                    f"{array.dtype}{list(array.shape)}, the kernel takes "
                    f"{param.dtype}{list(shape)}"
                )
            pointers.append(array.data_ptr)
        buffer_array = (ctypes.c_void_p * max(1, len(pointers)))(*pointers)
        var_array = (ctypes.c_int64 * max(1, len(values)))(*values)
        return cfunc, buffer_array, var_array, call["kernel"]

    def run(self) -> None:
        for cfunc, buffers, values, name in self.calls:
            if cfunc(buffers, values):
                raise RuntimeError(f"kernel {name} failed (it returned a non-zero code)")


def _empty(shape, dtype: str, dev: Device) -> NDArray:
    array = empty(shape, dtype, dev)
    array._array.fill(0)  # deterministic contents before the first set_input / run
    return array


class GraphModule:
    """The user's handle on a GraphExecutor (TVM's graph_executor.GraphModule)."""

    def __init__(self, executor: GraphExecutor):
        if not isinstance(executor, GraphExecutor):
            raise TypeError(
                "GraphModule expects lib['default'](dev) of a compiled model, "
                f"got {type(executor).__name__}"
            )
        self._ex = executor
        self._unset = {name for name, _, _ in executor.input_specs}  # run() needs them all

    # -- inputs ----------------------------------------------------------------------------

    def _input_slot(self, key) -> int:
        names = ", ".join(name for name, _, _ in self._ex.input_specs) or "none"
        if isinstance(key, str):
            if key not in self._ex.input_index:
                raise ValueError(f"the model has no input {key!r} (inputs: {names})")
            return self._ex.input_index[key]
        if isinstance(key, int | np.integer) and not isinstance(key, bool):
            if not 0 <= key < len(self._ex.inputs):
                raise ValueError(f"input index {key} out of range (inputs: {names})")
            return int(key)
        raise TypeError(f"an input is named by a str or an int, got {type(key).__name__}")

    def set_input(self, key=None, value=None, **inputs) -> None:
        """Copy `value` (numpy array or NDArray) into input `key` (name or index); or several
        inputs as keywords. Shape and dtype must match exactly."""
        if key is not None:
            inputs = {key: value, **inputs}
        for k, v in inputs.items():
            slot = self._input_slot(k)
            name, dtype, shape = self._ex.input_specs[slot]
            got_dtype, got_shape = _dtype_and_shape(v)
            if got_dtype != dtype or got_shape != shape:
                raise ValueError(
                    f"input {name!r}: expected {dtype} of shape {shape}, "
                    f"got {got_dtype} of shape {got_shape}"
                )
            self._ex.inputs[slot].copyfrom(v)
            self._unset.discard(name)

    def get_input(self, key) -> NDArray:
        """The input's own array (writing into it sets the input)."""
        slot = self._input_slot(key)
        self._unset.discard(self._ex.input_specs[slot][0])
        return self._ex.inputs[slot]

    def get_num_inputs(self) -> int:
        return len(self._ex.inputs)

    def get_input_info(self) -> tuple[dict[str, tuple], dict[str, str]]:
        """(shapes by input name, dtypes by input name), as TVM returns them."""
        shapes = {name: shape for name, _, shape in self._ex.input_specs}
        dtypes = {name: dtype for name, dtype, _ in self._ex.input_specs}
        return shapes, dtypes

    # -- running and outputs ---------------------------------------------------------------

    def run(self, **inputs) -> None:
        if inputs:
            self.set_input(**inputs)
        if self._unset:
            missing = ", ".join(repr(n) for n in sorted(self._unset))
            raise ValueError(f"run: input {missing} not set (use set_input)")
        self._ex.run()

    def get_num_outputs(self) -> int:
        return len(self._ex.outputs)

    def get_output(self, index: int, out: NDArray | None = None) -> NDArray:
        """Output `index`: the executor's own array (the next run overwrites it), or a copy
        into `out` when given."""
        if not isinstance(index, int | np.integer) or not 0 <= index < len(self._ex.outputs):
            raise ValueError(f"output index {index!r} out of range (0..{len(self._ex.outputs)})")
        array = self._ex.outputs[int(index)]
        return out.copyfrom(array) if out is not None else array

    def benchmark(self, dev=None, number: int = 10, repeat: int = 3, min_repeat_ms: float = 0):
        """Time `run()`: `repeat` measurements of the mean of `number` runs (ProfileResult)."""
        if number < 1 or repeat < 1:
            raise ValueError(f"benchmark: number and repeat must be >= 1, got {number}, {repeat}")
        self.run()  # warm-up, and the check that every input is set
        results = []
        for _ in range(repeat):
            runs = number
            while True:
                start = time.perf_counter()
                for _ in range(runs):
                    self._ex.run()
                elapsed = time.perf_counter() - start
                if elapsed * 1e3 >= min_repeat_ms or runs >= 1 << 24:
                    break
                runs *= 2
            results.append(elapsed / runs)
        return ProfileResult(tuple(results))

    @property
    def num_calls(self) -> int:
        """How many kernel calls one run makes."""
        return len(self._ex.calls)


def _dtype_and_shape(value) -> tuple[str, tuple]:
    if isinstance(value, NDArray):
        return value.dtype, tuple(value.shape)
    if isinstance(value, np.ndarray):
        return value.dtype.name, tuple(value.shape)
    raise TypeError(f"an input value is a numpy array or an NDArray, got {type(value).__name__}")
