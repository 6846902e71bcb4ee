"""LanguageModel.close() frees every GPU buffer the model created, and nothing grows with
use, on the native device: 5 load/close cycles of the tiny Llama (the device's counts and
wgpu-native's own count of live buffers), a long generation over resets (GPU buffers and
the Python heap by tracemalloc), a chat to the full context and the chat after it."""

import asyncio
import gc
import tracemalloc

import pytest
import wgpu

from pywebgpu.gpu import GPUError, request_device
from pywebgpu.llm import ChatSession, LanguageModel, SamplingParams

pytestmark = pytest.mark.native

CYCLES = 5  # each checked exactly: one buffer left shows at the first
GENERATED_TOKENS = 2000
# Python heap growth allowed over the whole long generation after its first round: the
# tokenizer's word cache and the like fill once; per-token growth would be far above it.
HEAP_BOUND_BYTES = 64 * 1024
GREEDY = SamplingParams(temperature=0)


def _native_live_buffers() -> int:
    """wgpu-native's own count of buffers alive (its hub), after Python drops its objects."""
    gc.collect()
    return wgpu.diagnostics.wgpu_native_counts.get_dict()["Buffer"]["hub"]["hub"]["a"]


async def _reply(chat: ChatSession, text: str, max_tokens: int) -> str:
    return "".join([piece async for piece in chat.send(text, sampling=GREEDY, max_tokens=max_tokens)])


def test_load_close_cycles_free_every_gpu_buffer(tiny_chat_manifest):
    async def main():
        device = await request_device()
        before = (device.allocated_bytes, device.allocated_buffers)
        native = None
        for cycle in range(CYCLES):
            model = await LanguageModel.load(tiny_chat_manifest, device=device)
            assert device.allocated_bytes > before[0]
            assert await _reply(ChatSession(model), "Hello", 4)
            model.close()
            assert (device.allocated_bytes, device.allocated_buffers) == before, f"cycle {cycle}"
            del model
            # The device's readback staging stays pooled from the first reply on.
            native = native if native is not None else _native_live_buffers()
            assert _native_live_buffers() == native, f"cycle {cycle}"

    asyncio.run(main())


def test_a_closed_model_refuses_to_run(tiny_chat_manifest):
    async def main():
        model = await LanguageModel.load(tiny_chat_manifest)
        model.close()
        model.close()
        with pytest.raises(GPUError, match="the model is closed"):
            await model.next_token_candidates([1, 2], 0, k=1)

    asyncio.run(main())


def test_long_generation_does_not_grow(tiny_chat_manifest):
    async def main():
        model = await LanguageModel.load(tiny_chat_manifest)
        device = model.graph.device
        chat = ChatSession(model)
        generated, rounds = 0, []
        while generated < GENERATED_TOKENS:
            chat.reset()
            await _reply(chat, "Go", model.max_context)
            assert chat.stats["stop_reason"] in ("context_full", "eos"), chat.stats
            generated += chat.stats["decode_tokens"]
            if not rounds:
                tracemalloc.start()
            gc.collect()  # what is only garbage (wgpu's map promises are reference cycles) is not growth
            rounds.append((generated, device.allocated_bytes, device.allocated_buffers, tracemalloc.get_traced_memory()[0]))
        tracemalloc.stop()
        model.close()
        return rounds

    rounds = asyncio.run(main())
    assert rounds[-1][0] >= GENERATED_TOKENS and len(rounds) > 3
    assert {r[1:3] for r in rounds} == {rounds[0][1:3]}, rounds
    assert rounds[-1][3] - rounds[1][3] < HEAP_BOUND_BYTES, rounds


def test_chat_to_the_full_context_stops_cleanly_and_the_next_chat_works(tiny_chat_manifest):
    async def main():
        model = await LanguageModel.load(tiny_chat_manifest)
        chat = ChatSession(model)
        replies = []
        while not replies or chat.stats["stop_reason"] != "context_full":
            replies.append(await _reply(chat, "Tell me more", model.max_context))
            assert len(replies) < model.max_context
        full = dict(chat.stats)
        chat.reset()
        after = await _reply(chat, "Hello again", 8)
        stats = dict(chat.stats)
        model.close()
        return full, after, stats

    full, after, stats = asyncio.run(main())
    assert full["stop_reason"] == "context_full"
    assert stats["stop_reason"] in ("max_tokens", "eos") and stats["decode_tokens"] >= 1
    assert after or stats["stop_reason"] == "eos"
