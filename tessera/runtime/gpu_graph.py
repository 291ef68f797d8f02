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
        self.launches = [self._prepare(call) for call in plan["calls"]]

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

    def _prepare(self, call: dict) -> list[tuple]:
        """The launches of one call, their buffers resolved once: (kernel, buffers, grid, block)."""
        fplan = self.functions[call["kernel"]]
        if len(fplan["params"]) != len(call["args"]):
            raise ValueError(
                f"executor plan: {call['kernel']} takes {len(fplan['params'])} arrays, the plan "
                f"passes {len(call['args'])}"
            )
        arrays = [
            self._storage(kind, index, spec)
            for (kind, index), spec in zip(call["args"], fplan["params"], strict=True)
        ]
        temps = self.temps[call["kernel"]]
        out = []
        for launch in fplan["launches"]:
            bufs = [arrays[i].handle if k == "param" else temps[i] for k, i in launch["args"]]
            out.append((launch["kernel"], bufs, launch["grid"], launch["block"]))
        return out

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
        for launches in self.launches:
            for kernel, bufs, grid, block in launches:
                self.api.launch(self.program, kernel, bufs, grid, block)
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
        return self.outputs[index]


def _array(spec: dict, dev: Device) -> GPUArray:
    return GPUArray(tuple(spec["shape"]), spec["dtype"], dev)
