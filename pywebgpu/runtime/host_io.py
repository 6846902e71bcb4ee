"""Tensors on the host: the inputs a caller gives a graph and the outputs it reads back."""

from __future__ import annotations

import array
from dataclasses import dataclass

from ..gpu import GPUError
from ..values import Tensor, numel

# Input dtypes as the caller gives them → how they are staged on the GPU. ExecuTorch's
# Vulkan graphs take int64 token ids and positions narrowed to int32.
_HOST_TYPECODES = {"float32": "f", "int32": "i", "int64": "i"}


@dataclass
class HostTensor:
    """Tensor data on the host: `values` is an array.array (or any flat int/float sequence)."""

    shape: tuple
    values: object
    dtype: str = "float32"

    def tolist(self):
        return list(self.values)


def staged_input(position: int, tensor: Tensor, host, shape: tuple) -> array.array:
    """Input `position`'s values (a HostTensor, array.array or numpy array of `shape`) as
    they are written to the GPU for graph input `tensor`."""
    values = _flat_values(host)
    if len(values) != numel(shape):
        raise GPUError(f"input {position}: {len(values)} values for shape {list(shape)}")
    typecode = _HOST_TYPECODES.get(tensor.dtype)
    if typecode is None:
        raise GPUError(f"input {position}: inputs of dtype {tensor.dtype} are not supported")
    try:
        return array.array(typecode, values)
    except OverflowError:
        raise GPUError(f"input {position}: a value does not fit in 32 bits") from None


async def read_output(device, tensor: Tensor) -> HostTensor:
    """Graph output `tensor`, read back from its buffer."""
    if tensor.dtype != "float32":
        raise GPUError(f"reading outputs of dtype {tensor.dtype} is not supported")
    data = await device.read_buffer(tensor.buffer, 0, (tensor.nbytes + 3) & ~3)
    values = array.array("f")
    values.frombytes(bytes(data[: tensor.nbytes]))
    return HostTensor(tensor.sizes, values, tensor.dtype)


def _flat_values(host):
    """Flat values of a HostTensor, array.array, or a numpy array (where numpy exists)."""
    if isinstance(host, HostTensor):
        return host.values
    if hasattr(host, "ravel"):
        return host.ravel().tolist()
    raise GPUError(f"unsupported input type {type(host).__name__}: use HostTensor or a numpy array")
