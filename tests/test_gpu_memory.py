"""Device.allocated_bytes: the GPU memory a device's buffers hold (the benchmark reports it)."""

import asyncio

import pytest

from pywebgpu.gpu import UNIFORM_USAGE, request_device

pytestmark = pytest.mark.native


def run(coro):
    return asyncio.run(coro)


def test_allocated_bytes_follow_buffer_creation_and_destruction():
    device = run(request_device())
    before = device.allocated_bytes
    a = device.create_buffer(1000, label="a")
    b = device.create_buffer(10, UNIFORM_USAGE, label="b")  # rounded up to 12
    c = device.create_buffer_with_data(bytes(64), label="c")
    assert device.allocated_bytes == before + 1000 + 12 + 64
    device.destroy_buffer(b)
    device.destroy_buffer(b)  # a second destroy frees nothing more
    assert device.allocated_bytes == before + 1000 + 64
    device.destroy_buffer(a)
    device.destroy_buffer(c)
    assert device.allocated_bytes == before


def test_allocated_bytes_count_a_loaded_graph(tmp_path_factory):
    from llama_fixtures import tiny_llama_trace
    from pywebgpu.ops.linear import LinearQ4gswConcat
    from pywebgpu.runtime import load

    trace = tiny_llama_trace(str(tmp_path_factory.getbasetemp()))
    device = run(request_device())
    graph = run(load(device, trace.pte))
    tensor_buffers = {id(v.buffer): v.buffer.size for v in graph.values if getattr(v, "buffer", None) is not None}
    # Linears fused into one (q/k/v, gate/up) hold their weights, scales and biases in
    # concatenated copies made at build (the linear inside a fused norm + linear too).
    linears = [getattr(op, "linear", op) for op in graph.ops]
    concatenated = [op for op in linears if isinstance(op, LinearQ4gswConcat)]
    packed = {id(b): b.size for op in concatenated for block in op.packed for b in block if b is not None}
    assert concatenated and not packed.keys() & tensor_buffers.keys()
    # ... which replace the constants they were made from: those are not uploaded.
    originals = [t for op in concatenated for linear in op.linears for t in (linear.weights, linear.scales, linear.bias) if t is not None]
    assert all(t.buffer is None for t in originals)
    assert sum(packed.values()) == sum(t.max_nbytes for t in originals)
    # The tensors' buffers (shared ones counted once), the concatenated constants, and
    # the ops' small parameter buffers.
    parameters = device.allocated_bytes - sum(tensor_buffers.values()) - sum(packed.values())
    assert 0 <= parameters <= 256 * len(graph.ops)
