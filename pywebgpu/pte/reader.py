"""Reader for ExecuTorch `.pte` programs whose methods are Vulkan-delegate graphs.

Pure Python (stdlib + the `flatbuffers` runtime), so it runs in Pyodide. The reader
never needs the whole file in memory: it reads the program flatbuffer and the
delegate's graph flatbuffer through a `ByteSource`, and describes every constant
(weights, KV-cache initial values, RoPE tables) as a `ConstantRef`, an absolute byte
range of the file that the caller can upload to the GPU straight from wherever the
file lives (a JS ArrayBuffer, an mmap).

    program = load_program(pte_bytes)       # or any ByteSource
    program.constant_methods                # {"get_max_seq_len": 128, ...}
    graph = program.vulkan_graph()          # method "forward"
    for op in graph.chain:                  # OpCall(index, node_id, name, args)
        ...
    weight = graph.values[op.args[1]]       # TensorValue(dtype, dims, constant, ...)
    program.source.read(weight.constant.offset, weight.constant.size)

Layout of a `.pte` file (see the ExecuTorch schemas in `_generated/`):

    0   u32 root offset of the Program flatbuffer, then file identifier "ET12"
    8   extended header "eh00": u32 header length, u64 program size,
        u64 segment base offset, u64 segment data size
    ... rest of the Program flatbuffer (up to program size)
    segment base offset: segments (delegate blobs, named constant data)

A Vulkan delegate blob is a 30-byte "VH00" header, a "VK00" VkGraph flatbuffer and a
bytes section for inline constants. Current exporters put every constant in the
program's named data instead (VkBytes.offset == UINT64_MAX, named_key set).

Malformed input raises `PteError`, and nothing else: the flatbuffers Python runtime
does no verification (it follows any offset, wraps negative positions around to the
end of the buffer and truncates out-of-range strings), so `_Flatbuffer` checks every
table and vector it touches before trusting it.
"""

from __future__ import annotations

import dataclasses
import struct
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterator, Protocol, Union, runtime_checkable

from ._generated.executorch_flatbuffer.Bool import Bool as _FbBool
from ._generated.executorch_flatbuffer.DataLocation import DataLocation as _FbDataLocation
from ._generated.executorch_flatbuffer.DelegateCall import DelegateCall as _FbDelegateCall
from ._generated.executorch_flatbuffer.Double import Double as _FbDouble
from ._generated.executorch_flatbuffer.InstructionArguments import (
    InstructionArguments as _FbInstructionKind,
)
from ._generated.executorch_flatbuffer.Int import Int as _FbInt
from ._generated.executorch_flatbuffer.KernelTypes import KernelTypes as _FbEValueKind
from ._generated.executorch_flatbuffer.Program import Program as _FbProgram
from ._generated.executorch_flatbuffer.ScalarType import ScalarType as _FbScalarType
from ._generated.executorch_flatbuffer.Tensor import Tensor as _FbTensor
from ._generated.executorch_flatbuffer.TensorShapeDynamism import (
    TensorShapeDynamism as _FbShapeDynamism,
)
from ._generated.vkgraph.Bool import Bool as _VkBool
from ._generated.vkgraph.BoolList import BoolList as _VkBoolList
from ._generated.vkgraph.Double import Double as _VkDouble
from ._generated.vkgraph.DoubleList import DoubleList as _VkDoubleList
from ._generated.vkgraph.GraphTypes import GraphTypes as _VkValueKind
from ._generated.vkgraph.Int import Int as _VkInt
from ._generated.vkgraph.IntList import IntList as _VkIntList
from ._generated.vkgraph.String import String as _VkString
from ._generated.vkgraph.SymInt import SymInt as _VkSymInt
from ._generated.vkgraph.ValueList import ValueList as _VkValueList
from ._generated.vkgraph.VkDataType import VkDataType as _VkDataType
from ._generated.vkgraph.VkGraph import VkGraph as _FbVkGraph
from ._generated.vkgraph.VkMemoryLayout import VkMemoryLayout as _VkMemoryLayout
from ._generated.vkgraph.VkStorageType import VkStorageType as _VkStorageType
from ._generated.vkgraph.VkTensor import VkTensor as _VkTensor


class PteError(Exception):
    """The input is not a well-formed `.pte` program (or lacks what was asked of it).

    The message names what is wrong and where: byte offset, method, value id, op
    index or field.
    """


# ---------------------------------------------------------------------------
# Byte sources


@runtime_checkable
class ByteSource(Protocol):
    """Random access to the bytes of a `.pte` file.

    `read` returns a bytes-like object (bytes, memoryview, ...) of exactly `size`
    bytes starting at `offset`; the reader only calls it for ranges inside
    `0 <= offset <= offset + size <= len(source)`. In the browser a source can wrap
    a JS ArrayBuffer and copy out only the small regions the reader asks for.
    """

    def __len__(self) -> int: ...

    def read(self, offset: int, size: int) -> bytes: ...


class BytesSource:
    """A `ByteSource` over an in-memory bytes-like object (bytes, bytearray,
    memoryview, mmap, array, ...). `read` returns zero-copy memoryview slices, which
    keep the underlying object exported (an mmap cannot be closed while they live)."""

    def __init__(self, data) -> None:
        self._view = memoryview(data).cast("B")

    def __len__(self) -> int:
        return len(self._view)

    def read(self, offset: int, size: int) -> memoryview:
        if offset < 0 or size < 0 or offset + size > len(self._view):
            raise ValueError(
                f"read of {size} bytes at {offset} is outside the {len(self._view)} byte buffer"
            )
        return self._view[offset : offset + size]


