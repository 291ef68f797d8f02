"""Data-movement ops (graph/ops/transform.py) against their numpy references, batched per module."""

import numpy as np
import pytest

from tessera import te
from tessera.graph.op import get_op
from tessera.topi import transform
from tessera.topi.testing import check_ops

RNG = np.random.default_rng(1)


def data(shape, dtype="float32"):
    if dtype == "bool":
        return RNG.random(shape) < 0.5
    return (RNG.standard_normal(shape) * 10).astype(dtype)


def slice_attrs(shape, *slices):
    """begin/end/strides in slice.indices form, as the frontend normalizes them."""
    idx = [s.indices(d) for s, d in zip(slices, shape, strict=True)]
    return {
        "begin": [i[0] for i in idx],
        "end": [i[1] for i in idx],
        "strides": [i[2] for i in idx],
    }


@pytest.mark.parametrize("dtype", ["float32", "int64", "bool"])
def test_reshape_transpose_tile_reverse(dtype):
    x = data((2, 3, 4), dtype)
    cases = [
        ("reshape", [x], {"newshape": (6, 4)}),
        ("reshape", [x], {"newshape": (4, 3, 2)}),
        ("reshape", [x], {"newshape": (24,)}),
        ("reshape", [x], {"newshape": (1, 2, 1, 12)}),
        ("transpose", [x], {"axes": (2, 0, 1)}),
        ("transpose", [x], {"axes": (1, 0, 2)}),
        ("transpose", [x], {"axes": (0, 1, 2)}),
        ("tile", [x], {"reps": (1, 2, 3)}),
        ("tile", [x], {"reps": (2, 1, 1)}),
        ("reverse", [x], {"axis": (0, 2)}),
        ("reverse", [x], {"axis": (-2,)}),
    ]
    check_ops(cases)


def test_concatenate_and_split():
    a, b, c = data((2, 3, 4)), data((2, 5, 4)), data((2, 1, 4))
    e = np.zeros((2, 0, 4), "float32")
    cases = [
        ("concatenate", [a, b, c], {"axis": 1}),
        ("concatenate", [a, e, b], {"axis": -2}),
        ("concatenate", [a], {"axis": 0}),
        ("concatenate", [a, a], {"axis": 2}),
        ("split", [b], {"axis": 1, "sections": (2, 3)}),
        ("split", [b], {"axis": -1, "sections": (1, 0, 3)}),
        ("split", [b], {"axis": 0, "sections": (2,)}),
    ]
    check_ops(cases)
    check_ops(cases[:1] + cases[4:5], target="c")


def test_concatenate_of_many_pieces_tests_log_many_bounds():
    """Note [concatenate tree]: 33 pieces of uneven sizes (one empty) joined along a middle axis
    match numpy, and an element's piece is found by a balanced tree of bounds (depth 6), not a
    chain of 32."""
    from tessera.tir import expr as E

    pieces = [data((2, 1 + k % 3, 4)) for k in range(33)]
    pieces[7] = np.zeros((2, 0, 4), "float32")
    check_ops([("concatenate", pieces, {"axis": 1})])

    def depth(e) -> int:
        if isinstance(e, E.Call):
            inner = max((depth(a) for a in e.args), default=0)
            return inner + (e.op == "if_then_else")
        return 0

    xs = [te.placeholder(p.shape, name=f"x{k}") for k, p in enumerate(pieces)]
    assert depth(transform.concatenate(xs, 1).op.body[0]) <= 6


def test_slice_with_steps_and_negative_steps():
    x = data((7, 6, 5))
    cases = [
        ("slice", [x], slice_attrs(x.shape, slice(1, 5), slice(None), slice(None, None, 2))),
        (
            "slice",
            [x],
            slice_attrs(x.shape, slice(None, None, -1), slice(4, 0, -2), slice(-2, None)),
        ),
        ("slice", [x], slice_attrs(x.shape, slice(-1, None, -3), slice(0, 6, 5), slice(3, 4))),
        ("slice", [x], slice_attrs(x.shape, slice(2, 2), slice(None), slice(None))),
    ]
    check_ops(cases)


def test_gathers_with_negative_indices():
    x = data((5, 4, 3))
    idx = np.array([[0, -1], [4, -5], [2, 1]], "int64")
    el = RNG.integers(-4, 4, size=(5, 2, 3)).astype("int32")
    nd = np.array([[0, -1], [4, 2], [-2, 0]], "int64")
    nd_batch = RNG.integers(-3, 3, size=(5, 2, 1)).astype("int64")
    cases = [
        ("gather", [x, idx], {"axis": 0}),
        ("gather", [x, np.clip(idx, -4, 3).astype("int32")], {"axis": 1}),
        ("gather", [x, np.array([2, -1], "int64")], {"axis": -1}),
        ("gather", [x, np.array(-2, "int64").reshape(1)], {"axis": 1}),
        ("gather_elements", [x, el], {"axis": 1}),
        ("gather_elements", [x, RNG.integers(-5, 5, size=(5, 4, 3))], {"axis": 0}),
        ("gather_nd", [x, nd], {}),
        ("gather_nd", [x, nd[:, :1]], {}),
        ("gather_nd", [x, nd_batch], {"batch_dims": 1}),
    ]
    check_ops(cases)
    check_ops(cases[:1] + cases[6:7], target="c")


