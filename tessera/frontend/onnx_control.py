"""ONNX converters for control flow known when converting: Scan (opset 9 on) is unrolled,
its body converted once per step with the step's slices and the carried states bound.

    Scan(s0, xs; body: (s, x_t) -> (s', y_t))  ->  s' after the last step, ys stacked

and control flow decided at run time, each subgraph a graph function of its own that a control
op (graph/ops/control.py) runs natively in the compiled model:

    If(cond; then, else)         ->  control.if (inlined when cond is known when converting)
    Loop(M, cond, v0; body)      ->  control.loop (folded away when every input is known)

A subgraph reads outer values: those known when converting are copied into its function (they
fold there), the others become its parameters after its own inputs. Branch outputs and
loop-carried values keep one static type; a Loop's scan outputs need a known trip count (their
room), and when the loop may stop early only the rows below its step count are defined, so such
a scan output may only be a graph output (the executor returns those rows). A subgraph whose
random ops draw takes its caller's random stream as a last parameter; a loop body (and each
unrolled step) folds it with its iteration number (Note [random streams] in topi/philox.py).
"""

from __future__ import annotations

import numpy as np

from tessera.frontend.onnx_registry import NodeError, onnx_op
from tessera.graph.ir import Constant, TensorType, Value


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


@onnx_op("Scan", since=8)
def scan8(b, sequence_lens, *inputs, body, num_scan_inputs, directions=None):
    """Scan-8: a batch axis 0 before the scan axis; each batch element scanned alone."""
    if sequence_lens is not None:
        raise NodeError("sequence_lens is not supported (every sequence runs its full length)")
    batch = b.shape_of(inputs[0])[0]
    results = []
    for i in range(batch):
        items = [_take(b, x, 0, i) for x in inputs]
        outs = scan(b, *items, body=body, num_scan_inputs=num_scan_inputs,
                    scan_input_directions=directions)  # fmt: skip
        results.append(outs)
    per_output = list(zip(*results, strict=True))
    return tuple(_stack(b, list(items), 0) for items in per_output)


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
        outs = b.convert_subgraph(body, bindings, step=t)
        states = outs[:n_state]
        for j in range(n_scan_out):
            ys[j].append(outs[n_state + j])
    out_axes = list(scan_output_axes or [0] * n_scan_out)
    out_dirs = list(scan_output_directions or [0] * n_scan_out)
    stacked = [
        _stack(b, items[::-1] if out_dirs[j] else items, out_axes[j]) for j, items in enumerate(ys)
    ]
    return (*states, *stacked)


def _outer(b, *graphs) -> list[str]:
    """The outer names the subgraphs read whose values are computed at run time."""
    from tessera.frontend.onnx import free_names

    names = dict.fromkeys(n for g in graphs for n in free_names(g))
    out = []
    for n in names:
        v = b.env.get(n)
        if isinstance(v, Value) and not isinstance(v, Constant):
            if id(v) in b.partial_rows:
                raise NodeError(f"a subgraph reads {b.partial_rows[id(v)]}")
            out.append(n)
    return out


def _scalar(b, v, dtype: str, what: str):
    """v as a scalar of `dtype` (ONNX allows a one-element tensor)."""
    if v.type.is_static and v.type.size != 1:
        raise NodeError(f"{what} must hold one element, got {v.type}")
    v = b.reshape(v, ())
    return v if str(v.type.dtype) == dtype else b.call("cast", v, dtype=dtype)


@onnx_op("If")
def if_(b, cond, *, then_branch, else_branch):
    """A known condition inlines its branch; otherwise both branches are compiled and the
    executor runs the one the condition selects."""
    if isinstance(cond, Constant):
        taken = bool(np.asarray(cond.array).reshape(-1)[0])
        return tuple(b.convert_subgraph(then_branch if taken else else_branch, {}))
    cond = _scalar(b, cond, "bool", "the condition")
    outer = _outer(b, then_branch, else_branch)
    branches, errors = [], []
    for graph, which in ((then_branch, "then"), (else_branch, "else")):
        try:
            name = b.fresh_name(f"{b.name_hint}_{which}")
            branches.append(b.convert_function(graph, [], outer, name))
            errors.append(None)
        except ValueError as err:
            if "must be a constant" in str(err):  # binding an input by value may make it work
                raise
            branches.append(None)
            errors.append(f"the {which} branch of If {b.node_name or b.name_hint!r} cannot run "
                          f"at the compiled shapes: {err}")  # fmt: skip
    if all(errors):
        raise NodeError(errors[0])
    if any(errors):  # the branch these shapes rule out fails if it is ever taken (control.fail)
        ok = next(f for f in branches if f is not None)
        k = branches.index(None)
        branches[k] = _failing(ok, b.fresh_name(f"{b.name_hint}_fails"), errors[k])
    branches, stream = _with_stream(b, branches)
    then_f, else_f = branches
    for k, (t, e) in enumerate(zip(then_f.outputs, else_f.outputs, strict=True)):
        if t.type != e.type:
            raise NodeError(
                f"output {k}: the then branch gives {t.type}, the else branch {e.type}; "
                "tessera needs one static type per output of an If"
            )
    out = b.call("control.if", cond, *(b.env[n] for n in outer), *stream, then_branch=then_f,
                 else_branch=else_f)  # fmt: skip
    return out if isinstance(out, tuple) else (out,)


