"""Run a compiled model: the executor plan's kernel calls over buffers allocated once.

    lib = tessera.build(mod, target="llvm", params=params)    # or runtime.load_module("model.so")
    m = GraphModule(lib["default"](cpu(0)))
    m.set_input("data", x);  m.run();  y = m.get_output(0).numpy()

`GraphExecutorFactory` (what a graph build returns) holds the kernels (a runtime `Module`), the
executor plan (JSON, below) and the weights (one 64-byte aligned byte blob). `factory["default"]
(dev)` creates a `GraphExecutor`: it allocates every input, output and the arena once, and
checks every kernel call against its kernel's FunctionInfo once, there. `run()` is then one
native call of the entry that the compiler generated with the kernels (RUN_SYMBOL, see
tessera/codegen/aot.py): it runs all calls in sequence with pointers into the inputs, outputs,
weights and arena, and times each call with a monotonic clock when asked (`GraphModule.profile`).
A plan without an entry (a hand-written plan, or `use_native = False` for debugging) runs as a
Python loop of raw native kernel calls with precomputed argument arrays.

Note [executor plan]
    {"version": 1,
     "inputs":  [{"name", "dtype", "shape"}],
     "outputs": [{"name", "dtype", "shape", "storage": [kind, index]}],
     "params":  [{"name", "dtype", "shape", "offset"}],    # offset: bytes into the blob
     "params_nbytes": int, "arena_nbytes": int,
     "calls":   [{"kernel": name, "args": [[kind, index], ...], "vars": [int, ...],
                  "nodes": [source node name, ...]}],
     "entry": RUN_SYMBOL}                                 # optional: the native executor
An argument (or an output's storage) is [kind, index]: "input" j, "param" j, "output" j (the
output buffer j), or "arena" byte-offset (into the arena, 64-byte aligned, shared by values whose
lifetimes do not overlap). An output whose storage is not its own output buffer is a model input,
a weight, or a repeat of an earlier output. A call's "nodes" (optional) name the source (ONNX)
nodes it computes, for profiles. Weights travel in an exported library as the symbol
`tessera_params` (written by `.incbin`, no C literal), read back zero-copy.

This module imports nothing from the compiler: a loaded artifact runs with numpy alone.
"""

from __future__ import annotations

import ctypes
import json
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tessera.runtime.module import Module
from tessera.runtime.ndarray import ALIGNMENT, STORAGE, Device, NDArray, device, empty
from tessera.runtime.profiling import ProfileResult

PLAN_KEY = "graph_executor"  # where the plan lives in an exported library's metadata
PARAMS_SYMBOL = "tessera_params"
PLAN_VERSION = 1
ARG_KINDS = ("input", "param", "output", "arena")
ENTRY_ARGS = ARG_KINDS
# int32_t tessera_model_run(void** inputs, void** outputs, const void* params, void* arena,
#                           int64_t* call_ns);   returns 0, or k + 1 when call k failed
RUN_SYMBOL = "tessera_model_run"
ENTRY_TYPE = ctypes.CFUNCTYPE(
    ctypes.c_int32,
    ctypes.POINTER(ctypes.c_void_p),
    ctypes.POINTER(ctypes.c_void_p),
    ctypes.c_void_p,
    ctypes.c_void_p,
    ctypes.POINTER(ctypes.c_int64),
)


def nbytes_of(dtype: str, shape) -> int:
    """The bytes of an array of this dtype (its storage type) and shape."""
    return int(np.prod(shape, dtype=np.int64)) * np.dtype(STORAGE[dtype]).itemsize


