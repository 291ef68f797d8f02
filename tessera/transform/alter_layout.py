"""Run convolutions, and the ops around them, in the blocked channel layout NCHW[x]c.

    before:  %1 = nn.conv2d(%x, %w, ...) : f32[1, 64, 56, 56]; %2 = add(%1, %b); %3 = nn.relu(%2)
             %4 = nn.conv2d(%3, %w2, ...); return %4
    after:   %1' = nn.conv2d_nchwc(%x, %w', ...) : f32[1, 4, 56, 56, 16]   # %x: 3 channels
             %2' = add(%1', %b') ; %3' = nn.relu(%2'); %4' = nn.conv2d_nchwc(%3', %w2', ...)
             %4 = layout_transform(%4', src_layout="NCHW16c", dst_layout="NCHW"); return %4

(%w', %b': constants re-packed here, at compile time.) See Note [block rule] for the block
sizes. What stays blocked: element-wise ops, broadcasts with per-channel or scalar operands
(bias, batch-norm leftovers), residual adds of two blocked tensors, max/avg/global pools,
concatenation along channels. Any other op gets its input back in NCHW (one transform per
value, inserted before its first such use), and so do the function's outputs. A channel shuffle
(reshape to (N, g, C/g, H, W), transpose(0, 2, 1, 3, 4), reshape back) of a blocked value
becomes one blocked `channel_shuffle`. Which layout a
conv or a pool takes, and its weight in that layout, is its strategy's answer
(`topi.strategy.plan_layout`: the chosen config's layout hook); this pass only moves values
between layouts. It needs the target (`with target:` around the graph passes, as `build` does,
or `target=`); it leaves functions unchanged for targets whose table row has no
`layout_strategies`, and for float types other than float32.
"""

from __future__ import annotations

import contextvars

import numpy as np

from tessera.graph.dims import lowers_symbolic, representative_call
from tessera.graph.ir import Call, Constant, Function, TensorType, Value
from tessera.graph.op import OpKind, get_op
from tessera.target import Target
from tessera.topi import strategy
from tessera.topi.layout import transform_array
from tessera.transform.conv_rewrites import ConvRewrites, as_row, is_column, multiplier, swap_hw
from tessera.transform.conv_taps import live_tap_regions, trim_dead_taps
from tessera.transform.graph_pass import graph_pass, uses
from tessera.transform.pass_context import PassContext

# Note [block rule]
# A tensor of C channels is blocked by the largest power of two that divides C and is at most
# the target's float32 vector lanes (16 with AVX-512, 8 with AVX2, 4 with SSE/NEON): no channel
# padding, so 1000 channels take blocks of 8 and 3 channels blocks of 1 (NCHW1c is NCHW: a conv
# reads such data as it is, with no transform). The conv's strategy decides (its config's
# out_block; by default: blocked only when the output block fills a 256-bit vector, 8 float32,
# or the whole vector where narrower: narrower blocks leave the vector unit mostly idle, so
# such a conv stays in NCHW, generic schedule). A conv's input block is that of its input when
# the input is already blocked (no re-blocking between convs), else the rule's. Grouped convs
# take any blocks (Note [grouped blocks] in topi/x86/conv2d.py). This pass only moves values between
# layouts; which layout a conv wants, and its weights in that layout, the strategy answers.

# Note [channel padding]
# Output channels whose block would be narrower than the vector (1000 classes: blocks of 8 on
# AVX-512) are padded up to a multiple of the lanes when that adds at most 1/8 (1000 -> 1008):
# full vectors do up to twice the work per FMA. The padded weights and per-channel constants are
# zeros, so padded channels hold finite values (zeros, or a constant after `add`) and meet zero
# weights in the next conv. They stay through convs (input channels padded with zero weights),
# depthwise convs (groups widened), pools and the element-wise ops of _PADDED_OK (finite in,
# finite out: never a division or a log that could make a NaN of them); every other use gets the
# value back in NCHW with the padding sliced off.

_PADDED_OK = {
    "nn.relu", "clip", "sigmoid", "tanh", "nn.leaky_relu", "nn.hard_sigmoid", "nn.hard_swish",
    "negative", "abs", "add", "subtract", "multiply", "maximum", "minimum",
}  # fmt: skip

_POOLS = {
    "nn.max_pool2d": "nn.max_pool2d_nchwc",
    "nn.avg_pool2d": "nn.avg_pool2d_nchwc",
    "nn.global_max_pool2d": "nn.global_max_pool2d_nchwc",
    "nn.global_avg_pool2d": "nn.global_avg_pool2d_nchwc",
}


def _layout(block: int) -> str:
    return f"NCHW{block}c"


