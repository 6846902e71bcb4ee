"""A language model: an exported .pte graph, its tokenizer and manifest, and one call
that feeds tokens at a position and returns the next-token candidates."""

from __future__ import annotations

import importlib.resources
from pathlib import PurePosixPath

from ..gpu import IN_BROWSER, Device, request_device
from ..runtime import HostTensor, load
from .chat_template import ChatTemplate
from .manifest import ModelFileError, parse_manifest
from .tokenizer import Tokenizer


def _sibling(manifest_location: str, name: str) -> str:
    if IN_BROWSER:
        import js

        return str(js.URL.new(name, js.URL.new(manifest_location, js.location.href)).href)
    return str(PurePosixPath(manifest_location).parent / name)


async def _fetch(url: str):
    import js

    response = await js.fetch(url)
    if not response.ok:
        raise ModelFileError(f"downloading {url} failed: HTTP {response.status}")
    return response


async def _read_text(location: str) -> str:
    if IN_BROWSER:
        return await (await _fetch(location)).text()
    with open(location, encoding="utf-8") as file:
        return file.read()


# Reads a response's body into one ArrayBuffer of the expected size: the loop over its
# pieces runs in JS (a Python loop crossed into JS several times a piece: ~1,200 pieces
# for a 0.8 GB .pte, 1.41-1.45 s against 1.22-1.25 s, headless Chromium on 2 cores).
# `onProgress(received, expected)` at most every hundredth of the size and at the end.
# With the manifest's chunk sha256s, each piece also goes (transferred, once copied into
# the buffer) to a Worker that hashes the chunks as they fill (chunk_hasher.js): the
# check ends with the download, where a sha256 of the whole after it took 1.0-1.5 s more
# for the 1B geometry's 0.81 GB on the H200 host; a damaged chunk stops the download.
# Returns {data, verified (every chunk matched), damagedChunk (-1: none), tooLarge}. The
# chat page's download (web/model-files.mjs, readChecked) does the same in its own JS.
_READ_BODY_JS = """async (response, expectedSize, onProgress, chunkBytes, chunkSha256, hasherSource) => {
  const reader = response.body.getReader();
  const data = new Uint8Array(expectedSize);
  let hasher = null, hasherUrl = null, settle, damaged = -1, matched = 0, results = 0, hashed = -1;
  // true: every chunk matched; false: no verdict (the Worker failed); else a damaged chunk's index.
  const verdict = new Promise((resolve) => { settle = resolve; });
  if (chunkSha256) {
    try {
      hasherUrl = URL.createObjectURL(new Blob([hasherSource], {type: "text/javascript"}));
      hasher = new Worker(hasherUrl);
      hasher.onmessage = ({data: message}) => {
        if (message.hashed !== undefined) {
          hashed = message.hashed;
        } else {
          results++;
          if (message.sha256 === chunkSha256[message.index]) matched++;
          else if (damaged < 0) settle(damaged = message.index);
        }
        if (damaged < 0 && results === hashed) settle(hashed === chunkSha256.length && matched === hashed);
      };
      hasher.onerror = () => settle(false);
      hasher.postMessage({chunkBytes: Math.min(chunkBytes, expectedSize)});
    } catch {
      hasher = null;  // no Workers here (e.g. a content security policy): the caller hashes the whole
    }
  }
  const result = {data: null, verified: false, damagedChunk: -1, tooLarge: false};
  let received = 0, reported = 0;
  try {
    for (;;) {
      const {done, value} = await reader.read();
      if (done) break;
      if (received + value.length > expectedSize) {
        await reader.cancel();
        result.tooLarge = true;
        return result;
      }
      data.set(value, received);
      received += value.length;
      if (hasher) {
        const whole = value.byteOffset === 0 && value.byteLength === value.buffer.byteLength;
        hasher.postMessage({piece: whole ? value : value.slice()}, whole ? [value.buffer] : []);
      }
      if (damaged >= 0) {
        await reader.cancel();
        result.damagedChunk = damaged;
        return result;
      }
      if (onProgress && received - reported >= expectedSize / 100) {
        reported = received;
        onProgress(received, expectedSize);
      }
    }
    if (onProgress && reported !== received) onProgress(received, expectedSize);
    if (received < expectedSize) {
      result.data = data.buffer.slice(0, received);
      return result;
    }
    result.data = data.buffer;
    if (hasher) {
      hasher.postMessage({end: true});
      const outcome = await verdict;
      if (outcome === true) result.verified = true;
      else if (outcome !== false) result.damagedChunk = outcome;
    }
    return result;
  } finally {
    if (hasher) hasher.terminate();
    if (hasherUrl) URL.revokeObjectURL(hasherUrl);
  }
}"""