def test_gather_clamps_out_of_range_indices():
    x = te.placeholder((4,), name="x")
    i = te.placeholder((2,), "int64", name="i")
    y = transform.gather(x, i)
    text = str(y.op.body[0])
    assert "Max(" in text and "Min(" in text


def test_expand():
    x = data((3, 1))
    cases = [
        ("expand", [x], {"shape": (2, 3, 4)}),
        ("expand", [x], {"shape": (1, 1)}),
        ("expand", [data((1,), "int32")], {"shape": (5,)}),
    ]
    check_ops(cases)


PAD_CASES = [
    ((3, 4), (1, 2, 2, 1)),
    ((3, 4), (0, 3, 0, 0)),
    ((3, 4), (-1, 1, 1, -2)),  # crops first
    ((2, 3, 4), (0, 1, 2, 1, 0, 0)),
    ((3,), (7, 8)),  # several periods
]


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
def test_pad_modes(mode):
    cases = []
    for shape, pads in PAD_CASES:
        cases.append(("pad", [data(shape)], {"pad_width": pads, "mode": mode}))
    cases.append(("pad", [data((1, 2))], {"pad_width": (2, 1, 0, 0), "mode": mode}))
    if mode == "constant":
        cases.append(("pad", [data((2, 2), "int32")], {"pad_width": (1, 1, 1, 1), "value": 3.7}))
        cases.append(("pad", [data((2, 2))], {"pad_width": (1, 1, 1, 1), "value": -2.5}))
    check_ops(cases)


def test_pad_rows_wider_than_a_vector():
    """Rows of several vectors: the lanes at each edge load one by one and the others as one
    vector (Note [clamped loads]; Note [loads in bounds] vectorizes the guard), uint8 and
    float32, pads on either side, crops, and a tail shorter than a vector."""
    u8 = (RNG.integers(0, 256, (2, 3, 5, 70))).astype("uint8")
    cases = [
        ("pad", [u8], {"pad_width": (0, 0, 1, 3, 0, 0, 2, 1)}),
        ("pad", [u8], {"pad_width": (0, 0, 0, 0, 0, 0, 1, 40)}),
        ("pad", [data((3, 5, 37))], {"pad_width": (0, 1, 2, 0, 1, 5)}),
        ("pad", [data((3, 5, 37))], {"pad_width": (0, 0, -3, 0, 0, 9), "value": 1.5}),
        ("pad", [data((4, 64))], {"pad_width": (1, 1, 1, 1)}),
    ]
    check_ops(cases)


def test_pad_on_c_target():
    x = data((3, 5))
    cases = [("pad", [x], {"pad_width": (1, 2, 2, 1), "mode": m}) for m in ("constant", "reflect")]
    check_ops(cases, target="c")


@pytest.mark.parametrize("block", [2, 3])
def test_depth_to_space_and_back(block):
    x = data((2, 2 * block * block, 3, 2))
    y = data((1, 3, 2 * block, block))
    cases = [
        ("nn.depth_to_space", [x], {"block_size": block, "mode": "DCR"}),
        ("nn.depth_to_space", [x], {"block_size": block, "mode": "CRD"}),
        ("nn.space_to_depth", [y], {"block_size": block}),
    ]
    check_ops(cases)


def test_transform_tags_are_injective_or_broadcast():
    x = te.placeholder((2, 3), name="x")
    assert get_op("transpose").rules["compute"](x, axes=(1, 0)).op.tag == "injective"
    assert get_op("expand").rules["compute"](x, shape=(4, 2, 3)).op.tag == "broadcast"
    outs = get_op("split").rules["compute"](x, axis=1, sections=(1, 2))
    assert [o.op.tag for o in outs] == ["injective", "injective"]


def test_reshape_of_wrong_size_is_a_value_error():
    with pytest.raises(ValueError, match="cannot reshape"):
        transform.reshape(te.placeholder((2, 3), name="x"), (4, 2))


def test_fused_chain_inlines_into_one_stage():
    """A fused injective group as the graph build schedules it: every stage but the output
    inlined (pad's and concatenate's if_then_else, a gather) and numerics unchanged."""
    import tessera
    from tessera.topi import broadcast, generic

    x = te.placeholder((3, 4), name="x")
    i = te.placeholder((2,), "int64", name="i")
    padded = transform.pad(x, (1, 0, 0, 2), mode="reflect")
    joined = transform.concatenate([padded, padded], 0)
    picked = transform.gather(joined, i, axis=1)
    out = broadcast.binary("multiply", picked, transform.reverse(picked, (0,)))
    s = generic.schedule_injective([out])
    assert [st.attach_type.name for st in s.stages if st.op is padded.op] == ["INLINE"]
    f = tessera.build(s, [x, i, out], target="llvm")
    xv, iv = data((3, 4)), np.array([-1, 2], "int64")
    p = np.pad(xv, ((1, 0), (0, 2)), mode="reflect")
    g = np.concatenate([p, p], 0)[:, [5, 2]]
    res = np.zeros((8, 2), "float32")
    f(xv, iv, res)
    np.testing.assert_allclose(res, g * g[::-1], rtol=1e-6)
