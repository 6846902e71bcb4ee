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
    from pywebgpu.runtime import load

    trace = tiny_llama_trace(str(tmp_path_factory.getbasetemp()))
    device = run(request_device())
    graph = run(load(device, trace.pte))
    tensor_buffers = {id(v.buffer): v.buffer.size for v in graph.values if getattr(v, "buffer", None) is not None}
    # The tensors' buffers (shared ones counted once) plus the ops' small parameter buffers.
    parameters = device.allocated_bytes - sum(tensor_buffers.values())
    assert 0 <= parameters <= 256 * len(graph.ops)
