"""Tests of pywebgpu.pte against ExecuTorch's own decoders, and against malformed files."""

from __future__ import annotations

import hashlib
import mmap
import random
import re
import shutil
import signal
import struct
import subprocess
import sys
import textwrap
from contextlib import contextmanager
from pathlib import Path

import pytest
from pte_fixtures import MLP_CONSTANT_METHODS, pte_exports  # noqa: F401 (fixture)

from pywebgpu.pte import (
    BytesSource,
    IntListValue,
    NullValue,
    PteError,
    StringValue,
    SymIntValue,
    TensorValue,
    ValueListValue,
    load_program,
)
from pywebgpu.pte._generated.executorch_flatbuffer.Program import Program as FbProgram
from pywebgpu.pte._generated.vkgraph.ValueList import ValueList as FbValueList
from pywebgpu.pte._generated.vkgraph.VkGraph import VkGraph as FbVkGraph
from pywebgpu.pte._generated.vkgraph.VkTensor import VkTensor as FbVkTensor

REPO_ROOT = Path(__file__).resolve().parents[1]

# Exports whose "forward" is one Vulkan delegate call (all but "partial").
VULKAN_PROGRAMS = [
    "mlp", "mlp_fp16", "mlp_inline", "dynamic", "q4w_linear", "q8da4w_linear", "llama_4w"
]


def decode_everything(data):
    """Everything the reader can decode from a file; raises PteError if malformed."""
    program = load_program(data)
    methods = {name: program.method(name) for name in program.method_names}
    return methods, program.constant_methods, program.vulkan_graph("forward")


class Hang(BaseException):
    """Raised by `deadline`; a BaseException so that no `except Exception` swallows it."""


