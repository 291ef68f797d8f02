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
     "entry": RUN_SYMBOL,                                 # optional: the native executor
     "functions": [{"inputs", "outputs", "calls", "arena_nbytes"}]}   # optional: control flow
An argument (or an output's storage) is [kind, index]: "input" j, "param" j, "output" j (the
output buffer j), or "arena" byte-offset (into the arena, 64-byte aligned, shared by values whose
lifetimes do not overlap). An output whose storage is not its own output buffer is a model input,
a weight, or a repeat of an earlier output. A call's "nodes" (optional) name the source (ONNX)
nodes it computes, for profiles. A model with control flow adds the plans of its branches and
loop bodies ("functions") and control calls (Note [control calls] in
graph_build/control_flow.py), which run in the native entry only; an output whose row count a
loop or an op decides at run time has "rows": the storage of that int64 count (and
"rows_axis" when they are not counted along axis 0). Weights travel in an
exported library as the symbol `tessera_params` (written by `.incbin`, no C literal), read back
zero-copy.

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

from tessera.runtime.module import Module, library
from tessera.runtime.ndarray import ALIGNMENT, STORAGE, Device, NDArray, device, empty
from tessera.runtime.plan_check import ARG_KINDS, PLAN_VERSION, check_plan
from tessera.runtime.run_counter import RunCounter, counter_slot
from tessera.runtime.shape_expr import DynamicPlan, evaluate, show_shape

