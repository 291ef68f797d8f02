"""tessera demo: TVM's vector add and Halide's 3x3 blur, written, scheduled, lowered, built and
checked.

Run: .venv/bin/python examples/demo.py   (after scripts/setup.sh; scripts/demo.sh is the
README's main job, a ResNet-50 benchmark)
"""

import time

import numpy as np

import tessera
from tessera import te


def vector_add():
    n = te.var("n")
    A = te.placeholder((n,), name="A")
    B = te.placeholder((n,), name="B")
    C = te.compute(A.shape, lambda i: A[i] + B[i], name="C")
    s = te.create_schedule(C.op)
    outer, inner = s[C].split(C.op.axis[0], factor=64)
    s[C].vectorize(inner)
    print("== vector add: schedule steps\n" + str(s))
    print("== vector add: lowered loop IR")
    print(tessera.lower(s, [A, B, C], simple_mode=True))
    fadd = tessera.build(s, [A, B, C], target="llvm", name="myadd")
    a = tessera.nd.array(np.random.uniform(size=100_000).astype("float32"))
    b = tessera.nd.array(np.random.uniform(size=100_000).astype("float32"))
    c = tessera.nd.empty((100_000,), "float32")
    fadd(a, b, c)
    np.testing.assert_allclose(c.numpy(), a.numpy() + b.numpy(), rtol=1e-6)
    print("vector add matches numpy")


def blur(H=1024, W=1536):
    inp = te.placeholder((H + 2, W + 2), name="inp")
    bx = te.compute(
        (H + 2, W), lambda y, x: (inp[y, x] + inp[y, x + 1] + inp[y, x + 2]) / 3.0, name="blur_x"
    )
    by = te.compute(
        (H, W), lambda y, x: (bx[y, x] + bx[y + 1, x] + bx[y + 2, x]) / 3.0, name="blur_y"
    )
    s = te.create_schedule(by.op)
    yo, xo, yi, xi = s[by].tile(by.op.axis[0], by.op.axis[1], 32, 256)
    _, xv = s[by].split(xi, factor=8)
    s[by].vectorize(xv)
    s[by].parallel(yo)
    s[bx].compute_at(s[by], xo)
    _, bxv = s[bx].split(bx.op.axis[1], factor=8)
    s[bx].vectorize(bxv)
    start = time.perf_counter()
    f = tessera.build(s, [inp, by], target="llvm", name="blur")
    print(f"\n== Halide blur {H}x{W}: built in {time.perf_counter() - start:.2f} s")
    a = np.random.default_rng(0).standard_normal((H + 2, W + 2)).astype("float32")
    out = tessera.nd.empty((H, W), "float32")
    f(tessera.nd.array(a), out)
    ref_x = (a[:, :-2] + a[:, 1:-1] + a[:, 2:]) / 3.0
    ref = (ref_x[:-2] + ref_x[1:-1] + ref_x[2:]) / 3.0
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-5, atol=1e-6)
    timer = f.time_evaluator(f.entry_name, tessera.cpu(0), number=20, repeat=3)
    t = timer(tessera.nd.array(a), out).median
    start = time.perf_counter()
    for _ in range(5):
        ref_x = (a[:, :-2] + a[:, 1:-1] + a[:, 2:]) / 3.0
        (ref_x[:-2] + ref_x[1:-1] + ref_x[2:]) / 3.0
    t_np = (time.perf_counter() - start) / 5
    print(f"blur matches numpy; tessera {t * 1e3:.3f} ms, numpy {t_np * 1e3:.3f} ms")


if __name__ == "__main__":
    vector_add()
    blur()
