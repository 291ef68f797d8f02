"""Parallel loops: the body is outlined into a function the runtime's thread pool calls.

    for (i, 0, n) parallel { B[i] = A[i] * x }
becomes
    struct closure { float* A; float* B; float x; };
    int32_t body(int64_t begin, int64_t end, void* c) { /* i in [begin, end): B[i] = ... */ }
    rc = tessera_parallel_for(n, body, &closure);   // returns rc when not 0

The outlined function loads the closure and calls an internal kernel whose buffer parameters
are noalias (see `define_kernel`), so the body vectorizes as well as a top-level loop. A
parallel loop inside a parallel body is outlined the same way; the runtime runs it inline.
Allocations that open the body and do not depend on the loop's var are made once per chunk
(`_chunk_allocations`).
"""

from __future__ import annotations

from llvmlite import ir

from tessera.codegen.common import closure_of
from tessera.codegen.llvm import types as T
from tessera.codegen.llvm.emitter import FunctionEmitter, define_kernel
from tessera.ir.dtype import int64
from tessera.tir.stmt import For

_I8P = T.I8.as_pointer()
BODY_TYPE = ir.FunctionType(T.I32, [T.I64, T.I64, _I8P])


def _outline(em: FunctionEmitter, loop: For, variables, buffers, aligns) -> ir.Function:
    ctx = em.ctx
    base = ctx.unique_name(f"{em.name}.parallel")
    var = loop.loop_var

    allocs, rest = _chunk_allocations(loop.body, var)

    def body(inner: FunctionEmitter, extra):
        begin, end = extra

        def chunk(k: int):
            if k < len(allocs):
                inner.allocate(allocs[k].buffer, lambda: chunk(k + 1))
                return
            start = inner.expr(loop.min)

            def iteration(i64):
                i = T.cast(inner.b, i64, int64, var.dtype)
                inner.bind_var(var, inner.b.add(start, i))
                inner.stmt(rest)

            inner.serial_loop(begin, end, iteration)

        chunk(0)

    kernel = define_kernel(
        ctx, f"{base}.compute", em.name, buffers, aligns, variables, [T.I64, T.I64], body
    )
    fn = ir.Function(ctx.module, BODY_TYPE, base)
    fn.linkage = "internal"
    fn.attributes.add("nounwind")
    begin, end, closure = fn.args
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    struct_ptr = b.bitcast(closure, _closure_type(variables, buffers).as_pointer())
    fields = [
        b.load(b.gep(struct_ptr, [ir.Constant(T.I32, 0), ir.Constant(T.I32, k)]))
        for k in range(len(buffers) + len(variables))
    ]
    b.ret(b.call(kernel, [*fields, begin, end]))
    return fn


def _chunk_allocations(body, var):
    """(the Allocates that open the loop's body and whose size does not depend on its var,
    the body inside them): they are made once per chunk of iterations, not per iteration (a
    row buffer of symbolic length on the heap costs an allocation per row otherwise)."""
    from tessera.tir.stmt import Allocate
    from tessera.tir.stmt_functor import uses_var

    allocs = []
    while isinstance(body, Allocate) and not uses_var(body.buffer.num_elements(), var):
        allocs.append(body)
        body = body.body
    return allocs, body


def _closure_type(variables, buffers) -> ir.LiteralStructType:
    ptrs = [T.storage_type(buf.dtype).as_pointer() for buf in buffers]
    return ir.LiteralStructType(ptrs + [T.llvm_type(v.dtype) for v in variables])


def emit_parallel_for(em: FunctionEmitter, loop: For) -> None:
    """Emit `loop` (kind PARALLEL) as a call of tessera_parallel_for on its outlined body."""
    variables, buffers = closure_of(loop, exclude=(loop.loop_var,))
    aligns = [em.buffer_align.get(id(buf), buf.dtype.itemsize) for buf in buffers]
    values = [em.buffer_ptr(buf) for buf in buffers] + [em.expr(v) for v in variables]
    body_fn = _outline(em, loop, variables, buffers, aligns)
    closure = em.alloca(_closure_type(variables, buffers), align=8, name="closure")
    for k, value in enumerate(values):
        slot = em.b.gep(closure, [ir.Constant(T.I32, 0), ir.Constant(T.I32, k)])
        em.b.store(value, slot)
    extent = em.to_i64(em.expr(loop.extent), loop.extent.dtype)
    run = em.ctx.declare("tessera_parallel_for", T.I32, [T.I64, BODY_TYPE.as_pointer(), _I8P])
    rc = em.b.call(run, [extent, body_fn, em.b.bitcast(closure, _I8P)])
    em.check_rc(rc)
