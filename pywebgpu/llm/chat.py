"""Multi-turn chat with streaming generation.

The KV cache holds the tokens of the conversation so far; a new turn prefills only what
its prompt adds after the longest prefix already in the cache (past turns are not
prefilled again), then decodes one token per program call. A turn's prompt keeps the
tokens the model generated for past replies rather than their text encoded again: a
model may generate a word in pieces its tokenizer would not cut it into (SmolLM2:
"el" "and" where encoding gives "eland"), and from such a token on an encoded reply would
no longer match the cache, and be prefilled again at the next turn. `start_prefix`
prefills the next prompt's start (the template's text before the next user turn's
content) ahead of the question, which then prefills only itself.

Decoding runs ahead: further steps are submitted, each taking its input token on the GPU
from the step before's pick (its top 1, or when sampling the token drawn from its top k on
the GPU, at a uniform the host drew; a repetition penalty's window of recent tokens grows
on the GPU too), before the host waits for this step's readback, so the GPU does not idle
through the round trip. Once the reply's tokens come fast (decode_block), they are
submitted in blocks of the model's decode_block_steps (one submission and readback for
several tokens, on GPUs), at least RUN_AHEAD_STEPS ahead. A step submitted past the end
of the reply (EOS, a stop string, cancel) only writes the cache past what
`_cached_tokens` records, which later turns overwrite.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque

from ..ops.topk import PENALIZED_MAX
from .model import LanguageModel
from .sampling import Sampler, SamplingParams
from .tokenizer import StreamDecoder


# Decode steps submitted ahead of the one being read back, since on fast GPUs a readback's
# round trip is as long as a whole step.
RUN_AHEAD_STEPS = 2


# Decode steps go in blocks once a reply's tokens come faster than this each: there the
# host's time per submission is a large share of a token's. Slower, a block would only
# make tokens arrive in bursts, and waste more steps past the end of a reply.
BLOCK_MAX_TOKEN_S = 0.005


def decode_block(model, tokens: int, seconds: float, max_token_s: float = BLOCK_MAX_TOKEN_S) -> int:
    """Decode steps to submit as one after `tokens` tokens of a reply came in `seconds`
    (from the first's arrival to now): the model's decode_block_steps while, from the third
    token on, they come faster than `max_token_s` each; else 1."""
    if tokens >= 3 and seconds < max_token_s * (tokens - 1):
        return model.decode_block_steps
    return 1


# Stands for a user turn's text where the template's start is rendered: a character from
# Unicode's private use area, which no template writes.
_CONTENT_MARK = "\ue000"


async def _collect(steps):
    """Await every one of `steps`, then raise the first error any raised (a lost device
    fails them all: none is left unawaited)."""
    first_error = None
    for step in steps:
        try:
            await step
        except Exception as error:  # noqa: BLE001 (raised below, once all are awaited)
            first_error = first_error or error
    if first_error is not None:
        raise first_error


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


class ChatSession:
    def __init__(self, model: LanguageModel, system_prompt: str | None = None):
        self.model = model
        self.system_prompt = system_prompt
        self.messages: list[dict] = []
        self._cached_tokens: list[int] = []  # what the KV cache holds, position by position
        # The conversation's tokens as the model read and generated them (its last prompt
        # and reply), and the rendered text they stand for; the next prompt extends them
        # where its text extends that text. Empty: encode the whole prompt.
        self._history_tokens: list[int] = []
        self._history_text = ""
        self._prefilling: asyncio.Future | None = None  # start_prefix's, until send awaits it
        self._sending = False
        self._cancelled = False
        self.stats: dict = {}
        self.block_max_token_s = BLOCK_MAX_TOKEN_S  # see decode_block

    def reset(self):
        """A new chat: history cleared; the cache is simply overwritten from position 0."""
        self.messages = []
        self._cached_tokens = []
        self._history_tokens, self._history_text = [], ""

    def start_prefix(self) -> asyncio.Future:
        """Start prefilling what the next prompt begins with, whatever the question: the
        template's text before the next user turn's content (at a chat's start the system
        turn and the user turn's header; after a reply, the end of the reply's turn and
        the next user turn's header), so that the question prefills only itself and the
        assistant turn's header. Between replies only; `send` waits for it. Returns the
        prefill."""
        if self._sending:
            raise RuntimeError("start_prefix() during a reply: call it between replies")
        self._prefilling = asyncio.ensure_future(self._prefill_prefix(self._prefilling))
        return self._prefilling

    async def _prefill_prefix(self, before: asyncio.Future | None):
        if before is not None:
            await before
        rendered = self._render(self.messages + [{"role": "user", "content": _CONTENT_MARK}])
        text = rendered[: rendered.index(_CONTENT_MARK)]
        tokens = self._encoded(text)
        self._history_tokens, self._history_text = tokens, text
        reused = _common_prefix(self._cached_tokens, tokens)
        # A prefix the context cannot hold is left to send, which ends at it (context_full).
        if reused < len(tokens) < self.model.max_context:
            self._cached_tokens = tokens[:reused]  # until the cache holds the rest
            await self.model.next_token_candidates(tokens[reused:], reused, 1)
            self._cached_tokens = tokens

    def cancel(self):
        """Stop the running send() after the token being computed."""
        self._cancelled = True

    def _render(self, messages: list[dict]) -> str:
        """The template's text of the chat `messages` (after the system turn, if any)."""
        system = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        return self.model.chat_template.render(system + messages)

    def _encoded(self, text: str) -> list[int]:
        """The tokens of rendered `text`: the history's tokens, then the text after the
        history's text, encoded (where `text` begins with it; else, e.g. after a reply cut
        at a stop string, the whole text encoded)."""
        history = self._history_text if self._history_tokens and text.startswith(self._history_text) else ""
        # The rendered template already holds every special token (BOS included).
        added = self.model.tokenizer.encode(text[len(history) :], add_special_tokens=False)
        return (self._history_tokens if history else []) + added

    async def send(self, text: str, sampling: SamplingParams | None = None, max_tokens: int = 256, stop: tuple = ()):
        """Add a user turn and stream the reply as text pieces (whole UTF-8 characters)."""
        if self._sending:
            raise RuntimeError("send() while a reply is streaming: one reply at a time")
        self._sending = True
        reply = self._reply(text, sampling, max_tokens, stop)
        try:
            async for piece in reply:
                yield piece
        finally:
            await reply.aclose()  # a reply left unread collects its steps now
            self._sending = False

    async def _reply(self, text: str, sampling: SamplingParams | None, max_tokens: int, stop: tuple):
        sampling = sampling or SamplingParams()
        sampler = Sampler(sampling)
        model = self.model
        # The time to the first token counts from the call: a prefix still prefilling too.
        started = time.perf_counter()
        if self._prefilling is not None:
            prefilling, self._prefilling = self._prefilling, None
            await prefilling
        self._cancelled = False
        self.messages.append({"role": "user", "content": text})
        prompt_text = self._render(self.messages)
        prompt = self._encoded(prompt_text)
        reused = min(_common_prefix(self._cached_tokens, prompt), len(prompt) - 1)
        self.stats = stats = {"prompt_tokens": len(prompt), "prefilled_tokens": len(prompt) - reused, "decode_tokens": 0}
        if len(prompt) >= model.max_context:
            stats["stop_reason"] = "context_full"
            self.messages.pop()
            return
        fed = self._cached_tokens = prompt[:reused]
        reply_tokens = []
        to_feed = prompt[reused:]
        decoder = StreamDecoder(model.tokenizer)
        reply, held_back = "", ""
        hold = max((len(s) for s in stop), default=1) - 1
        stats["stop_reason"] = "max_tokens"
        decode_started = None
        # Every sampled token is drawn on the GPU (a step takes the last one's there): a
        # call's result is then that one token.
        drawn_on_gpu = not sampling.greedy
        draw = sampler.draw if drawn_on_gpu else lambda: None
        k, penalty = sampling.candidates_needed, sampling.repetition_penalty
        block = 1
        # Steps read, and when the last was: the decode rate spans the reads from the first
        # to the one that ended the reply (an EOS included), not the collecting of the
        # steps submitted past its end.
        steps_read, last_read = 0, None

        # A call the host feeds: to_feed at its position; the penalty's window, the
        # tokens fed (TopK keeps the last PENALIZED_MAX of them).
        def feed():
            return model.start_next_token_candidates(to_feed, len(fed), k, penalty, fed[-PENALIZED_MAX:] + to_feed, draw())

        step = feed()
        ahead = deque()  # the steps after `step`, already submitted
        try:
            while True:
                next_position = len(fed) + len(to_feed)  # where `step`'s token goes
                while len(ahead) < max(RUN_AHEAD_STEPS, block):
                    position = next_position + len(ahead)
                    # Steps whose token could still be in the reply (within the context and max_tokens).
                    count = min(block, model.max_context - 1 - position, max_tokens - 1 - stats["decode_tokens"] - len(ahead))
                    if count <= 0:
                        break
                    ahead.extend(model.start_next_steps(position, k, [draw() for _ in range(count)], penalty))
                awaited, step = step, None  # the finally below collects `step` while unawaited
                candidates = await awaited
                steps_read, last_read = steps_read + 1, time.perf_counter()
                fed.extend(to_feed)
                token = sampler.drawn(candidates) if drawn_on_gpu else sampler.pick(candidates)
                if decode_started is None:
                    decode_started = time.perf_counter()
                    stats["time_to_first_token_s"] = decode_started - started
                if token in model.eos_ids:
                    stats["stop_reason"] = "eos"
                    break
                stats["decode_tokens"] += 1
                reply_tokens.append(token)
                held_back += decoder.push(token)
                found = [held_back.find(s) for s in stop if s in held_back]
                if found:
                    reply += held_back[: min(found)]
                    held_back = ""
                    stats["stop_reason"] = "stop_string"
                    break
                if len(held_back) > hold:
                    piece, held_back = held_back[: len(held_back) - hold], held_back[len(held_back) - hold :]
                    reply += piece
                    yield piece
                if self._cancelled:
                    stats["stop_reason"] = "cancelled"
                    break
                block = decode_block(model, stats["decode_tokens"], time.perf_counter() - decode_started, self.block_max_token_s)
                if stats["decode_tokens"] >= max_tokens:
                    break
                if len(fed) + 1 >= model.max_context:
                    stats["stop_reason"] = "context_full"
                    break
                to_feed = [token]
                if ahead:
                    step = ahead.popleft()
                else:
                    step = feed()
        finally:
            # The step in hand if an error came first, and the steps past the reply: their
            # readbacks are collected, tokens unused.
            await _collect(([step] if step is not None else []) + list(ahead))
        tail = held_back + (decoder.flush() if stats["stop_reason"] != "stop_string" else "")
        if tail:
            reply += tail
            yield tail
        elapsed = last_read - decode_started if steps_read > 1 else 0
        stats["decode_tokens_per_s"] = (steps_read - 1) / elapsed if elapsed > 0 else None
        self.messages.append({"role": "assistant", "content": reply})
        # The reply's tokens join the history where they stand for its text (the stream
        # decoder's pieces are their text), not where a stop string cut it.
        if stats["stop_reason"] != "stop_string":
            self._history_tokens, self._history_text = prompt + reply_tokens, prompt_text + reply
        else:
            self._history_tokens, self._history_text = [], ""
        # The model's faster kernels compile while the reply is read, not at the load,
        # where they would slow down a first prompt sent at once.
        model.start_upgrades()
