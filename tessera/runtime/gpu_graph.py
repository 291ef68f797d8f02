"""Compiled models on a GPU: the executor plan (graph_executor's format) run with GPU kernels.

    lib = tessera.build(mod, target="opencl", params=params)   # a GPUGraphFactory
    m = lib["default"](tessera.opencl(0))                        # a GPUGraphModule
    m.set_input("data", x); m.run(); y = m.get_output(0).numpy()
    lib.export_library("model.tsgpu"); tessera.runtime.load_module("model.tsgpu")

The plan is the CPU executor's (Note [executor plan] in graph_executor.py): each call names a
function of the GPUModule (a fused group: one or more kernels, runtime/gpu_module.py) and where
each argument lives: a model input, a weight, an arena slot or a model output. On a device the
weights are uploaded once, when the module is made; the intermediates live in one device arena
(slots are views of it); a function's own temporaries are allocated once per module too. `run`
queues every launch without a host round trip and waits once at the end.

A model with control flow (Note [control calls] in graph_build/control_flow.py) has a plan per
branch and loop body; the host runs them: an If reads its condition byte from the device and
queues one branch's launches, a Loop reads its trip count and condition, then per step writes
the step number, queues the body, copies the next carried values and the scan slices on the
device and reads the next condition (one round trip per step, the price of a decision the host
makes). Every place is (an allocation, a byte offset): a function's inputs and outputs are the
places its caller binds, its arena the main arena from the control call's region on.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import numpy as np

from tessera.runtime.gpu_module import (
    GPUArray,
    GPUModule,
    device_api,
    load_gpu_module,
    write_sealed,
)
from tessera.runtime.ndarray import Device
from tessera.runtime.run_counter import RunCounter, counter_slot


class GPUGraphFactory:
    """A compiled model for a GPU: its GPUModule, executor plan and weights blob."""

    def __init__(self, module: GPUModule, plan: dict, params_blob: np.ndarray):
        self.module, self.plan = module, plan
        self.blob = np.asarray(params_blob).view(np.uint8).reshape(-1)

    def __getitem__(self, name: str):
        if name != "default":
            raise KeyError(f"a compiled model has the function 'default', not {name!r}")
        return self.create

    def create(self, dev: Device | None = None) -> GPUGraphModule:
        return GPUGraphModule(self, dev or Device(self.module.kind, 0))

    @property
    def num_kernels(self) -> int:
        return sum(len(p["launches"]) for p in self.module.plans)

    def get_source(self, fmt: str = "") -> str:
        return self.module.source

    def get_params(self) -> dict[str, np.ndarray]:
        out = {}
        for p in self.plan["params"]:
            storage = GPUArray.storage_dtype(p["dtype"])
            count = int(np.prod(p["shape"], dtype=np.int64))
            data = self.blob[p["offset"] : p["offset"] + count * storage.itemsize]
            out[p["name"]] = data.view(storage).reshape(p["shape"])
        return out

    def export_library(self, path, *, key=None) -> Path:
        """One sealed file: device code, kernel plans, executor plan and the weights."""

        def entries(z: zipfile.ZipFile) -> None:
            self.module.write_entries(z)
            z.writestr("graph.json", json.dumps(self.plan))
            z.writestr("params.bin", self.blob.tobytes())

        return write_sealed(path, self.module.kind, entries, key)

    def __repr__(self) -> str:
        return f"<GPUGraphFactory {self.module.kind}: {len(self.plan['calls'])} calls>"


def load_gpu_library(z: zipfile.ZipFile, name: str):
    """A GPUModule, or for a compiled model a GPUGraphFactory, from an exported archive."""
    module = load_gpu_module(z, name)
    if "graph.json" not in z.namelist():
        return module
    plan = json.loads(z.read("graph.json"))
    blob = np.frombuffer(z.read("params.bin"), np.uint8)
    return GPUGraphFactory(module, plan, blob)


class GPUGraphModule:
    """One instance of a compiled model on a GPU device (the GraphModule API)."""

    def __init__(self, factory: GPUGraphFactory, dev: Device):
        self.factory, self.device = factory, dev
        plan = factory.plan
        self.api = device_api(dev)
        self.program = factory.module.program(dev)  # build (OpenCL) or load (CUDA) first
        self.inputs = [_array(i, dev) for i in plan["inputs"]]
        # the user's inputs: all but the run counter (Note [random call counter])
        specs = [(i["name"], i["dtype"], tuple(i["shape"])) for i in plan["inputs"]]
        self.counter_slot, self.counter = counter_slot(specs), RunCounter()
        self.user_inputs = plan["inputs"][: self.counter_slot]
        self.input_index = {i["name"]: k for k, i in enumerate(self.user_inputs)}
        weights = factory.get_params()
        self.params = [
            GPUArray(tuple(p["shape"]), p["dtype"], dev).copyfrom(weights[p["name"]])
            for p in plan["params"]
        ]
        self.arena = self.api.alloc(max(int(plan["arena_nbytes"]), 1))
        self.outputs: list[GPUArray] = []
        for k, out in enumerate(plan["outputs"]):
            kind, index = out["storage"]
            if (kind, index) == ("output", k):
                self.outputs.append(_array(out, dev))
            else:
                self.outputs.append(self._storage(kind, index, out))
        self.functions = {p["name"]: p for p in factory.module.plans}
        self.temps = {
            name: [self.api.alloc(max(t["nbytes"], 1)) for t in fp["temps"]]
            for name, fp in self.functions.items()
        }
        self.views: dict[tuple, object] = {}  # (id(allocation), offset, nbytes) -> its view
        self.owned: list[GPUArray] = []  # loops' scan-slice buffers
        own = [(o.handle, 0) if o._owned else None for o in self.outputs]
        self.main_frame = _Frame([(a.handle, 0) for a in self.inputs], own, 0)
        self.steps = self._prepare_function(plan, self.main_frame)

    def __del__(self):
        api = getattr(self, "api", None)
        if api is None:
            return
        for handle in [getattr(self, "arena", None)] + [
            t for temps in getattr(self, "temps", {}).values() for t in temps
        ]:
            if handle is not None:
                api.free(handle)

    def _storage(self, kind: str, index: int, spec: dict) -> GPUArray:
        if kind == "input":
            return self.inputs[index]
        if kind == "param":
            return self.params[index]
        if kind == "output":
            return self.outputs[index]
        if kind == "arena":
            return GPUArray(tuple(spec["shape"]), spec["dtype"], self.device, (self.arena, index))
        raise ValueError(f"executor plan: unknown argument kind {kind!r}")

    def _place(self, arg, frame: _Frame) -> tuple:
        """(allocation, byte offset) of a plan argument in `frame`."""
        kind, index = arg
        if kind == "input":
            return frame.inputs[index]
        if kind == "output":
            return frame.outputs[index]
        if kind == "param":
            return (self.params[index].handle, 0)
        if kind == "arena":
            return (self.arena, frame.base + int(index))
        raise ValueError(f"executor plan: unknown argument kind {kind!r}")

    def _buffer(self, place: tuple, nbytes: int):
        """A kernel argument of `nbytes` at `place`: the allocation itself, or a view of it."""
        handle, offset = place
        if offset == 0:
            return handle
        key = (id(handle), offset, nbytes)
        if key not in self.views:
            self.views[key] = (self.api.view(handle, offset, max(nbytes, 1)), handle)
        return self.views[key][0]

    def _prepare_function(self, fplan: dict, frame: _Frame) -> list:
        """The steps of a plan function in `frame`: a call's launches (kernel, buffers, grid,
        block), or a control call's runner."""
        steps = []
        for call in fplan["calls"]:
            if "control" in call:
                steps.append(self._prepare_control(call, frame))
            else:
                steps.append(self._prepare_call(call, frame))
        return steps

    def _prepare_call(self, call: dict, frame: _Frame) -> list[tuple]:
        """The launches of one call, their buffers resolved once: (kernel, buffers, grid, block)."""
        fplan = self.functions[call["kernel"]]
        if len(fplan["params"]) != len(call["args"]):
            raise ValueError(
                f"executor plan: {call['kernel']} takes {len(fplan['params'])} arrays, the plan "
                f"passes {len(call['args'])}"
            )
        arrays = [
            self._buffer(self._place(arg, frame), _nbytes(spec))
            for arg, spec in zip(call["args"], fplan["params"], strict=True)
        ]
        temps = self.temps[call["kernel"]]
        out = []
        for launch in fplan["launches"]:
            bufs = [arrays[i] if k == "param" else temps[i] for k, i in launch["args"]]
            out.append((launch["kernel"], bufs, launch["grid"], launch["block"]))
        return out

    def _sub_frame(self, call: dict, k: int, inputs: list, outputs: list, frame: _Frame):
        sub = self.factory.plan["functions"][call["functions"][k] - 1]
        return sub, _Frame(inputs, outputs, frame.base + int(call["region"]))

    def _prepare_control(self, call: dict, frame: _Frame):
        """A runner of a control call (Note [control calls] in graph_build/control_flow.py)."""
        kind = call["control"]
        if kind == "fail":
            return _Fail(call)
        if kind == "if":
            cond = self._place(call["args"][0], frame)
            ins = [self._place(a, frame) for a in call["args"][1:]]
            outs = [self._place(a, frame) for a in call["outputs"]]
            branches = []
            for k in range(2):
                sub, sub_frame = self._sub_frame(call, k, ins, outs, frame)
                branches.append(self._prepare_function(sub, sub_frame))
            return _If(self, cond, branches)
        if kind == "loop":
            return _Loop(self, call, frame)
        raise ValueError(f"executor plan: unknown control call {kind!r}")

    def _run_steps(self, steps: list) -> None:
        for step in steps:
            if isinstance(step, list):
                for kernel, bufs, grid, block in step:
                    self.api.launch(self.program, kernel, bufs, grid, block)
            else:
                step.run()

    def _read(self, place: tuple, dtype) -> int:
        host = np.zeros(1, dtype)
        self.api.read(place[0], place[1], host)
        return int(host[0])

    def _write(self, place: tuple, value, dtype) -> None:
        self.api.write(place[0], place[1], np.array([value], dtype))

    def set_input(self, key=None, value=None, **inputs) -> None:
        if key is not None:
            inputs[key] = value
        for name, v in inputs.items():
            index = name if isinstance(name, int) else self.input_index.get(name)
            if isinstance(index, int) and not 0 <= index < len(self.user_inputs):
                index = None
            if index is None:
                raise KeyError(f"no input {name!r} (inputs: {', '.join(self.input_index)})")
            values = np.asarray(v)
            if values.shape != self.inputs[index].shape:
                raise ValueError(
                    f"input {name!r}: expected shape {self.inputs[index].shape}, got {values.shape}"
                )
            self.inputs[index].copyfrom(values)

    def run(self, **inputs) -> None:
        if inputs:
            self.set_input(**inputs)
        if self.counter_slot < len(self.inputs):
            self.inputs[self.counter_slot].copyfrom(np.array(self.counter.take(), np.int64))
        self._run_steps(self.steps)
        self.api.sync()

    def get_input_info(self) -> tuple[dict[str, tuple], dict[str, str]]:
        """(shapes by input name, dtypes by input name), as GraphModule gives them."""
        specs = self.user_inputs
        return {i["name"]: tuple(i["shape"]) for i in specs}, {i["name"]: i["dtype"] for i in specs}

    def get_num_outputs(self) -> int:
        return len(self.outputs)

    def get_num_inputs(self) -> int:
        return len(self.user_inputs)

    def get_output(self, index: int) -> GPUArray:
        out, spec = self.outputs[index], self.factory.plan["outputs"][index]
        if "rows" not in spec:
            return out
        # a loop's scan output that may stop early: the rows it wrote (Note [control calls])
        rows = self._read(self._place(spec["rows"], self.main_frame), np.int64)
        if not out._owned:
            raise ValueError(f"output {index}: counted rows need storage of their own")
        return GPUArray((rows, *out.shape[1:]), out.dtype, self.device, view_of=(out.handle, 0))