def _read(source: ByteSource, offset: int, size: int, what: str) -> bytes:
    """Reads `size` bytes of `what` at absolute `offset`, checked against the file size."""
    file_size = len(source)
    if offset < 0 or size < 0 or offset + size > file_size:
        raise PteError(
            f"{what}: bytes {offset}..{offset + size} lie outside the {file_size} byte file"
        )
    data = bytes(source.read(offset, size))
    if len(data) != size:
        raise PteError(
            f"{what}: the byte source returned {len(data)} bytes for a read of {size} at {offset}"
        )
    return data


# ---------------------------------------------------------------------------
# Public data model


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

_VK_DTYPES = {
    _VkDataType.BOOL: "bool",
    _VkDataType.UINT8: "uint8",
    _VkDataType.INT8: "int8",
    _VkDataType.INT32: "int32",
    _VkDataType.FLOAT16: "float16",
    _VkDataType.FLOAT32: "float32",
    _VkDataType.FLOAT64: "float64",
    _VkDataType.INT64: "int64",
}

# ExecuTorch ScalarType -> torch dtype name.
_PROGRAM_DTYPES = {
    _FbScalarType.BYTE: "uint8",
    _FbScalarType.CHAR: "int8",
    _FbScalarType.SHORT: "int16",
    _FbScalarType.INT: "int32",
    _FbScalarType.LONG: "int64",
    _FbScalarType.HALF: "float16",
    _FbScalarType.FLOAT: "float32",
    _FbScalarType.DOUBLE: "float64",
    _FbScalarType.BOOL: "bool",
    _FbScalarType.QINT8: "qint8",
    _FbScalarType.QUINT8: "quint8",
    _FbScalarType.QINT32: "qint32",
    _FbScalarType.BFLOAT16: "bfloat16",
    _FbScalarType.QUINT4X2: "quint4x2",
    _FbScalarType.QUINT2X4: "quint2x4",
    _FbScalarType.BITS16: "bits16",
    _FbScalarType.FLOAT8E5M2: "float8_e5m2",
    _FbScalarType.FLOAT8E4M3FN: "float8_e4m3fn",
    _FbScalarType.FLOAT8E5M2FNUZ: "float8_e5m2fnuz",
    _FbScalarType.FLOAT8E4M3FNUZ: "float8_e4m3fnuz",
    _FbScalarType.UINT16: "uint16",
    _FbScalarType.UINT32: "uint32",
    _FbScalarType.UINT64: "uint64",
}

_SHAPE_DYNAMISM = {
    _FbShapeDynamism.STATIC: "static",
    _FbShapeDynamism.DYNAMIC_BOUND: "dynamic_bound",
    _FbShapeDynamism.DYNAMIC_UNBOUND: "dynamic_unbound",
}

_EVALUE_KINDS = {
    _FbEValueKind.Null: "null",
    _FbEValueKind.Int: "int",
    _FbEValueKind.Bool: "bool",
    _FbEValueKind.Double: "double",
    _FbEValueKind.Tensor: "tensor",
    _FbEValueKind.String: "string",
    _FbEValueKind.IntList: "int_list",
    _FbEValueKind.DoubleList: "double_list",
    _FbEValueKind.BoolList: "bool_list",
    _FbEValueKind.TensorList: "tensor_list",
    _FbEValueKind.OptionalTensorList: "optional_tensor_list",
}

_INSTRUCTION_KINDS = {
    value: name for name, value in vars(_FbInstructionKind).items() if not name.startswith("_")
}


def _enum_values(enum_class) -> frozenset[int]:
    return frozenset(v for k, v in vars(enum_class).items() if not k.startswith("_"))


_VK_STORAGE_TYPES = _enum_values(_VkStorageType)
_VK_MEMORY_LAYOUTS = _enum_values(_VkMemoryLayout)

_VULKAN_BACKEND_ID = "VulkanBackend"

# ExecuTorch's kTensorDimensionLimit. Also keeps a corrupt dims vector from making
# numel a product of thousands of factors.
_MAX_TENSOR_DIMS = 16

# VkBytes.offset of a constant stored in the program's named data, not inline.
_NAMED_DATA_OFFSET = 2**64 - 1


# ---------------------------------------------------------------------------
# Checked flatbuffer access

# What the flatbuffers runtime raises on out-of-range reads: struct.error past the
# end of the buffer, TypeError for positions beyond 32 bits (enforce_number),
# IndexError from _CheckedBytes, UnicodeDecodeError (a ValueError) for bad strings.
_LOW_LEVEL_ERRORS = (struct.error, IndexError, TypeError, ValueError, OverflowError)


class _CheckedBytes(bytes):
    """bytes whose slices raise IndexError when they run past the end, where plain
    bytes would silently truncate (flatbuffers reads strings by slicing)."""

    def __getitem__(self, key):
        if isinstance(key, slice) and key.stop is not None and key.stop > len(self):
            raise IndexError(f"slice to byte {key.stop} runs past the {len(self)} byte buffer")
        return super().__getitem__(key)