PLAN_KEY = "graph_executor"  # where the plan lives in an exported library's metadata
PARAMS_SYMBOL = "tessera_params"
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
        check_plan(plan, kernels.library_path)
        nbytes = int(plan["params_nbytes"])
        # the handle load_module opened (Note [library handles] in module.py)
        lib = library(kernels.library_path)
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
        raw.library = lib  # a view of the weights (a param's array) keeps the library open
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

    def export_library(self, path, options=(), *, key=None) -> Path:
        """Write one shared library holding the kernels, the plan and the weights, sealed (a
        checksum, tessera's version and the target; signed when `key` is given)."""
        if not self._kernels.has_code_to_link():
            return self._kernels.export_library(path, options, key=key)  # a loaded model
        with tempfile.TemporaryDirectory(prefix="tessera-params-") as tmp:
            files = []
            if self._blob.nbytes:
                files.append(write_blob_assembly(Path(tmp), self._blob))
            metadata = {PLAN_KEY: self.plan}
            return self._kernels.export_library(
                path, options, extra_files=files, extra_metadata=metadata, key=key
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

    def __init__(self, factory: GraphExecutorFactory, dev: Device, counter=None):
        if not isinstance(dev, Device) or dev.device_type != "cpu":
            raise ValueError(f"a compiled model runs on cpu devices here, got {dev!r}")
        plan = factory.plan
        self.factory, self.device = factory, dev
        self.input_specs = [
            (i["name"], i["dtype"], _shape_spec(i["shape"])) for i in plan["inputs"]
        ]
        # the inputs the user sets: all but the run counter (Note [random call counter])
        self.counter_slot = counter_slot(self.input_specs)
        self.user_specs = self.input_specs[: self.counter_slot]
        self.input_index = {name: k for k, (name, _, _) in enumerate(self.user_specs)}
        self.counter = counter if counter is not None else RunCounter()
        self.params = [NDArray(factory._param_array(p), p["dtype"], dev) for p in plan["params"]]
        # symbolic dims: buffers sized per binding of the dims (Note [dynamic plan])
        self.dynamic = DynamicPlan(plan) if "dynamic" in plan else None
        if self.dynamic is not None:
            self._init_dynamic(plan)
            return
        self.inputs = [_empty(shape, dtype, dev) for _, dtype, shape in self.input_specs]
        self.arena = _empty((int(plan["arena_nbytes"]),), "uint8", dev)
        self.outputs: list[NDArray] = []
        for k, out in enumerate(plan["outputs"]):
            kind, index = out["storage"]
            if (kind, index) == ("output", k):
                self.outputs.append(_empty(tuple(out["shape"]), out["dtype"], dev))
            else:
                self.outputs.append(self._storage(kind, index, out["dtype"], out["shape"]))
        self.calls = [
            self._prepare(call) if "control" not in call else self._prepare_control(call)
            for call in plan["calls"]
        ]
        self.has_control_flow = any(cfunc is None for cfunc, _, _, _ in self.calls)
        # an output whose row count is decided at run time (Note [control calls])
        self.rows = [
            self._storage(*out["rows"], "int64", ()) if "rows" in out else None
            for out in plan["outputs"]
        ]
        self.rows_axis = [int(out.get("rows_axis", 0)) for out in plan["outputs"]]
        self.nodes = [list(call.get("nodes", ())) for call in plan["calls"]]
        self._entry = factory._entry
        self.use_native = self._entry is not None  # False: the Python loop (for debugging)
        self._entry_args = self._native_args(factory) if self._entry is not None else None
        self._call_ns = (ctypes.c_int64 * max(1, len(self.calls)))()

    # -- symbolic dims (Note [dynamic plan] in runtime/shape_expr.py) -------------------------

    # Note [per-call binding]
    # A dynamic plan binds its dims and lays out the arena, outputs and calls only when an
    # input changed shape (and with it, maybe its storage): `set_dynamic_input` drops the
    # binding then, and `_rebind` returns at once while it stands. So a run at the shapes of
    # the last one costs what a specialized plan's run does: no tuple of shapes or addresses is
    # built and compared per call (that took ~2.5 us, as long as a small MLP's kernels). Writing
    # into an input's own array (`get_input`) changes neither, so it keeps the binding.

    def _init_dynamic(self, plan: dict) -> None:
        """Inputs at their dims' smallest sizes; outputs, arena and calls made by `_rebind`."""
        dyn = self.dynamic
        smallest = {name: lo for name, lo, _ in dyn.dims}
        self._backing: dict[tuple, NDArray] = {}  # ("input" | "output", k) -> uint8 storage
        self.inputs = []
        for k, (_, dtype, _) in enumerate(self.input_specs):
            shape = tuple(evaluate(d, smallest) for d in dyn.inputs[k][1])
            self.inputs.append(self._grown(("input", k), shape, dtype))
        self.arena = _empty((0,), "uint8", self.device)
        self.outputs, self.calls, self.rows = [], [], [None] * len(plan["outputs"])
        self.nodes = [list(call.get("nodes", ())) for call in plan["calls"]]
        self.has_control_flow = False
        self._entry = self.factory._entry
        self.use_native = self._entry is not None
        self._entry_args = None
        self._call_ns = (ctypes.c_int64 * max(1, len(plan["calls"])))()
        self._bound: tuple | None = None  # the input shapes of the binding; None: bind anew

    def _grown(self, key: tuple, shape: tuple, dtype: str) -> NDArray:
        """An array of `shape` over the storage kept for `key`, grown when it is too small."""
        nbytes = nbytes_of(dtype, shape)
        backing = self._backing.get(key)
        if backing is None or backing.nbytes < nbytes:
            backing = self._backing[key] = _empty((max(nbytes, ALIGNMENT),), "uint8", self.device)
        storage = np.dtype(STORAGE[dtype])
        view = np.ndarray(shape, storage, buffer=backing._array, offset=0)
        return NDArray(view, dtype, self.device)

    def set_dynamic_input(self, slot: int, value) -> None:
        """Copy `value` into input `slot` at its own shape (checked by the caller)."""
        _, dtype, _ = self.input_specs[slot]
        shape = tuple(value.shape)
        if tuple(self.inputs[slot].shape) != shape:
            self.inputs[slot] = self._grown(("input", slot), shape, dtype)
            self._bound = None  # a new shape or storage: the next run binds again
        self.inputs[slot].copyfrom(value)

    def _rebind(self) -> None:
        """Bind the dims from the inputs' shapes; lay out the arena (grown when too small, its
        table rewritten), the outputs and the calls for them. Nothing is done when no input
        changed shape or storage since the last run (Note [per-call binding])."""
        if self._bound is not None:
            return
        shapes = tuple(tuple(a.shape) for a in self.inputs)
        dyn, plan = self.dynamic, self.factory.plan
        names = [name for name, _, _ in self.input_specs]
        values = dyn.bind(dict(zip(names, shapes, strict=True)))
        layout = dyn.layout(values)
        if self.arena.nbytes < layout.arena_nbytes:
            self.arena = _empty((layout.arena_nbytes,), "uint8", self.device)
        self.arena._array[: layout.table.nbytes] = layout.table.view(np.uint8)
        self.outputs = []
        for k, (out, shape) in enumerate(zip(plan["outputs"], layout.output_shapes, strict=True)):
            kind, index = out["storage"]
            if (kind, index) == ("output", k):
                self.outputs.append(self._grown(("output", k), shape, out["dtype"]))
            else:
                self.outputs.append(self._storage(kind, index, out["dtype"], shape))
        table = [int(t) for t in layout.table]
        self.calls = [self._prepare(_resolve_call(c, table, values)) for c in plan["calls"]]
        if self._entry is not None:
            self._entry_args = self._native_args(self.factory)
        self._bound = shapes

    def _storage(self, kind: str, index: int, dtype: str, shape) -> NDArray:
        """The array behind an argument [kind, index] (a view into the arena for "arena")."""
        tables = {"input": self.inputs, "param": self.params, "output": self.outputs}
        if kind in tables:
            if not 0 <= index < len(tables[kind]):
                raise ValueError(f"executor plan: there is no {kind} {index}")
            array, shape = tables[kind][index], tuple(shape)
            # a view call's bytes under another shape (Note [view calls] in
            # transform/plan_memory.py): a reshaped view where dtype and size agree (else the
            # caller's check reports the argument)
            same = tuple(array.shape) == shape or array.dtype != dtype
            if same or nbytes_of(dtype, shape) != array.nbytes:
                return array
            return NDArray(array._array.reshape(shape), dtype, self.device)
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
        shapes = call.get("shapes", ())  # a dynamic plan's: the dims a kernel's info writes
        for k, (param, (kind, index)) in enumerate(zip(buffers, call["args"], strict=True)):
            shape = tuple(d if isinstance(d, int) else bound.get(d) for d in param.shape)
            if None in shape and k < len(shapes):  # as text (an expression): the plan's value
                shape = tuple(s if d is None else d for d, s in zip(shape, shapes[k], strict=True))
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

    def _prepare_control(self, call: dict):
        """A control call (Note [control calls] in graph_build/control_flow.py): its functions'
        kernel calls checked against their kernels' infos; it runs in the native entry only."""
        functions = self.factory.plan.get("functions", [])
        for k in call.get("functions", ()):
            if not isinstance(k, int) or not 1 <= k <= len(functions):
                raise ValueError(f"executor plan: a control call names no function {k!r}")
            check_function_calls(self.factory, functions[k - 1])
        return None, None, None, f"control.{call['control']}"

    def output(self, index: int) -> NDArray:
        """Output `index` of the last run: its rows below the run's count when a loop decided
        them (a scan output of a loop that stopped early)."""
        array, rows = self.outputs[index], self.rows[index]
        if rows is None:
            return array
        n, axis = int(rows.numpy()[()]), self.rows_axis[index]
        kept = (slice(None),) * axis + (slice(0, max(0, min(n, array.shape[axis]))),)
        view = array._array[kept]
        view = view if axis == 0 else np.ascontiguousarray(view)
        return NDArray(view, array.dtype, self.device)

    def _native_args(self, factory: GraphExecutorFactory) -> tuple:
        """(inputs, outputs, params, arena) of the entry: pointers fixed for this executor."""
        inputs = [a.data_ptr for a in self.inputs]
        outputs = [a.data_ptr for a in self.outputs]
        in_array = (ctypes.c_void_p * max(1, len(inputs)))(*inputs)
        out_array = (ctypes.c_void_p * max(1, len(outputs)))(*outputs)
        params = factory._blob.ctypes.data if factory._blob.nbytes else None
        return in_array, out_array, params, self.arena.data_ptr

    def _count_run(self) -> None:
        """Write this run's index into the run counter input, if the model has one."""
        if self.counter_slot < len(self.inputs):
            self.inputs[self.counter_slot]._array[()] = self.counter.take()

    def run(self) -> None:
        if self.dynamic is not None:
            self._rebind()
        self._count_run()
        if self.use_native:
            code = self._entry(*self._entry_args, None)
            if code:
                self._failed(code - 1)
            return
        if self.has_control_flow:
            raise RuntimeError("a model with control flow runs in its native entry only")
        for k, (cfunc, buffers, values, _) in enumerate(self.calls):
            if cfunc(buffers, values):
                self._failed(k)

    def _failed(self, k: int):
        nodes = f" (source nodes: {', '.join(self.nodes[k])})" if self.nodes[k] else ""
        reasons = _fail_messages(self.factory.plan, self.factory.plan["calls"][k])
        if reasons:
            raise RuntimeError(f"call {k} of the plan{nodes} failed: {'; '.join(reasons)}")
        raise RuntimeError(
            f"kernel {self.calls[k][3]} failed in call {k} of the plan{nodes}: "
            "it returned a non-zero code"
        )

    def time_calls(self) -> np.ndarray:
        """Run once, timing each call: seconds per call, in plan order."""
        if self.dynamic is not None:
            self._rebind()
        self._count_run()
        if self.use_native:
            code = self._entry(*self._entry_args, self._call_ns)
            if code:
                self._failed(code - 1)
            return np.ctypeslib.as_array(self._call_ns)[: len(self.calls)] * 1e-9
        if self.has_control_flow:
            raise RuntimeError("a model with control flow runs in its native entry only")
        times = np.zeros(len(self.calls))
        for k, (cfunc, buffers, values, _) in enumerate(self.calls):
            start = time.perf_counter()
            code = cfunc(buffers, values)
            times[k] = time.perf_counter() - start
            if code:
                self._failed(k)
        return times


def _shape_spec(shape: list) -> tuple:
    """An input's shape as the user sees it: ints, dim names, and expressions as text."""
    return tuple(d if isinstance(d, int | str) else show_shape([d])[1:-1] for d in shape)


def _resolve_call(call: dict, table: list[int], dims: dict[str, int]) -> dict:
    """A call of a dynamic plan with its ["dyn", t] arguments and vars resolved by the arena's
    table and its values' shapes by the dims (Note [dynamic plan]): a static plan's call."""
    args = [["arena", table[a[1]]] if a[0] == "dyn" else a for a in call["args"]]
    values = [table[v[1]] if isinstance(v, list) else v for v in call.get("vars", ())]
    shapes = [[evaluate(d, dims) for d in s] for s in call.get("shapes", ())]
    return {**call, "args": args, "vars": values, "shapes": shapes}


def _fail_messages(plan: dict, call: dict) -> list[str]:
    """The messages of the branches ruled out at the compiled shapes under a control call."""
    if call.get("control") == "fail":
        return [str(call.get("message", "a branch that cannot run was taken"))]
    out = []
    for k in call.get("functions", ()):
        for inner in plan["functions"][k - 1]["calls"]:
            out += _fail_messages(plan, inner)
    return out


def check_function_calls(factory: GraphExecutorFactory, plan: dict) -> None:
    """Check every kernel call of a sub-function's plan against its kernel's info: each
    argument's dtype and shape are those of what it names (the function's inputs and outputs,
    a weight) or it lies in the function's arena."""
    params = factory.plan["params"]
    for call in plan["calls"]:
        if "control" in call:
            continue
        name = call["kernel"]
        info = factory.get_lib()[name].info
        buffers = [p for p in info.params if p.kind == "buffer"]
        if len(buffers) != len(call["args"]) or info.vars:
            raise ValueError(f"executor plan: a sub-function's call of {name} does not fit it")
        for param, (kind, index) in zip(buffers, call["args"], strict=True):
            specs = {"input": plan["inputs"], "output": plan["outputs"], "param": params}
            if kind == "arena":
                ok = index + nbytes_of(param.dtype, param.shape) <= plan["arena_nbytes"]
            else:
                spec = specs[kind][index] if 0 <= index < len(specs[kind]) else None
                ok = spec is not None and (spec["dtype"], list(spec["shape"])) == (
                    param.dtype,
                    list(param.shape),
                )
            if not ok:
                raise ValueError(
                    f"executor plan: argument {param.name!r} of {name} in a sub-function does "
                    f"not fit [{kind}, {index}]"
                )


def _empty(shape, dtype: str, dev: Device) -> NDArray:
    array = empty(shape, dtype, dev)
    array._array.fill(0)  # deterministic contents before the first set_input / run
    return array
