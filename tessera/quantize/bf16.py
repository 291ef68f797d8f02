"""The bf16 passes: dense and matmul layers with constant float32 weights run as `bf16.dense`
(bfloat16 products on vdpbf16ps, float32 accumulation and output; topi/x86/bf16_dense.py), and,
after alter_layout, blocked convs as `bf16.conv2d_nchwc` (topi/x86/bf16_conv2d.py).

    before:  %y = matmul(%x, %w) : f32[1, 128, 3072]               # %w: a constant f32[768, 3072]
    after:   %y = bf16.dense(%x, %w_bf16, units=3072) : f32[1, 128, 3072]
             (%w_bf16: a constant i32[192, 384, 16], the weight rounded to bfloat16, in panels)

On when `PassContext(config={"precision": "bf16"})` (the CLI's `--precision bf16`) builds for
a CPU target (`to_bf16` before pack_weights, `to_bf16_convs` after alter_layout: groups of
1, even input channel blocks; a 3-channel stem, depthwise and Winograd convs stay float32);
everything else stays float32 (activations are float32 between kernels, rounded
to bfloat16 where a bf16 kernel reads them). A CPU without AVX512_BF16 (the target's
features, read from LLVM for the host) is refused with an error that says so, unless the
config also sets "bf16_emulate": True (the same numbers on FMAs, slower than float32: for
tests and for checking accuracy on such a host).
"""

from __future__ import annotations

from tessera.graph.ir import Call, Constant, Function
from tessera.graph.op import get_op
from tessera.target import Target
from tessera.transform.graph_pass import graph_pass, rebuild

PRECISIONS = ("fp32", "bf16")


def precision() -> str:
    from tessera.transform import PassContext

    value = PassContext.current().config.get("precision", "fp32")
    if value not in PRECISIONS:
        raise ValueError(f"precision {value!r} is not one of {', '.join(PRECISIONS)}")
    return value


def _weight(call: Call):
    """The (N, K) float32 weight of a dense/matmul with a constant 2-D weight, else None."""
    if call.op.name not in ("nn.dense", "matmul") or len(call.inputs) != 2:
        return None
    x, w = call.inputs
    if not isinstance(w, Constant) or str(w.type.dtype) != "float32" or w.type.ndim != 2:
        return None
    if str(x.type.dtype) != "float32" or x.type.ndim < 1 or not x.type.is_static:
        return None
    return w.array.T if call.op.name == "matmul" else w.array


def check_target(target: Target) -> None:
    """Refuse a target whose CPU lacks AVX512_BF16 (unless emulation is asked for)."""
    from tessera.codegen.llvm.bf16_dot import native_lanes
    from tessera.transform import PassContext

    if PassContext.current().config.get("bf16_emulate", False):
        return
    if not native_lanes(target.features):
        raise ValueError(
            f"precision bf16 needs a CPU with AVX512_BF16 (vdpbf16ps); target {target} has "
            "none: build with precision fp32, pick such a CPU (-mcpu=sapphirerapids, znver4), "
            'or set config "bf16_emulate": True for the same numbers on slower FMAs'
        )


@graph_pass(opt_level=1)
def to_bf16(func: Function, target: Target | str | None = None) -> Function:
    """dense/matmul layers with constant weights on bf16.dense (before the layout pass)."""
    from tessera.topi.x86.bf16_dense import pack_bf16_weight

    def attrs(call, w):
        return {"units": int(w.shape[0])}

    return _rewrite(func, target, _weight, pack_bf16_weight, "bf16.dense", attrs)


def _conv_weight(call: Call):
    """The blocked float32 weight of a conv that bf16.conv2d_nchwc takes, else None."""
    if call.op.name != "nn.conv2d_nchwc" or len(call.inputs) != 2:
        return None
    x, w = call.inputs
    if call.attrs.get("groups", 1) != 1 or not isinstance(w, Constant) or w.type.ndim != 6:
        return None
    if str(w.type.dtype) != "float32" or w.type.shape[4] % 2 or x.type.ndim != 5:
        return None
    return w.array if x.type.shape[4] == w.type.shape[4] else None


@graph_pass(opt_level=2)
def to_bf16_convs(func: Function, target: Target | str | None = None) -> Function:
    """blocked float convs on bf16.conv2d_nchwc (after the layout pass)."""
    from tessera.topi.x86.bf16_conv2d import pack_bf16_conv_weight

    def attrs(call, w):
        return {k: call.attrs[k] for k in ("strides", "padding", "dilation")}

    return _rewrite(func, target, _conv_weight, pack_bf16_conv_weight, "bf16.conv2d_nchwc", attrs)


def _rewrite(func: Function, target, weight_of, pack, op: str, attrs_of) -> Function:
    """Each call whose weight `weight_of` gives becomes `op` over its data and that weight
    packed by `pack` (once per weight), with `attrs_of(call, weight)`; under precision bf16, on
    targets whose kernels take blocked layouts (C and GPU targets keep float32)."""
    if precision() != "bf16":
        return func
    target = Target.current() if target is None else target
    target = Target(target) if isinstance(target, str) else target
    if target is None or not target.kind_info.layout_strategies:
        return func
    packed: dict[int, Constant] = {}
    body, constants = [], list(func.constants)
    for call in func.body:
        w = weight_of(call)
        if w is None:
            body.append(call)
            continue
        if not packed:
            check_target(target)
        src = call.inputs[1]
        if id(src) not in packed:
            packed[id(src)] = Constant.of(f"{src.name}_bf16", pack(w))
            constants.append(packed[id(src)])
        inputs = (call.inputs[0], packed[id(src)])
        body.append(Call(get_op(op), inputs, attrs_of(call, w), call.outputs, call.span))
    if not packed:
        return func
    used = {id(v) for c in body for v in c.inputs} | {id(v) for v in func.outputs}
    return rebuild(func, body, {}, [c for c in constants if id(c) in used])