class _Flatbuffer:
    """A flatbuffer read through the generated classes, with the checks flatbuffers'
    Python runtime lacks. `file_offset` (where the buffer starts in the file) turns
    buffer positions into file offsets for error messages."""

    def __init__(self, data: bytes, file_offset: int, name: str) -> None:
        self.buf = _CheckedBytes(data)
        self.file_offset = file_offset
        self.name = name

    @contextmanager
    def reading(self, what: str) -> Iterator[None]:
        """Turns the runtime's low-level exceptions into PteError naming `what`."""
        try:
            yield
        except _LOW_LEVEL_ERRORS as exc:
            raise PteError(f"{self.name}: {what}: malformed flatbuffer ({exc})") from exc

    def error(self, what: str, problem: str) -> PteError:
        return PteError(f"{self.name}: {what}: {problem}")

    def root(self, table_class, identifier: bytes):
        if len(self.buf) < 8:
            raise self.error("header", f"{len(self.buf)} bytes is too short for a flatbuffer")
        if self.buf[4:8] != identifier:
            raise self.error(
                f"file identifier at byte {self.file_offset + 4}",
                f"expected {identifier!r}, found {bytes(self.buf[4:8])!r}",
            )
        with self.reading("root table offset"):
            root = table_class.GetRootAs(self.buf, 0)
        return self.table(root, "root table")

    def table(self, obj, what: str):
        """Checks that the table `obj` (a generated class instance) and its vtable
        lie inside the buffer, so every later field lookup reads inside it too."""
        size = len(self.buf)
        pos = obj._tab.Pos
        at = f"table at byte {self.file_offset + pos}"
        if pos + 4 > size:
            raise self.error(what, f"{at} lies outside the {size} byte flatbuffer")
        (vtable_distance,) = struct.unpack_from("<i", self.buf, pos)
        vtable = pos - vtable_distance
        if vtable < 0 or vtable + 4 > size:
            raise self.error(what, f"{at} has its vtable outside the flatbuffer")
        vtable_size, table_size = struct.unpack_from("<HH", self.buf, vtable)
        if vtable_size < 4 or vtable_size % 2 or vtable + vtable_size > size:
            raise self.error(what, f"{at} has a vtable of invalid size {vtable_size}")
        if table_size < 4 or pos + table_size > size:
            raise self.error(what, f"{at} has an invalid size {table_size}")
        field_offsets = struct.unpack_from(f"<{(vtable_size - 4) // 2}H", self.buf, vtable + 4)
        for field_index, field_offset in enumerate(field_offsets):
            if field_offset >= table_size:
                raise self.error(
                    what, f"{at}: field {field_index} at offset {field_offset} lies outside the table"
                )
        return obj

    def vector(self, length: Callable[[], int], element: Callable[[int], object], what: str) -> int:
        """The length of a vector field, given its generated `XLength` and `X(j)`
        accessors. Reading the last element proves the whole vector lies inside the
        buffer (positions only grow), so a corrupt length fails here instead of
        driving a huge loop."""
        with self.reading(what):
            count = length()
        if count:
            with self.reading(f"{what}[{count - 1}] (vector of {count})"):
                element(count - 1)
        return count

    def ints(self, length: Callable[[], int], element: Callable[[int], int], what: str) -> tuple:
        """The elements of a scalar vector field, given its `XLength` and `X(j)`."""
        count = self.vector(length, element, what)
        with self.reading(what):
            return tuple(element(j) for j in range(count))

    def value_ids(
        self, length: Callable[[], int], element: Callable[[int], int], what: str, value_count: int
    ) -> tuple[int, ...]:
        """A vector field of value ids, each checked to index one of `value_count` values."""
        ids = self.ints(length, element, what)
        for position, value_id in enumerate(ids):
            if not 0 <= value_id < value_count:
                raise self.error(
                    f"{what}[{position}]", f"value id {value_id} is out of range ({value_count} values)"
                )
        return ids

    def string(self, read: Callable[[], bytes | None], what: str) -> str | None:
        """A string field, given its generated accessor (None when absent)."""
        with self.reading(what):
            raw = read()
            return None if raw is None else raw.decode("utf-8")

    def required_string(self, read: Callable[[], bytes | None], what: str) -> str:
        text = self.string(read, what)
        if text is None:
            raise self.error(what, "missing")
        return text

    def union_table(self, kind_name: str, raw_table, table_class, what: str):
        """Wraps the flatbuffers Table of a union member in its generated class."""
        if raw_table is None:
            raise self.error(what, f"{kind_name} value has no table")
        obj = table_class()
        obj.Init(raw_table.Bytes, raw_table.Pos)
        return self.table(obj, f"{what} ({kind_name})")


# ---------------------------------------------------------------------------
# File header

_PROGRAM_IDENTIFIER = b"ET12"
_EXTENDED_HEADER_OFFSET = 8
_EXTENDED_HEADER_MAGIC = b"eh00"
# Header lengths ExecuTorch has written: 24 before segment_data_size existed, then 32.
_EXTENDED_HEADER_LENGTHS = (24, 32)


@dataclass(frozen=True)
class _FileLayout:
    program_size: int
    # Absolute offset and size of the segment area. A file without segment data
    # (no extended header, or a zero segment base) can still list empty segments.
    segment_base: int
    segment_area_size: int


