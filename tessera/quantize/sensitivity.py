"""Layer sensitivity: how much of the model's output SQNR each layer costs when it alone is
int8, and which layers to keep float to reach a target output SQNR (Note [layer sensitivity]).

    probe = NoiseProbe(func, layers, target)          # compiled once
    signal, noise = probe.measure(feeds, deltas)      # noise[j]: output error energy, layer j
    keep = keep_float_for(noise, signal, target_db)   # layer positions to keep float
"""

from __future__ import annotations

import math

import numpy as np

from tessera.graph.ir import Call, Function, Value
from tessera.graph.op import get_op

# Note [layer sensitivity]
# A layer's own SQNR (its int8 output against its float one) says little about what it costs
# the model: a classifier's logits feel an error in the last projection directly and one in an
# early depthwise conv through every layer after it, which may amplify or average it out. The
# probe measures the cost itself: the float function with each quantizable layer's output y_j
# replaced by y_j + d_j, d_j a new input (zeros by default), compiled once. For layer j and a
# feed, d_j is that layer's int8 output minus its float output from the same float input (the
# int8 weights, the quantized input, bias correction: what the rewrite emits), every other
# d is zero, and the model's output minus its float output is the error of "layer j alone
# int8" carried through the float network after it. N_j is its energy summed over the feeds,
# S the float output's energy; the layer's output SQNR alone is 10 log10(S / N_j).
# The roundings of different layers are independent and their means are corrected (Note [bias
# correction]), so their output errors are close to uncorrelated and their energies add: with
# the layers Q in int8 the output SQNR is predicted as 10 log10(S / sum_{j in Q} N_j).
# `target_sqnr_db` keeps float the layers with the largest N_j, one at a time, until the
# prediction reaches the target (keep_float_for). What is not in the prediction: a value that
# a residual add reads as its int8 copy (share=True) adds its own rounding there.


def _probe_function(func: Function, layers) -> tuple[Function, list[Value]]:
    """func with an `add` of a new parameter after each layer's output (the parameters, in the
    order of `layers`)."""
    by_index = {layer.index: j for j, layer in enumerate(layers)}
    add = get_op("add")
    body, extra = [], [None] * len(layers)
    for k, call in enumerate(func.body):
        j = by_index.get(k)
        if j is None:
            body.append(call)
            continue
        y = call.outputs[0]
        raw = Value(f"{y.name}_sens_raw", y.type)
        extra[j] = Value(f"sens_noise_{j}", y.type)
        body.append(Call(call.op, call.inputs, call.attrs, (raw,), call.span))
        body.append(Call(add, (raw, extra[j]), {}, (y,), call.span))
    return Function(func.name, func.params + tuple(extra), tuple(body), func.outputs,
                    func.constants), extra  # fmt: skip


class NoiseProbe:
    """The float function compiled with an additive input after each layer (Note [layer
    sensitivity])."""

    def __init__(self, func: Function, layers, target="llvm"):
        import tessera
        from tessera.runtime import GraphModule, cpu
        from tessera.transform import PassContext

        probe, self.noise_inputs = _probe_function(func, layers)
        with PassContext(opt_level=3):
            lib = tessera.build(probe, target=target)
        self.module = GraphModule(lib["default"](cpu(0)))
        self.zeros = [np.zeros(tuple(v.type.shape), str(v.type.dtype)) for v in self.noise_inputs]

    def _run(self, feed: dict) -> np.ndarray:
        m = self.module
        for name, array in feed.items():
            m.set_input(name, np.ascontiguousarray(array))
        m.run()
        outs = [m.get_output(k).numpy().astype(np.float64).ravel()
                for k in range(m.get_num_outputs())]  # fmt: skip
        return np.concatenate(outs)

    def measure(self, feeds, deltas) -> tuple[float, np.ndarray]:
        """(S, N): S the float output's energy over the feeds, N[j] the energy of the output's
        error when layer j's output is off by deltas(f)[j] (feed f) and no other is.
        deltas(f) gives one array per layer (or None: not measured, N[j] = 0)."""
        m = self.module
        signal, noise = 0.0, np.zeros(len(self.noise_inputs))
        for f, feed in enumerate(feeds):
            for v, z in zip(self.noise_inputs, self.zeros, strict=True):
                m.set_input(v.name, z)
            ref = self._run(feed)
            signal += float(np.sum(ref**2))
            for j, d in enumerate(deltas(f)):
                if d is None:
                    continue
                name = self.noise_inputs[j].name
                m.set_input(name, np.ascontiguousarray(d, self.zeros[j].dtype))
                noise[j] += float(np.sum((self._run(feed) - ref) ** 2))
                m.set_input(name, self.zeros[j])
        return signal, noise


def db(signal: float, noise: float) -> float:
    return math.inf if noise <= 0 else 10 * math.log10(max(signal, 1e-30) / noise)


def keep_float_for(noise: np.ndarray, signal: float, target_db: float,
                   candidates) -> list[int]:  # fmt: skip
    """The positions (among `candidates`, indices into noise) to keep float, largest noise
    first, until the predicted output SQNR of the rest reaches target_db (Note [layer
    sensitivity]); all of them when it cannot."""
    order = sorted(candidates, key=lambda j: -noise[j])
    total = float(sum(noise[j] for j in order))
    keep = []
    for j in order:
        if db(signal, total) >= target_db:
            break
        keep.append(j)
        total -= float(noise[j])
    return keep
