"""A language model: an exported .pte graph, its tokenizer and manifest, and one call
that feeds tokens at a position and returns the next-token candidates."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import importlib.resources
import sys
from pathlib import PurePosixPath

from ..gpu import IN_BROWSER, BufferOwner, Device, GPUError, is_js_buffer, request_device
from ..runtime import GraphRuntime, HostTensor, RangedFile, blob_pieces, file_pieces, read_graph
from ..runtime.ranged_file import PIECE_BYTES
from .chat_template import ChatTemplate
from .logits_top_k import LogitsTopK
from .manifest import ModelFileError, parse_manifest
from .tokenizer import Tokenizer


def _sibling(manifest_location: str, name: str) -> str:
    if IN_BROWSER:
        import js

        return str(js.URL.new(name, js.URL.new(manifest_location, js.location.href)).href)
    return str(PurePosixPath(manifest_location).parent / name)


async def _fetch(url: str, byte_range: tuple[int, int] | None = None):
    """GET `url`, or its bytes first..last (an HTTP Range request, answered 206)."""
    import js
    from pyodide.ffi import to_js

    if byte_range is None:
        response = await js.fetch(url)
    else:
        headers = {"Range": "bytes={}-{}".format(*byte_range)}
        response = await js.fetch(url, to_js({"headers": headers}, dict_converter=js.Object.fromEntries))
        if response.status == 200:
            raise ModelFileError(f"the server of {url} answers no Range requests, which loading the model piece by piece needs")
    if not response.ok:
        raise ModelFileError(f"downloading {url} failed: HTTP {response.status}")
    return response


async def _read_text(location: str) -> str:
    if IN_BROWSER:
        return await (await _fetch(location)).text()
    with open(location, encoding="utf-8") as file:
        return file.read()


# The download's loop runs in JS (checked_read.mjs), as a Python loop would cross into JS
# several times a piece; it checks the manifest's chunk sha256s in a Worker as the pieces
# come (chunk_hasher.js). Both are the wheel's files, started from Blobs, so the pages the
# wheel runs in need not serve them. The module is imported once per page: a page keeps
# every module it imports for good, so a new Blob's import each load would stay.
_READ_BODY_JS = """(() => {
  const blobUrl = (source) => URL.createObjectURL(new Blob([source], {type: "text/javascript"}));
  let imported = null;
  return async (moduleSource, hasherSource, response, expectedSize, onProgress, chunkBytes, chunkSha256) => {
    if (imported === null) {
      const moduleUrl = blobUrl(moduleSource);
      imported = import(moduleUrl).finally(() => URL.revokeObjectURL(moduleUrl));
      imported.catch(() => { imported = null; });
    }
    const {readModelBody} = await imported;
    const hasherUrl = chunkSha256 ? blobUrl(hasherSource) : null;
    try {
      return await readModelBody(response, expectedSize, {onProgress, chunkBytes, chunkSha256, hasherUrl});
    } finally {
      if (hasherUrl) URL.revokeObjectURL(hasherUrl);
    }
  };
})()"""


@functools.cache
def _read_body():
    """_READ_BODY_JS's function, made once (it holds the imported module)."""
    from pyodide.code import run_js

    return run_js(_READ_BODY_JS)


def _package_text(name: str) -> str:
    return (importlib.resources.files(__package__) / name).read_text(encoding="utf-8")