def _read_file_layout(source: ByteSource) -> _FileLayout:
    file_size = len(source)
    if file_size < 8:
        raise PteError(f"file of {file_size} bytes is too short for a .pte program")
    head = _read(source, 0, min(file_size, _EXTENDED_HEADER_OFFSET + 32), "file header")
    if head[4:8] != _PROGRAM_IDENTIFIER:
        raise PteError(
            f"file identifier at byte 4: expected {_PROGRAM_IDENTIFIER!r}, found {head[4:8]!r}"
        )
    magic = head[_EXTENDED_HEADER_OFFSET : _EXTENDED_HEADER_OFFSET + 4]
    if magic != _EXTENDED_HEADER_MAGIC:
        # Programs without segment data may omit the header: the flatbuffer is the file.
        return _FileLayout(program_size=file_size, segment_base=file_size, segment_area_size=0)
    if len(head) < _EXTENDED_HEADER_OFFSET + 8:
        raise PteError(f"extended header at byte 8: truncated (file of {file_size} bytes)")
    (header_length,) = struct.unpack_from("<I", head, _EXTENDED_HEADER_OFFSET + 4)
    if header_length not in _EXTENDED_HEADER_LENGTHS:
        raise PteError(f"extended header at byte 8: unknown header length {header_length}")
    header_end = _EXTENDED_HEADER_OFFSET + header_length
    if len(head) < header_end:
        raise PteError(f"extended header at byte 8: truncated (file of {file_size} bytes)")
    program_size, segment_base = struct.unpack_from("<QQ", head, _EXTENDED_HEADER_OFFSET + 8)
    if not header_end <= program_size <= file_size:
        raise PteError(
            f"extended header at byte 8: program size {program_size} is outside "
            f"{header_end}..{file_size} (file size)"
        )
    if segment_base == 0:
        return _FileLayout(program_size, segment_base=program_size, segment_area_size=0)
    if not program_size <= segment_base <= file_size:
        raise PteError(
            f"extended header at byte 8: segment base offset {segment_base} is outside "
            f"{program_size} (program end)..{file_size} (file size)"
        )
    if header_length == 24:
        segment_area_size = file_size - segment_base
    else:
        (segment_area_size,) = struct.unpack_from("<Q", head, _EXTENDED_HEADER_OFFSET + 24)
        if segment_base + segment_area_size > file_size:
            raise PteError(
                f"extended header at byte 8: segment data of {segment_area_size} bytes at "
                f"{segment_base} runs past the end of the {file_size} byte file"
            )
    return _FileLayout(program_size, segment_base, segment_area_size)


# ---------------------------------------------------------------------------
# Program


@dataclass(frozen=True)
class _Delegate:
    backend_id: str
    blob_offset: int  # absolute
    blob_size: int
    compile_specs: dict[str, bytes]


@dataclass(frozen=True)
class _Method:
    info: MethodInfo
    # The value a constant method (no inputs, no instructions, one int/double/bool
    # output) returns; None for other methods.
    constant_value: int | float | bool | None
    # The delegate and argument count of the method's only instruction when that is a
    # delegate call; otherwise a description of the instructions, for error messages.
    delegate: _Delegate | None
    delegate_args: tuple[int, ...]  # the delegate call's method-value ids: inputs, then outputs
    input_value_ids: tuple[int, ...]  # the method's inputs and outputs, as method-value ids
    output_value_ids: tuple[int, ...]
    instructions_summary: str


class Program:
    """A decoded `.pte` program. Build one with `load_program`.

    `method_names` lists every method (execution plan) in file order;
    `constant_methods` maps the constant metadata methods (get_max_seq_len,
    use_kv_cache, ...) to the value they return. `source` is the file's ByteSource,
    for reading constants by their ConstantRef.
    """

    def __init__(
        self,
        source: ByteSource,
        methods: dict[str, _Method],
        named_data: dict[str, ConstantRef],
    ) -> None:
        self.source = source
        self._methods = methods
        self._named_data = named_data
        self._vulkan_graphs: dict[str, VkGraph] = {}
        self.method_names: tuple[str, ...] = tuple(methods)
        self.constant_methods: dict[str, int | float | bool] = {
            name: m.constant_value for name, m in methods.items() if m.constant_value is not None
        }

    def _method(self, name: str) -> _Method:
        if name not in self._methods:
            raise PteError(f"no method named {name!r}; the program has {list(self._methods)}")
        return self._methods[name]

    def method(self, name: str) -> MethodInfo:
        """Inputs and outputs of method `name` (PteError if there is none)."""
        return self._method(name).info

    def vulkan_graph(self, method: str = "forward") -> VkGraph:
        """The Vulkan-delegate graph that method `method` consists of. PteError if the
        method is anything but exactly one VulkanBackend delegate call."""
        if method not in self._vulkan_graphs:
            self._vulkan_graphs[method] = self._read_vulkan_graph(method)
        return self._vulkan_graphs[method]

    def _read_vulkan_graph(self, method: str) -> VkGraph:
        decoded = self._method(method)
        delegate = decoded.delegate
        if delegate is None:
            raise PteError(
                f"method {method!r} has {decoded.instructions_summary}, "
                "not exactly one VulkanBackend delegate call"
            )
        if delegate.backend_id != _VULKAN_BACKEND_ID:
            raise PteError(
                f"method {method!r} is a call of delegate {delegate.backend_id!r}, "
                f"not {_VULKAN_BACKEND_ID!r}"
            )
        graph = _read_vk_graph(self.source, delegate, self._named_data, f"method {method!r}")
        io_count = len(graph.input_ids) + len(graph.output_ids)
        if io_count != len(decoded.delegate_args):
            raise PteError(
                f"method {method!r}: the delegate call passes {len(decoded.delegate_args)} "
                f"values but the Vulkan graph has {len(graph.input_ids)} inputs and "
                f"{len(graph.output_ids)} outputs"
            )
        call_inputs = decoded.delegate_args[: len(graph.input_ids)]
        call_outputs = decoded.delegate_args[len(graph.input_ids) :]
        method_inputs = tuple(
            graph.input_ids[call_inputs.index(v)] if v in call_inputs else None for v in decoded.input_value_ids
        )
        method_outputs = []
        for position, value in enumerate(decoded.output_value_ids):
            if value not in call_outputs:
                raise PteError(f"method {method!r}: output {position} is not produced by the Vulkan graph")
            method_outputs.append(graph.output_ids[call_outputs.index(value)])
        return dataclasses.replace(graph, method_input_ids=method_inputs, method_output_ids=tuple(method_outputs))