def _array(spec: dict, dev: Device) -> GPUArray:
    return GPUArray(tuple(spec["shape"]), spec["dtype"], dev)


def _nbytes(spec: dict) -> int:
    size = int(np.prod(spec["shape"], dtype=np.int64))
    return size * GPUArray.storage_dtype(spec["dtype"]).itemsize


class _Frame:
    """Where one plan function's arguments live: its inputs and outputs (the places its caller
    binds), its arena (the main arena from byte `base` on)."""

    __slots__ = ("inputs", "outputs", "base")

    def __init__(self, inputs: list, outputs: list, base: int):
        self.inputs, self.outputs, self.base = inputs, outputs, base


class _Fail:
    """A branch the compiled shapes rule out: taking it raises its message."""

    def __init__(self, call: dict):
        self.message = str(call.get("message", "a branch that cannot run was taken"))

    def run(self) -> None:
        raise RuntimeError(f"the model took a branch that cannot run: {self.message}")


class _If:
    def __init__(self, module: GPUGraphModule, cond: tuple, branches: list):
        self.module, self.cond, self.branches = module, cond, branches

    def run(self) -> None:
        taken = self.module._read(self.cond, np.uint8)  # waits for the queue: a host decision
        self.module._run_steps(self.branches[0 if taken else 1])