async def _read_model_bytes(location: str, expected: dict, on_progress):
    """The .pte (the manifest's `pte` entry says its size and sha256s) and whether its
    sha256 was checked: in the browser a JS ArrayBuffer, streamed with progress and checked
    chunk by chunk where the manifest has chunk sha256s; natively bytes, not checked."""
    if not IN_BROWSER:
        with open(location, "rb") as file:
            return file.read(), False
    from pyodide.ffi import create_proxy, to_js

    response = await _fetch(location)
    progress = create_proxy(on_progress) if on_progress else None
    chunk_sha256 = expected.get("chunk_sha256")
    try:
        result = await _read_body()(
            _package_text("checked_read.mjs"), _package_text("chunk_hasher.js"), response, expected["bytes"], progress,
            expected.get("chunk_bytes"), to_js(chunk_sha256) if chunk_sha256 else None,
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
    if isinstance(data, RangedFile):
        return data.size
    return data.byteLength if is_js_buffer(data) else len(data)


def _is_js_blob(data) -> bool:
    if not IN_BROWSER or not is_js_buffer(data):
        return False
    import js

    return bool(js.Blob.prototype.isPrototypeOf(data))


def _chunk_check(chunk_bytes: int, chunk_sha256: list, size: int):
    """A RangedFile's check of each piece (one chunk) against its sha256 in the manifest."""

    async def check(index: int, data):
        if await _sha256_hex(data) != chunk_sha256[index]:
            first = index * chunk_bytes
            last = min(first + chunk_bytes, size) - 1
            raise ModelFileError(f"the model file's sha256 of bytes {first:,}-{last:,} does not match its manifest: the file is damaged")

    return check


# A .pte larger than this downloads piece by piece (HTTP Range requests) unless the caller
# says otherwise: one ArrayBuffer of it would hold the whole file in the page.
WHOLE_DOWNLOAD_MAX_BYTES = 1 << 30


def _url_pieces(url: str, size: int, piece_bytes: int, check, on_progress) -> RangedFile:
    """A RangedFile over `url`, a piece a Range request."""
    received = 0

    async def read_piece(index: int):
        nonlocal received
        first = index * piece_bytes
        last = min(first + piece_bytes, size) - 1
        response = await _fetch(url, (first, last))
        total = (response.headers.get("Content-Range") or "").rpartition("/")[2]
        if total != str(size):
            raise ModelFileError(f"the model file {url} has {total or 'an unknown number of'} bytes, its manifest says {size}")
        data = await response.arrayBuffer()
        received = min(received + data.byteLength, size)
        if on_progress:
            on_progress(received, size)
        return data

    return RangedFile(size, read_piece, piece_bytes, check)


def _piece_by_piece(pte_data, location: str, expected: dict, sha256_checked: bool, by_pieces, on_progress):
    """The .pte as a RangedFile read by the manifest's chunks, each checked as it is read
    (unless the caller checked the file): natively from the file (pte_data None); in the
    browser from a JS Blob (a File, a Cache API entry's blob), or downloaded by Range
    requests where `by_pieces` (None: where larger than WHOLE_DOWNLOAD_MAX_BYTES). Else
    pte_data. Needs the manifest's chunk sha256s, or a file the caller checked."""
    chunked = "chunk_sha256" in expected
    if pte_data is None and IN_BROWSER:
        wanted = by_pieces if by_pieces is not None else expected["bytes"] > WHOLE_DOWNLOAD_MAX_BYTES
        if wanted and not chunked:
            raise ModelFileError("loading the model piece by piece needs the chunk sha256s its manifest lacks (pte.chunk_sha256)")
        if not wanted:
            return None
    elif not (chunked or sha256_checked) or not (pte_data is None or _is_js_blob(pte_data)):
        return pte_data
    piece_bytes = expected["chunk_bytes"] if chunked else PIECE_BYTES
    check = None if sha256_checked else _chunk_check(piece_bytes, expected["chunk_sha256"], expected["bytes"])
    if pte_data is not None:
        return blob_pieces(pte_data, piece_bytes, check)
    if IN_BROWSER:
        return _url_pieces(location, expected["bytes"], piece_bytes, check, on_progress)
    return file_pieces(location, piece_bytes, check)


# Decode steps a chat submits together on a GPU (start_next_steps): one submission, JS call
# and readback for this many tokens. On a CPU adapter (SwiftShader) a step takes tens of
# milliseconds and its host time is lost in them: one step a submission there.
DECODE_BLOCK_STEPS = 4


def _report_failed_upgrades(upgrades: asyncio.Future):
    """The model runs on with the kernels it loaded with; say why it has no faster ones
    (in the browser, stderr is the console)."""
    if not upgrades.cancelled() and upgrades.exception() is not None:
        print(f"pywebgpu: the model's faster kernels were not built: {upgrades.exception()}", file=sys.stderr)


def _owning_its_buffers(load):
    """LanguageModel.load with every GPU buffer it creates collected in the model's
    `buffers` (a BufferOwner), which close() frees."""

    @functools.wraps(load)
    async def owned_load(cls, *args, **kwargs):
        owner = BufferOwner()
        with owner.collecting():
            model = await load(cls, *args, **kwargs)
        model.buffers = owner
        return model

    return owned_load


class LanguageModel:
    # The GPU buffers the model created (set by load); close() frees them.
    buffers: BufferOwner | None = None
    closed = False

    def __init__(self, graph, tokenizer: Tokenizer, manifest: dict, top_k: LogitsTopK):
        self.graph = graph
        self.top_k = top_k  # the graph's runs that end in its next-token candidates
        self.tokenizer = tokenizer
        self.manifest = manifest
        geometry = manifest["model"]
        self.max_context = geometry["max_context_len"]
        self.max_prefill = geometry["max_prefill_tokens"]
        self.vocab_size = geometry["vocab_size"]
        self.eos_ids = frozenset(token["id"] for token in manifest["special_tokens"]["eos"])
        self.chat_template = ChatTemplate.from_template_string(manifest.get("chat_template"))
        self.decode_block_steps = 1 if graph.device.adapter.is_fallback else DECODE_BLOCK_STEPS
        # The graph's faster kernels, being built or built (start_upgrades); None until
        # they are started, and where the device cannot build them in the background.
        self.upgrades: asyncio.Future | None = None

    @classmethod
    @_owning_its_buffers
    async def load(
        cls,
        manifest_location: str,
        pte_data=None,
        on_progress=None,
        device: Device | None = None,
        sha256_checked: bool = False,
        kernel_set: str | None = None,
        on_stage=None,
        by_pieces: bool | None = None,
    ):
        """Load from a manifest (URL in the browser, path natively). `pte_data` may hold
        the .pte already: bytes, a JS ArrayBuffer, or a JS Blob (a File the user chose, a
        cached copy), which is read piece by piece. It is checked against the manifest's
        size either way, and against its sha256s unless the caller has checked it
        (`sha256_checked`: the chat page checks each copy it takes from its cache or the
        network, so hashing it again would only cost). Without `pte_data`, natively the file
        is read piece by piece; in the browser it is downloaded whole into one ArrayBuffer,
        or with `by_pieces` (None: where larger than WHOLE_DOWNLOAD_MAX_BYTES) a piece an
        HTTP Range request as the build goes, never held whole. Pieces are the manifest's
        chunks, each checked against its sha256 before use; a whole download is checked as
        it comes where the manifest has chunk sha256s (_read_model_bytes). `kernel_set`: the
        kernels to run, "cpu" or "gpu" (None: those that suit the device; runtime.load). The
        model is returned ready to run; its faster kernels wait for start_upgrades.
        `on_stage(name)` is called as each stage of the load starts: "download" (only where
        it downloads the .pte whole), "program" (reading it), "build" (uploading its weights
        and compiling its pipelines)."""
        stage = on_stage or (lambda name: None)
        manifest = parse_manifest(await _read_text(manifest_location), manifest_location)  # before the .pte's download
        expected = manifest["pte"]
        pte_location = _sibling(manifest_location, expected["file"])
        pte_data = _piece_by_piece(pte_data, pte_location, expected, sha256_checked, by_pieces, on_progress)
        if isinstance(pte_data, RangedFile):
            sha256_checked = True  # piece by piece as the pieces are read
        elif _is_js_blob(pte_data):
            pte_data = await pte_data.arrayBuffer()
        elif pte_data is None:
            stage("download")
            pte_data, sha256_checked = await _read_model_bytes(pte_location, expected, on_progress)
        if _byte_length(pte_data) != expected["bytes"]:
            raise ModelFileError(
                f"the model file has {_byte_length(pte_data)} bytes, its manifest says {expected['bytes']}: it is truncated or damaged"
            )
        if not sha256_checked and await _sha256_hex(pte_data) != expected["sha256"]:
            raise ModelFileError("the model file's sha256 does not match its manifest: the file is damaged")
        tokenizer = Tokenizer.from_json(await _read_text(_sibling(manifest_location, manifest["tokenizer"]["file"])))
        device = device or await request_device()
        stage("program")
        # runtime.load's two steps, apart so that each reports its stage.
        graph = GraphRuntime(device, await read_graph(pte_data), pte_data, kernel_set)
        stage("build")
        await graph.build()
        top_k = LogitsTopK(graph)
        await top_k.build()
        return cls(graph, tokenizer, manifest, top_k)

    def start_upgrades(self) -> asyncio.Future | None:
        """Start building the graph's faster kernels that compile slowly
        (GraphRuntime.build_upgrades), once, where the device compiles in the background
        (the browser); the model runs them once they are built. Returns `upgrades` (None
        where the device cannot: natively, creating a pipeline blocks the thread). On CPU
        adapters that takes a core for seconds, slowing what the model runs meanwhile:
        ChatSession starts it when a reply has ended, while its reader reads."""
        if self.upgrades is None and self.graph.device.compiles_in_background and not self.closed:
            with self.buffers.collecting() if self.buffers else contextlib.nullcontext():
                self.upgrades = asyncio.ensure_future(self.graph.build_upgrades())
            self.upgrades.add_done_callback(_report_failed_upgrades)
        return self.upgrades

    def close(self):
        """Free every GPU buffer the model created (its graph's, its top-k's, its faster
        kernels'): the device's allocated_bytes return to what they were before the load.
        The model cannot run afterwards; closing it again does nothing."""
        if self.closed:
            return
        self.closed = True
        if self.upgrades is not None:
            self.upgrades.cancel()
        for buffer in self.buffers.take() if self.buffers else ():
            self.graph.device.destroy_buffer(buffer)

    def _check_open(self):
        if self.closed:
            raise GPUError("the model is closed: load it again to run it")

    async def next_token_candidates(self, tokens: list[int], position: int, k: int, penalty: float = 1.0, penalized_ids=(), draw=None):
        """Feed `tokens` at `position` (prefill in chunks the program accepts) and return
        the top-k (logit, id) candidates for the token after them; with a `draw`
        (ops.topk.Draw), the one candidate drawn from them on the GPU."""
        return await self.start_next_token_candidates(tokens, position, k, penalty, penalized_ids, draw)

    def start_next_token_candidates(self, tokens: list[int], position: int, k: int, penalty: float = 1.0, penalized_ids=(), draw=None):
        """next_token_candidates' work submitted now; returns an awaitable of its result."""
        self._check_open()
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
                return self.top_k.submit(*inputs, k=k, penalty=penalty, penalized_ids=penalized_ids, draw=draw)

    def start_next_step(self, position: int, k: int = 1, draw=None, penalty: float = 1.0):
        """Decode, at `position`, the token the last submitted call picked on the GPU (its
        top 1, or the token it drew), without the host knowing that token yet: the GPU
        copies it into this step's input. Returns an awaitable of this step's top-1
        [(logit, id)], or with a `draw` (ops.topk.Draw) of the token drawn from its top k.
        A repetition `penalty` applies to the last call's penalized tokens and that one
        (the last call must have had the penalty). Submitting it before awaiting the last
        call keeps the GPU busy while the host waits."""
        self._check_open()
        if position + 1 > self.max_context:
            raise ValueError(f"{position + 1} tokens exceed the model's context of {self.max_context}")
        inputs = (HostTensor((1, 1), [0], "int64"), HostTensor((1,), [position], "int64"))
        return self.top_k.submit(*inputs, k=k, penalty=penalty, token_from_last_run=True, draw=draw)

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