def load_program(data) -> Program:
    """Decodes and validates a `.pte` program from a bytes-like object (bytes,
    bytearray, memoryview, mmap) or a `ByteSource`. Reads only the program
    flatbuffer here; a method's Vulkan graph is read by `Program.vulkan_graph`."""
    source = _as_source(data)
    layout = _read_file_layout(source)
    fb = _Flatbuffer(
        _read(source, 0, layout.program_size, "program flatbuffer"), 0, "program flatbuffer"
    )
    program = fb.root(_FbProgram, _PROGRAM_IDENTIFIER)
    segments = _read_segments(fb, program, layout)
    named_data = _read_named_data(fb, program, segments)
    delegate_blobs = _DelegateBlobs(fb, program, segments)
    methods: dict[str, _Method] = {}
    count = fb.vector(program.ExecutionPlanLength, program.ExecutionPlan, "execution_plan")
    for plan_index in range(count):
        method = _read_method(fb, program, plan_index, delegate_blobs)
        name = method.info.name
        if name in methods:
            raise PteError(f"program flatbuffer: two methods are named {name!r}")
        methods[name] = method
    return Program(source, methods, named_data)


def _as_source(data) -> ByteSource:
    # Bytes-like first: an mmap also has `read` and `__len__`, but means its bytes.
    try:
        return BytesSource(data)
    except TypeError:
        if isinstance(data, ByteSource):
            return data
        raise TypeError(
            f"expected a bytes-like object or a ByteSource, not {type(data).__name__}"
        ) from None


def _read_segments(fb: _Flatbuffer, program, layout: _FileLayout) -> list[tuple[int, int]]:
    """Absolute (offset, size) of every segment, checked against the segment area."""
    segments = []
    count = fb.vector(program.SegmentsLength, program.Segments, "segments")
    for index in range(count):
        what = f"segment {index}"
        with fb.reading(what):
            segment = fb.table(program.Segments(index), what)
            offset, size = segment.Offset(), segment.Size()
        if offset + size > layout.segment_area_size:
            raise fb.error(
                what,
                f"{size} bytes at segment offset {offset} run past the "
                f"{layout.segment_area_size} byte segment area",
            )
        segments.append((layout.segment_base + offset, size))
    return segments


def _read_named_data(fb: _Flatbuffer, program, segments) -> dict[str, ConstantRef]:
    named_data: dict[str, ConstantRef] = {}
    count = fb.vector(program.NamedDataLength, program.NamedData, "named_data")
    for index in range(count):
        what = f"named_data {index}"
        with fb.reading(what):
            entry = fb.table(program.NamedData(index), what)
            key = fb.required_string(entry.Key, f"{what} key")
            segment_index = entry.SegmentIndex()
        if segment_index >= len(segments):
            raise fb.error(
                f"{what} ({key!r})",
                f"segment index {segment_index} is out of range ({len(segments)} segments)",
            )
        if key in named_data:
            raise fb.error(what, f"duplicate key {key!r}")
        offset, size = segments[segment_index]
        named_data[key] = ConstantRef(offset, size, key)
    return named_data


class _DelegateBlobs:
    """Resolves a BackendDelegateDataReference to the blob's absolute byte range."""

    def __init__(self, fb: _Flatbuffer, program, segments) -> None:
        self._fb = fb
        self._program = program
        self._segments = segments
        self._inline_count = fb.vector(
            program.BackendDelegateDataLength,
            program.BackendDelegateData,
            "backend_delegate_data",
        )

    def span(self, reference, what: str) -> tuple[int, int]:
        fb = self._fb
        with fb.reading(what):
            fb.table(reference, what)
            location, index = reference.Location(), reference.Index()
        if location == _FbDataLocation.SEGMENT:
            if index >= len(self._segments):
                raise fb.error(
                    what, f"segment index {index} is out of range ({len(self._segments)} segments)"
                )
            return self._segments[index]
        if location == _FbDataLocation.INLINE:
            if index >= self._inline_count:
                raise fb.error(
                    what,
                    f"backend_delegate_data index {index} is out of range "
                    f"({self._inline_count} entries)",
                )
            with fb.reading(f"backend_delegate_data {index}"):
                inline = fb.table(
                    self._program.BackendDelegateData(index), f"backend_delegate_data {index}"
                )
                size = fb.vector(inline.DataLength, inline.Data, "data")
                # The generated class exposes the bytes only one by one (or through
                # numpy); take the vector's position from its table field instead.
                data_field = inline._tab.Offset(4)
                offset = inline._tab.Vector(data_field) if data_field else 0
            return (fb.file_offset + offset, size)
        raise fb.error(what, f"unknown data location {location}")


