"""The native code of an executor plan's control calls (Note [control calls] in
graph_build/control_flow.py): branches and loops over the plan's sub-functions.

Each sub-function of the plan (plan["functions"][k]) becomes an internal function
`tessera_model_fn{k}` with the entry's signature: its inputs and outputs are pointer tables the
control call fills, its arena the control call's region. An If loads its condition byte and
calls one branch; a Loop keeps its step and condition in registers, its carried values in its
final outputs' storage, and calls the body until the step reaches the trip count (and the scan
outputs' room) or the body's condition is false. Nothing returns to Python between steps.
"""

from __future__ import annotations

from tessera.runtime.graph_executor import RUN_SYMBOL

FUNCTION_SYMBOL = "tessera_model_fn{}"


def declare_functions(module, fn_type, plan: dict) -> list:
    """An internal LLVM function per sub-function of the plan."""
    from llvmlite import ir

    subs = []
    for k in range(len(plan.get("functions", ()))):
        f = ir.Function(module, fn_type, FUNCTION_SYMBOL.format(k + 1))
        f.linkage = "internal"
        f.attributes.add("nounwind")
        subs.append(f)
    return subs


def _table(b, fn, args, offsets):
    """A stack table of the i8* of plan arguments (allocated in the entry block)."""
    from llvmlite import ir

    from tessera.codegen.aot import entry_args, llvm_arg

    i8p = ir.IntType(8).as_pointer()
    with b.goto_entry_block():
        table = b.alloca(ir.ArrayType(i8p, max(1, len(args))))
    for i, (kind, x) in enumerate(entry_args(args, offsets)):
        b.store(llvm_arg(b, fn, kind, x), _slot(b, table, i))
    return table


def _slot(b, table, i: int):
    from llvmlite import ir

    i32 = ir.IntType(32)
    return b.gep(table, [ir.Constant(i32, 0), ir.Constant(i32, i)])


def _ptr(b, fn, arg, offsets):
    from tessera.codegen.aot import entry_args, llvm_arg

    ((kind, x),) = entry_args([arg], offsets)
    return llvm_arg(b, fn, kind, x)


def _call_sub(b, fn, sub, ins, outs, region: int):
    """Call sub-function `sub` with the pointer tables `ins`, `outs` and the arena region."""
    from llvmlite import ir

    zero = ir.Constant(ir.IntType(32), 0)
    params, arena = fn.args[2], fn.args[3]
    arena_at = b.gep(arena, [ir.Constant(ir.IntType(64), region)])
    null = ir.Constant(ir.IntType(64).as_pointer(), None)
    tables = [b.gep(ins, [zero, zero]), b.gep(outs, [zero, zero])]
    return b.call(sub, [*tables, params, arena_at, null])


def _fail_unless_zero(b, fn, rc, k: int):
    from llvmlite import ir

    i32 = ir.IntType(32)
    failed, ok = fn.append_basic_block(f"cfail{k}"), fn.append_basic_block(f"cok{k}")
    b.cbranch(b.icmp_signed("!=", rc, ir.Constant(i32, 0)), failed, ok)
    b.position_at_end(failed)
    b.ret(ir.Constant(i32, k + 1))
    b.position_at_end(ok)


def _memmove(b, dst, src, nbytes: int):
    from llvmlite import ir

    if nbytes == 0:
        return
    i8p, i64 = ir.IntType(8).as_pointer(), ir.IntType(64)
    move = b.module.declare_intrinsic("llvm.memmove", [i8p, i8p, i64])
    b.call(move, [dst, src, ir.Constant(i64, nbytes), ir.Constant(ir.IntType(1), 0)])


def llvm_control(b, fn, subs, call: dict, k: int, clock, plan: dict) -> None:
    """Emit control call k of `fn` (timed into call_ns[k] when `clock`)."""
    from llvmlite import ir

    i64 = ir.IntType(64)
    start = b.call(clock, []) if clock else None
    offsets = [int(p["offset"]) for p in plan["params"]]
    if call["control"] == "fail":  # a branch ruled out at the compiled shapes
        b.ret(ir.Constant(ir.IntType(32), k + 1))
        b.position_at_end(fn.append_basic_block(f"after_fail{k}"))  # unreachable
    elif call["control"] == "if":
        _llvm_if(b, fn, subs, call, k, offsets)
    elif call["control"] == "loop":
        _llvm_loop(b, fn, subs, call, k, offsets)
    else:
        raise ValueError(f"executor plan: unknown control call {call['control']!r}")
    if clock:
        elapsed = b.sub(b.call(clock, []), start)
        b.store(elapsed, b.gep(fn.args[4], [ir.Constant(i64, k)]))


