"""A tiny 4-bit Llama .pte on wgpu-native: prefill + 10 decode steps, a call of 70 tokens
(after the graph's upgrades too), an 8,192-token context filled, and a chat of three
prompts match eager PyTorch."""

import asyncio

import pytest

import graph_programs
from llama_fixtures import (
    DRAW_RUNS,
    PROGRAMS,
    check_decode_resizes,
    check_draw_trace,
    check_returns_resize_the_position_only,
    check_run,
    check_upgraded_kernels,
    tiny_llama_chat_trace,
    tiny_llama_draw_trace,
    tiny_llama_long_context_trace,
    tiny_llama_long_trace,
    tiny_llama_trace,
)

pytestmark = pytest.mark.native


# Both kernel sets whatever the adapter: the GPU one runs decode's norm inside the GEMV.
# float16: the program exported with force_fp16, run with float32 tensors (float16 KV
# caches with the kernels for GPUs); with a large vocabulary its final norm reaches the
# LM head through a clone.
@pytest.mark.parametrize("float_dtype, vocab_size", PROGRAMS)
@pytest.mark.parametrize("kernel_set", ["cpu", "gpu"])
def test_tiny_llama_prefill_and_decode(tmp_path_factory, kernel_set, float_dtype, vocab_size):
    trace = tiny_llama_trace(str(tmp_path_factory.getbasetemp()), float_dtype == "float16", kernel_set, vocab_size)
    answer = asyncio.run(graph_programs.run_graph(trace.pte, trace.runs, kernel_set))
    check_run(trace, kernel_set, answer)
    if kernel_set == "gpu":
        check_decode_resizes(answer["resized"])


@pytest.mark.parametrize("float_dtype", ["float32", "float16"])
@pytest.mark.parametrize("kernel_set", ["cpu", "gpu"])
def test_tiny_llama_long_chunk(tmp_path_factory, kernel_set, float_dtype):
    """A 70-token call after the prefill and a decode step (with the kernels for GPUs the
    tiled attention over cached and new keys, float16 caches for the f16 program)."""
    trace = tiny_llama_long_trace(str(tmp_path_factory.getbasetemp()), float_dtype == "float16", kernel_set)
    answer = asyncio.run(graph_programs.run_graph(trace.pte, trace.runs, kernel_set))
    check_run(trace, kernel_set, answer)


@pytest.mark.parametrize("kernel_set", ["cpu", "gpu"])
def test_tiny_llama_fills_an_8k_context(tmp_path_factory, kernel_set):
    """An export with an 8,192-token cache, filled by 17 prompts and two decode steps,
    the last at its last position (attention split over the most workgroups)."""
    trace = tiny_llama_long_context_trace(str(tmp_path_factory.getbasetemp()), kernel_set)
    answer = asyncio.run(graph_programs.run_graph(trace.pte, trace.runs, kernel_set))
    check_run(trace, kernel_set, answer)


def test_tiny_llama_upgraded_kernels(tmp_path_factory):
    """The kernels for CPU adapters, the graph's upgrades built after the prefill and a
    decode step (as a chat in the browser starts them after its first reply):
    the 70-token call then runs gemv_rows' 16-row kernel."""
    trace = tiny_llama_long_trace(str(tmp_path_factory.getbasetemp()), False, "cpu")
    answer = asyncio.run(graph_programs.run_graph(trace.pte, trace.runs, "cpu", upgrade_before_run=2))
    check_run(trace, "cpu", answer)
    check_upgraded_kernels(answer["kernels"])


@pytest.mark.parametrize("kernel_set", ["cpu", "gpu"])
def test_tiny_llama_chat(tmp_path_factory, kernel_set):
    """Prompts of changing lengths between decode steps; calls that return to an earlier
    call's shape restore what the runtime kept for it (with the kernels for GPUs, resizing
    only the position's ops)."""
    trace = tiny_llama_chat_trace(str(tmp_path_factory.getbasetemp()), kernel_set)
    answer = asyncio.run(graph_programs.run_graph(trace.pte, trace.runs, kernel_set))
    check_run(trace, kernel_set, answer)
    if kernel_set == "gpu":
        check_returns_resize_the_position_only(answer["resized"])


@pytest.mark.parametrize("kernel_set", ["cpu", "gpu"])
def test_a_restored_shape_state_is_what_resizing_makes(tmp_path_factory, kernel_set):
    """After every call of the chat (those restoring a kept state included), resizing every
    op again changes nothing the GPU sees: no live size or SymInt, no parameter written,
    no op's commands. (An op's attributes may differ: one reading the position on the GPU
    keeps those of the position it was last resized at, which its recording serves.)"""
    from pywebgpu.gpu import request_device
    from pywebgpu.runtime import load

    trace = tiny_llama_chat_trace(str(tmp_path_factory.getbasetemp()), kernel_set)

    async def main():
        graph = await load(await request_device(), trace.pte, kernel_set=kernel_set)
        device = graph.device
        for call, inputs in enumerate(trace.runs):
            await graph.execute(*[graph_programs.host_tensor(*x) for x in inputs])
            kept_commands = list(graph._op_commands)
            changed, written = [], []
            graph.value_changed = lambda value_id, host_data_only=False: changed.append(value_id)
            device.write_buffer = lambda buffer, *args, **kwargs: written.append(buffer.label)
            try:
                for op in graph.ops:
                    op.resize()
            finally:
                del graph.value_changed, device.write_buffer
            assert not changed, f"call {call}: values {changed} changed"
            assert not written, f"call {call}: {written} written"
            for index, op in enumerate(graph.ops):
                recorder = device.record()
                op.record(recorder)
                assert recorder.commands == kept_commands[index], f"call {call}: op #{index} {op.name} records otherwise"

    asyncio.run(main())