def _read_method(fb: _Flatbuffer, program, plan_index: int, blobs: _DelegateBlobs) -> _Method:
    where = f"execution plan {plan_index}"
    with fb.reading(where):
        plan = fb.table(program.ExecutionPlan(plan_index), where)
        name = fb.required_string(plan.Name, f"{where} name")
    where = f"method {name!r}"
    value_count = fb.vector(plan.ValuesLength, plan.Values, f"{where} values")
    specs = []
    scalars = []
    for value_id in range(value_count):
        spec, scalar = _read_evalue(fb, plan, value_id, f"{where} value {value_id}")
        specs.append(spec)
        scalars.append(scalar)

    input_ids = fb.value_ids(plan.InputsLength, plan.Inputs, f"{where} inputs", value_count)
    output_ids = fb.value_ids(plan.OutputsLength, plan.Outputs, f"{where} outputs", value_count)
    info = MethodInfo(
        name=name,
        inputs=tuple(specs[i] for i in input_ids),
        outputs=tuple(specs[i] for i in output_ids),
    )

    delegate_count = fb.vector(plan.DelegatesLength, plan.Delegates, f"{where} delegates")
    delegates = [
        _read_delegate(fb, plan, index, blobs, f"{where} delegate {index}")
        for index in range(delegate_count)
    ]

    instructions = _read_instructions(fb, plan, where)
    constant_value = None
    if not input_ids and not instructions and len(output_ids) == 1:
        constant_value = scalars[output_ids[0]]

    delegate, arg_ids = None, ()
    if len(instructions) == 1 and instructions[0].kind == "DelegateCall":
        (instruction,) = instructions
        what = instruction.what
        with fb.reading(what):
            call = fb.union_table("DelegateCall", instruction.arguments, _FbDelegateCall, what)
            delegate_index = call.DelegateIndex()
        if not 0 <= delegate_index < delegate_count:
            raise fb.error(
                what, f"delegate index {delegate_index} is out of range ({delegate_count} delegates)"
            )
        delegate = delegates[delegate_index]
        arg_ids = fb.value_ids(call.ArgsLength, call.Args, f"{what} args", value_count)
    kinds = ", ".join(instruction.kind for instruction in instructions)
    summary = f"{len(instructions)} instructions ({kinds})" if instructions else "no instructions"
    return _Method(info, constant_value, delegate, tuple(arg_ids), tuple(input_ids), tuple(output_ids), summary)


@dataclass(frozen=True)
class _Instruction:
    kind: str  # an InstructionArguments name: "KernelCall", "DelegateCall", ...
    arguments: object  # the flatbuffers Table of the union member
    what: str  # where it is, for error messages


def _read_instructions(fb: _Flatbuffer, plan, where: str) -> list[_Instruction]:
    instructions = []
    chain_count = fb.vector(plan.ChainsLength, plan.Chains, f"{where} chains")
    for chain_index in range(chain_count):
        what = f"{where} chain {chain_index}"
        with fb.reading(what):
            chain = fb.table(plan.Chains(chain_index), what)
        count = fb.vector(chain.InstructionsLength, chain.Instructions, f"{what} instructions")
        for index in range(count):
            what = f"{where} chain {chain_index} instruction {index}"
            with fb.reading(what):
                instruction = fb.table(chain.Instructions(index), what)
                kind, arguments = instruction.InstrArgsType(), instruction.InstrArgs()
            if kind not in _INSTRUCTION_KINDS or kind == _FbInstructionKind.NONE:
                raise fb.error(what, f"unknown instruction kind {kind}")
            instructions.append(_Instruction(_INSTRUCTION_KINDS[kind], arguments, what))
    return instructions


# Program value kinds holding a scalar: kind -> (generated table class, accessor).
_PROGRAM_SCALARS = {
    _FbEValueKind.Int: (_FbInt, _FbInt.IntVal),
    _FbEValueKind.Double: (_FbDouble, _FbDouble.DoubleVal),
    _FbEValueKind.Bool: (_FbBool, _FbBool.BoolVal),
}


def _read_evalue(fb: _Flatbuffer, plan, value_id: int, what: str):
    """(EValueSpec, scalar) of a program value; scalar is the int/double/bool it holds."""
    with fb.reading(what):
        evalue = fb.table(plan.Values(value_id), what)
        kind = evalue.ValType()
        if kind not in _EVALUE_KINDS:
            raise fb.error(what, f"unknown value kind {kind}")
        kind_name = _EVALUE_KINDS[kind]
        if kind == _FbEValueKind.Tensor:
            tensor = fb.union_table(kind_name, evalue.Val(), _FbTensor, what)
            scalar_type = tensor.ScalarType()
            if scalar_type not in _PROGRAM_DTYPES:
                raise fb.error(what, f"unknown tensor scalar type {scalar_type}")
            dynamism = tensor.ShapeDynamism()
            if dynamism not in _SHAPE_DYNAMISM:
                raise fb.error(what, f"unknown shape dynamism {dynamism}")
            sizes = fb.ints(tensor.SizesLength, tensor.Sizes, f"{what} sizes")
            if len(sizes) > _MAX_TENSOR_DIMS:
                raise fb.error(what, f"{len(sizes)} dims, more than ExecuTorch's limit of {_MAX_TENSOR_DIMS}")
            if any(size < 0 for size in sizes):
                raise fb.error(what, f"negative tensor size in {list(sizes)}")
            spec = EValueSpec(kind_name, _PROGRAM_DTYPES[scalar_type], sizes, _SHAPE_DYNAMISM[dynamism])
            return spec, None
        if kind not in _PROGRAM_SCALARS:
            return EValueSpec(kind_name), None
        table_class, read_scalar = _PROGRAM_SCALARS[kind]
        return EValueSpec(kind_name), read_scalar(fb.union_table(kind_name, evalue.Val(), table_class, what))


def _read_delegate(fb: _Flatbuffer, plan, index: int, blobs: _DelegateBlobs, what: str) -> _Delegate:
    with fb.reading(what):
        delegate = fb.table(plan.Delegates(index), what)
        backend_id = fb.required_string(delegate.Id, f"{what} id")
        reference = delegate.Processed()
    if reference is None:
        raise fb.error(what, "missing processed data reference")
    blob_offset, blob_size = blobs.span(reference, f"{what} ({backend_id}) processed")
    compile_specs = {}
    count = fb.vector(delegate.CompileSpecsLength, delegate.CompileSpecs, f"{what} compile_specs")
    for spec_index in range(count):
        spec_what = f"{what} compile_spec {spec_index}"
        with fb.reading(spec_what):
            spec = fb.table(delegate.CompileSpecs(spec_index), spec_what)
            key = fb.required_string(spec.Key, f"{spec_what} key")
            value = bytes(fb.ints(spec.ValueLength, spec.Value, f"{spec_what} value"))
        compile_specs[key] = value
    return _Delegate(backend_id, blob_offset, blob_size, compile_specs)