def _with_stream(b, funcs: list) -> tuple[list, tuple]:
    """The functions and the caller's extra arguments: when one of them draws random numbers
    (its last parameter is STREAM_PARAM), all take the caller's stream (Note [random streams]
    in topi/philox.py) as their last argument."""
    from dataclasses import replace

    from tessera.runtime.run_counter import STREAM_PARAM

    def draws(f):
        return bool(f.params) and f.params[-1].name == STREAM_PARAM

    if not any(draws(f) for f in funcs):
        return funcs, ()
    stream = Value(STREAM_PARAM, TensorType((), "int64"))
    funcs = [f if draws(f) else replace(f, params=(*f.params, stream)) for f in funcs]
    return funcs, (b.run_counter(),)


def _failing(like, name: str, message: str):
    """A function of `like`'s signature that fails with `message` when run."""
    from tessera.graph.builder import GraphBuilder

    g = GraphBuilder(fold=False)
    for p in like.params:
        g.param(p.name, p.type.shape, p.type.dtype)
    types = tuple((tuple(v.type.shape), str(v.type.dtype)) for v in like.outputs)
    outs = g.call("control.fail", message=message, types=types) if types else ()
    outs = outs if isinstance(outs, tuple) else (outs,)
    return g.finish(list(outs), name=name)


INT64_MAX = np.iinfo(np.int64).max


def _passes_condition_through(body) -> bool:
    """The body's next condition is its condition input (directly or by Identity)."""
    cond_in, cond_out = body.input[1].name, body.output[0].name
    producers = {o: n for n in body.node for o in n.output}
    while cond_out != cond_in:
        node = producers.get(cond_out)
        if node is None or node.op_type != "Identity":
            return False
        cond_out = node.input[0]
    return True


@onnx_op("Loop")
def loop(b, M=None, cond=None, *v_initial, body):
    """Run `body` while the step is below M and the condition holds (ONNX Loop)."""
    n = len(v_initial)
    if len(body.input) != 2 + n or len(body.output) < 1 + n:
        raise NodeError(
            f"the body takes {len(body.input)} inputs and returns {len(body.output)} outputs; "
            f"with {n} carried values it takes {2 + n} and returns at least {1 + n}"
        )
    if any(v is None for v in v_initial):
        raise NodeError("a loop-carried value without an initial value is not supported")
    trips = b.const(np.int64(INT64_MAX)) if M is None else _scalar(b, M, "int64", "M")
    first = b.const(np.bool_(True)) if cond is None else _scalar(b, cond, "bool", "cond")
    known_trips = int(trips.array) if isinstance(trips, Constant) else None
    exact = (
        known_trips is not None
        and isinstance(first, Constant)
        and bool(first.array)
        and _passes_condition_through(body)
    )
    if not all(isinstance(v, Value) for v in v_initial):  # a sequence: known when converting
        if known_trips is None or not isinstance(first, Constant):
            raise NodeError(
                "a Loop that carries a sequence runs when converting: its trip count and "
                "condition must be a constant (bind the inputs they come from)"
            )
        return _unrolled(b, body, known_trips, bool(first.array), v_initial)
    outer = _outer(b, body)
    types = [((), "int64"), ((), "bool")] + [(v.type.shape, v.type.dtype) for v in v_initial]
    try:
        name = b.fresh_name(f"{b.name_hint}_body")
        func = b.convert_function(body, types, outer, name, step=True)
    except ValueError as err:
        # a body whose shapes depend on the step number (a Slice at the step) runs unrolled
        # when the number of steps is known
        if not exact or known_trips > UNROLL_LIMIT or "must be a constant" not in str(err):
            raise
        return _unrolled(b, body, known_trips, True, v_initial)
    func = _loop_body_signature(b, func, n)
    (func,), stream = _with_stream(b, [func])
    num_scans = len(func.outputs) - 1 - n
    capacity = 0
    if num_scans:
        if known_trips is None or known_trips == INT64_MAX:
            raise NodeError(
                "the trip count M of a Loop with scan outputs must be a constant when "
                "compiling (it sizes the scan outputs): bind the inputs it is computed from "
                "(from_onnx's input_values)"
            )
        capacity = known_trips
    outs = b.call("control.loop", trips, first, *v_initial, *(b.env[m] for m in outer), *stream,
                  body=func, num_carried=n, capacity=capacity, exact=exact)  # fmt: skip
    outs = outs if isinstance(outs, tuple) else (outs,)
    if not exact:
        for v in outs[n : n + num_scans]:
            b.partial_rows[id(v)] = (
                f"a scan output of Loop {b.node_name or b.name_hint!r} (the loop may stop early)"
            )
    return outs[:-1]


