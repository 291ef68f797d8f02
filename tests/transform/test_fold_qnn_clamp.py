"""fold_qnn_clamp: a ReLU or clip feeding only qnn.quantize becomes its saturation range
(Note [clamps folded into quantize])."""

import numpy as np
import pytest

import tessera
from tessera.graph import parse, run_function
from tessera.ir.module import IRModule
from tessera.transform.fold_qnn_clamp import fold_qnn_clamp

SRC = """def main(%x: f32[1, 4, 5, 6]) {{
  %1 = {clamp};
  %2 = qnn.quantize(%1, scale={scale}, zero_point={zp}, dtype="{dtype}");
  return %2{extra} }}"""


def _func(clamp, scale=0.05, zp=0, dtype="uint8", extra=""):
    return parse(SRC.format(clamp=clamp, scale=scale, zp=zp, dtype=dtype, extra=extra))


CASES = [  # (clamp, scale, zero point, dtype)
    ("clip(%x, a_min=0.0, a_max=6.0)", 0.05, 0, "uint8"),  # ReLU6: [0, 120]
    ("clip(%x, a_min=0.0, a_max=6.0)", 0.0125, 3, "uint8"),  # 6 / scale + zp past 255
    ("nn.relu(%x)", 0.1, -128, "int8"),
    ("clip(%x, a_min=-1.0, a_max=1.0)", 0.02, 10, "int8"),
    ("clip(%x, a_min=0.07, a_max=0.33)", 0.02, 0, "uint8"),  # bounds at ties, off the grid
    ("clip(%x, a_max=2.0)", 0.05, 128, "uint8"),
]


@pytest.mark.parametrize("clamp,scale,zp,dtype", CASES)
def test_fold_matches_the_clamp_then_quantize(clamp, scale, zp, dtype):
    """The folded quantize gives the integers of clamp-then-quantize on values across and past
    the bounds, ties included, interpreted and built."""
    before = _func(clamp, scale, zp, dtype)
    after = fold_qnn_clamp(before)
    assert [c.op.name for c in after.body] == ["qnn.quantize"]
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((1, 4, 5, 6)) * 4).astype("f4")
    x.flat[:12] = [0.0, -0.0, 6.0, 5.975, 6.025, 0.07, 0.33, 0.01, -1.0, 1.0, 1e9, -1e9]
    (want,) = run_function(before, {"x": x})
    np.testing.assert_array_equal(run_function(after, {"x": x})[0], want)
    with tessera.transform.PassContext(opt_level=3):
        lib = tessera.build(IRModule({"main": before}), target="llvm", params={})
    m = tessera.runtime.GraphModule(lib["default"](tessera.cpu(0)))
    m.set_input("x", x)
    m.run()
    np.testing.assert_array_equal(m.get_output(0).numpy(), want)


def test_a_clamp_with_other_users_or_no_range_stays():
    """A clip that is also an output (or feeds a float op) is not folded, nor one whose bounds
    cross (every output a_max) or are NaN."""
    before = _func("clip(%x, a_min=0.0, a_max=6.0)", extra=", %1")
    assert fold_qnn_clamp(before) is before
    for clamp in ("clip(%x, a_min=2.0, a_max=1.0)", "clip(%x, a_min=nan, a_max=1.0)"):
        before = _func(clamp)
        assert fold_qnn_clamp(before) is before