def _llvm_if(b, fn, subs, call: dict, k: int, offsets) -> None:
    from llvmlite import ir

    i8, i32 = ir.IntType(8), ir.IntType(32)
    cond = b.load(b.bitcast(_ptr(b, fn, call["args"][0], offsets), i8.as_pointer()))
    ins = _table(b, fn, call["args"][1:], offsets)
    outs = _table(b, fn, call["outputs"], offsets)
    then_f, else_f = (subs[j - 1] for j in call["functions"])
    then_bb, else_bb = fn.append_basic_block(f"then{k}"), fn.append_basic_block(f"else{k}")
    join = fn.append_basic_block(f"endif{k}")
    b.cbranch(b.icmp_unsigned("!=", cond, ir.Constant(i8, 0)), then_bb, else_bb)
    b.position_at_end(then_bb)
    rc_then = _call_sub(b, fn, then_f, ins, outs, call["region"])
    b.branch(join)
    b.position_at_end(else_bb)
    rc_else = _call_sub(b, fn, else_f, ins, outs, call["region"])
    b.branch(join)
    b.position_at_end(join)
    rc = b.phi(i32)
    rc.add_incoming(rc_then, then_bb)
    rc.add_incoming(rc_else, else_bb)
    _fail_unless_zero(b, fn, rc, k)


def _llvm_loop(b, fn, subs, call: dict, k: int, offsets) -> None:
    from llvmlite import ir

    from tessera.codegen.aot import llvm_arg

    i8, i64 = ir.IntType(8), ir.IntType(64)
    n = call["num_carried"]
    args, outputs, scratch = call["args"], call["outputs"], call["scratch"]
    scans = outputs[n:-1]
    body = subs[call["functions"][0] - 1]
    trips = b.load(b.bitcast(_ptr(b, fn, args[0], offsets), i64.as_pointer()))
    first = b.load(b.bitcast(_ptr(b, fn, args[1], offsets), i8.as_pointer()))
    if scans:  # never past the scan outputs' room
        room = ir.Constant(i64, call["capacity"])
        trips = b.select(b.icmp_signed("<", trips, room), trips, room)
    for j in range(n):
        nbytes = call["nbytes"][j]
        _memmove(b, _ptr(b, fn, outputs[j], offsets), _ptr(b, fn, args[2 + j], offsets), nbytes)
    step_slot = b.bitcast(llvm_arg(b, fn, "arena", scratch[0]), i64.as_pointer())
    cond_slot = llvm_arg(b, fn, "arena", scratch[1])
    next_cond = llvm_arg(b, fn, "arena", scratch[2])
    body_ins = [["arena", scratch[0]], ["arena", scratch[1]], *outputs[:n], *args[2 + n :]]
    ins = _table(b, fn, body_ins, offsets)
    next_args = [["arena", scratch[2]]] + [["arena", x] for x in scratch[3 : 3 + n]]
    outs = _table(b, fn, next_args + list(scans), offsets)
    scan_base = [_ptr(b, fn, s, offsets) for s in scans]
    pre = b.block
    header = fn.append_basic_block(f"loop{k}")
    body_bb = fn.append_basic_block(f"loop{k}_body")
    done = fn.append_basic_block(f"loop{k}_end")
    b.branch(header)
    b.position_at_end(header)
    step = b.phi(i64)
    cond = b.phi(i8)
    step.add_incoming(ir.Constant(i64, 0), pre)
    cond.add_incoming(first, pre)
    go = b.and_(b.icmp_signed("<", step, trips), b.icmp_unsigned("!=", cond, ir.Constant(i8, 0)))
    b.cbranch(go, body_bb, done)
    b.position_at_end(body_bb)
    b.store(step, step_slot)
    b.store(b.zext(b.icmp_unsigned("!=", cond, ir.Constant(i8, 0)), i8), cond_slot)
    for j, base in enumerate(scan_base):
        row = b.mul(step, ir.Constant(i64, call["slice_nbytes"][j]))
        b.store(b.gep(base, [row]), _slot(b, outs, 1 + n + j))
    rc = _call_sub(b, fn, body, ins, outs, call["region"])
    _fail_unless_zero(b, fn, rc, k)
    for j in range(n):
        nbytes = call["nbytes"][j]
        dst = _ptr(b, fn, outputs[j], offsets)
        _memmove(b, dst, llvm_arg(b, fn, "arena", scratch[3 + j]), nbytes)
    next_value = b.load(next_cond)
    latch = b.block
    step.add_incoming(b.add(step, ir.Constant(i64, 1)), latch)
    cond.add_incoming(next_value, latch)
    b.branch(header)
    b.position_at_end(done)
    count = b.bitcast(_ptr(b, fn, outputs[-1], offsets), i64.as_pointer())
    b.store(step, count)


