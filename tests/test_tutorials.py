"""TVM's classic tutorial programs, run as written with tessera for tvm, on both CPU targets."""

import numpy as np
import pytest

import tessera
from tessera import te

TARGETS = ["llvm", "c"]


@pytest.mark.parametrize("target", TARGETS)
def test_vector_add(target):
    n = te.var("n")
    A = te.placeholder((n,), name="A")
    B = te.placeholder((n,), name="B")
    C = te.compute(A.shape, lambda i: A[i] + B[i], name="C")
    s = te.create_schedule(C.op)
    outer, inner = s[C].split(C.op.axis[0], factor=64)
    s[C].vectorize(inner)
    text = str(tessera.lower(s, [A, B, C], simple_mode=True))
    assert "A" in text and "C[" in text

    fadd = tessera.build(s, [A, B, C], target=target, name="myadd")
    dev = tessera.cpu(0)
    for size in (1024, 1000, 1, 77):
        a = tessera.nd.array(np.random.uniform(size=size).astype(A.dtype), dev)
        b = tessera.nd.array(np.random.uniform(size=size).astype(B.dtype), dev)
        c = tessera.nd.array(np.zeros(size, dtype=C.dtype), dev)
        fadd(a, b, c)
        np.testing.assert_allclose(c.numpy(), a.numpy() + b.numpy(), rtol=1e-6)
    source = fadd.get_source("ll" if target == "llvm" else "c")
    assert "myadd" in source


def test_vector_add_rejects_bad_arguments():
    n = te.var("n")
    A = te.placeholder((n,), name="A")
    B = te.placeholder((n,), name="B")
    C = te.compute(A.shape, lambda i: A[i] + B[i], name="C")
    s = te.create_schedule(C.op)
    fadd = tessera.build(s, [A, B, C], target="llvm", name="myadd")
    a = tessera.nd.array(np.zeros(8, "float32"))
    with pytest.raises(ValueError, match="B"):
        fadd(a, tessera.nd.array(np.zeros(8, "float64")), tessera.nd.array(np.zeros(8, "float32")))
    with pytest.raises(ValueError, match="C"):
        fadd(a, a, tessera.nd.array(np.zeros(9, "float32")))
    with pytest.raises(ValueError, match="3 arguments"):
        fadd(a, a)


def blur(H, W):
    """Halide's 3x3 blur: inp is (H + 2, W + 2), the output (H, W)."""
    inp = te.placeholder((H + 2, W + 2), name="inp")
    blur_x = te.compute(
        (H + 2, W), lambda y, x: (inp[y, x] + inp[y, x + 1] + inp[y, x + 2]) / 3.0, name="blur_x"
    )
    blur_y = te.compute(
        (H, W),
        lambda y, x: (blur_x[y, x] + blur_x[y + 1, x] + blur_x[y + 2, x]) / 3.0,
        name="blur_y",
    )
    return inp, blur_x, blur_y


def blur_reference(a):
    bx = (a[:, :-2] + a[:, 1:-1] + a[:, 2:]) / 3.0
    return (bx[:-2] + bx[1:-1] + bx[2:]) / 3.0


def halide_blur_schedule(blur_x, blur_y):
    s = te.create_schedule(blur_y.op)
    y, x = blur_y.op.axis
    yo, xo, yi, xi = s[blur_y].tile(y, x, 32, 256)
    _, xv = s[blur_y].split(xi, factor=8)
    s[blur_y].vectorize(xv)
    s[blur_y].parallel(yo)
    s[blur_x].compute_at(s[blur_y], xo)
    _, bxv = s[blur_x].split(blur_x.op.axis[1], factor=8)
    s[blur_x].vectorize(bxv)
    return s


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("shape", [(64, 512), (70, 300)])
def test_halide_blur(target, shape):
    H, W = shape
    inp, blur_x, blur_y = blur(H, W)
    s = halide_blur_schedule(blur_x, blur_y)
    f = tessera.build(s, [inp, blur_y], target=target, name="blur")
    a = np.random.default_rng(0).standard_normal((H + 2, W + 2)).astype("float32")
    out = tessera.nd.empty((H, W), "float32")
    f(tessera.nd.array(a), out)
    np.testing.assert_allclose(out.numpy(), blur_reference(a), rtol=1e-5, atol=1e-6)


def test_halide_blur_producer_region_has_halo():
    inp, blur_x, blur_y = blur(64, 512)
    s = halide_blur_schedule(blur_x, blur_y)
    text = str(te.lower(s, [inp, blur_y], name="blur"))
    # blur_x is computed per 32x256 tile of blur_y, with the 2-row halo: a 34 x 256 region.
    assert "34" in text
    assert "blur_x" in text


@pytest.mark.parametrize("target", TARGETS)
def test_build_without_a_name_works_on_both_targets(target):
    A = te.placeholder((10,), name="A")
    B = te.compute((10,), lambda i: A[i] * 2.0, name="B")
    f = tessera.build(te.create_schedule(B.op), [A, B], target=target)
    assert f.entry_name == "default_function"  # TVM's default; "main" would clash in C
    a = np.arange(10, dtype="float32")
    b = np.zeros(10, "float32")
    f(a, b)
    np.testing.assert_allclose(b, a * 2)
