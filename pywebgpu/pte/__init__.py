"""Reading ExecuTorch `.pte` programs whose methods are Vulkan-delegate graphs.

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

Malformed input raises `PteError`, and nothing else (flatbuffer.py says how).

Modules, in reading order: source.py (byte sources), layout.py (extended header,
segments, named data, delegate blobs), methods.py (execution plans), vk_graph.py (the
Vulkan delegate blob), reader.py (`load_program`, `Program`); types.py holds the records
they return, flatbuffer.py the checked flatbuffer access, errors.py `PteError`.
"""

from .errors import PteError
from .reader import Program, load_program
from .source import ByteSource, BytesSource
from .types import (
    DTYPE_ITEMSIZE,
    BoolListValue,
    BoolValue,
    ConstantRef,
    DoubleListValue,
    DoubleValue,
    EValueSpec,
    IntListValue,
    IntValue,
    MethodInfo,
    NullValue,
    OpCall,
    StringValue,
    SymIntValue,
    TensorValue,
    Value,
    ValueListValue,
    VkGraph,
)

__all__ = [
    "DTYPE_ITEMSIZE",
    "BoolListValue",
    "BoolValue",
    "ByteSource",
    "BytesSource",
    "ConstantRef",
    "DoubleListValue",
    "DoubleValue",
    "EValueSpec",
    "IntListValue",
    "IntValue",
    "MethodInfo",
    "NullValue",
    "OpCall",
    "Program",
    "PteError",
    "StringValue",
    "SymIntValue",
    "TensorValue",
    "Value",
    "ValueListValue",
    "VkGraph",
    "load_program",
]
