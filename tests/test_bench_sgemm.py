"""bench/sgemm.py's schedule is correct (against numpy, on llvm and c, at small and ragged sizes),
its block sizes follow the target's rules, and its k loop keeps C in registers. No timings."""

import numpy as np
import pytest
from bench_modules import load_bench

import tessera


def _load_bench():
    return load_bench("sgemm")  # it imports its neighbour fma_peak


sgemm = _load_bench()


def _matmul(target, M, N, K):
    blocking = sgemm.choose_blocking(target, M, N, K)
    s, tensors = sgemm.matmul_schedule(M, N, K, blocking)
    f = tessera.build(s, tensors, target=target, name="sgemm")
    rng = np.random.default_rng(M * N + K)
    a = rng.standard_normal((M, K), dtype=np.float32)
    b = rng.standard_normal((K, N), dtype=np.float32)
    c = tessera.nd.empty((M, N), "float32")
    f(tessera.nd.array(a), tessera.nd.array(b), c)
    return f, blocking, c.numpy(), a @ b


# 128: whole tiles; 70x100x300: a row tail (70 % 6), a padded B panel (100 % 64) and a k tail.
@pytest.mark.parametrize("target", ["llvm", "c"])
@pytest.mark.parametrize("shape", [(128, 128, 128), (70, 100, 300), (1, 3, 5)])
def test_schedule_matches_numpy(target, shape):
    _, _, got, want = _matmul(target, *shape)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.sqrt(shape[2]))


def test_k_loop_keeps_the_accumulators_in_registers():
    target = tessera.Target("llvm")
    if "fma" not in target.features or not target.llvm_triple.startswith("x86_64"):
        pytest.skip("the assembly check reads x86 FMA code")
    f, blocking, _, _ = _matmul(target, 96, 128, 256)
    loops = [sgemm.loop_summary(body) for body in sgemm.fma_loops(f.get_source("asm"))]
    assert loops, "no loop of FMAs: a*b+c was not contracted"
    for loop in loops:
        assert loop["fma"] % (blocking.mr * blocking.nv) == 0
        assert loop["stores"] == 0 and loop["stack"] == 0, loop


def test_fma_loops_reads_the_innermost_loop():
    asm = """
    .LBB0_1:
        vmovaps %zmm1, (%rdi)
    .LBB0_2:
        vfmadd231ps (%rax){1to16}, %zmm1, %zmm2
        vfmadd231ps %zmm3, %zmm1, %zmm4
        vmovaps %zmm2, 64(%rsp)
        jne .LBB0_2
        jmp .LBB0_1
    """
    (body,) = sgemm.fma_loops(asm)
    assert sgemm.loop_summary(body) == {"fma": 2, "stores": 1, "stack": 1}


def test_rbp_advanced_by_the_loop_is_a_pointer_not_the_frame():
    """Without a frame pointer LLVM may keep a panel's address in %rbp (seen on znver4): loads
    through it are not spills. A loop that leaves %rbp alone reads its frame through it."""
    pointer = ["vmovaps -192(%rbp), %zmm26", "addq $256, %rbp", "vfmadd231ps %zmm1, %zmm26, %zmm2"]
    frame = ["vmovaps -192(%rbp), %zmm26", "addq $256, %rax", "vfmadd231ps %zmm1, %zmm26, %zmm2"]
    assert sgemm.loop_summary(pointer)["stack"] == 0
    assert sgemm.loop_summary(frame)["stack"] == 1


@pytest.mark.parametrize(
    "cpu, registers, mr, nv, lanes",
    [("skylake-avx512", 32, 6, 4, 16), ("haswell", 16, 6, 2, 8)],
)
def test_blocking_follows_the_registers_and_caches(cpu, registers, mr, nv, lanes):
    caches = {1: 32 * 1024, 2: 1 << 20}
    b = sgemm.choose_blocking(tessera.Target(f"llvm -mcpu={cpu}"), 1024, 1024, 1024, caches)
    assert (b.registers, b.mr, b.nv, b.lanes) == (registers, mr, nv, lanes)
    assert b.mr * b.nv + b.nv + 1 <= b.registers
    assert b.kc & (b.kc - 1) == 0  # a power of two
    assert (b.mr + b.nr) * b.kc * 4 <= caches[1] < (b.mr + b.nr) * b.kc * 8
    small = sgemm.choose_blocking(tessera.Target(f"llvm -mcpu={cpu}"), 2, 5, 7, caches)
    assert (small.mr, small.nv, small.kc) == (2, 1, 7)


def test_blocking_rejects_empty_sizes():
    with pytest.raises(ValueError, match="positive"):
        sgemm.choose_blocking("llvm", 0, 4, 4)


def test_cache_sizes_read_sysfs_and_fall_back(tmp_path):
    for n, (level, kind, size) in enumerate(
        [(1, "Data", "48K"), (1, "Instruction", "32K"), (2, "Unified", "2M")]
    ):
        d = tmp_path / f"index{n}"
        d.mkdir()
        (d / "level").write_text(f"{level}\n")
        (d / "type").write_text(f"{kind}\n")
        (d / "size").write_text(f"{size}\n")
    assert sgemm.cache_sizes(tmp_path) == {1: 48 << 10, 2: 2 << 20}
    assert sgemm.cache_sizes(tmp_path / "missing") == sgemm.DEFAULT_CACHES


def test_child_env_drops_only_the_openblas_variables():
    env = {"OPENBLAS_CORETYPE": "Haswell", "OPENBLAS_L2_SIZE": "512", "PATH": "/bin"}
    assert sgemm.child_env(env) == {"PATH": "/bin"}


def test_warns_when_a_kernel_beats_the_measured_peak():
    assert sgemm.warn_if_above_peak("tessera", 100.0, 200.0) is None
    assert "above the measured FMA peak" in sgemm.warn_if_above_peak("tessera", 300.0, 200.0)


def test_main_runs_end_to_end(capsys):
    flags = "--size 40 --threads 1 --repeat 1 --gap 0 --peak-runs 1 --no-reexec"
    code = sgemm.main(flags.split())
    out = capsys.readouterr().out
    assert code == 0 and "sgemm 40x40x40" in out and "FMA peak" in out and "numpy:" in out