UNROLL_LIMIT = 256  # steps of a Loop that may be unrolled when its body needs the step known


def _unrolled(b, body, trips: int, go: bool, v_initial):
    """The Loop's body converted once per step, the step and condition constants: while the
    step is below `trips` and the body's condition (which must fold) holds."""
    names = [vi.name for vi in body.input]
    n = len(v_initial)
    carried, scans, step = list(v_initial), [[] for _ in body.output[1 + n :]], 0
    while step < trips and go:
        if step >= UNROLL_LIMIT:
            raise NodeError(f"the Loop runs more than {UNROLL_LIMIT} steps when unrolled")
        bindings = {names[0]: b.const(np.int64(step)), names[1]: b.const(np.bool_(go))}
        bindings.update(zip(names[2:], carried, strict=True))
        outs = b.convert_subgraph(body, bindings, step=step)
        if not isinstance(outs[0], Constant):
            raise NodeError("the body's condition must be a constant when the Loop is unrolled")
        go = bool(np.asarray(outs[0].array).reshape(-1)[0])
        carried = outs[1 : 1 + n]
        for items, y in zip(scans, outs[1 + n :], strict=True):
            items.append(y)
        step += 1
    if scans and not step:
        raise NodeError("a Loop of 0 steps with scan outputs is not supported")
    return (*carried, *(_stack(b, items, 0) for items in scans))


def _loop_body_signature(b, func, n: int):
    """The body with a scalar bool condition output (ONNX allows a one-element tensor)."""
    from dataclasses import replace

    from tessera.graph.builder import GraphBuilder

    c = func.outputs[0]
    if str(c.type.dtype) != "bool" or (c.type.is_static and c.type.size != 1):
        raise NodeError(f"the body's condition output must be one bool, got {c.type}")
    for k, (p, o) in enumerate(zip(func.params[2 : 2 + n], func.outputs[1 : 1 + n], strict=True)):
        if p.type != o.type:
            raise NodeError(
                f"loop-carried value {k} enters the body as {p.type} and leaves it as {o.type}; "
                "tessera needs a carried value to keep its shape and dtype"
            )
    if c.type.shape == ():
        return func
    g = GraphBuilder()
    g.params, g.body, g.constants = list(func.params), list(func.body), list(func.constants)
    g._used = {v.name: 1 for call in func.body for v in call.outputs}
    scalar = g.call("reshape", c, newshape=())
    return replace(g.finish([scalar, *func.outputs[1:]], name=func.name))


@onnx_op("FlexAttention", domain="ai.onnx.preview")
def flex_attention(b, Q, K, V, *, score_mod=None, prob_mod=None, scale=None,
                   softmax_precision=None):  # fmt: skip
    """softmax(score_mod(Q K^T * scale)) -> prob_mod -> @ V; the modifiers are subgraphs of one
    tensor, converted inline; scores in float32 (float64 for double inputs) unless
    `softmax_precision` says; K/V heads shared by groups of query heads (GQA)."""
    from tessera.frontend.onnx_attention import _np_type, _repeat_heads

    if Q.type.ndim != 4 or K.type.ndim != 4 or V.type.ndim != 4:
        raise NodeError("Q, K and V must be rank-4 (batch, heads, sequence, head size)")
    hq, hk = b.shape_of(Q)[1], b.shape_of(K)[1]
    if hq % hk:
        raise NodeError(f"{hq} query heads do not group over {hk} key/value heads")
    K, V = _repeat_heads(b, K, hq // hk), _repeat_heads(b, V, hq // hk)
    if softmax_precision is not None:
        work = str(np.dtype(_np_type(softmax_precision)))
    else:
        work = "float64" if str(Q.type.dtype) == "float64" else "float32"
    q, k, v = (x if str(x.type.dtype) == work else b.call("cast", x, dtype=work) for x in (Q, K, V))
    s = 1 / np.sqrt(b.shape_of(Q)[3]) if scale is None else scale
    scores = b.call("matmul", q, b.call("transpose", k, axes=(0, 1, 3, 2)))
    scores = b.call("multiply", scores, b.scalar(s, scores))
    if score_mod is not None:
        (scores,) = b.convert_subgraph(score_mod, {score_mod.input[0].name: scores})
    probs = b.call("nn.softmax", scores, axis=-1)
    if prob_mod is not None:
        (probs,) = b.convert_subgraph(prob_mod, {prob_mod.input[0].name: probs})
    y = b.call("matmul", probs, v)
    return y if str(y.type.dtype) == str(Q.type.dtype) else b.call("cast", y, dtype=Q.type.dtype)