# the float types blocked for the pass's target: float32, and float16 where the core computes
# in half (Target.blocked_float_dtypes, Note [half blocks])
_BLOCKED: contextvars.ContextVar = contextvars.ContextVar("blocked_dtypes", default=("float32",))


def _is_plain_4d(t: TensorType) -> bool:
    return t.ndim == 4 and _static_channels(t) and str(t.dtype) in _BLOCKED.get()


_INTS = ("uint8", "int8", "int32")  # int8 activations and int32 products, blocked too


def _is_plain(t: TensorType) -> bool:
    """NCHW, or NCL (1-D convs' data: blocked as NCHW[x]c with H = 1, Note [1-D convs])."""
    return t.ndim in (3, 4) and _static_channels(t) and str(t.dtype) in _BLOCKED.get() + _INTS


def _static_channels(t: TensorType) -> bool:
    """Channels static; the batch and the sizes may be symbolic (Note [symbolic blocks])."""
    return isinstance(t.shape[1], int) and not any(isinstance(d, str) for d in t.shape)


# Note [symbolic blocks]
# With a symbolic batch or size (graph/dims.py) and static channels, a conv or a pool is asked
# for its layout at representative sizes (`representative_call`: its config, hence its blocks,
# is the one for those sizes), and rewritten only when its blocked kernel lowers with the
# symbolic dims (`lowers_symbolic`); otherwise what was emitted for it is taken back and it
# stays in NCHW. The blocked convs (direct and Winograd), pools and layout transforms take a
# symbolic batch and sizes, dim expressions included (a width of floordiv(width, 2) after a
# pool), so with static channels they are rewritten as a static call is; a value whose channels
# the blocks pad is sliced back with a slice to the symbolic axes' ends.


def _as_4d_shape(shape) -> tuple[int, ...]:
    return tuple(shape) if len(shape) == 4 else (shape[0], shape[1], 1, shape[2])


# Note [1-D convs]
# A 1-D conv (speech and audio models) is the 2-d conv of its data seen as (N, C, 1, L) with a
# (1, K) kernel: same memory, and then the blocked kernels, the strategy and its knobs serve it
# unchanged. Its NCL values are blocked as NCHW[x]c of height 1; going back to NCL is the layout
# transform and a reshape (free: the same memory order).