@contextmanager
def deadline(seconds: float):
    def expire(signum, frame):
        raise Hang(f"still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


# ---------------------------------------------------------------------------
# Agreement with ExecuTorch's decoders

# ExecuTorch ScalarType names -> torch dtype names, for the types these exports use.
SCALAR_TYPE_NAMES = {"FLOAT": "float32", "LONG": "int64", "INT": "int32", "HALF": "float16"}


def executorch_value_spec(evalue):
    """(kind, dtype, sizes, dynamism) of an executorch.exir.schema EValue value."""
    kind = type(evalue).__name__
    if kind != "Tensor":
        return (re.sub(r"(?<!^)(?=[A-Z])", "_", kind).lower(), None, None, None)
    return (
        "tensor",
        SCALAR_TYPE_NAMES[evalue.scalar_type.name],
        tuple(evalue.sizes),
        evalue.shape_dynamism.name.lower(),
    )


def our_value_spec(spec):
    return (spec.kind, spec.dtype, spec.sizes, spec.shape_dynamism)


@pytest.mark.parametrize("name", VULKAN_PROGRAMS + ["partial"])
def test_program_matches_executorch(pte_exports, name):
    from executorch.exir._serialize._program import deserialize_pte_binary

    data = pte_exports.data(name)
    program = load_program(data)
    plans = deserialize_pte_binary(data).program.execution_plan

    assert program.method_names == tuple(plan.name for plan in plans)
    expected_constants = {}
    for plan in plans:
        info = program.method(plan.name)
        assert info.name == plan.name
        assert [our_value_spec(s) for s in info.inputs] == [
            executorch_value_spec(plan.values[i].val) for i in plan.inputs
        ]
        assert [our_value_spec(s) for s in info.outputs] == [
            executorch_value_spec(plan.values[i].val) for i in plan.outputs
        ]
        instructions = [i for chain in plan.chains for i in chain.instructions]
        if not plan.inputs and not instructions and len(plan.outputs) == 1:
            scalar = plan.values[plan.outputs[0]].val
            expected_constants[plan.name] = next(iter(vars(scalar).values()))
    assert program.constant_methods == expected_constants
    for method, value in program.constant_methods.items():
        assert type(value) is type(expected_constants[method])


def executorch_vk_value(value, constants):
    """A VkValue of ExecuTorch's vulkan_graph_schema, in the shape of `our_vk_value`."""
    value = value.value
    kind = type(value).__name__
    if kind == "VkTensor":
        dtype = value.datatype.name.lower()
        staging = value.staging_datatype.name.lower()
        return (
            "tensor",
            dtype,
            tuple(value.dims),
            constants[value.constant_id] if value.constant_id >= 0 else None,
            max(value.mem_obj_id, -1),
            None if staging in ("unset", dtype) else staging,
            int(value.storage_type),
            int(value.memory_layout),
        )
    fields = {
        "Null": lambda: (),
        "Int": lambda: value.int_val,
        "Double": lambda: value.double_val,
        "Bool": lambda: value.bool_val,
        "String": lambda: value.string_val,
        "SymInt": lambda: value.value,
        "IntList": lambda: tuple(value.items),
        "DoubleList": lambda: tuple(value.items),
        "BoolList": lambda: tuple(value.items),
        "ValueList": lambda: tuple(value.items),
    }
    return (kind, fields[kind]())


def our_vk_value(value, data):
    if isinstance(value, TensorValue):
        constant = None
        if value.constant is not None:
            constant = data[value.constant.offset : value.constant.offset + value.constant.size]
        return (
            "tensor",
            value.dtype,
            value.dims,
            constant,
            value.mem_obj_id,
            value.staging_dtype,
            value.storage_type,
            value.memory_layout,
        )
    kind = type(value).__name__.removesuffix("Value")
    if isinstance(value, NullValue):
        return (kind, ())
    return (kind, value.items if hasattr(value, "items") else value.value)


@pytest.mark.parametrize("name", VULKAN_PROGRAMS)
def test_vulkan_graph_matches_executorch(pte_exports, name):
    from executorch.backends.vulkan.serialization.vulkan_graph_serialize import (
        VulkanDelegateHeader,
        extract_vk_flatbuffer,
        flatbuffer_to_vk_graph,
    )
    from executorch.exir._serialize._program import deserialize_pte_binary

    data = pte_exports.data(name)
    graph = load_program(data).vulkan_graph()

    pte = deserialize_pte_binary(data)
    (forward,) = [plan for plan in pte.program.execution_plan if plan.name == "forward"]
    (delegate,) = forward.delegates
    assert delegate.id == "VulkanBackend"
    # deserialize_pte_binary moves segment data inline.
    blob = pte.program.backend_delegate_data[delegate.processed.index].data
    header = VulkanDelegateHeader.from_bytes(blob[: VulkanDelegateHeader.EXPECTED_LENGTH])
    theirs = flatbuffer_to_vk_graph(extract_vk_flatbuffer(blob))

    named = pte.named_data
    constants = []
    for entry in theirs.constants:
        if entry.named_key:
            stored = bytes(named.buffers[named.pte_data[entry.named_key].buffer_index])
            assert hashlib.sha256(stored).hexdigest() == entry.named_key
        else:
            start = header.bytes_offset + entry.offset
            stored = bytes(blob[start : start + entry.length])
        constants.append(stored)

    assert graph.version == theirs.version
    assert [(op.index, op.node_id, op.name, op.args) for op in graph.chain] == [
        (index, op.node_id, op.name, tuple(op.args)) for index, op in enumerate(theirs.chain)
    ]
    ours = [our_vk_value(v, data) for v in graph.values]
    expected = [executorch_vk_value(v, constants) for v in theirs.values]
    # flatc's JSON (which ExecuTorch decodes) prints doubles rounded to ~6 digits:
    # rms_norm's eps, stored as float32(1e-5) = 9.999999747378752e-06, reads 1e-05.
    for value_id, (our, their) in enumerate(zip(ours, expected)):
        if our[0] == their[0] == "Double":
            assert our[1] == pytest.approx(their[1], rel=1e-6), f"value {value_id}"
            ours[value_id] = their
    assert ours == expected
    assert graph.input_ids == tuple(theirs.input_ids)
    assert graph.output_ids == tuple(theirs.output_ids)
    assert graph.compile_specs == {spec.key: spec.value for spec in delegate.compile_specs}
    assert graph.storage_type_override == int(theirs.storage_type_override)
    assert graph.memory_layout_override == int(theirs.memory_layout_override)
    mem_obj_ids = [v.value.mem_obj_id for v in theirs.values if type(v.value).__name__ == "VkTensor"]
    assert graph.shared_object_count == max(mem_obj_ids) + 1

    for value in graph.values:
        if isinstance(value, TensorValue) and value.constant is not None:
            ref = value.constant
            assert ref.size == value.nbytes
            if ref.key is not None:
                assert hashlib.sha256(data[ref.offset : ref.offset + ref.size]).hexdigest() == ref.key


def test_mlp_program(pte_exports):
    program = load_program(pte_exports.data("mlp"))
    assert program.constant_methods == MLP_CONSTANT_METHODS
    graph = program.vulkan_graph()
    assert [op.name for op in graph.chain] == [
        "et_vk.prepack.default",
        "aten.linear.default",
        "aten.relu.default",
        "aten.mul.Tensor",
        "aten.add.Tensor",
    ]
    inputs = [graph.values[i] for i in graph.input_ids]
    assert [(v.dtype, v.dims, v.constant) for v in inputs] == [
        ("float32", (2, 16), None),
        ("float32", (2, 8), None),
    ]
    weight = graph.values[graph.chain[1].args[1]]
    assert (weight.dtype, weight.dims, weight.constant.size) == ("float32", (8, 16), 8 * 16 * 4)


def test_inline_delegate_and_constants(pte_exports):
    """A blob inside the program flatbuffer with inline constants decodes to the same
    graph as the segment-and-named-data original, constants byte for byte."""
    original, inline = pte_exports.data("mlp"), pte_exports.data("mlp_inline")
    assert inline[8:12] != b"eh00"
    original_graph = load_program(original).vulkan_graph()
    inline_graph = load_program(inline).vulkan_graph()
    assert [our_vk_value(v, original) for v in original_graph.values] == [
        our_vk_value(v, inline) for v in inline_graph.values
    ]
    assert inline_graph.chain == original_graph.chain
    refs = [v.constant for v in inline_graph.values if isinstance(v, TensorValue) and v.constant]
    assert len(refs) == 3 and all(ref.key is None for ref in refs)


def test_force_fp16_keeps_float32_staging(pte_exports):
    graph = load_program(pte_exports.data("mlp_fp16")).vulkan_graph()
    assert graph.compile_specs["force_fp16"] == b"\x01"
    tensors = [v for v in graph.values if isinstance(v, TensorValue)]
    assert {v.dtype for v in tensors} == {"float16"}
    for value_id in graph.input_ids + graph.output_ids:
        assert graph.values[value_id].staging_dtype == "float32"
    # Constants are stored as float16.
    assert all(v.staging_dtype is None for v in tensors if v.constant is not None)


def test_dynamic_shapes(pte_exports):
    program = load_program(pte_exports.data("dynamic"))
    (tokens,) = program.method("forward").inputs
    assert (tokens.dtype, tokens.sizes, tokens.shape_dynamism) == ("float32", (16, 8), "dynamic_bound")
    graph = program.vulkan_graph()
    assert any(isinstance(v, SymIntValue) for v in graph.values)
    (view,) = [op for op in graph.chain if op.name == "aten.view_copy.default"]
    sizes = graph.values[view.args[1]]
    assert isinstance(sizes, ValueListValue)
    assert isinstance(graph.values[sizes.items[0]], SymIntValue)


def test_quantized_linears(pte_exports):
    graph = load_program(pte_exports.data("q4w_linear")).vulkan_graph()
    linears = [op for op in graph.chain if op.name == "et_vk.linear_q4gsw.default"]
    assert len(linears) == 2
    weight = graph.values[linears[0].args[1]]
    # 4-bit weights [N=32, K=64] packed two per byte.
    assert (weight.dtype, weight.dims, weight.constant.size) == ("uint8", (32, 32), 32 * 32)

    graph = load_program(pte_exports.data("q8da4w_linear")).vulkan_graph()
    assert [op.name for op in graph.chain].count("et_vk.linear_dq8ca_q4gsw.default") == 2
    assert any(isinstance(v, StringValue) for v in graph.values)
    assert any(isinstance(v, IntListValue) for v in graph.values)
    assert {v.dtype for v in graph.values if isinstance(v, TensorValue)} >= {"int8", "uint8"}


def test_tiny_llama(pte_exports):
    program = load_program(pte_exports.data("llama_4w"))
    assert program.constant_methods == {
        "get_max_seq_len": 32,
        "get_max_context_len": 128,
        "get_n_layers": 2,
        "get_vocab_size": 512,
        "use_kv_cache": True,
        "use_sdpa_with_kv_cache": True,
        "enable_dynamic_shape": True,
    }
    forward = program.method("forward")
    assert [our_value_spec(s) for s in forward.inputs] == [
        ("tensor", "int64", (1, 31), "dynamic_bound"),
        ("tensor", "int64", (1,), "static"),
    ]
    assert [our_value_spec(s) for s in forward.outputs] == [("tensor", "float32", (1, 512), "static")]
    graph = program.vulkan_graph()
    names = [op.name for op in graph.chain]
    assert len(names) == 60
    assert names.count("et_vk.linear_q4gsw.default") == 15
    assert names.count("sdpa_with_kv_cache.default") == 2
    assert names.count("et_vk.embedding_q4gsw.default") == 1
    # int64 inputs are narrowed to int32 on the GPU.
    assert [graph.values[i].dtype for i in graph.input_ids] == ["int32", "int32"]
    assert graph.shared_object_count == 13


# ---------------------------------------------------------------------------
# Byte sources


class CountingSource:
    """A ByteSource that records what the reader reads."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.size = len(data)
        self.reads: list[tuple[int, int]] = []

    def read(self, offset: int, size: int) -> bytes:
        self.reads.append((offset, size))
        return self.data[offset : offset + size]


def test_reader_never_reads_constants(pte_exports):
    data = pte_exports.data("llama_4w")
    source = CountingSource(data)
    graph = load_program(source).vulkan_graph()
    constants = {v.constant for v in graph.values if isinstance(v, TensorValue) and v.constant}
    assert sum(c.size for c in constants) > len(data) // 2
    for offset, size in source.reads:
        for constant in constants:
            assert offset + size <= constant.offset or constant.offset + constant.size <= offset


def test_accepts_bytes_like_objects(pte_exports, tmp_path):
    path = pte_exports.path("mlp")
    data = path.read_bytes()
    expected = decode_everything(data)
    for form in (bytearray(data), memoryview(data), BytesSource(data)):
        assert decode_everything(form) == expected
    with path.open("rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
        assert decode_everything(mapped) == expected


def test_bytes_source_reads_without_copying():
    buffer = bytearray(b"0123456789")
    source = BytesSource(buffer)
    view = source.read(2, 3)
    assert bytes(view) == b"234"
    buffer[2] = ord("x")
    assert bytes(view) == b"x34"
    with pytest.raises(ValueError):
        source.read(8, 3)


def test_runs_without_numpy(pte_exports, tmp_path):
    """The browser has no numpy: import and decode with only the stdlib and flatbuffers."""
    import flatbuffers

    runtime = tmp_path / "runtime"
    shutil.copytree(Path(flatbuffers.__file__).parent, runtime / "flatbuffers")
    script = textwrap.dedent(
        f"""
        import importlib.util, sys
        sys.path[:0] = [{str(REPO_ROOT)!r}, {str(runtime)!r}]
        assert importlib.util.find_spec("numpy") is None
        from pywebgpu.pte import load_program
        graph = load_program(open({str(pte_exports.path("llama_4w"))!r}, "rb").read()).vulkan_graph()
        assert "numpy" not in sys.modules
        print(len(graph.chain))
        """
    )
    # -S: no site-packages, so neither numpy nor anything else of the venv.
    result = subprocess.run(
        [sys.executable, "-S", "-c", script], cwd=tmp_path, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "60"


# ---------------------------------------------------------------------------
# Programs that are not what vulkan_graph() needs


def test_missing_and_non_vulkan_methods(pte_exports):
    program = load_program(pte_exports.data("mlp"))
    with pytest.raises(PteError, match="no method named 'backward'"):
        program.method("backward")
    with pytest.raises(PteError, match="no method named 'backward'"):
        program.vulkan_graph("backward")
    with pytest.raises(PteError, match="'get_max_seq_len' has no instructions"):
        program.vulkan_graph("get_max_seq_len")

    partial = load_program(pte_exports.data("partial"))
    with pytest.raises(
        PteError, match=r"has 3 instructions \(DelegateCall, KernelCall, DelegateCall\)"
    ):
        partial.vulkan_graph()


# ---------------------------------------------------------------------------
# Malformed files


@pytest.mark.parametrize("name", ["mlp", "llama_4w"])
def test_truncated_files(pte_exports, name):
    data = pte_exports.data(name)
    cuts = set(range(0, 80)) | set(range(0, len(data), max(1, len(data) // 200))) | {len(data) - 1}
    for cut in sorted(cuts):
        with deadline(5), pytest.raises(PteError):
            decode_everything(data[:cut])


class Positions:
    """File offsets of fields in an export, found with the generated classes (which
    read without checks: fine for files known to be good)."""

    def __init__(self, data: bytes) -> None:
        self.program = FbProgram.GetRootAs(data, 0)
        (self.program_size, self.segment_base) = struct.unpack_from("<QQ", data, 16)
        plan = self.program.ExecutionPlan(0)
        assert plan.Name() == b"forward"
        self.delegate_reference = plan.Delegates(0).Processed()
        self.delegate_segment = self.program.Segments(self.delegate_reference.Index())
        self.blob = self.segment_base + self.delegate_segment.Offset()
        graph_offset, graph_size, bytes_offset = struct.unpack_from("<III", data, self.blob + 10)
        self.graph_start = self.blob + graph_offset
        self.graph_size = graph_size
        self.graph_size_limit = bytes_offset - graph_offset
        self.graph = FbVkGraph.GetRootAs(data, self.graph_start)

    def value(self, value_id: int, table_class=FbVkTensor):
        """The table of value `value_id`, as a `table_class` (VkTensor by default)."""
        union = self.graph.Values(value_id).Value()
        table = table_class()
        table.Init(union.Bytes, union.Pos)
        return table


def slot(field_index: int) -> int:
    """vtable slot of the `field_index`-th field (schema order) of a table."""
    return 4 + 2 * field_index


def field(table, field_index: int) -> int:
    """File offset of a field stored in `table`."""
    offset = table._tab.Offset(slot(field_index))
    assert offset, "field not stored"
    return table._tab.Pos + offset


def vector(table, field_index: int) -> int:
    """File offset of the first element of a vector field (its length is 4 bytes before)."""
    return table._tab.Vector(table._tab.Offset(slot(field_index)))


def string(table, field_index: int) -> int:
    """File offset of the first character of a string field."""
    return vector(table, field_index)


def put(data: bytearray, fmt: str, offset: int, value) -> None:
    struct.pack_into(fmt, data, offset, value)


# (program, description, patch(data, positions), expected message pattern)
CORRUPTIONS = [
    ("mlp", "file identifier", lambda d, p: d.__setitem__(slice(4, 8), b"ET13"),
     r"file identifier at byte 4: expected b'ET12', found b'ET13'"),
    ("mlp", "extended header length", lambda d, p: put(d, "<I", 12, 40),
     r"extended header at byte 8: unknown header length 40"),
    ("mlp", "program size past the file", lambda d, p: put(d, "<Q", 16, len(d) + 1),
     r"program size \d+ is outside"),
    ("mlp", "segment base past the file", lambda d, p: put(d, "<Q", 24, len(d) + 8),
     r"segment base offset \d+ is outside"),
    ("mlp", "segment data past the file", lambda d, p: put(d, "<Q", 32, len(d)),
     r"segment data of \d+ bytes at \d+ runs past the end"),
    ("mlp", "root offset past the program", lambda d, p: put(d, "<I", 0, 0x7FFFFF00),
     r"program flatbuffer: root table: table at byte \d+ lies outside"),
    ("mlp", "segment size", lambda d, p: put(d, "<Q", field(p.delegate_segment, 1), 2**40),
     r"segment \d+: 1099511627776 bytes at segment offset \d+ run past the \d+ byte segment area"),
    ("mlp", "named data segment index",
     lambda d, p: put(d, "<I", field(p.program.NamedData(0), 1), 999),
     r"named_data 0 \('[0-9a-f]{64}'\): segment index 999 is out of range"),
    ("mlp", "delegate data index", lambda d, p: put(d, "<I", field(p.delegate_reference, 1), 999),
     r"delegate 0 \(VulkanBackend\) processed: segment index 999 is out of range"),
    ("mlp", "VH00 magic", lambda d, p: d.__setitem__(slice(p.blob + 4, p.blob + 8), b"VH01"),
     r"Vulkan delegate header at byte \d+: expected magic b'VH00', found b'VH01'"),
    ("mlp", "VH00 flatbuffer size", lambda d, p: put(d, "<I", p.blob + 14, 2**31),
     r"flatbuffer of 2147483648 bytes at 32 lies outside"),
    ("mlp", "VK00 identifier",
     lambda d, p: d.__setitem__(slice(p.graph_start + 4, p.graph_start + 8), b"VK01"),
     r"Vulkan graph flatbuffer: file identifier at byte \d+: expected b'VK00', found b'VK01'"),
    ("mlp", "op arg out of range", lambda d, p: put(d, "<i", vector(p.graph.Chain(1), 2), 10_000),
     r"op 1 \(aten.linear.default\) args\[0\]: value id 10000 is out of range \(11 values\)"),
    ("mlp", "negative op arg", lambda d, p: put(d, "<i", vector(p.graph.Chain(4), 2) + 4, -1),
     r"op 4 \(aten.add.Tensor\) args\[1\]: value id -1 is out of range"),
    ("mlp", "input id out of range", lambda d, p: put(d, "<I", vector(p.graph, 3), 11),
     r"input_ids\[0\]: value id 11 is out of range"),
    ("mlp", "unknown value kind", lambda d, p: put(d, "<B", field(p.graph.Values(3), 0), 42),
     r"value 3: unknown value kind 42"),
    ("mlp", "unknown dtype", lambda d, p: put(d, "<b", field(p.value(0), 0), 99),
     r"value 0: unknown tensor datatype 99"),
    ("mlp", "unknown storage type", lambda d, p: put(d, "<B", field(p.value(3), 4), 7),
     r"value 3 storage_type: unknown value 7"),
    ("mlp", "constant id out of range", lambda d, p: put(d, "<i", field(p.value(1), 2), 99),
     r"value 1: constant id 99 is out of range \(3 constants\)"),
    ("mlp", "too many dims", lambda d, p: put(d, "<I", vector(p.value(0), 1) - 4, 17),
     r"value 0: 17 dims, more than ExecuTorch's limit of 16"),
    ("mlp", "constant size vs dims", lambda d, p: put(d, "<I", vector(p.value(0), 1), 9),
     r"value 0: constant 0 holds 512 bytes but float32\[9, 16\] needs 576"),
    ("mlp", "constant length vs named data",
     lambda d, p: put(d, "<Q", field(p.graph.Constants(1), 1), 33),
     r"constant 1: length 33 differs from the 32 bytes of named data"),
    ("mlp", "unknown named key",
     lambda d, p: d.__setitem__(string(p.graph.Constants(0), 2), ord("X")),
     r"constant 0: named_key 'X[0-9a-f]{63}' is not in the program's named data"),
    ("mlp", "vector length past the buffer", lambda d, p: put(d, "<I", vector(p.graph, 2) - 4, 2**31 - 1),
     r"values\[2147483646\] \(vector of 2147483647\): malformed flatbuffer"),
    ("mlp", "string length past the buffer",
     lambda d, p: put(d, "<I", string(p.graph.Chain(0), 1) - 4, 2**20),
     r"op 0 name: malformed flatbuffer"),
    ("mlp", "vtable outside the buffer",
     lambda d, p: put(d, "<i", p.graph.Values(5)._tab.Pos, -(2**20)),
     r"value 5: table at byte \d+ has its vtable outside the flatbuffer"),
    ("mlp", "inputs missing from the graph", lambda d, p: put(d, "<I", vector(p.graph, 3) - 4, 1),
     r"method 'forward': the delegate call passes 3 values but the Vulkan graph has 1 inputs"),
    ("dynamic", "value list item out of range",
     lambda d, p: put(d, "<i", vector(p.value(6, FbValueList), 0), 10_000),
     r"value 6 \(ValueList\) items\[0\]: value id 10000 is out of range"),
]  # fmt: skip


@pytest.mark.parametrize(
    "name, patch, message",
    [pytest.param(name, patch, message, id=f"{name}: {what}") for name, what, patch, message in CORRUPTIONS],
)
def test_corruption_is_reported(pte_exports, name, patch, message):
    data = bytearray(pte_exports.data(name))
    patch(data, Positions(bytes(data)))
    with deadline(5), pytest.raises(PteError, match=message):
        decode_everything(bytes(data))


def benign_header_flip(positions: Positions, position: int, corrupted: bytes) -> bool:
    """Whether a flipped header byte leaves the meaning unchanged: the padding in
    front of the VH00 magic, or a program / graph flatbuffer size grown into the
    padding that follows that flatbuffer."""
    if positions.blob <= position < positions.blob + 4:
        return True
    if 16 <= position < 24:
        (program_size,) = struct.unpack_from("<Q", corrupted, 16)
        return positions.program_size <= program_size <= positions.segment_base
    if positions.blob + 14 <= position < positions.blob + 18:
        (graph_size,) = struct.unpack_from("<I", corrupted, positions.blob + 14)
        return positions.graph_size <= graph_size <= positions.graph_size_limit
    return False


@pytest.mark.parametrize("name", ["mlp", "llama_4w"])
def test_header_bit_flips(pte_exports, name):
    """Every flip of a bit of the file header (bytes 0..40) or of the Vulkan delegate
    header is reported, unless it leaves the decoded program unchanged."""
    data = pte_exports.data(name)
    expected = decode_everything(data)
    positions = Positions(data)
    header_bytes = list(range(40)) + list(range(positions.blob, positions.blob + 30))
    for position in header_bytes:
        for bit in range(8):
            corrupted = bytearray(data)
            corrupted[position] ^= 1 << bit
            with deadline(5):
                if benign_header_flip(positions, position, corrupted):
                    assert decode_everything(bytes(corrupted)) == expected
                else:
                    with pytest.raises(PteError):
                        decode_everything(bytes(corrupted))


@pytest.mark.parametrize("name", ["mlp", "mlp_inline", "dynamic", "q8da4w_linear", "llama_4w"])
def test_random_corruption(pte_exports, name):
    """Random byte changes either raise PteError or decode to some well-formed program
    (a changed weight or dimension can be indistinguishable from a real one); never
    another exception, never a hang. Most changes to the structure are caught."""
    data = pte_exports.data(name)
    if data[8:12] == b"eh00":
        positions = Positions(data)
        structure_end = positions.graph_start + positions.graph_size
    else:  # the delegate blob lies inside the program flatbuffer
        structure_end = len(data)
    rng = random.Random(f"pte-{name}")
    rejected = 0
    mutations = 300
    for _ in range(mutations):
        corrupted = bytearray(data)
        for _ in range(rng.choice([1, 1, 2, 4])):
            # Mostly the headers and flatbuffers, sometimes anywhere (constant data).
            end = structure_end if rng.random() < 0.8 else len(data)
            position = rng.randrange(end)
            if rng.random() < 0.5:
                corrupted[position] ^= 1 << rng.randrange(8)
            else:
                corrupted[position] = rng.randrange(256)
        with deadline(5):
            try:
                decode_everything(bytes(corrupted))
            except PteError:
                rejected += 1
    assert rejected > mutations // 3, f"only {rejected} of {mutations} corruptions rejected"