@pytest.mark.parametrize("kernel_set", ["cpu", "gpu"])
def test_resize_sets_only_the_attributes_kept_per_shape(tmp_path_factory, kernel_set):
    """Every attribute that an op's resize() sets, of the op or of the OpParts it keeps, is
    one its class names in RESIZED: those the runtime keeps per input shape. Over the chat
    and the 70-token call (on GPUs tiled attention and split GEMMs), every resize made."""
    from pywebgpu.gpu import request_device
    from pywebgpu.runtime import load

    folder = str(tmp_path_factory.getbasetemp())
    traces = [tiny_llama_chat_trace(folder, kernel_set), tiny_llama_long_trace(folder, False, kernel_set)]

    async def undeclared(trace):
        graph = await load(await request_device(), trace.pte, kernel_set=kernel_set)
        found = set()
        for index, op in enumerate(graph.ops):
            parts = graph.shape_states.op_parts(index)

            def checked(resize=op.resize, parts=parts):
                before = [dict(vars(part)) for part, _ in parts]
                resize()
                for (part, names), attributes in zip(parts, before):
                    for name, value in vars(part).items():
                        if name not in names and (name not in attributes or attributes[name] is not value):
                            found.add(f"{type(part).__name__}.{name}")

            op.resize = checked
        for inputs in trace.runs:
            await graph.execute(*[graph_programs.host_tensor(*x) for x in inputs])
        return found

    for trace in traces:
        assert not asyncio.run(undeclared(trace))


@pytest.mark.parametrize("block", [1, 3])
@pytest.mark.parametrize("temperature, penalty", DRAW_RUNS)
@pytest.mark.parametrize("kernel_set", ["cpu", "gpu"])
def test_tiny_llama_run_ahead_sampled_or_penalized(tmp_path_factory, kernel_set, temperature, penalty, block):
    """Decoding run ahead of the host, each step taking the last call's token on the GPU:
    sampled (each token drawn on the GPU) and/or with a repetition penalty (its window of
    tokens growing on the GPU), against eager PyTorch at the same uniforms and penalty;
    steps submitted one at a time, and three at a time as one submission (each step's
    position and uniform then copied in-stream; with the kernels for CPUs, the KV-cache
    copy at the position re-recorded into a new schedule for each step)."""
    trace = tiny_llama_draw_trace(str(tmp_path_factory.getbasetemp()), temperature, penalty)
    args = (trace.pte, trace.prefill, trace.draws, trace.k, trace.penalty, kernel_set)
    check_draw_trace(trace, asyncio.run(graph_programs.run_graph_drawing(*args, block=block)))


def test_decode_step_writes_only_the_position_to_the_gpu(tmp_path_factory):
    """With the kernels for GPUs, a greedy decode step's only queue write is the position's
    one buffer: the position input is read on the host alone (select_as_symint), its two
    SymInts (input_pos[0] and input_pos[-1]) share a buffer, and the token comes from the
    last step's top-1 on the GPU."""
    from pywebgpu.gpu import request_device
    from pywebgpu.llm.logits_top_k import LogitsTopK
    from pywebgpu.runtime import HostTensor, load

    trace = tiny_llama_trace(str(tmp_path_factory.getbasetemp()))

    async def main():
        graph = await load(await request_device(), trace.pte, kernel_set="gpu")
        top_k = LogitsTopK(graph)
        await top_k.execute(HostTensor((1, 5), [1, 2, 3, 4, 5], "int64"), HostTensor((1,), [0], "int64"))
        # The first step of one row resizes every op whose sizes the prefill's 5 rows set.
        await top_k.submit(HostTensor((1, 1), [0], "int64"), HostTensor((1,), [5], "int64"), token_from_last_run=True)
        written = []
        write = graph.device.write_buffer
        graph.device.write_buffer = lambda buffer, data, *args, **kwargs: (written.append((buffer.label, bytes(data))), write(buffer, data, *args, **kwargs))
        for position in (6, 7, 8):
            written.clear()
            await top_k.submit(HostTensor((1, 1), [0], "int64"), HostTensor((1,), [position], "int64"), token_from_last_run=True)
            assert [data for _, data in written] == [position.to_bytes(4, "little") + bytes(12)], written
            assert written[0][0].startswith("symint")

    asyncio.run(main())
