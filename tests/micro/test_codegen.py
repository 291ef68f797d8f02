"""Micro kernels: no threads, no heap, scratch in the arena; the host build matches numpy."""

from __future__ import annotations

import numpy as np
import pytest

from tessera import tir
from tessera.codegen.micro import MicroCodegenError, emit_micro_c, prepare_micro_kernel


def _loop_with_scratch(n: int, scope: str = "global"):
    """for i in 0..4 (parallel): T = A * 2 (a scratch buffer of n floats); A[i] = T[i]."""
    A = tir.decl_buffer((n,), "float32", "A")
    T = tir.decl_buffer((n,), "float32", "T", scope=scope)
    i, j = tir.Var("i"), tir.Var("j")
    fill = tir.For(j, 0, n, tir.ForKind.SERIAL, tir.BufferStore(T, A[j] * 2.0, (j,)))
    use = tir.BufferStore(A, T[i], (i,))
    body = tir.For(i, 0, 4, tir.ForKind.PARALLEL, tir.Allocate(T, tir.seq(fill, use)))
    return tir.PrimFunc("scratchy", (A,), body)


def test_scratch_in_a_parallel_loop_becomes_a_workspace():
    func = prepare_micro_kernel(_loop_with_scratch(1000))
    assert len(func.buffer_params) == 2  # A, then the lifted T
    assert func.attr("workspaces") == 1
    assert not tir.collect(func.body, lambda n: isinstance(n, tir.Allocate))
    loops = tir.collect(func.body, lambda n: isinstance(n, tir.For))
    assert all(loop.kind != tir.ForKind.PARALLEL for loop in loops)
    source = emit_micro_c(func)
    for name in ("tessera_alloc", "tessera_parallel_for", "malloc"):
        assert name not in source


def test_small_local_scratch_stays_on_the_stack():
    func = prepare_micro_kernel(_loop_with_scratch(16, scope="local"))
    assert len(func.buffer_params) == 1
    assert "float T[16]" in emit_micro_c(func)


def test_scratch_of_unknown_size_is_an_error():
    n = tir.Var("n")
    A = tir.decl_buffer((4,), "float32", "A")
    T = tir.decl_buffer((n,), "float32", "T")
    func = tir.PrimFunc("dyn", (A, n), tir.Allocate(T, tir.BufferStore(A, T[0], (0,))))
    with pytest.raises(MicroCodegenError, match="dyn: scratch buffer T .* compile time"):
        prepare_micro_kernel(func)


def test_host_build_matches_onnxruntime(lib, small_cnn, sample_input, host_output):
    ort = pytest.importorskip("onnxruntime")
    x = sample_input()
    session = ort.InferenceSession(small_cnn().SerializeToString())
    expected = session.run(None, {"x": x})[0]
    np.testing.assert_allclose(host_output(lib, x), expected, rtol=1e-5, atol=1e-6)


def test_kernel_sources_need_no_runtime(lib):
    assert lib.kernel_sources
    for name, source in lib.kernel_sources.items():
        assert "tessera_alloc" not in source and "tessera_parallel_for" not in source, name
        assert '#include "' not in source  # self-contained: libc headers only


def test_every_cortex_m_builds(compiled, sample_input, host_output):
    for mcpu in ("cortex-m0", "cortex-m55"):
        lib = compiled(mcpu)
        assert lib.target.mcpu == mcpu
        np.testing.assert_allclose(
            host_output(lib, sample_input()), host_output(compiled(), sample_input()), rtol=1e-5
        )


def test_scalar_schedules_keep_workspaces_small(lib):
    # RAM is what a microcontroller lacks: a depthwise conv pads one channel's plane at a time
    # (not the whole 4 x 10 x 10 input), a dense layer reads its weight in place (no packed
    # copy of the 3 x 4 weight)
    layers = {layer["nodes"][0]: layer for layer in lib.memory_report()["layers"]}
    padded_input = 4 * 10 * 10 * 4
    assert layers["dw"]["workspace_bytes"] < padded_input // 2
    assert layers["fc"]["workspace_bytes"] < 3 * 4 * 4


def test_requantize_clamps_become_one_saturation():
    # Note [micro saturation]: min(max(v, -128), 127) -> SSAT (USAT for uint8), either order
    from tessera.codegen.micro import _saturations

    text = "/* head */\n\nint32_t f(void) {\n  y[0] = (int8_t)tessera_min_i32(tessera_max_i32(" \
           "g(a, (b + 1)), -128), 127);\n  z = tessera_max_i32(tessera_min_i32(v, 255), 0);\n" \
           "  w = tessera_min_i32(tessera_max_i32(v, -127), 127);\n}\n"  # fmt: skip
    out = _saturations(text)
    assert "(int8_t)tessera_sat_s8(g(a, (b + 1)));" in out
    assert "z = tessera_sat_u8(v);" in out
    assert "w = tessera_min_i32(tessera_max_i32(v, -127), 127);" in out  # not a byte's range
    assert "__ssat(x, 8)" in out and "#if defined(__ARM_FEATURE_SAT)" in out
    assert _saturations("a\n\nb = tessera_min_i32(c, 1);\n") == "a\n\nb = tessera_min_i32(c, 1);\n"
