"""The GPU device lost in the middle of a reply, natively (wgpu-native's device destroyed
under the model, as a driver reset would leave it): the reply ends with a
DeviceLostError that says so, every later call on that device raises it at once, and
the model loaded again on a new device replies as before."""

import asyncio

import pytest

from pywebgpu.gpu import DeviceLostError, request_device
from pywebgpu.llm import ChatSession, LanguageModel, SamplingParams

pytestmark = pytest.mark.native

GREEDY = SamplingParams(temperature=0)
REPLY_TOKENS = 12
LOST_AT_PIECE = 3


async def _reply(model, lose_at: int | None = None) -> list[str]:
    pieces = []
    async for piece in ChatSession(model).send("Hello", sampling=GREEDY, max_tokens=REPLY_TOKENS):
        pieces.append(piece)
        if len(pieces) == lose_at:
            model.graph.device.raw.destroy()
    return pieces


def test_device_lost_in_a_reply_ends_it_and_a_new_device_works(tiny_chat_manifest):
    async def main():
        model = await LanguageModel.load(tiny_chat_manifest, device=await request_device())
        expected = await _reply(model)
        with pytest.raises(DeviceLostError, match="the GPU device was lost") as lost:
            await asyncio.wait_for(_reply(model, lose_at=LOST_AT_PIECE), 60)
        device = model.graph.device
        with pytest.raises(DeviceLostError):
            device.create_buffer(16)
        model.close()  # frees what it can on the lost device, raises nothing
        reloaded = await LanguageModel.load(tiny_chat_manifest, device=await request_device())
        again = await _reply(reloaded)
        reloaded.close()
        return expected, str(lost.value), again

    expected, message, again = asyncio.run(main())
    assert len(expected) > LOST_AT_PIECE, expected  # the loss came inside the reply
    assert again == expected
    print(message)
