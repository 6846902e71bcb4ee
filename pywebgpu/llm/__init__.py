"""The LLM runner: tokenizer, chat templates, sampling and streaming generation over a
.pte graph. Pure Python; it knows nothing of WGSL (the GPU work is the graph runtime's).

    model = await LanguageModel.load("models/smollm2-135m-instruct-4w.json")
    chat = ChatSession(model)
    async for piece in chat.send("What is the capital of France?"):
        print(piece, end="")
"""

from .chat import ChatSession
from .chat_template import ChatTemplate
from .model import LanguageModel, ModelFileError
from .sampling import Sampler, SamplingParams
from .tokenizer import StreamDecoder, Tokenizer

__all__ = [
    "ChatSession",
    "ChatTemplate",
    "LanguageModel",
    "ModelFileError",
    "Sampler",
    "SamplingParams",
    "StreamDecoder",
    "Tokenizer",
]
