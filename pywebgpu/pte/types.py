"""The records the reader returns: constants, graph values and ops, VkGraph, method signatures."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Union

# Element sizes of the dtypes a VkGraph tensor can have.
DTYPE_ITEMSIZE = {
    "bool": 1,
    "uint8": 1,
    "int8": 1,
    "int32": 4,
    "float16": 2,
    "float32": 4,
    "float64": 8,
    "int64": 8,
}


@dataclass(frozen=True)
class ConstantRef:
    """Where a constant's bytes lie: `size` bytes at ABSOLUTE file offset `offset`.

    `key` is the program's named-data key (a sha256 hex digest of the bytes in
    current exports; identical constants share one key and one byte range), or None
    for a constant stored inline in the delegate's own bytes section.
    """

    offset: int
    size: int
    key: str | None


@dataclass(frozen=True)
class TensorValue:
    """A tensor of the Vulkan graph.

    `dims` are upper bounds for dynamically shaped tensors; live sizes come from
    SymInts at run time. `constant` is set for weights and other constant data.
    `mem_obj_id` names the shared memory object that memory planning assigned (tensors
    with the same id alias one allocation), -1 if none.
    `staging_dtype` is the dtype of the CPU-side (input/output) representation when it
    differs from `dtype` (e.g. float32 I/O of a graph forced to float16), else None.
    `storage_type` / `memory_layout` are raw VkStorageType / VkMemoryLayout values
    (255 = default): hints for the Vulkan runtime's texture layouts that a
    buffer-based runtime may ignore.
    """

    dtype: str
    dims: tuple[int, ...]
    constant: ConstantRef | None
    mem_obj_id: int
    staging_dtype: str | None
    storage_type: int
    memory_layout: int

    @property
    def numel(self) -> int:
        count = 1
        for dim in self.dims:
            count *= dim
        return count

    @property
    def nbytes(self) -> int:
        return self.numel * DTYPE_ITEMSIZE[self.dtype]


@dataclass(frozen=True)
class NullValue:
    """An absent optional argument (also how torch dtype arguments are serialized)."""


@dataclass(frozen=True)
class IntValue:
    value: int


@dataclass(frozen=True)
class DoubleValue:
    value: float


@dataclass(frozen=True)
class BoolValue:
    value: bool


@dataclass(frozen=True)
class StringValue:
    value: str


@dataclass(frozen=True)
class SymIntValue:
    """A symbolic integer (e.g. a live sequence length); `value` is its initial value."""

    value: int


@dataclass(frozen=True)
class IntListValue:
    items: tuple[int, ...]


@dataclass(frozen=True)
class DoubleListValue:
    items: tuple[float, ...]


@dataclass(frozen=True)
class BoolListValue:
    items: tuple[bool, ...]


@dataclass(frozen=True)
class ValueListValue:
    """A list of other values, by value id (e.g. the tensors of a `cat`)."""

    items: tuple[int, ...]


Value = Union[
    TensorValue,
    NullValue,
    IntValue,
    DoubleValue,
    BoolValue,
    StringValue,
    SymIntValue,
    IntListValue,
    DoubleListValue,
    BoolListValue,
    ValueListValue,
]


@dataclass(frozen=True)
class OpCall:
    """One operator call of the graph's chain: `index` is its position in the chain,
    `node_id` the exporter's node id, `args` value ids (inputs, then outputs)."""

    index: int
    node_id: int
    name: str
    args: tuple[int, ...]


@dataclass(frozen=True)
class VkGraph:
    """The Vulkan-delegate graph of one method, decoded and validated.

    Every value id (in `chain` args, ValueListValue items, `input_ids`, `output_ids`)
    is a valid index into `values`. `input_ids` / `output_ids` follow the order of
    the delegate call's arguments, which the exporter lists in order of first use, NOT
    the method's argument order: `method_input_ids[i]` is the graph value that the
    method's input i feeds (None if the graph never reads it), and `method_output_ids[i]`
    the graph value that becomes the method's output i. `shared_object_count` is one more than the largest
    `mem_obj_id` (0 if no tensor shares memory). `compile_specs` are the delegate's
    compile options (e.g. b"force_fp16" -> b"\\x00"). `storage_type_override` /
    `memory_layout_override` are graph-wide layout hints like those of TensorValue.
    """

    version: str
    values: tuple[Value, ...]
    chain: tuple[OpCall, ...]
    input_ids: tuple[int, ...]
    output_ids: tuple[int, ...]
    shared_object_count: int
    compile_specs: dict[str, bytes]
    storage_type_override: int
    memory_layout_override: int
    method_input_ids: tuple[int | None, ...] = ()
    method_output_ids: tuple[int, ...] = ()


@dataclass(frozen=True)
class EValueSpec:
    """An input or output of a method, as the ExecuTorch program declares it.

    `kind` is one of 'tensor', 'null', 'int', 'bool', 'double', 'string', 'int_list',
    'double_list', 'bool_list', 'tensor_list', 'optional_tensor_list'. For tensors,
    `dtype` is e.g. 'int64' or 'float32', `sizes` are upper bounds unless
    `shape_dynamism` is 'static' ('dynamic_bound', 'dynamic_unbound' otherwise).
    """

    kind: str
    dtype: str | None = None
    sizes: tuple[int, ...] | None = None
    shape_dynamism: str | None = None


@dataclass(frozen=True)
class MethodInfo:
    name: str
    inputs: tuple[EValueSpec, ...]
    outputs: tuple[EValueSpec, ...]