# ---------------------------------------------------------------------------
# Vulkan delegate blob

_VK_HEADER_MAGIC = b"VH00"
_VK_HEADER_LENGTH = 30
_VK_GRAPH_IDENTIFIER = b"VK00"


@dataclass(frozen=True)
class _VkHeader:
    flatbuffer_offset: int  # relative to the blob
    flatbuffer_size: int
    bytes_offset: int
    bytes_size: int


def _read_vk_header(source: ByteSource, delegate: _Delegate, where: str) -> _VkHeader:
    at = f"{where}: Vulkan delegate header at byte {delegate.blob_offset}"
    if delegate.blob_size < _VK_HEADER_LENGTH:
        raise PteError(f"{at}: the {delegate.blob_size} byte blob is too short for a header")
    head = _read(source, delegate.blob_offset, _VK_HEADER_LENGTH, at)
    if head[4:8] != _VK_HEADER_MAGIC:
        raise PteError(f"{at}: expected magic {_VK_HEADER_MAGIC!r}, found {head[4:8]!r}")
    header_length, fb_offset, fb_size, bytes_offset, bytes_size = struct.unpack_from("<HIIIQ", head, 8)
    if header_length != _VK_HEADER_LENGTH:
        raise PteError(f"{at}: header length {header_length}, expected {_VK_HEADER_LENGTH}")
    if fb_offset < _VK_HEADER_LENGTH or fb_offset + fb_size > delegate.blob_size:
        raise PteError(
            f"{at}: flatbuffer of {fb_size} bytes at {fb_offset} lies outside the "
            f"{delegate.blob_size} byte blob"
        )
    if bytes_offset < fb_offset + fb_size or bytes_offset + bytes_size > delegate.blob_size:
        raise PteError(
            f"{at}: bytes section of {bytes_size} bytes at {bytes_offset} lies outside "
            f"{fb_offset + fb_size}..{delegate.blob_size} (flatbuffer end..blob end)"
        )
    return _VkHeader(fb_offset, fb_size, bytes_offset, bytes_size)


def _read_vk_graph(
    source: ByteSource, delegate: _Delegate, named_data: dict[str, ConstantRef], where: str
) -> VkGraph:
    header = _read_vk_header(source, delegate, where)
    fb_file_offset = delegate.blob_offset + header.flatbuffer_offset
    fb = _Flatbuffer(
        _read(source, fb_file_offset, header.flatbuffer_size, f"{where}: Vulkan graph flatbuffer"),
        fb_file_offset,
        f"{where}: Vulkan graph flatbuffer",
    )
    graph = fb.root(_FbVkGraph, _VK_GRAPH_IDENTIFIER)
    version = fb.string(graph.Version, "version") or ""
    shader_count = fb.vector(graph.ShadersLength, graph.Shaders, "shaders")
    if shader_count:
        raise fb.error("shaders", f"{shader_count} custom shaders; custom shaders are not supported")

    bytes_section = (delegate.blob_offset + header.bytes_offset, header.bytes_size)
    constants = _read_vk_constants(fb, graph, bytes_section, named_data)

    value_count = fb.vector(graph.ValuesLength, graph.Values, "values")
    values = tuple(
        _read_vk_value(fb, graph, value_id, constants, value_count) for value_id in range(value_count)
    )

    op_count = fb.vector(graph.ChainLength, graph.Chain, "chain")
    chain = []
    for index in range(op_count):
        what = f"op {index}"
        with fb.reading(what):
            op = fb.table(graph.Chain(index), what)
            name = fb.required_string(op.Name, f"{what} name")
            node_id = op.NodeId()
        args = fb.value_ids(op.ArgsLength, op.Args, f"op {index} ({name}) args", value_count)
        chain.append(OpCall(index, node_id, name, args))

    storage_type_override = _checked_enum(
        fb, graph.StorageTypeOverride, _VK_STORAGE_TYPES, "storage_type_override"
    )
    memory_layout_override = _checked_enum(
        fb, graph.MemoryLayoutOverride, _VK_MEMORY_LAYOUTS, "memory_layout_override"
    )
    mem_obj_ids = [v.mem_obj_id for v in values if isinstance(v, TensorValue)]
    return VkGraph(
        version=version,
        values=values,
        chain=tuple(chain),
        input_ids=fb.value_ids(graph.InputIdsLength, graph.InputIds, "input_ids", value_count),
        output_ids=fb.value_ids(graph.OutputIdsLength, graph.OutputIds, "output_ids", value_count),
        shared_object_count=max(mem_obj_ids, default=-1) + 1,
        compile_specs=dict(delegate.compile_specs),
        storage_type_override=storage_type_override,
        memory_layout_override=memory_layout_override,
    )


def _checked_enum(fb: _Flatbuffer, read: Callable[[], int], known: frozenset[int], what: str) -> int:
    with fb.reading(what):
        value = read()
    if value not in known:
        raise fb.error(what, f"unknown value {value}")
    return value