class GraphExecutorFactory:
    """A compiled model: kernels, executor plan and weights. `lib["default"](dev)` runs it."""

    def __init__(
        self, kernels: Module, plan: dict, params_blob: np.ndarray, keepalive=None, entry=None
    ):
        """`entry`: the address of the plan's native entry (RUN_SYMBOL) in `kernels`' code, or
        None (a loaded library is asked for plan["entry"]; without one, run() loops in Python)."""
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
        self._entry = ENTRY_TYPE(entry) if entry else None

    @staticmethod
    def from_library(kernels: Module) -> GraphExecutorFactory:
        """The factory of a library loaded by `load_module` (its metadata holds the plan)."""
        plan = kernels.metadata[PLAN_KEY]
        nbytes = int(plan["params_nbytes"])
        lib = ctypes.CDLL(kernels.library_path)  # the same handle load_module opened
        entry = None
        if plan.get("entry"):
            try:
                entry = ctypes.cast(getattr(lib, plan["entry"]), ctypes.c_void_p).value
            except AttributeError:
                raise ValueError(
                    f"{kernels.library_path!r}: its plan names the entry {plan['entry']!r}, "
                    "which the library does not define"
                ) from None
        if nbytes == 0:
            return GraphExecutorFactory(kernels, plan, np.zeros(0, np.uint8), lib, entry)
        try:
            start = ctypes.c_uint8.in_dll(lib, PARAMS_SYMBOL)
        except ValueError:
            raise ValueError(
                f"{kernels.library_path!r}: its plan has weights but no {PARAMS_SYMBOL} symbol"
            ) from None
        raw = (ctypes.c_uint8 * nbytes).from_address(ctypes.addressof(start))
        blob = np.frombuffer(raw, dtype=np.uint8)
        blob.flags.writeable = False  # it is the library's read-only data: never written
        return GraphExecutorFactory(kernels, plan, blob, keepalive=lib, entry=entry)

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
        # no executable stack ('%progbits': '@' starts a comment in 32-bit ARM assembly)
        text += '.section .note.GNU-stack,"",%progbits\n'
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
        self.nodes = [list(call.get("nodes", ())) for call in plan["calls"]]
        self._entry = factory._entry
        self.use_native = self._entry is not None  # False: the Python loop (for debugging)
        self._entry_args = self._native_args(factory) if self._entry is not None else None
        self._call_ns = (ctypes.c_int64 * max(1, len(self.calls)))()

    def _storage(self, kind: str, index: int, dtype: str, shape) -> NDArray:
        """The array behind an argument [kind, index] (a view into the arena for "arena")."""
        if kind == "input":
            return self.inputs[index]
        if kind == "param":
            return self.params[index]
        if kind == "output":
            return self.outputs[index]
        if kind == "arena":
            if index % ALIGNMENT or index + nbytes_of(dtype, shape) > self.arena.nbytes:
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

    def _native_args(self, factory: GraphExecutorFactory) -> tuple:
        """(inputs, outputs, params, arena) of the entry: pointers fixed for this executor."""
        inputs = [a.data_ptr for a in self.inputs]
        outputs = [a.data_ptr for a in self.outputs]
        in_array = (ctypes.c_void_p * max(1, len(inputs)))(*inputs)
        out_array = (ctypes.c_void_p * max(1, len(outputs)))(*outputs)
        params = factory._blob.ctypes.data if factory._blob.nbytes else None
        return in_array, out_array, params, self.arena.data_ptr

    def run(self) -> None:
        if self.use_native:
            code = self._entry(*self._entry_args, None)
            if code:
                self._failed(code - 1)
            return
        for k, (cfunc, buffers, values, _) in enumerate(self.calls):
            if cfunc(buffers, values):
                self._failed(k)

    def _failed(self, k: int):
        nodes = f" (source nodes: {', '.join(self.nodes[k])})" if self.nodes[k] else ""
        raise RuntimeError(
            f"kernel {self.calls[k][3]} failed in call {k} of the plan{nodes}: "
            "it returned a non-zero code"
        )

    def time_calls(self) -> np.ndarray:
        """Run once, timing each call: seconds per call, in plan order."""
        if self.use_native:
            code = self._entry(*self._entry_args, self._call_ns)
            if code:
                self._failed(code - 1)
            return np.ctypeslib.as_array(self._call_ns)[: len(self.calls)] * 1e-9
        times = np.zeros(len(self.calls))
        for k, (cfunc, buffers, values, _) in enumerate(self.calls):
            start = time.perf_counter()
            code = cfunc(buffers, values)
            times[k] = time.perf_counter() - start
            if code:
                self._failed(k)
        return times


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
        count = len(self._ex.outputs)
        if not isinstance(index, int | np.integer) or not 0 <= index < count:
            outputs = f"{count} output" + ("" if count == 1 else "s")
            raise ValueError(f"output index {index!r} out of range (the model has {outputs})")
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

    def profile(self, repeat: int = 10) -> list[CallProfile]:
        """Time every kernel call natively over `repeat` runs (after a warm-up run): one row per
        call of the plan, in plan order, with its kernel, source node names, mean seconds and
        share of the total time in kernels."""
        if isinstance(repeat, bool) or not isinstance(repeat, int) or repeat < 1:
            raise ValueError(f"profile: repeat must be an int >= 1, got {repeat!r}")
        self.run()  # warm-up (caches, thread pool, weight pages) and the inputs check
        total = np.zeros(len(self._ex.calls))
        for _ in range(repeat):
            total += self._ex.time_calls()
        means = total / repeat
        whole = float(means.sum()) or 1.0
        return [
            CallProfile(k, call[3], list(self._ex.nodes[k]), float(t), float(t) / whole)
            for k, (call, t) in enumerate(zip(self._ex.calls, means, strict=True))
        ]


@dataclass(frozen=True)
class CallProfile:
    """One kernel call of a profile (`GraphModule.profile`)."""

    index: int  # position in the executor plan
    kernel: str
    nodes: list[str]  # source (ONNX) node names
    seconds: float  # mean time per run
    share: float  # of the time of all calls


def _dtype_and_shape(value) -> tuple[str, tuple]:
    if isinstance(value, NDArray):
        return value.dtype, tuple(value.shape)
    if isinstance(value, np.ndarray):
        return value.dtype.name, tuple(value.shape)
    raise TypeError(f"an input value is a numpy array or an NDArray, got {type(value).__name__}")
