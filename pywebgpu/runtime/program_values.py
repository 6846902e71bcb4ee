"""The runtime's values (values.py) for a program's values (pte.py)."""

from __future__ import annotations

from .. import pte
from ..ops.registry import OpError
from ..values import DTYPE_SIZES, SymInt, Tensor, ValueList


def runtime_value(index, value):
    """The runtime's value for the program's value `index`."""
    if isinstance(value, pte.TensorValue):
        if value.dtype not in DTYPE_SIZES:
            raise OpError(f"value {index}: tensors of dtype {value.dtype} are not supported")
        dims = tuple(value.dims)
        if value.dtype == "float16":
            # An f16 program (ExecuTorch's force_fp16) runs as float32, as the kernels are
            # f32: its constants are widened at build unless its ops take them as stored.
            return Tensor(index, "float32", dims, dims, value.constant, constant_dtype="float16" if value.constant else None)
        return Tensor(index, value.dtype, dims, dims, value.constant)
    if isinstance(value, pte.SymIntValue):
        return SymInt(index, value.value)
    if isinstance(value, pte.ValueListValue):
        return ValueList(index, list(value.items))
    if isinstance(value, pte.NullValue):
        return None
    if isinstance(value, (pte.IntListValue, pte.DoubleListValue, pte.BoolListValue)):
        return tuple(value.items)
    return value.value  # Int, Double, Bool, String