class _Loop:
    """A Loop run by the host (module docstring): carried values live in the final outputs'
    storage; the body writes the next ones to scratch slots and each scan slice to a buffer of
    its own, copied to its row after the step (rows need not meet a view's alignment)."""

    def __init__(self, module: GPUGraphModule, call: dict, frame: _Frame):
        self.module = m = module
        n, args, outputs = call["num_carried"], call["args"], call["outputs"]
        place = lambda a: m._place(a, frame)  # noqa: E731
        self.trips, self.cond = place(args[0]), place(args[1])
        self.initial = [place(a) for a in args[2 : 2 + n]]
        self.carried = [place(a) for a in outputs[:n]]
        self.scans = [place(a) for a in outputs[n:-1]]
        self.steps_out = place(outputs[-1])
        self.nbytes, self.slice_nbytes = call["nbytes"], call["slice_nbytes"]
        self.capacity = int(call["capacity"])
        scratch = [place(["arena", x]) for x in call["scratch"]]
        self.step, self.cond_in, self.cond_out, self.next = (
            scratch[0], scratch[1], scratch[2], scratch[3:],
        )  # fmt: skip
        slices = []
        for nbytes in self.slice_nbytes:
            buf = GPUArray((max(int(nbytes), 1),), "uint8", m.device)
            m.owned.append(buf)
            slices.append((buf.handle, 0))
        self.slices = slices
        ins = [self.step, self.cond_in, *self.carried, *(place(a) for a in args[2 + n :])]
        outs = [self.cond_out, *self.next, *slices]
        body, body_frame = m._sub_frame(call, 0, ins, outs, frame)
        self.body = m._prepare_function(body, body_frame)

    def run(self) -> None:
        m, api = self.module, self.module.api
        trips, go = m._read(self.trips, np.int64), m._read(self.cond, np.uint8)
        if self.scans:
            trips = min(trips, self.capacity)
        for (dst, dst_off), (src, src_off), n in zip(
            self.carried, self.initial, self.nbytes, strict=True
        ):
            if (dst, dst_off) != (src, src_off) and n:
                api.copy(dst, dst_off, src, src_off, n)
        i = 0
        while i < trips and go:
            m._write(self.step, i, np.int64)
            m._write(self.cond_in, 1, np.uint8)
            m._run_steps(self.body)
            for (dst, off), (src, _), n in zip(
                self.scans, self.slices, self.slice_nbytes, strict=True
            ):
                if n:
                    api.copy(dst, off + i * int(n), src, 0, n)
            for (dst, dst_off), (src, src_off), n in zip(
                self.carried, self.next, self.nbytes, strict=True
            ):
                if n:
                    api.copy(dst, dst_off, src, src_off, n)
            go = m._read(self.cond_out, np.uint8)
            i += 1
        m._write(self.steps_out, i, np.int64)
