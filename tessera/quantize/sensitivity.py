"""Layer sensitivity: how much of the model's output SQNR each layer costs when it alone is
int8, and which layers to keep float to reach a target output SQNR (Note [layer sensitivity]).

    probe = NoiseProbe(func, layers, shared, target)  # compiled once
    signal, noise = probe.measure(feeds, deltas)      # noise[j]: output error energy, layer j
    keep = keep_float_for(noise, signal, target_db, candidates, groups)  # positions kept float
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
# prediction reaches the target (keep_float_for). A value that other ops read as its int8 copy
# (share=True: a residual add reads the block's input; Note [shared quantized values]) gets a
# noise input of its own, before those readers only, its delta the value's quantize-dequantize
# error: its noise counts while any layer reading the value is int8 (`groups`). On
# EfficientNet-Lite0 these are the residual streams, rounded at the coarse scale of the signed
# stream, and leaving them out of the prediction overestimated the output SQNR by ~6 dB.


def _probe_function(func: Function, layers, shared=()) -> tuple[Function, list[Value]]:
    """func with an `add` of a new parameter after each layer's output, and one after each value
    of `shared` that only the readers other than the layers read (the parameters: the layers'
    in the order of `layers`, then shared's)."""
    by_index = {layer.index: j for j, layer in enumerate(layers)}
    layer_calls = {id(layer.call) for layer in layers}
    add = get_op("add")
    n = len(layers)
    extra = [None] * (n + len(shared))
    noisy: dict[int, Value] = {}  # id(shared value) -> value + its noise

    def share(k: int, v: Value, span) -> list[Call]:
        extra[n + k] = Value(f"sens_noise_{n + k}", v.type)
        noisy[id(v)] = Value(f"{v.name}_sens_shared", v.type)
        return [Call(add, (v, extra[n + k]), {}, (noisy[id(v)],), span)]

    where = {id(v): k for k, v in enumerate(shared)}
    body = [c for v in func.params if id(v) in where for c in share(where[id(v)], v, ())]
    for k, call in enumerate(func.body):
        if id(call) not in layer_calls and any(id(v) in noisy for v in call.inputs):
            inputs = tuple(noisy.get(id(v), v) for v in call.inputs)
            call = Call(call.op, inputs, call.attrs, call.outputs, call.span)
        j = by_index.get(k)
        if j is None:
            body.append(call)
        else:
            y = call.outputs[0]
            raw = Value(f"{y.name}_sens_raw", y.type)
            extra[j] = Value(f"sens_noise_{j}", y.type)
            body.append(Call(call.op, call.inputs, call.attrs, (raw,), call.span))
            body.append(Call(add, (raw, extra[j]), {}, (y,), call.span))
        for v in call.outputs:
            if id(v) in where:
                body += share(where[id(v)], v, call.span)
    return Function(func.name, func.params + tuple(extra), tuple(body), func.outputs,
                    func.constants), extra  # fmt: skip


class NoiseProbe:
    """The float function compiled with an additive input after each layer (Note [layer
    sensitivity])."""

    def __init__(self, func: Function, layers, shared=(), target="llvm"):
        import tessera
        from tessera.runtime import GraphModule, cpu
        from tessera.transform import PassContext

        probe, self.noise_inputs = _probe_function(func, layers, shared)
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

    def outputs(self, feeds) -> list[np.ndarray]:
        """The float outputs (all noise inputs zero), flattened, one array per feed."""
        for v, z in zip(self.noise_inputs, self.zeros, strict=True):
            self.module.set_input(v.name, z)
        return [self._run(feed) for feed in feeds]

    def joint_noise(self, feed: dict, ref: np.ndarray, deltas: dict) -> float:
        """The energy of the output's error on `feed` (float output `ref`, from outputs()) when
        the noise inputs {position: array} of `deltas` are set together and the others are
        zero (as outputs() leaves them)."""
        m = self.module
        for j, d in deltas.items():
            m.set_input(self.noise_inputs[j].name, np.ascontiguousarray(d, self.zeros[j].dtype))
        noise = float(np.sum((self._run(feed) - ref) ** 2))
        for j in deltas:
            m.set_input(self.noise_inputs[j].name, self.zeros[j])
        return noise

    def measure(self, feeds, deltas) -> tuple[float, np.ndarray]:
        """(S, N): S the float output's energy over the feeds, N[j] the energy of the output's
        error when noise input j (layer j's output, then the shared values') is deltas(f)[j]
        (feed f) and no other is nonzero. deltas(f) gives one array per noise input (or None:
        not measured, N[j] = 0)."""
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


def predicted_noise(noise, int8, groups=(), upper=None, eight=None) -> float:
    """The output noise energy with the positions `int8` int8 and those of `upper` ({position:
    its noise energy}) at a higher precision (Note [16-bit activations] in
    tessera/quantize/__init__.py): theirs, plus each group's (noise energy, reader positions)
    that has a reader of the 8-bit code: one of `eight` (default: `int8`; a layer with a
    16-bit code reads the float value)."""
    int8 = set(int8)
    eight = int8 if eight is None else set(eight)
    total = float(sum(noise[j] for j in int8)) + sum(
        float(n) for n, readers in groups if eight & set(readers)
    )
    return total + float(sum((upper or {}).values()))


def keep_float_for(noise, signal: float, target_db: float, candidates, groups=()) -> list[int]:
    """The positions (among `candidates`, indices into noise) to keep float until the predicted
    output SQNR of the rest reaches target_db, each step the one whose keeping removes the most
    noise (its own, and a group's when it is the group's last int8 reader; Note [layer
    sensitivity]); all of them when the target cannot be met."""
    return choose_levels([noise], signal, target_db, candidates, groups)[0]


# Note [precision levels]
# A layer runs on the int8 kernels at one of four levels, each a (16-bit activation, split
# weight) pair: "int8" (one pass), "a16" (a 16-bit activation code over its two bytes: two
# passes; Note [16-bit activations] in tessera/quantize/__init__.py), "a16w16" (both: three)
# and "w16" (the 8-bit activation and the weight split into two int8 weights, Note [16-bit
# weights by splitting] in rewrite.py: two passes). A level is "higher" than another when it
# costs more passes; a16 and w16 cost the same and remove different noise (the activation's
# grid or the weight's rounding), so choose_levels weighs them by what each removes per pass.
# A w16 layer reads the same 8-bit code as an int8 one, so a shared value's noise (a residual
# stream's int8 copy, Note [shared quantized values]) still counts while it has such a reader.
LEVELS = ("int8", "a16", "a16w16", "w16")
PASSES = (1, 2, 3, 2)  # int8 kernel passes of a layer at each level of LEVELS
ACT16 = (False, True, True, False)  # the level's activation is a 16-bit code
SPLIT = (False, False, True, True)  # the level's weight is split into two int8 weights


def level_of(act16: bool, split: bool) -> int:
    """The index in LEVELS of a layer with (or without) a 16-bit activation and split weight."""
    return next(v for v in range(len(LEVELS)) if (ACT16[v], SPLIT[v]) == (act16, split))


def choose_levels(levels, signal: float, target_db: float, candidates, groups=(), start=None,
                  upgrade: bool = False) -> tuple[list[int], dict[int, int]]:  # fmt: skip
    """(positions kept float, {position: level}) among `candidates` for an output SQNR of
    target_db. levels[l][j]: layer j's output noise energy alone at level l of LEVELS (0: int8;
    1: a16; 2: a16w16; 3: w16; nan or a missing level: not available); `start`: {position:
    level} to begin from. With `upgrade`, one layer at a time moves to a level of more passes
    (PASSES), the move that removes the most noise per added pass, until the prediction meets
    the target; then, if it is still short, layers are kept float, each step the one whose
    keeping removes the most (Note [precision levels]; Note [16-bit activations] in
    tessera/quantize/__init__.py)."""
    level = {j: (start or {}).get(j, 0) for j in candidates}

    def total(lv):
        upper = {j: levels[v][j] for j, v in lv.items() if v}
        return predicted_noise(levels[0], [j for j, v in lv.items() if not v], groups, upper,
                               [j for j, v in lv.items() if not ACT16[v]])  # fmt: skip

    def short():
        return db(signal, total(level)) < target_db

    while upgrade and short():
        now = total(level)
        moves = [(j, v) for j, u in level.items() for v in range(1, len(levels))
                 if PASSES[v] > PASSES[u] and not np.isnan(levels[v][j])]  # fmt: skip
        if not moves:
            break
        j, v = max(moves, key=lambda m: (now - total({**level, m[0]: m[1]}))
                   / (PASSES[m[1]] - PASSES[level[m[0]]]))  # fmt: skip
        level[j] = v
    keep = []
    while level and short():
        now = total(level)
        j = max(sorted(level),
                key=lambda i: now - total({k: v for k, v in level.items() if k != i}))  # fmt: skip
        keep.append(j)
        del level[j]
    return keep, level