# The Worker's script, started from a Blob (the wheel's pages have no file to point it at).
_HASH_CHUNKS_JS = (importlib.resources.files(__package__) / "chunk_hasher.js").read_text(encoding="utf-8")


async def _read_model_bytes(location: str, expected: dict, on_progress):
    """The .pte (the manifest's `pte` entry says its size and sha256s) and whether its
    sha256 was checked: in the browser a JS ArrayBuffer, streamed with progress and checked
    chunk by chunk where the manifest has chunk sha256s; natively bytes, not checked."""
    if not IN_BROWSER:
        with open(location, "rb") as file:
            return file.read(), False
    from pyodide.code import run_js
    from pyodide.ffi import create_proxy, to_js

    response = await _fetch(location)
    progress = create_proxy(on_progress) if on_progress else None
    chunk_sha256 = expected.get("chunk_sha256")
    try:
        result = await run_js(_READ_BODY_JS)(
            response, expected["bytes"], progress, expected.get("chunk_bytes"), to_js(chunk_sha256) if chunk_sha256 else None, _HASH_CHUNKS_JS
        )
    finally:
        if progress is not None:
            progress.destroy()
    if result.tooLarge:
        raise ModelFileError(f"{location} is larger than the {expected['bytes']} bytes its manifest says")
    if result.damagedChunk >= 0:
        first = result.damagedChunk * expected["chunk_bytes"]
        last = min(first + expected["chunk_bytes"], expected["bytes"]) - 1
        raise ModelFileError(f"the model file's sha256 of bytes {first:,}-{last:,} does not match its manifest: the file is damaged")
    return result.data, bool(result.verified)


async def _sha256_hex(data) -> str:
    if IN_BROWSER:
        import js

        digest = await js.crypto.subtle.digest("SHA-256", data)
        return js.Uint8Array.new(digest).to_bytes().hex()
    import hashlib

    return hashlib.sha256(data).hexdigest()


def _byte_length(data) -> int:
    return data.byteLength if hasattr(data, "byteLength") else len(data)


# Decode steps a chat submits together on a GPU (start_next_steps): one submission, JS call
# and readback for this many tokens. On a CPU adapter (SwiftShader) a step takes tens of
# milliseconds and its host time is lost in them: one step a submission there.
DECODE_BLOCK_STEPS = 4


