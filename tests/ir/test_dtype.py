import numpy as np
import pytest

from tessera.ir.dtype import DType, bfloat16, bool_, float32, int8


@pytest.mark.parametrize(
    "text",
    [
        "float32",
        "float16",
        "float64",
        "bfloat16",
        "int8",
        "int16",
        "int32",
        "int64",
        "uint8",
        "bool",
        "float32x8",
        "int8x64",
        "handle",
    ],
)
def test_parse_print_round_trip(text):
    assert str(DType.parse(text)) == text


def test_properties():
    assert float32.with_lanes(16).lanes == 16
    assert DType.parse("float32x16").element == float32
    assert bfloat16.is_float and bfloat16.numpy_name == "uint16"
    assert bool_.itemsize == 1 and int8.itemsize == 1 and float32.itemsize == 4
    assert DType.parse(np.float32) == float32
    assert DType.parse(np.dtype("int8")) == int8


@pytest.mark.parametrize("bad", ["float33", "int7", "floaty", "float32xq", "uint1"])
def test_bad_dtypes_are_rejected(bad):
    with pytest.raises(ValueError, match="dtype"):
        DType.parse(bad)
