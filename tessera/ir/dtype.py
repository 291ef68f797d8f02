"""Data types shared by every IR: scalar and vector element types.

A `DType` is a (code, bits, lanes) triple that prints the way users write it:

    DType.parse("float32x8")  ->  DType("float", 32, 8);  str(...) == "float32x8"
    int32.with_lanes(4)       ->  int32x4

`handle` is an opaque pointer (buffer data). `bool` is one bit. bfloat16 is a 16-bit float whose
storage in numpy is uint16 (see `tessera.runtime.ndarray`).

The small ONNX types (`float8_e4m3fn`, `float8_e4m3fnuz`, `float8_e5m2`, `float8_e5m2fnuz`,
`float4_e2m1fn`, `float8_e8m0fnu`, `int4`, `uint4`, `int2`, `uint2`, spelled as ml_dtypes spells
them) are storage types: one byte per element in memory (ml_dtypes' numpy layout, unpacked), so
their `bits` is 8; their code is their name. Tensors hold, move and convert them
(`tessera.topi.cast_small`), but no arithmetic takes them: `is_float` and `is_integer` are
False, `is_storage_only` is True.
"""

from __future__ import annotations

from dataclasses import dataclass

# the storage-only types, by name (their code); "fn": finite (no infinity), "uz": no negative zero
STORAGE_ONLY = (
    "float8_e4m3fn",
    "float8_e4m3fnuz",
    "float8_e5m2",
    "float8_e5m2fnuz",
    "float4_e2m1fn",
    "float8_e8m0fnu",  # an exponent only (small_types.E8M0)
    "int4",
    "uint4",
    "int2",
    "uint2",
)
_CODES = ("int", "uint", "float", "bfloat", "bool", "handle", *STORAGE_ONLY)


@dataclass(frozen=True)
class DType:
    code: str
    bits: int
    lanes: int = 1

    def __post_init__(self):
        if self.code not in _CODES:
            raise ValueError(f"unknown dtype code {self.code!r}")
        if self.lanes < 1:
            raise ValueError(f"dtype lanes must be >= 1, got {self.lanes}")

    @staticmethod
    def parse(text: str | DType) -> DType:
        """Read 'float32', 'int8x16', 'bool', 'handle', 'bfloat16'."""
        if isinstance(text, DType):
            return text
        if not isinstance(text, str):
            # numpy dtypes and numpy scalar types
            import numpy as np

            text = np.dtype(text).name
        name, lanes = text, 1
        if "x" in text:
            name, _, lanes_text = text.partition("x")
            if not lanes_text.isdigit():
                raise ValueError(f"cannot parse dtype {text!r}")
            lanes = int(lanes_text)
        if name == "bool":
            return DType("bool", 1, lanes)
        if name == "handle":
            return DType("handle", 64, lanes)
        if name in STORAGE_ONLY:
            return DType(name, 8, lanes)
        for code in ("bfloat", "float", "uint", "int"):
            if name.startswith(code) and name[len(code) :].isdigit():
                bits = int(name[len(code) :])
                if bits not in _VALID_BITS[code]:
                    break
                return DType(code, bits, lanes)
        raise ValueError(f"cannot parse dtype {text!r}")

    def __str__(self) -> str:
        if self.code in ("bool", "handle") or self.code in STORAGE_ONLY:
            base = self.code
        else:
            base = f"{self.code}{self.bits}"
        return base if self.lanes == 1 else f"{base}x{self.lanes}"

    def __repr__(self) -> str:
        return f"DType({str(self)!r})"

    @property
    def is_float(self) -> bool:
        return self.code in ("float", "bfloat")

    @property
    def is_int(self) -> bool:
        return self.code == "int"

    @property
    def is_uint(self) -> bool:
        return self.code == "uint"

    @property
    def is_integer(self) -> bool:
        """int or uint (not bool)."""
        return self.code in ("int", "uint")

    @property
    def is_bool(self) -> bool:
        return self.code == "bool"

    @property
    def is_handle(self) -> bool:
        return self.code == "handle"

    @property
    def is_storage_only(self) -> bool:
        """A small ONNX type (float8, float4, int4, int2): loaded, stored and converted only."""
        return self.code in STORAGE_ONLY

    @property
    def value_bits(self) -> int:
        """Bits of the value itself (4 for int4 and float4_e2m1fn; `bits` for other types)."""
        if self.code in STORAGE_ONLY:
            return int(self.code.split("_")[0].lstrip("uintfloa"))
        return self.bits

    @property
    def is_vector(self) -> bool:
        return self.lanes > 1

    @property
    def element(self) -> DType:
        return DType(self.code, self.bits, 1) if self.lanes != 1 else self

    def with_lanes(self, lanes: int) -> DType:
        return DType(self.code, self.bits, lanes)

    @property
    def itemsize(self) -> int:
        """Bytes one element takes in memory (bool is stored as one byte)."""
        return 1 if self.code == "bool" else self.bits // 8

    @property
    def numpy_name(self) -> str:
        """The numpy dtype that stores this type (bfloat16 is stored as uint16; the small types
        are named as ml_dtypes names them, and need `import ml_dtypes` for numpy to know them)."""
        if self.code == "bfloat":
            return "uint16"
        if self.code == "handle":
            return "uint64"
        return str(self.element)

    @property
    def dtype(self):
        """The numpy dtype: numpy then takes a DType as a dtype (`x.astype(A.dtype)`).
        A small type is ml_dtypes' dtype (TypeError when ml_dtypes is not installed)."""
        import numpy as np

        if self.is_storage_only:
            return ml_dtype(self)
        return np.dtype(self.numpy_name)

    def min_value(self):
        if self.code in ("int4", "int2"):
            return -(1 << (self.value_bits - 1))
        if self.code in ("uint4", "uint2"):
            return 0
        if self.is_int:
            return -(1 << (self.bits - 1))
        if self.is_uint or self.is_bool:
            return 0
        return float("-inf")

    def max_value(self):
        if self.code in ("int4", "int2"):
            return (1 << (self.value_bits - 1)) - 1
        if self.code in ("uint4", "uint2"):
            return (1 << self.value_bits) - 1
        if self.is_int:
            return (1 << (self.bits - 1)) - 1
        if self.is_uint:
            return (1 << self.bits) - 1
        if self.is_bool:
            return 1
        return float("inf")


_VALID_BITS = {
    "int": (8, 16, 32, 64),
    "uint": (8, 16, 32, 64),
    "float": (16, 32, 64),
    "bfloat": (16,),
}

float16 = DType("float", 16)
float32 = DType("float", 32)
float64 = DType("float", 64)
bfloat16 = DType("bfloat", 16)
int8 = DType("int", 8)
int16 = DType("int", 16)
int32 = DType("int", 32)
int64 = DType("int", 64)
uint8 = DType("uint", 8)
uint16 = DType("uint", 16)
uint32 = DType("uint", 32)
uint64 = DType("uint", 64)
bool_ = DType("bool", 1)
handle = DType("handle", 64)


def ml_dtype(dt: DType):
    """The numpy dtype (from ml_dtypes) of a storage-only type."""
    import numpy as np

    try:
        import ml_dtypes
    except ImportError:
        raise TypeError(f"dtype {dt} needs the ml_dtypes package (pip install ml_dtypes)") from None
    return np.dtype(getattr(ml_dtypes, dt.element.code))


def dtype(x) -> DType:
    """Coerce a string, numpy dtype or DType to a DType."""
    return DType.parse(x)
