"""Dtype names as the profiler spells them, mapped to torch's own names, without importing torch.

The Chrome trace says ``c10::BFloat16`` in ``Input type`` and ``15`` (a ``c10::ScalarType``)
in ``Concrete Inputs``; traces and reports use torch's names (``bfloat16``). The tables
below were read off torch 2.13 profiles; ``tests/test_runtime_dtypes.py`` checks them
against the installed torch so a renumbering upstream fails a test, not a report.
"""

from __future__ import annotations

# c10/core/ScalarType.h enumeration order.
SCALAR_TYPES: tuple[str, ...] = (
    "uint8", "int8", "int16", "int32", "int64", "float16", "float32", "float64",
    "complex32", "complex64", "complex128", "bool", "qint8", "quint8", "qint32",
    "bfloat16", "quint4x2", "quint2x4", "bits1x8", "bits2x4", "bits4x2", "bits8",
    "bits16", "float8_e5m2", "float8_e4m3fn", "float8_e5m2fnuz", "float8_e4m3fnuz",
    "uint16", "uint32", "uint64", "uint1", "uint2", "uint3", "uint4", "uint5", "uint6",
    "uint7", "int1", "int2", "int3", "int4", "int5", "int6", "int7", "float8_e8m0fnu",
    "float4_e2m1fn_x2",
)  # fmt: skip

# The C++ element type names the profiler writes in ``Input type``.
CPP_TYPES: dict[str, str] = {
    "unsigned char": "uint8",
    "signed char": "int8",
    "short int": "int16",
    "int": "int32",
    "long int": "int64",
    "long long int": "int64",
    "c10::Half": "float16",
    "float": "float32",
    "double": "float64",
    "c10::complex<c10::Half>": "complex32",
    "c10::complex<float>": "complex64",
    "c10::complex<double>": "complex128",
    "bool": "bool",
    "c10::qint8": "qint8",
    "c10::quint8": "quint8",
    "c10::qint32": "qint32",
    "c10::BFloat16": "bfloat16",
    "c10::quint4x2": "quint4x2",
    "c10::quint2x4": "quint2x4",
    "c10::bits1x8": "bits1x8",
    "c10::bits2x4": "bits2x4",
    "c10::bits4x2": "bits4x2",
    "c10::bits8": "bits8",
    "c10::bits16": "bits16",
    "c10::Float8_e5m2": "float8_e5m2",
    "c10::Float8_e4m3fn": "float8_e4m3fn",
    "c10::Float8_e5m2fnuz": "float8_e5m2fnuz",
    "c10::Float8_e4m3fnuz": "float8_e4m3fnuz",
    "short unsigned int": "uint16",
    "unsigned int": "uint32",
    "long unsigned int": "uint64",
    "c10::Float8_e8m0fnu": "float8_e8m0fnu",
    "c10::Float4_e2m1fn_x2": "float4_e2m1fn_x2",
}
for _n in range(1, 8):
    CPP_TYPES[f"c10::dummy_uint1_7_t<{_n}>"] = f"uint{_n}"
    CPP_TYPES[f"c10::dummy_int1_7_t<{_n}>"] = f"int{_n}"
del _n

# Bytes per element, as ``torch.dtype.itemsize`` reports them (sub-byte types round up to 1).
ITEMSIZE: dict[str, int] = {name: 1 for name in SCALAR_TYPES}
ITEMSIZE.update(
    int16=2, int32=4, int64=8, float16=2, float32=4, float64=8, complex32=4, complex64=8,
    complex128=16, qint32=4, bfloat16=2, bits16=2, uint16=2, uint32=4, uint64=8,
)  # fmt: skip


def scalar_type_name(code: int) -> str | None:
    """The torch dtype name for a ``c10::ScalarType`` number, or ``None`` if unknown."""
    if 0 <= code < len(SCALAR_TYPES):
        return SCALAR_TYPES[code]
    return None


def cpp_type_name(cpp: str) -> str | None:
    """The torch dtype name for a profiler ``Input type`` string, or ``None`` if it is not a tensor type."""
    return CPP_TYPES.get(cpp)