# -- C -------------------------------------------------------------------------------------------


def c_declarations(plan: dict) -> list[str]:
    """Forward declarations of the sub-functions (they call each other in any order)."""
    signature = "(void** inputs, void** outputs, const void* params, void* arena, int64_t* call_ns)"
    return [
        f"static int32_t {FUNCTION_SYMBOL.format(k + 1)}{signature};"
        for k in range(len(plan.get("functions", ())))
    ]


def _c_ptr(arg, offsets) -> str:
    from tessera.codegen.aot import C_BASE, entry_args

    ((kind, x),) = entry_args([arg], offsets)
    return C_BASE[kind].format(x)


def _c_table(name: str, args, offsets) -> list[str]:
    lines = [f"        void* {name}[{max(1, len(args))}];"]
    lines += [f"        {name}[{i}] = {_c_ptr(a, offsets)};" for i, a in enumerate(args)]
    return lines


def c_control(call: dict, k: int, plan: dict) -> list[str]:
    """The C statements of control call k (Note [control calls])."""
    offsets = [int(p["offset"]) for p in plan["params"]]
    kind, fns = call["control"], [FUNCTION_SYMBOL.format(f) for f in call["functions"]]
    region = f"(void*)(A + {int(call['region'])})"
    lines = [f"    /* call {k}: control.{kind} ({', '.join(call.get('nodes', ()))}) */", "    {"]
    if kind == "fail":  # a branch ruled out at the compiled shapes
        return lines + [f"        return {k + 1};", "    }"]
    if kind == "if":
        cond = _c_ptr(call["args"][0], offsets)
        lines += _c_table("in_", call["args"][1:], offsets)
        lines += _c_table("out_", call["outputs"], offsets)
        lines += [
            f"        int32_t rc = *(const uint8_t*){cond}",
            f"            ? {fns[0]}(in_, out_, params, {region}, NULL)",
            f"            : {fns[1]}(in_, out_, params, {region}, NULL);",
            f"        if (rc != 0) return {k + 1};",
            "    }",
        ]
        return lines
    if kind != "loop":
        raise ValueError(f"executor plan: unknown control call {kind!r}")
    n, args, outputs, scratch = call["num_carried"], call["args"], call["outputs"], call["scratch"]
    scans = outputs[n:-1]
    slot = [f"(A + {int(x)})" for x in scratch]
    lines += [
        f"        int64_t trips = *(const int64_t*){_c_ptr(args[0], offsets)};",
        f"        uint8_t c = *(const uint8_t*){_c_ptr(args[1], offsets)};",
        "        int64_t i;",
    ]
    if scans:
        cap = int(call["capacity"])
        lines.append(f"        if (trips > INT64_C({cap})) trips = INT64_C({cap});")
    for j in range(n):
        src, dst = _c_ptr(args[2 + j], offsets), _c_ptr(outputs[j], offsets)
        lines.append(f"        memmove({dst}, {src}, {int(call['nbytes'][j])});")
    body_ins = [["arena", scratch[0]], ["arena", scratch[1]], *outputs[:n], *args[2 + n :]]
    next_args = [["arena", x] for x in scratch[2 : 3 + n]]
    lines += _c_table("in_", body_ins, offsets)
    lines += _c_table("out_", next_args + list(scans), offsets)
    lines += [
        "        for (i = 0; i < trips && c; ++i) {",
        f"            *(int64_t*){slot[0]} = i;",
        f"            *{slot[1]} = (uint8_t)(c != 0);",
    ]
    for j, s in enumerate(scans):
        row = f"i * INT64_C({int(call['slice_nbytes'][j])})"
        lines.append(f"            out_[{1 + n + j}] = (uint8_t*){_c_ptr(s, offsets)} + {row};")
    lines.append(
        f"            if ({fns[0]}(in_, out_, params, {region}, NULL) != 0) return {k + 1};"
    )
    for j in range(n):
        dst = _c_ptr(outputs[j], offsets)
        lines.append(f"            memmove({dst}, {slot[3 + j]}, {int(call['nbytes'][j])});")
    lines += [
        f"            c = *{slot[2]};",
        "        }",
        f"        *(int64_t*){_c_ptr(outputs[-1], offsets)} = i;",
        "    }",
    ]
    return lines


__all__ = ["FUNCTION_SYMBOL", "RUN_SYMBOL", "c_control", "declare_functions", "llvm_control"]
