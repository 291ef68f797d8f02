"""ONNX converters for control flow known when converting: Scan (opset 9 on) is unrolled,
its body converted once per step with the step's slices and the carried states bound.

    Scan(s0, xs; body: (s, x_t) -> (s', y_t))  ->  s' after the last step, ys stacked
    If(cond; then, else)  ->  the branch cond selects, inlined (cond must be known)
"""

from __future__ import annotations

import numpy as np

from tessera.frontend.onnx_registry import NodeError, onnx_op


def _take(b, x, axis, index):
    """x[..., index, ...] along axis, the axis removed."""
    shape = b.shape_of(x)
    begin, end = [0] * len(shape), list(shape)
    begin[axis], end[axis] = index, index + 1
    s = b.call("slice", x, begin=tuple(begin), end=tuple(end), strides=(1,) * len(shape))
    return b.reshape(s, shape[:axis] + shape[axis + 1 :])


def _stack(b, items, axis):
    shape = b.shape_of(items[0])
    axis %= len(shape) + 1
    parts = [b.reshape(v, (*shape[:axis], 1, *shape[axis:])) for v in items]
    return parts[0] if len(parts) == 1 else b.call("concatenate", *parts, axis=axis)


@onnx_op("Scan", since=9)
def scan(b, *inputs, body, num_scan_inputs, scan_input_axes=None, scan_input_directions=None,
         scan_output_axes=None, scan_output_directions=None):  # fmt: skip
    m = num_scan_inputs
    states, xs = list(inputs[: len(inputs) - m]), list(inputs[len(inputs) - m :])
    if not xs:
        raise NodeError("needs at least one scan input")
    in_axes = [a % x.type.ndim for a, x in zip(scan_input_axes or [0] * m, xs, strict=True)]
    in_dirs = list(scan_input_directions or [0] * m)
    steps = {b.shape_of(x)[a] for x, a in zip(xs, in_axes, strict=True)}
    if len(steps) != 1 or 0 in steps:
        raise NodeError(f"scan inputs disagree on the number of steps or have none: {steps}")
    (n_steps,) = steps
    names = [vi.name for vi in body.input]
    n_state, n_scan_out = len(states), len(body.output) - len(states)
    ys = [[] for _ in range(n_scan_out)]
    for t in range(n_steps):
        bindings = dict(zip(names[:n_state], states, strict=True))
        for j, x in enumerate(xs):
            index = n_steps - 1 - t if in_dirs[j] else t
            bindings[names[n_state + j]] = _take(b, x, in_axes[j], index)
        outs = b.convert_subgraph(body, bindings)
        states = outs[:n_state]
        for j in range(n_scan_out):
            ys[j].append(outs[n_state + j])
    out_axes = list(scan_output_axes or [0] * n_scan_out)
    out_dirs = list(scan_output_directions or [0] * n_scan_out)
    stacked = [
        _stack(b, items[::-1] if out_dirs[j] else items, out_axes[j]) for j, items in enumerate(ys)
    ]
    return (*states, *stacked)


@onnx_op("If")
def if_(b, cond, *, then_branch, else_branch):
    """The branch is chosen when converting: `cond` must be known (the ONNX backend binds a
    condition fed as an input by value and compiles once per value)."""
    taken = bool(np.asarray(b.known(cond, "cond")).reshape(-1)[0])
    return tuple(b.convert_subgraph(then_branch if taken else else_branch, {}))