def _read_vk_constants(
    fb: _Flatbuffer, graph, bytes_section: tuple[int, int], named_data: dict[str, ConstantRef]
) -> tuple[ConstantRef, ...]:
    section_offset, section_size = bytes_section
    count = fb.vector(graph.ConstantsLength, graph.Constants, "constants")
    constants = []
    for index in range(count):
        what = f"constant {index}"
        with fb.reading(what):
            entry = fb.table(graph.Constants(index), what)
            offset, length = entry.Offset(), entry.Length()
            key = fb.string(entry.NamedKey, f"{what} named_key")
        if offset == _NAMED_DATA_OFFSET:
            if key is None:
                raise fb.error(what, "stored as named data but has no named_key")
            if key not in named_data:
                raise fb.error(what, f"named_key {key!r} is not in the program's named data")
            ref = named_data[key]
            if ref.size != length:
                raise fb.error(
                    what, f"length {length} differs from the {ref.size} bytes of named data {key!r}"
                )
        else:
            if offset + length > section_size:
                raise fb.error(
                    what,
                    f"{length} bytes at offset {offset} run past the delegate's "
                    f"{section_size} byte bytes section",
                )
            ref = ConstantRef(section_offset + offset, length, None)
        constants.append(ref)
    return tuple(constants)


# Graph value kinds holding one scalar: kind -> (generated table class, accessor,
# value class).
_VK_SCALARS = {
    _VkValueKind.Int: (_VkInt, _VkInt.IntVal, IntValue),
    _VkValueKind.Double: (_VkDouble, _VkDouble.DoubleVal, DoubleValue),
    _VkValueKind.Bool: (_VkBool, _VkBool.BoolVal, BoolValue),
    _VkValueKind.SymInt: (_VkSymInt, _VkSymInt.Value, SymIntValue),
}

# Graph value kinds holding a list of scalars: kind -> (generated table class, value class).
_VK_SCALAR_LISTS = {
    _VkValueKind.IntList: (_VkIntList, IntListValue),
    _VkValueKind.DoubleList: (_VkDoubleList, DoubleListValue),
    _VkValueKind.BoolList: (_VkBoolList, BoolListValue),
}

_VK_KIND_NAMES = {
    value: name for name, value in vars(_VkValueKind).items() if not name.startswith("_")
}


def _read_vk_value(
    fb: _Flatbuffer, graph, value_id: int, constants: tuple[ConstantRef, ...], value_count: int
) -> Value:
    what = f"value {value_id}"
    with fb.reading(what):
        vk_value = fb.table(graph.Values(value_id), what)
        kind, table = vk_value.ValueType(), vk_value.Value()
        if kind not in _VK_KIND_NAMES or kind == _VkValueKind.NONE:
            raise fb.error(what, f"unknown value kind {kind}")
        kind_name = _VK_KIND_NAMES[kind]
        if kind == _VkValueKind.Null:
            return NullValue()
        if kind == _VkValueKind.VkTensor:
            tensor = fb.union_table(kind_name, table, _VkTensor, what)
            return _read_vk_tensor(fb, tensor, constants, what)
        if kind == _VkValueKind.String:
            string = fb.union_table(kind_name, table, _VkString, what)
            return StringValue(fb.string(string.StringVal, f"{what} string_val") or "")
        if kind in _VK_SCALARS:
            table_class, read_scalar, value_class = _VK_SCALARS[kind]
            return value_class(read_scalar(fb.union_table(kind_name, table, table_class, what)))
        if kind == _VkValueKind.ValueList:
            values = fb.union_table(kind_name, table, _VkValueList, what)
            items = f"{what} (ValueList) items"
            return ValueListValue(fb.value_ids(values.ItemsLength, values.Items, items, value_count))
        table_class, value_class = _VK_SCALAR_LISTS[kind]
        scalars = fb.union_table(kind_name, table, table_class, what)
        return value_class(fb.ints(scalars.ItemsLength, scalars.Items, f"{what} ({kind_name}) items"))


def _read_vk_tensor(fb: _Flatbuffer, tensor, constants: tuple[ConstantRef, ...], what: str) -> TensorValue:
    datatype = tensor.Datatype()
    if datatype not in _VK_DTYPES:
        raise fb.error(what, f"unknown tensor datatype {datatype}")
    staging = tensor.StagingDatatype()
    if staging != _VkDataType.UNSET and staging not in _VK_DTYPES:
        raise fb.error(what, f"unknown tensor staging datatype {staging}")
    dtype = _VK_DTYPES[datatype]
    staging_dtype = None if staging in (_VkDataType.UNSET, datatype) else _VK_DTYPES[staging]
    dims = fb.ints(tensor.DimsLength, tensor.Dims, f"{what} dims")
    if len(dims) > _MAX_TENSOR_DIMS:
        raise fb.error(what, f"{len(dims)} dims, more than ExecuTorch's limit of {_MAX_TENSOR_DIMS}")
    storage_type = _checked_enum(fb, tensor.StorageType, _VK_STORAGE_TYPES, f"{what} storage_type")
    memory_layout = _checked_enum(fb, tensor.MemoryLayout, _VK_MEMORY_LAYOUTS, f"{what} memory_layout")
    # Negative ids mean "none" in the schema.
    constant_id, mem_obj_id = tensor.ConstantId(), max(tensor.MemObjId(), -1)
    constant = None
    if constant_id >= 0:
        if constant_id >= len(constants):
            raise fb.error(what, f"constant id {constant_id} is out of range ({len(constants)} constants)")
        constant = constants[constant_id]
    value = TensorValue(dtype, dims, constant, mem_obj_id, staging_dtype, storage_type, memory_layout)
    if constant is not None and constant.size != value.nbytes:
        raise fb.error(
            what,
            f"constant {constant_id} holds {constant.size} bytes but {dtype}{list(dims)} "
            f"needs {value.nbytes}",
        )
    return value