class LanguageModel:
    def __init__(self, graph, tokenizer: Tokenizer, manifest: dict):
        self.graph = graph
        self.tokenizer = tokenizer
        self.manifest = manifest
        geometry = manifest["model"]
        self.max_context = geometry["max_context_len"]
        self.max_prefill = geometry["max_prefill_tokens"]
        self.vocab_size = geometry["vocab_size"]
        self.eos_ids = frozenset(token["id"] for token in manifest["special_tokens"]["eos"])
        self.chat_template = ChatTemplate.from_template_string(manifest.get("chat_template"))
        self.decode_block_steps = 1 if graph.device.adapter.is_fallback else DECODE_BLOCK_STEPS

    @classmethod
    async def load(
        cls, manifest_location: str, pte_data=None, on_progress=None, device: Device | None = None, sha256_checked: bool = False
    ):
        """Load from a manifest (URL in the browser, path natively). `pte_data` may hold
        the .pte already (bytes, or a JS ArrayBuffer the page took from its cache); it is
        checked against the manifest's size either way, and against its sha256 unless the
        caller has checked that `pte_data` (`sha256_checked`: the chat page checks each copy
        it takes from its cache or the network, and hashing the bundled model again took
        ~0.3 s of its load on a 2-core machine). A download in the browser is checked as it
        comes where the manifest has chunk sha256s (_read_model_bytes)."""
        manifest = parse_manifest(await _read_text(manifest_location), manifest_location)  # before the .pte's download
        expected = manifest["pte"]
        if pte_data is None:
            pte_data, sha256_checked = await _read_model_bytes(_sibling(manifest_location, expected["file"]), expected, on_progress)
        if _byte_length(pte_data) != expected["bytes"]:
            raise ModelFileError(
                f"the model file has {_byte_length(pte_data)} bytes, its manifest says {expected['bytes']}: it is truncated or damaged"
            )
        if not sha256_checked and await _sha256_hex(pte_data) != expected["sha256"]:
            raise ModelFileError("the model file's sha256 does not match its manifest: the file is damaged")
        tokenizer = Tokenizer.from_json(await _read_text(_sibling(manifest_location, manifest["tokenizer"]["file"])))
        graph = await load(device or await request_device(), pte_data)
        await graph.build_top_k()
        return cls(graph, tokenizer, manifest)

    async def next_token_candidates(self, tokens: list[int], position: int, k: int, penalty: float = 1.0, penalized_ids=(), draw=None):
        """Feed `tokens` at `position` (prefill in chunks the program accepts) and return
        the top-k (logit, id) candidates for the token after them; with a `draw`
        (ops.topk.Draw), the one candidate drawn from them on the GPU."""
        return await self.start_next_token_candidates(tokens, position, k, penalty, penalized_ids, draw)

    def start_next_token_candidates(self, tokens: list[int], position: int, k: int, penalty: float = 1.0, penalized_ids=(), draw=None):
        """next_token_candidates' work submitted now; returns an awaitable of its result."""
        if not tokens:
            raise ValueError("no tokens to feed")
        if position + len(tokens) > self.max_context:
            raise ValueError(f"{position + len(tokens)} tokens exceed the model's context of {self.max_context}")
        for start in range(0, len(tokens), self.max_prefill):
            chunk = tokens[start : start + self.max_prefill]
            inputs = (HostTensor((1, len(chunk)), chunk, "int64"), HostTensor((1,), [position + start], "int64"))
            if start + len(chunk) < len(tokens):
                self.graph.submit(*inputs)  # an earlier chunk: only its KV cache entries matter
            else:
                return self.graph.submit_top_k(*inputs, k=k, penalty=penalty, penalized_ids=penalized_ids, draw=draw)

    def start_next_step(self, position: int, k: int = 1, draw=None, penalty: float = 1.0):
        """Decode, at `position`, the token the last submitted call picked on the GPU (its
        top 1, or the token it drew), without the host knowing that token yet: the GPU
        copies it into this step's input. Returns an awaitable of this step's top-1
        [(logit, id)], or with a `draw` (ops.topk.Draw) of the token drawn from its top k.
        A repetition `penalty` applies to the last call's penalized tokens and that one
        (the last call must have had the penalty). Submitting it before awaiting the last
        call keeps the GPU busy while the host waits."""
        if position + 1 > self.max_context:
            raise ValueError(f"{position + 1} tokens exceed the model's context of {self.max_context}")
        inputs = (HostTensor((1, 1), [0], "int64"), HostTensor((1,), [position], "int64"))
        return self.graph.submit_top_k(*inputs, k=k, penalty=penalty, token_from_last_run=True, draw=draw)

    def start_next_steps(self, position: int, k: int, draws: list, penalty: float = 1.0) -> list:
        """start_next_step at `position` and the positions after it, one step per item of
        `draws` (a Draw, or None for the top 1), each taking the token of the one before
        on the GPU, all in one submission with one readback (Device.batched_submits).
        Returns each step's awaitable, as start_next_step does."""
        if position + len(draws) > self.max_context:
            raise ValueError(f"{position + len(draws)} tokens exceed the model's context of {self.max_context}")
        if len(draws) == 1:  # a batch of one would only add its own bookkeeping
            return [self.start_next_step(position, k, draws[0], penalty)]
        with self.graph.device.batched_submits():
            return [self.start_next_step(position + i, k, draw, penalty) for i, draw in enumerate(draws)]