class _Rewriter(ConvRewrites):
    def __init__(self, func: Function, target: Target, use_winograd: bool = True,
                 int8: bool = True, float_depthwise: bool = True):  # fmt: skip
        self.func = func
        self.target = target
        self.use_winograd = use_winograd
        self.int8 = int8
        self.float_depthwise = float_depthwise
        self.body: list[Call] = []
        self.constants: list[Constant] = list(func.constants)
        self.blocked: dict[int, tuple[Value, int]] = {}  # id(NCHW value) -> (blocked, block)
        self.reblocked: dict[tuple[int, int], Value] = {}
        self.defined: set[int] = {id(v) for v in (*func.params, *func.constants)}
        self.span: tuple[str, ...] = ()
        self.count = 0
        self.shuffles = _shuffle_chains(func)  # id(first reshape) -> (its chain, groups)
        self.skip: set[int] = set()  # calls a rewrite of an earlier call took over
        self.users = uses(func)
        self.outputs = {id(v) for v in func.outputs}

    # -- values in either layout --------------------------------------------------------------

    def _name(self, v: Value, suffix: str) -> str:
        self.count += 1
        return f"{v.name}_{suffix}{self.count}"

    def emit(self, op_name: str, inputs, attrs, out: Value | None = None, name="v") -> Value:
        op = get_op(op_name)
        (t,) = op.infer_type([v.type for v in inputs], attrs)
        if out is None:
            out = Value(name, t)
        elif out.type != t:
            raise TypeError(f"alter_layout: {op_name} gives {t}, expected {out.type}")
        self.body.append(Call(op, tuple(inputs), attrs, (out,), self.span))
        self.defined.add(id(out))
        return out

    def plain(self, v: Value) -> Value:
        """v in NCHW: v itself, defined by a transform back from its blocked form if needed
        (and a slice of its channels when they are padded)."""
        if id(v) not in self.defined:
            vb, b = self.blocked[id(v)]
            attrs = {"src_layout": _layout(b), "dst_layout": "NCHW"}
            if not self.is_padded(v) and v.type.ndim == 4:
                self.emit("layout_transform", [vb], attrs, out=v)
                return v
            full = self.emit("layout_transform", [vb], attrs, name=self._name(v, "nchw"))
            if self.is_padded(v):
                shape = _as_4d_shape(v.type.shape)
                attrs = {"begin": [0] * 4, "end": list(shape), "strides": [1] * 4}
                out = v if v.type.ndim == 4 else None
                full = self.emit("slice", [full], attrs, out=out, name=self._name(v, "sliced"))
            if v.type.ndim == 3:  # Note [1-D convs]
                self.emit("reshape", [full], {"newshape": list(v.type.shape)}, out=v)
        return v

    def as_4d(self, v: Value) -> Value:
        """A plain NCL value seen as NCHW, (N, C, 1, L) (Note [1-D convs]); 4-d ones as they are."""
        if v.type.ndim == 4:
            return v
        shape = list(_as_4d_shape(v.type.shape))
        if isinstance(v, Constant):
            return self.constant(v.name, v.array.reshape(shape))
        key = (id(v), 0)
        if key not in self.reblocked:
            attrs = {"newshape": shape}
            self.reblocked[key] = self.emit("reshape", [v], attrs, name=self._name(v, "2d"))
        return self.reblocked[key]

    def is_padded(self, v: Value) -> bool:
        """v is blocked with padded channels (Note [channel padding])."""
        if id(v) not in self.blocked:
            return False
        vb, b = self.blocked[id(v)]
        return vb.type.shape[1] * b != v.type.shape[1]

    def blocked_channels(self, v: Value) -> int:
        vb, b = self.blocked.get(id(v), (v, 1))
        return vb.type.shape[1] * b

    def to_block(self, v: Value, block: int) -> Value:
        """v (NCHW, 4-d, channels a multiple of block) in NCHW{block}c (NCHW for block 1)."""
        if id(v) in self.blocked and self.blocked[id(v)][1] == block:
            return self.blocked[id(v)][0]
        if block == 1:  # NCHW1c is NCHW's memory: convs read it as it is (no transform)
            return self.as_4d(self.plain(v) if id(v) in self.blocked else v)
        key = (id(v), block)
        if key not in self.reblocked:
            if isinstance(v, Constant):
                array = v.array.reshape(_as_4d_shape(v.array.shape))
                array = transform_array(array, "NCHW", _layout(block))
                self.reblocked[key] = self.constant(v.name, array)
            else:
                src, layout = v, "NCHW"
                if self.is_padded(v):
                    src = self.plain(v)
                elif id(v) in self.blocked and id(v) not in self.defined:
                    src, b = self.blocked[id(v)]
                    layout = _layout(b)
                src = self.as_4d(src) if layout == "NCHW" else src
                attrs = {"src_layout": layout, "dst_layout": _layout(block)}
                self.reblocked[key] = self.emit(
                    "layout_transform", [src], attrs, name=self._name(v, f"nchw{block}c")
                )
        return self.reblocked[key]

    def constant(self, name: str, array: np.ndarray) -> Constant:
        self.count += 1
        c = Constant.of(f"{name}_{self.count}", array)
        self.constants.append(c)
        self.defined.add(id(c))
        return c

    def block_of(self, v: Value) -> int | None:
        return self.blocked[id(v)][1] if id(v) in self.blocked else None

    def set_blocked(self, v: Value, vb: Value, block: int) -> None:
        self.blocked[id(v)] = (vb, block)

    # -- the rewrite ------------------------------------------------------------------------

    def run(self) -> Function:
        for call in self.func.body:
            self.span = call.span
            if id(call) in self.skip:
                continue
            if not (self.shuffle(call) or self.rewrite(call)):
                inputs = [self.plain(v) if id(v) in self.blocked else v for v in call.inputs]
                same = all(a is b for a, b in zip(inputs, call.inputs, strict=True))
                self.body.append(
                    call
                    if same
                    else Call(call.op, tuple(inputs), call.attrs, call.outputs, call.span)
                )
                self.defined.update(id(v) for v in call.outputs)
        self.span = ()
        outputs = tuple(self.plain(v) if id(v) in self.blocked else v for v in self.func.outputs)
        used = {id(v) for c in self.body for v in c.inputs} | {id(v) for v in outputs}
        constants = [c for c in self.constants if id(c) in used]
        return Function(self.func.name, self.func.params, self.body, outputs, constants)

    def rewrite(self, call: Call) -> bool:
        """Emit a blocked form of `call` and record its output as blocked; False: not done."""
        name = call.op.name
        if name == "split":
            return self.split(call)
        if len(call.outputs) != 1 or not _is_plain(call.outputs[0].type):
            return False
        if name == "nn.conv2d":
            return self.conv(call)
        if name == "qnn.conv2d":
            return self.int8 and self.qnn_conv(call)
        if name == "nn.conv1d":
            return self.conv1d(call)
        if call.outputs[0].type.ndim != 4:
            pass  # NCL values: convs and the element-wise and broadcast ops between them
        elif name in _POOLS:
            return self.pool(call)
        elif name == "concatenate":
            return self.concatenate(call)
        elif name == "image.resize":
            return self.resize(call)
        if call.op.kind == OpKind.ELEMWISE and len(call.inputs) == 1:
            return self.elementwise(call)
        if call.op.kind == OpKind.BROADCAST and len(call.inputs) == 2:
            return self.broadcast(call)
        return False

    def conv(self, call: Call, x: Value | None = None, out: Value | None = None) -> bool:
        """Ask the conv's strategy which layout its config wants; emit that op. `x`, `out`:
        the NCL data and result of a 1-D conv seen as this 2-d one (Note [1-D convs])."""
        if not (_is_plain_4d(call.inputs[0].type) and isinstance(call.inputs[1], Constant)):
            return False
        call = trim_dead_taps(call)
        if x is None and multiplier(call) > 1:
            return self.depthwise_multiplier(call)
        if x is None and (regions := live_tap_regions(call)) is not None:
            return self.live_tap_regions(call, regions)
        if x is None and self.dilated_as_phases(call):
            return True
        x = call.inputs[0] if x is None else x
        out = call.outputs[0] if out is None else out
        column = is_column(call)
        if column:  # Note [column convs]
            call = as_row(call)
        w = call.inputs[1]
        context = self.conv_context(x, self.use_winograd)
        plan = strategy.plan_layout(representative_call(call), self.target, context)
        if plan is None:
            return False
        saved = self._save()
        wb = self.constant(w.name, plan["weight"])
        xb = self.to_block(x, plan["in_block"])
        if column:
            attrs = {"newshape": swap_hw(xb.type.shape)}
            xb = self.emit("reshape", [xb], attrs, name=self._name(x, "row"))
        suffix = "wino" if "winograd" in plan["op"] else "nchwc"
        if not self._emits(plan["op"], [xb, wb], plan["attrs"], self._name(out, suffix)):
            return self._restore(saved)
        yb = self.body[-1].outputs[0]
        if column:
            attrs = {"newshape": swap_hw(yb.type.shape)}
            yb = self.emit("reshape", [yb], attrs, name=self._name(out, "column"))
        self.set_blocked(out, yb, plan["out_block"])
        return True

    def conv_context(self, x: Value, winograd: bool) -> dict:
        """What a float conv's strategy is told of its data `x` (topi.strategy.plan_layout)."""
        return {
            "in_block": self.block_of(x),
            "in_channels": self.blocked_channels(x),
            "in_padded": self.is_padded(x),
            "winograd": winograd,
        }

    def qnn_conv(self, call: Call) -> bool:
        """An int8 conv between blocked int8 activations, where its strategy's answer to
        "blocked" is qnn.conv2d_nchwc (Note [blocked int8 activations] in topi/qnn.py)."""
        (x, w), (out,) = call.inputs, call.outputs
        if not (isinstance(w, Constant) and x.type.is_static and x.type.ndim == 4):
            return False
        if self.is_padded(x):
            return False
        context = {"blocked": True, "in_block": self.block_of(x)}
        context["float_depthwise"] = self.float_depthwise
        plan = strategy.plan_layout(call, self.target, context)
        if plan is not None and plan["op"] == "nn.conv2d" and self.qnn_conv_as_float(call, plan):
            return True
        if plan is None or plan["op"] != "qnn.conv2d_nchwc":
            if id(x) in self.blocked and id(x) not in self.defined:  # a conv left in NCHW
                # (depthwise, grouped, "rows") reads the blocked data as it is: no transform
                xb, _ = self.blocked[id(x)]
                self.emit(call.op.name, [xb, w], call.attrs, out=out)
                return True
            return False
        wb = self.constant(w.name, plan["weight"])
        block = plan["in_block"]
        xb = self.to_block(x, block) if block else self.plain(x) if id(x) in self.blocked else x
        yb = self.emit(plan["op"], [xb, wb], plan["attrs"], name=self._name(out, "nchwc"))
        self.set_blocked(out, yb, plan["out_block"])
        return True

    def qnn_conv_as_float(self, call: Call, plan: dict) -> bool:
        """A depthwise qnn.conv2d as the blocked float conv on its exact integers (Note [float
        depthwise] in topi/x86/int8_strategy.py): float(x_u) - pad_value, the float conv,
        + pad_value * sum(w) per channel, cast to int32. False (nothing emitted): the float
        conv was not rewritten blocked."""
        (x, _), (out,) = call.inputs, call.outputs
        saved, winograd = self._save(), self.use_winograd
        pad = plan["pad_value"] if any(call.attrs["padding"]) else 0
        offset = (128 if str(x.type.dtype) == "int8" else 0) - pad  # x_u - pad
        v = self.through("cast", [x], {"dtype": "float32"}, self._name(x, "float"))
        if offset:
            shift = self.constant(f"{x.name}_offset", np.array(offset, np.float32))
            v = self.through("add", [v, shift], {}, self._name(x, "shifted"))
        w = self.constant(f"{call.inputs[1].name}_float", plan["weight"])
        conv = get_op("nn.conv2d")
        (t,) = conv.infer_type([v.type, w.type], plan["attrs"])
        y = Value(self._name(out, "float"), t)
        self.use_winograd = False  # exact integer sums only (Note [float depthwise])
        try:
            done = self.conv(Call(conv, (v, w), plan["attrs"], (y,), call.span))
        finally:
            self.use_winograd = winograd
        if not done:
            return self._restore(saved)
        # the integers pad_value * sum(w) that the float conv's zero padding left out
        sums = plan["weight"].sum(axis=(1, 2, 3)).astype(np.int64).reshape(-1, 1, 1) * pad
        tail = self._dequantize_tail(out, sums, plan["weight"][0].size)
        if tail is not None:  # out - c, dequantized: in float (Note [float depthwise])
            (sub, deq), shift = tail
            term = self.constant(f"{call.inputs[1].name}_shift", shift.astype(np.float32))
            y = self.through("subtract", [y, term], {}, self._name(out, "shifted"))
            self.through("multiply", [y, deq.inputs[1]], {}, out=deq.outputs[0])
            self.skip.update((id(sub), id(deq)))
            return True
        if pad:
            term = self.constant(f"{call.inputs[1].name}_pad", sums.astype(np.float32))
            y = self.through("add", [y, term], {}, self._name(out, "padded"))
        self.through("cast", [y], {"dtype": "int32"}, out=out)
        return True

    def _dequantize_tail(self, out: Value, sums: np.ndarray, taps: int):
        """((subtract, dequantize), shift) where out's integers only go on to
        dequantize(out - c, scale, zero_point), c constant, and the float conv's sum minus
        shift = c + zero_point - sums is exact in float32 (every operand and result below
        2**24 in magnitude): that float is out - c - zero_point. None otherwise."""
        users = self.users.get(id(out), [])
        if len(users) != 1 or id(out) in self.outputs or users[0].op.name != "subtract":
            return None
        sub = users[0]
        if sub.inputs[0] is not out or not isinstance(sub.inputs[1], Constant):
            return None
        (mid,) = sub.outputs
        after = self.users.get(id(mid), [])
        if len(after) != 1 or id(mid) in self.outputs or after[0].op.name != "qnn.dequantize":
            return None
        deq = after[0]
        c = sub.inputs[1].array
        if c.ndim > 3 and c.shape[:-3] != (1,) * (c.ndim - 3):
            return None
        c = c.reshape(c.shape[-3:]) if c.ndim > 3 else c
        try:
            if np.broadcast_shapes(c.shape, sums.shape) != sums.shape:
                return None  # not per channel (nor one integer)
        except ValueError:
            return None
        shift = c.astype(np.int64) + int(deq.attrs.get("zero_point", 0)) - sums
        if np.abs(shift).max(initial=0) + taps * 255 * 128 >= 2**24:
            return None
        return (sub, deq), np.broadcast_to(shift, sums.shape)

    def through(self, op_name: str, inputs, attrs, name="v", out: Value | None = None) -> Value:
        """A call of `op_name` on NCHW-typed values, rewritten blocked as any call of the
        function would be (else emitted on the plain values); its NCHW-typed output."""
        op = get_op(op_name)
        (t,) = op.infer_type([v.type for v in inputs], attrs)
        out = Value(name, t) if out is None else out
        if not self.rewrite(Call(op, tuple(inputs), attrs, (out,), self.span)):
            plain = [self.plain(v) if id(v) in self.blocked else v for v in inputs]
            self.emit(op_name, plain, attrs, out=out)
        return out

    def _emits(self, op_name: str, inputs, attrs, name: str) -> bool:
        """Emit a blocked op; False when its rules do not take its symbolic dims (Note
        [symbolic blocks]): the caller takes back what it emitted."""
        if all(v.type.is_static for v in inputs):
            self.emit(op_name, inputs, attrs, name=name)
            return True
        try:
            self.emit(op_name, inputs, attrs, name=name)
        except (TypeError, ValueError):  # its type rule wants static shapes
            return False
        return lowers_symbolic(self.body[-1], self.target)

    def _save(self) -> tuple:
        return (
            len(self.body),
            list(self.constants),
            dict(self.reblocked),
            set(self.defined),
            dict(self.blocked),
        )

    def _restore(self, saved: tuple) -> bool:
        """Take back what was emitted since `saved`: False (the call was not rewritten)."""
        n, self.constants, self.reblocked, self.defined, self.blocked = saved
        del self.body[n:]
        return False

    def conv1d(self, call: Call) -> bool:
        """A 1-D conv as the 2-d conv of (N, C, 1, L) data (Note [1-D convs])."""
        x, w = call.inputs
        (out,) = call.outputs
        if not (_is_plain(x.type) and x.type.ndim == 3 and isinstance(w, Constant)):
            return False
        a = call.attrs
        attrs = {
            "strides": [1, *a["strides"]],
            "padding": [0, a["padding"][0], 0, a["padding"][1]],
            "dilation": [1, *a["dilation"]],
            "groups": a.get("groups", 1),
        }
        x4 = Value(x.name, x.type.with_shape(_as_4d_shape(x.type.shape)))
        w4 = Constant.of(w.name, w.array[:, :, None, :])
        y4 = Value(out.name, out.type.with_shape(_as_4d_shape(out.type.shape)))
        conv2d = Call(get_op("nn.conv2d"), (x4, w4), attrs, (y4,), call.span)
        return self.conv(conv2d, x, out)

    def shuffle(self, call: Call) -> bool:
        """The chain of a channel shuffle whose input is blocked: one blocked channel_shuffle."""
        if id(call) not in self.shuffles:
            return False
        (x,) = call.inputs
        block = self.block_of(x)
        if block is None or self.is_padded(x):
            return False
        chain, groups = self.shuffles[id(call)]
        out = chain[-1].outputs[0]
        xb, attrs = self.to_block(x, block), {"groups": groups}
        yb = self.emit("channel_shuffle", [xb], attrs, name=self._name(out, "nchwc"))
        self.set_blocked(out, yb, block)
        self.skip.update(id(c) for c in chain[1:])
        return True

    def pool(self, call: Call) -> bool:
        (x,), (out,) = call.inputs, call.outputs
        block = self.block_of(x)
        if block is None:
            return False  # a pool alone is no reason to change layouts
        if call.op.name in ("nn.max_pool2d", "nn.avg_pool2d"):  # those with a strategy
            asked = representative_call(call)
            plan = strategy.plan_layout(asked, self.target, {"in_block": block})
            if plan is None:
                return False
            op, attrs = plan["op"], plan["attrs"]
        else:
            op, attrs = _POOLS[call.op.name], call.attrs
        saved = self._save()
        if not self._emits(op, [self.to_block(x, block)], attrs, self._name(out, "nchwc")):
            return self._restore(saved)
        yb = self.body[-1].outputs[0]
        self.set_blocked(out, yb, block)
        return True

    def elementwise(self, call: Call) -> bool:
        (x,), (out,) = call.inputs, call.outputs
        block = self.block_of(x)
        if block is None or x.type.shape != out.type.shape:
            return False
        if self.is_padded(x) and call.op.name not in _PADDED_OK:
            return False
        yb = self.emit(
            call.op.name, [self.to_block(x, block)], call.attrs, name=self._name(out, "nchwc")
        )
        self.set_blocked(out, yb, block)
        return True

    def broadcast(self, call: Call) -> bool:
        (out,) = call.outputs
        blocked = [v for v in call.inputs if self.block_of(v) is not None]
        if not blocked:
            return False
        block, shape = self.block_of(blocked[0]), out.type.shape
        padded = self.blocked_channels(blocked[0])
        if any(self.is_padded(v) for v in blocked):
            same = all(self.blocked_channels(v) == padded for v in blocked)
            if not same or call.op.name not in _PADDED_OK:
                return False  # mixed with unpadded channels: in NCHW (Note [channel padding])
        else:
            padded = shape[1]
        inputs = [self.broadcast_operand(v, shape, block, padded) for v in call.inputs]
        if any(v is None for v in inputs):
            return False
        yb = self.emit(call.op.name, inputs, call.attrs, name=self._name(out, "nchwc"))
        self.set_blocked(out, yb, block)
        return True

    def broadcast_operand(self, v: Value, shape, block: int, padded: int) -> Value | None:
        """v as an operand of a blocked broadcast op whose NCHW output has `shape` (its
        channels padded to `padded`)."""
        t = v.type
        if t.is_static and t.size == 1:
            return v  # a scalar broadcasts the same in every layout
        if self.is_padded(v):
            return self.to_block(v, block)  # its block: the caller checked
        if padded != shape[1] and not isinstance(v, Constant):
            return None
        per_channel = isinstance(v, Constant) and t.is_static and t.size == shape[1]
        axis = t.ndim - len(shape) + 1  # the operand's channel axis, broadcast from the right
        if per_channel and axis >= 0 and t.shape[axis] == shape[1]:  # (C, 1, 1), (1, C, 1, 1)
            array = np.pad(v.array.reshape(-1), (0, padded - shape[1]))  # zeros: Note
            array = array.reshape(1, padded // block, 1, 1, block)
            return self.constant(v.name, np.ascontiguousarray(array))
        same_rank = t.ndim == len(shape) and _static_channels(t)
        if same_rank and t.shape[1] == shape[1] and shape[1] % block == 0:
            if all(a in (1, b) for a, b in zip(t.shape, shape, strict=True)):
                return self.to_block(v, block)
        return None

    def split(self, call: Call) -> bool:
        """Note [blocked split]: channels split into whole blocks stay blocked."""
        (x,) = call.inputs
        block = self.block_of(x)
        if block is None or self.is_padded(x) or x.type.ndim != 4 or call.attrs["axis"] % 4 != 1:
            return False
        sections = [int(s) for s in call.attrs["sections"]]
        if any(s % block for s in sections):
            return False
        op, attrs = call.op, {**call.attrs, "axis": 1, "sections": [s // block for s in sections]}
        xb = self.to_block(x, block)
        types = op.infer_type([xb.type], attrs)
        parts = tuple(
            Value(self._name(v, "nchwc"), t) for v, t in zip(call.outputs, types, strict=True)
        )
        self.body.append(Call(op, (xb,), attrs, parts, self.span))
        self.defined.update(id(p) for p in parts)
        for v, part in zip(call.outputs, parts, strict=True):
            self.set_blocked(v, part, block)
        return True

    def resize(self, call: Call) -> bool:
        """Note [blocked resize]: a resize of the height and width of a blocked value."""
        (x,), (out,) = call.inputs, call.outputs
        block = self.block_of(x)
        attrs = call.attrs
        if block is None or not (x.type.is_static and out.type.is_static):
            return False
        if attrs.get("coordinate_transformation_mode") == "tf_crop_and_resize":
            return False  # its region of interest names the axes of NCHW
        scales, size = list(attrs["scales"]), list(attrs["size"])
        if scales[:2] != [1.0, 1.0] or size[:2] != list(x.type.shape[:2]):
            return False  # batch and channels must stay as they are
        xb = self.to_block(x, block)
        n, cb, *_ = xb.type.shape
        blocked = {
            **attrs,
            "size": [n, cb, *size[2:], block],
            "scales": [*scales, 1.0],
            "roi": None,
        }
        yb = self.emit("image.resize", [xb], blocked, name=self._name(out, "nchwc"))
        self.set_blocked(out, yb, block)
        return True

    def concatenate(self, call: Call) -> bool:
        (out,) = call.outputs
        if call.attrs["axis"] % 4 != 1:
            return False
        blocks = [self.block_of(v) for v in call.inputs if self.block_of(v) is not None]
        if not blocks or any(self.is_padded(v) for v in call.inputs):
            return False  # channel offsets need the true channel counts
        block = min(blocks)
        if any(v.type.shape[1] % block for v in call.inputs):
            return False
        inputs = [self.to_block(v, block) for v in call.inputs]
        yb = self.emit("concatenate", inputs, {"axis": 1}, name=self._name(out, "nchwc"))
        self.set_blocked(out, yb, block)
        return True


# Note [blocked resize]
# A detector's neck upsamples a blocked conv output (nearest, 2x) and concatenates it with an
# earlier blocked one: resize in NCHW put a transform back before it and one forward after it.
# A resize of the height and width reads each channel's plane alone, so it is the same resize of
# the blocked value with the block's axis (scale 1, its size kept) added: an identity axis the
# compute skips (topi/image.py), the channel vector innermost. Padded channels resize as the
# rest (their zeros stay zeros for every mode but an extrapolating crop). Not taken: a resize
# of the batch or channels, tf_crop_and_resize (its region of interest is per NCHW axis) and
# symbolic sizes.


# Note [blocked split]
# A split along the channels of a blocked value (YOLOv5/v8's C2f and CSP blocks halve a conv's
# output, run convs on one half and concatenate all) went back to NCHW for the split and each
# part forward to NCHW[x]c for the convs after it: a whole-tensor transform and one per part,
# several per block. Where every part is a whole number of blocks, the same split of the blocked
# value along its block axis gives each part in the blocked layout (parts of whole blocks are
# contiguous runs of it); a part some plain op reads goes back to NCHW alone, as any blocked
# value. Parts that cut a block, and padded values (Note [channel padding]), split in NCHW.


def _shuffle_chains(func: Function) -> dict[int, tuple[tuple[Call, Call, Call], int]]:
    """The channel shuffles of `func`: reshape (N, C, H, W) -> (N, g, C/g, H, W), transpose
    (0, 2, 1, 3, 4), reshape back, the two inner values used once and not outputs."""
    used = uses(func)
    outputs = {id(v) for v in func.outputs}
    only = {}  # id(value) -> its one user

    for call in func.body:
        for v in call.inputs:
            if len(used[id(v)]) == 1 and id(v) not in outputs:
                only[id(v)] = call
    found = {}
    for r1 in func.body:
        if r1.op.name != "reshape" or len(r1.outputs) != 1 or not _is_plain_4d(r1.inputs[0].type):
            continue
        n, c, h, w = r1.inputs[0].type.shape
        split = tuple(r1.outputs[0].type.shape)
        if len(split) != 5 or (split[0], split[1] * split[2], *split[3:]) != (n, c, h, w):
            continue
        t = only.get(id(r1.outputs[0]))
        if t is None or t.op.name != "transpose" or list(t.attrs["axes"]) != [0, 2, 1, 3, 4]:
            continue
        r2 = only.get(id(t.outputs[0]))
        if r2 is None or r2.op.name != "reshape" or r2.outputs[0].type.shape != (n, c, h, w):
            continue
        found[id(r1)] = ((r1, t, r2), split[1])
    return found


@graph_pass(opt_level=2)
def alter_layout(func: Function, target: Target | str | None = None) -> Function:
    target = Target.current() if target is None else target
    target = Target(target) if isinstance(target, str) else target
    if target is None or not target.kind_info.layout_strategies:
        return func  # the target's kernels do not take blocked layouts (its table row)
    if not any(c.op.name in ("nn.conv2d", "nn.conv1d", "qnn.conv2d") for c in func.body):
        return func
    config = PassContext.current().config
    use_winograd = bool(config.get("alter_layout.winograd", True))
    int8 = bool(config.get("alter_layout.int8", True))  # False: int8 convs keep NCHW
    # False: depthwise int8 convs keep their integer kernel (Note [float depthwise])
    float_depthwise = bool(config.get("alter_layout.int8_float_depthwise", True))
    float_depthwise = float_depthwise and config.get("precision") != "bf16"  # bf16 is inexact
    token = _BLOCKED.set(target.blocked_float_dtypes)
    try:
        new = _Rewriter(func, target, use_winograd, int8, float_depthwise).run()
    finally:
        _BLOCKED.reset(token)
    changed = len(new.body) != len(func.body) or any(
        a is not b for a, b in zip(new.body, func.body, strict=True)
    )
    return new if changed else func


def alter_layout_from(
    func: Function,
    target: Target,
    blocked: dict,
    use_winograd: bool = True,
    out_blocks: list | None = None,
) -> tuple[Function, list]:
    """`func` rewritten as this pass rewrites it inside a model where the params named in
    `blocked` ({name: (block, channels)}) arrive in NCHW{block}c with `channels` channels (the
    padded count, Note [channel padding]), as the op before them in the model leaves them; the
    outputs stay in the layout the rewrite gives them, or with `out_blocks` (one block per
    output, 1: NCHW) are moved to the layout the ops after them read where one of the two is
    NCHW and the other blocked (another block: a conv after it reads it as it is). Returns
    (function, one (block, NCHW shape) per output, or None where it is in NCHW). What the tuner
    measures a task in (autotune/measure.py `kernel_graph`: Note [in-model layout])."""
    rw = _Rewriter(func, target, use_winograd)
    params = []
    for p in func.params:
        if p.name not in blocked:
            params.append(p)
            continue
        block, channels = blocked[p.name]
        n, _, h, w = p.type.shape
        pb = Value(p.name, TensorType((n, channels // block, h, w, block), p.type.dtype))
        rw.blocked[id(p)] = (pb, block)
        rw.defined.discard(id(p))  # p is now what a transform back from pb defines
        rw.defined.add(id(pb))
        params.append(pb)
    for call in func.body:
        rw.span = call.span
        if not (rw.shuffle(call) or rw.rewrite(call)):
            inputs = [rw.plain(v) if id(v) in rw.blocked else v for v in call.inputs]
            rw.body.append(Call(call.op, tuple(inputs), call.attrs, call.outputs, call.span))
            rw.defined.update(id(v) for v in call.outputs)
    outputs, layouts = [], []
    for i, v in enumerate(func.outputs):
        want = None if out_blocks is None else out_blocks[i]
        if want == 1 and id(v) in rw.blocked:
            rw.plain(v)
        elif want is not None and want > 1 and rw.block_of(v) is None and _is_plain_4d(v.type):
            rw.set_blocked(v, rw.to_block(v, want), want)
            rw.defined.discard(id(v))
        if id(v) in rw.blocked and id(v) not in rw.defined:
            outputs.append(rw.blocked[id(v)][0])
            layouts.append((rw.blocked[id(v)][1], tuple(v.type.shape)))
        else:
            outputs.append(v)
            layouts.append(None)
    used = {id(v) for c in rw.body for v in c.inputs} | {id(v) for v in outputs}
    constants = [c for c in rw.constants if id(c) in used]
    return Function(func.name, params, rw.body, outputs, constants), layouts
