"""A Vulkan delegate blob: its "VH00" header, the "VK00" VkGraph flatbuffer, and the
graph's constants, values and op chain decoded into a `VkGraph`."""

from __future__ import annotations

import struct
from dataclasses import dataclass

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
from .errors import PteError
from .flatbuffer import Flatbuffer, enum_names, enum_values
from .methods import Delegate
from .source import ByteSource, read_range
from .types import (
    BoolListValue,
    BoolValue,
    ConstantRef,
    DoubleListValue,
    DoubleValue,
    IntListValue,
    IntValue,
    NullValue,
    OpCall,
    StringValue,
    SymIntValue,
    TensorValue,
    Value,
    ValueListValue,
    VkGraph,
)

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

_VK_STORAGE_TYPES = enum_values(_VkStorageType)
_VK_MEMORY_LAYOUTS = enum_values(_VkMemoryLayout)

# VkBytes.offset of a constant stored in the program's named data, not inline (what
# current exporters do for every constant).
_NAMED_DATA_OFFSET = 2**64 - 1

# A Vulkan delegate blob is a 30-byte "VH00" header, a "VK00" VkGraph flatbuffer and
# a bytes section for inline constants.
_VK_HEADER_MAGIC = b"VH00"
_VK_HEADER_LENGTH = 30
_VK_GRAPH_IDENTIFIER = b"VK00"


@dataclass(frozen=True)
class _VkHeader:
    """Where the graph flatbuffer and the inline-constant bytes lie in the blob."""

    flatbuffer_offset: int  # relative to the blob
    flatbuffer_size: int
    bytes_offset: int
    bytes_size: int


def _read_vk_header(source: ByteSource, delegate: Delegate, where: str) -> _VkHeader:
    """The blob's header, its two sections checked to lie inside the blob, in order."""
    at = f"{where}: Vulkan delegate header at byte {delegate.blob_offset}"
    if delegate.blob_size < _VK_HEADER_LENGTH:
        raise PteError(f"{at}: the {delegate.blob_size} byte blob is too short for a header")
    head = read_range(source, delegate.blob_offset, _VK_HEADER_LENGTH, at)
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


def read_vk_graph(
    source: ByteSource, delegate: Delegate, named_data: dict[str, ConstantRef], where: str
) -> VkGraph:
    """The delegate's graph, every value id and constant checked; `where` names the method."""
    header = _read_vk_header(source, delegate, where)
    fb_file_offset = delegate.blob_offset + header.flatbuffer_offset
    fb = Flatbuffer(
        read_range(source, fb_file_offset, header.flatbuffer_size, f"{where}: Vulkan graph flatbuffer"),
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

    storage_type_override = fb.enum(graph.StorageTypeOverride, _VK_STORAGE_TYPES, "storage_type_override")
    memory_layout_override = fb.enum(graph.MemoryLayoutOverride, _VK_MEMORY_LAYOUTS, "memory_layout_override")
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


def _read_vk_constants(
    fb: Flatbuffer, graph, bytes_section: tuple[int, int], named_data: dict[str, ConstantRef]
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

_VK_KIND_NAMES = enum_names(_VkValueKind)


def _read_vk_value(
    fb: Flatbuffer, graph, value_id: int, constants: tuple[ConstantRef, ...], value_count: int
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


def _read_vk_tensor(fb: Flatbuffer, tensor, constants: tuple[ConstantRef, ...], what: str) -> TensorValue:
    datatype = tensor.Datatype()
    if datatype not in _VK_DTYPES:
        raise fb.error(what, f"unknown tensor datatype {datatype}")
    staging = tensor.StagingDatatype()
    if staging != _VkDataType.UNSET and staging not in _VK_DTYPES:
        raise fb.error(what, f"unknown tensor staging datatype {staging}")
    dtype = _VK_DTYPES[datatype]
    staging_dtype = None if staging in (_VkDataType.UNSET, datatype) else _VK_DTYPES[staging]
    dims = fb.tensor_dims(tensor.DimsLength, tensor.Dims, f"{what} dims", what)
    storage_type = fb.enum(tensor.StorageType, _VK_STORAGE_TYPES, f"{what} storage_type")
    memory_layout = fb.enum(tensor.MemoryLayout, _VK_MEMORY_LAYOUTS, f"{what} memory_layout")
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
