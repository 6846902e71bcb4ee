"""The chat demo (web/index.html) in headless Chromium with the bundled SmolLM2-135M 4-bit
model: greedy replies equal eager PyTorch's, Stop, multi-turn KV reuse, the Cache API,
damaged model files and missing WebGPU; and ChatSession's sampled replies (tokens drawn
on the GPU) against eager PyTorch's draws at the same uniforms.

One page serves the chat tests in order (the model loads once); SwiftShader decodes
slowly, so replies are kept to a few tokens.
"""

import functools
import hashlib
import json
import random
import shutil
import time
from pathlib import Path

import pytest

from conftest import open_page

from devtools.bundle import WEB
from llama_fixtures import penalized
from topk_cases import expected_draw

from pywebgpu.ops.topk import PENALIZED_MAX

MAX_TOKENS = 16
LOAD_TIMEOUT_MS = 300_000
REPLY_TIMEOUT_MS = 300_000
READY_OR_ERROR = "document.body.dataset.ready === '1' || document.getElementById('status').dataset.state === 'error'"


@pytest.fixture(scope="session")
def bundled_model():
    """The bundled model's manifest (web/models/….json), exported on first use."""
    from export_tools.bundled import ensure_bundled_model

    return ensure_bundled_model(WEB / "models").with_suffix(".json")


# --- the eager PyTorch reference -------------------------------------------------------------


@functools.lru_cache(maxsize=None)
def _eager():
    """The 4-bit eager module the bundled .pte was lowered from."""
    from export_tools.bundled import build_bundled_eager

    return build_bundled_eager()


def hf_tokenizer(manifest_path: Path):
    """HF tokenizers' Tokenizer from the model's tokenizer.json."""
    from tokenizers import Tokenizer

    manifest = json.loads(manifest_path.read_text())
    return Tokenizer.from_file(str(manifest_path.with_name(manifest["tokenizer"]["file"])))


def eager_reply(manifest_path: Path, question: str, max_tokens: int, choose, penalty: float = 1.0, system: str | None = None, model=None):
    """The reply to a one-question chat (after a `system` turn, if any; else the
    template's default one): ChatML prompt through Jinja and HF tokenizers
    (independent of pywebgpu's template and tokenizer), decoded by eager PyTorch (the
    EagerLlama `model`; the bundled model's by default), each
    token `choose(logits)`'s (token, margin) after a repetition `penalty` on the last
    PENALIZED_MAX tokens fed, up to EOS or `max_tokens` tokens, as ChatSession.send
    counts them. Returns (tokens, margins, HF tokenizers' decode)."""
    import jinja2

    manifest = json.loads(manifest_path.read_text())
    tokenizer = hf_tokenizer(manifest_path)
    prompt = jinja2.Environment().from_string(manifest["chat_template"]).render(
        messages=([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": question}],
        add_generation_prompt=True,
    )
    ids = tokenizer.encode(prompt, add_special_tokens=False).ids
    eos = {token["id"] for token in manifest["special_tokens"]["eos"]}
    model = model or _eager()
    model.reset()
    position, reply, margins = 0, [], []
    for start in range(0, len(ids), model.max_prefill_tokens):
        chunk = ids[start : start + model.max_prefill_tokens]
        logits = model(chunk, position)
        position += len(chunk)
    while len(reply) < max_tokens:
        token, margin = choose(penalized(logits.reshape(-1).float(), (ids + reply)[-PENALIZED_MAX:], penalty))
        margins.append(margin)
        if token in eos:
            break
        reply.append(token)
        logits = model([token], position)
        position += 1
    return reply, margins, lambda tokens: tokenizer.decode(tokens, skip_special_tokens=False)


def hf_tokens(manifest_path: Path, text: str) -> list[int]:
    """`text` encoded by HF tokenizers with the model's tokenizer.json."""
    return hf_tokenizer(manifest_path).encode(text, add_special_tokens=False).ids


def user_turn_rest(manifest_path: Path, question: str) -> list[int]:
    """What a question prefills once its prompt's start is in the KV cache: its text, the
    end of its turn and the assistant turn's header (ChatML), by HF tokenizers."""
    return hf_tokens(manifest_path, f"{question}<|im_end|>\n<|im_start|>assistant\n")


@functools.lru_cache(maxsize=None)
def eager_greedy_reply(manifest_path: Path, question: str, max_tokens: int, system: str | None = None, model=None) -> str:
    """The greedy reply (eager_reply's text)."""
    return eager_greedy_tokens(manifest_path, question, max_tokens, system, model)[1]


@functools.lru_cache(maxsize=None)
def eager_greedy_tokens(manifest_path: Path, question: str, max_tokens: int, system: str | None = None, model=None):
    """The greedy reply's tokens and text."""
    reply, _, decode = eager_reply(manifest_path, question, max_tokens, lambda logits: (int(logits.argmax()), 1.0), system=system, model=model)
    return reply, decode(reply)


# --- the page ------------------------------------------------------------------------------


def wait_ready(page):
    page.wait_for_function(READY_OR_ERROR, timeout=LOAD_TIMEOUT_MS)
    assert page.eval_on_selector("#status", "e => e.dataset.state") != "error", page.inner_text("#status")


def last_reply(page):
    return page.locator("#messages .assistant").last


def ask(page, question):
    """Send `question`; wait for the reply to end. Returns (text, state, stats)."""
    page.fill("#prompt", question)
    page.click("#send")
    page.wait_for_function(
        "[...document.querySelectorAll('#messages .assistant')].pop().dataset.state !== 'streaming'",
        timeout=REPLY_TIMEOUT_MS,
    )
    reply = last_reply(page)
    return reply.locator(".body").text_content(), reply.get_attribute("data-state"), stats(page)


def stats(page):
    return page.eval_on_selector("#stats", "e => ({...e.dataset})")


@pytest.fixture(scope="module")
def chat(chromium, web_server, bundled_model):
    """One chat page for the module's tests, model loaded; page problems fail each test."""
    started = time.perf_counter()
    page, problems = open_page(chromium, f"{web_server.url}/index.html?max_tokens={MAX_TOKENS}")
    wait_ready(page)
    page.load_seconds = time.perf_counter() - started
    page.problems = problems
    yield page
    page.context.close()


@pytest.fixture
def chat_page(chat):
    chat.problems.take()
    yield chat
    problems = chat.problems.take()
    assert not problems, "\n".join(problems)


def test_greedy_reply_matches_eager_pytorch(chat_page, bundled_model):
    question = "What is the capital of France?"
    assert chat_page.get_attribute("#progress", "data-from-cache") == "0"  # a fresh profile downloads
    text, state, numbers = ask(chat_page, question)
    assert state == "done"
    assert text == eager_greedy_reply(bundled_model, question, MAX_TOKENS)
    # The system turn was prefilled after the load (ChatSession.start_prefix): the
    # question prefilled only its turn's content and the assistant turn's header.
    assert int(numbers["prefilledTokens"]) == len(user_turn_rest(bundled_model, question))
    assert numbers["stopReason"] in ("eos", "max_tokens")
    assert float(numbers["ttftS"]) > 0
    assert "first token" in chat_page.inner_text("#stats")


def test_second_turn_prefills_only_what_is_new(chat_page, bundled_model):
    first = stats(chat_page)
    first_prompt, first_reply = int(first["promptTokens"]), int(first["decodeTokens"])
    text, state, numbers = ask(chat_page, "And of Germany?")
    assert state == "done" and text.strip()
    # The first turn, its reply's tokens as generated, is still in the KV cache, and the
    # end of the reply's turn and the next user turn's header were prefilled after the
    # reply (ChatSession.start_prefix): the question prefilled only its turn's rest.
    between = hf_tokens(bundled_model, "<|im_end|>\n<|im_start|>user\n")
    rest = user_turn_rest(bundled_model, "And of Germany?")
    assert int(numbers["promptTokens"]) == first_prompt + first_reply + len(between) + len(rest)
    assert int(numbers["prefilledTokens"]) == len(rest)


def test_new_chat_with_a_system_prompt_matches_eager_pytorch(chat_page, bundled_model):
    """A new chat takes the system prompt typed in the settings: its greedy reply is eager
    PyTorch's after that system turn, which was prefilled before the question."""
    system, question = "You are a pirate. Answer briefly.", "What is the capital of France?"
    set_system_prompt = "(e, value) => { e.value = value; e.dispatchEvent(new Event('input')); }"
    chat_page.eval_on_selector("#system-prompt", set_system_prompt, system)
    chat_page.click("#new-chat")
    text, state, numbers = ask(chat_page, question)
    assert state == "done"
    assert text == eager_greedy_reply(bundled_model, question, MAX_TOKENS, system)
    assert int(numbers["prefilledTokens"]) == len(user_turn_rest(bundled_model, question))
    chat_page.eval_on_selector("#system-prompt", set_system_prompt, "")  # the default again, from the next new chat


# Text that a page setting it as HTML would turn into elements (running their code, which
# sets window.pwned) or that a markdown renderer would format.
UNSAFE_TEXT = '<img src=x onerror="window.pwned=1"><script>window.pwned=2</script> **bold** [link](javascript:window.pwned=3) `code` <b>b</b>'
# Elements that text set as HTML or rendered as markdown would make in the conversation.
MADE_ELEMENTS = "document.querySelectorAll('#messages img, #messages script, #messages a, #messages b, #messages strong, #messages code').length"
# In the chat worker: each streamed piece of a reply gets `text` in front (a fake reply).
PREFIX_TOKENS = """(text) => {
    const post = self.postMessage;
    self.postMessage = function (message, ...rest) {
        post.call(self, message?.type === "token" ? { ...message, text: text + message.text } : message, ...rest);
    };
    self.restorePostMessage = () => { self.postMessage = post; };
}"""


def chat_worker(page):
    [worker] = [w for w in page.workers if w.url.endswith("/chat-worker.mjs")]
    return worker


def test_user_text_and_model_text_are_never_html(chat_page, bundled_model):
    """The question and a reply (the model's own, each piece with the text in front) are
    shown as the characters they are."""
    question = f"Repeat this: {UNSAFE_TEXT}"
    chat_page.click("#new-chat")
    worker = chat_worker(chat_page)
    worker.evaluate(PREFIX_TOKENS, UNSAFE_TEXT)
    try:
        text, state, numbers = ask(chat_page, question)
    finally:
        worker.evaluate("self.restorePostMessage()")
    assert state == "done"
    assert chat_page.locator("#messages .user .body").last.text_content() == question
    pieces = text.split(UNSAFE_TEXT)
    assert pieces[0] == "" and len(pieces) > 1
    assert "".join(pieces) == eager_greedy_reply(bundled_model, question, MAX_TOKENS)
    assert chat_page.evaluate(MADE_ELEMENTS) == 0
    assert chat_page.evaluate("window.pwned") is None


def test_system_prompt_is_never_html(chat_page, bundled_model):
    """The system prompt reaches the model as its characters: the reply is eager PyTorch's
    after that system turn; nothing of it becomes an element."""
    question = "Hi!"
    set_system_prompt = "(e, value) => { e.value = value; e.dispatchEvent(new Event('input')); }"
    chat_page.eval_on_selector("#system-prompt", set_system_prompt, UNSAFE_TEXT)
    chat_page.click("#new-chat")
    try:
        text, state, _ = ask(chat_page, question)
    finally:
        chat_page.eval_on_selector("#system-prompt", set_system_prompt, "")
    assert state == "done"
    assert text == eager_greedy_reply(bundled_model, question, MAX_TOKENS, UNSAFE_TEXT)
    assert chat_page.evaluate(MADE_ELEMENTS) == 0
    assert chat_page.evaluate("window.pwned") is None


def test_stop_halts_the_stream(chat_page):
    chat_page.click("#new-chat")
    assert chat_page.locator("#messages .message").count() == 0
    chat_page.click("#settings-toggle")  # the settings panel
    chat_page.fill("#max-tokens", "64")
    chat_page.fill("#prompt", "Write a long story about a dragon who learns to paint.")
    chat_page.click("#send")
    # Stop once a few pieces have streamed in.
    chat_page.wait_for_function(
        "[...document.querySelectorAll('#messages .assistant .body')].pop().textContent.length > 8",
        timeout=REPLY_TIMEOUT_MS,
    )
    assert chat_page.is_visible("#stop")
    chat_page.click("#stop")
    reply = last_reply(chat_page)
    chat_page.wait_for_function(
        "[...document.querySelectorAll('#messages .assistant')].pop().dataset.state !== 'streaming'",
        timeout=REPLY_TIMEOUT_MS,
    )
    assert reply.get_attribute("data-state") == "stopped"
    numbers = stats(chat_page)
    assert numbers["stopReason"] == "cancelled"
    assert 0 < int(numbers["decodeTokens"]) < 64
    assert chat_page.is_visible("#send") and chat_page.is_hidden("#stop")
    chat_page.fill("#max-tokens", str(MAX_TOKENS))
    chat_page.click("#settings-toggle")


def test_reload_uses_the_cached_model(chat_page):
    """The cached copy is used, checked chunk by chunk by the hashing Worker (the bundled
    manifest has chunk sha256s); the load's stages are all shown done."""
    pte_requests, hasher_responses = [], []
    chat_page.on("request", lambda request: ".pte" in request.url and pte_requests.append(request.url))
    chat_page.on("response", lambda response: "chunk-hasher" in response.url and hasher_responses.append(response.status))
    chat_page.reload()
    wait_ready(chat_page)
    assert pte_requests == []
    assert hasher_responses == [200]
    assert chat_page.get_attribute("#progress", "data-from-cache") == "1"
    assert chat_page.is_hidden("#progress")
    states = chat_page.eval_on_selector_all("#load-stages li", "items => items.map((i) => [i.dataset.stage, i.dataset.state])")
    assert states == [["download", "done"], ["program", "done"], ["build", "done"], ["warm-up", "done"]]


def test_damaged_cached_model_is_dropped(chat_page):
    """A cached copy that fails its sha256 check is deleted; the next visit downloads again."""
    damaged_key = chat_page.evaluate(
        """async () => {
            const cache = await caches.open("pywebgpu-models");
            const [request] = (await cache.keys()).filter((r) => r.url.includes(".pte"));
            const bytes = new Uint8Array(await (await cache.match(request)).arrayBuffer());
            bytes[bytes.length >> 1] ^= 0xff;
            await cache.put(request, new Response(bytes));
            return request.url;
        }"""
    )
    chat_page.reload()
    chat_page.wait_for_function(READY_OR_ERROR, timeout=LOAD_TIMEOUT_MS)
    assert chat_page.eval_on_selector("#status", "e => e.dataset.state") == "error"
    assert "The model file is damaged" in chat_page.inner_text("#status")
    assert "Reload the page to download it again" in chat_page.inner_text("#status")
    assert chat_page.is_disabled("#prompt")
    assert not chat_page.evaluate("async (key) => !!(await (await caches.open('pywebgpu-models')).match(key))", damaged_key)


def write_bad_model(web_server, name, manifest_path, *, sha256=None, wrong_chunk=None, truncate_to=None):
    """A manifest under /files/ whose .pte is the bundled one with a wrong sha256 (and no
    chunk sha256s) or with chunk sha256s of which one is wrong, or a truncated copy."""
    manifest = json.loads(manifest_path.read_text())
    pte = manifest_path.with_name(manifest["pte"]["file"])
    manifest["tokenizer"]["file"] = f"../models/{manifest['tokenizer']['file']}"
    if sha256 or wrong_chunk is not None:
        manifest["pte"] = {key: value for key, value in manifest["pte"].items() if not key.startswith("chunk_")}
        manifest["pte"]["file"] = f"../models/{pte.name}"
    if sha256:
        manifest["pte"]["sha256"] = sha256
    if wrong_chunk is not None:
        manifest["pte"] = pte_entry_with_chunks(manifest_path) | {"file": f"../models/{pte.name}"}
        manifest["pte"]["chunk_sha256"][wrong_chunk] = "0" * 64
    if truncate_to:
        manifest["pte"]["file"] = f"{name}.pte"
        with pte.open("rb") as file:
            (web_server.files_dir / f"{name}.pte").write_bytes(file.read(truncate_to))
    (web_server.files_dir / f"{name}.json").write_text(json.dumps(manifest))
    return f"/files/{name}.json"


@pytest.mark.parametrize(
    "damage, detail",
    [
        ({"sha256": "0" * 64}, "its sha256 does not match the manifest"),
        ({"wrong_chunk": 3}, "its sha256 of bytes 12,582,912-16,777,215 does not match the manifest"),
        ({"truncate_to": 1 << 20}, "truncated"),
    ],
    ids=["wrong-sha256", "wrong-chunk-sha256", "truncated"],
)
def test_bad_model_file_gives_a_clear_error(request, fresh_page, web_server, bundled_model, damage, detail):
    manifest_url = write_bad_model(web_server, f"bad-{request.node.callspec.id}", bundled_model, **damage)
    page, problems = fresh_page(f"/index.html?model={manifest_url}")
    page.wait_for_function(READY_OR_ERROR, timeout=LOAD_TIMEOUT_MS)
    status = page.inner_text("#status")
    assert page.eval_on_selector("#status", "e => e.dataset.state") == "error"
    assert "The model file is damaged" in status and detail in status and "Reload the page" in status
    assert page.evaluate("async () => (await (await caches.open('pywebgpu-models')).keys()).length") == 0
    assert not problems.take()


@pytest.mark.parametrize(
    "change, detail",
    [
        (
            lambda m: {"architectures": ["LlamaForCausalLM"], "vocab_size": 49152},
            'it is not a model manifest of pywebgpu\'s export tools (its "format" is null, not "pywebgpu.llama-export")',
        ),
        (lambda m: {**m, "format_version": 2}, "it is format version 2, and this page reads version 1"),
        (lambda m: {**m, "pte": {**m["pte"], "bytes": "90 MB"}}, '"pte.bytes" must be a positive integer, not "90 MB"'),
        (lambda m: {**m, "model": {k: v for k, v in m["model"].items() if k != "dim"}}, 'it has no "model.dim"'),
    ],
    ids=["not-a-manifest", "newer-version", "bad-size", "no-dim"],
)
def test_bad_manifest_is_named_before_any_download(request, fresh_page, web_server, bundled_model, change, detail):
    """The page checks the manifest's fields it reads: the error names the field, and
    neither the .pte nor the worker is fetched."""
    name = f"manifest-{request.node.callspec.id}.json"
    (web_server.files_dir / name).write_text(json.dumps(change(json.loads(bundled_model.read_text()))))
    page, problems = fresh_page(f"/index.html?model=/files/{name}")
    requests = []
    page.on("request", lambda request: requests.append(request.url))
    page.wait_for_function(READY_OR_ERROR, timeout=LOAD_TIMEOUT_MS)
    assert page.eval_on_selector("#status", "e => e.dataset.state") == "error"
    status = page.inner_text("#status")
    assert f"The model's manifest at {web_server.url}/files/{name} cannot be used: {detail}." in status, status
    assert not [url for url in requests if url.endswith((".pte", "chat-worker.mjs"))]
    assert not problems.take()


def test_page_without_its_chunk_hasher_checks_the_whole(chromium, web_server, bundled_model):
    """When the hashing Worker cannot start (its script missing here), the page checks the
    whole file's sha256 after the download: a manifest whose chunk sha256s are right but
    whose whole sha256 is wrong is refused, which the chunk check alone would let pass."""
    manifest = json.loads(bundled_model.read_text())
    manifest["tokenizer"]["file"] = f"../models/{manifest['tokenizer']['file']}"
    manifest["pte"] = pte_entry_with_chunks(bundled_model) | {"file": f"../models/{manifest['pte']['file']}", "sha256": "0" * 64}
    (web_server.files_dir / "no-hasher.json").write_text(json.dumps(manifest))
    context = chromium.new_context()
    hasher_requests = []
    context.route("**/chunk-hasher.js", lambda route: (hasher_requests.append(route.request.url), route.fulfill(status=404)))
    page = context.new_page()
    page.goto(f"{web_server.url}/index.html?model=/files/no-hasher.json")
    page.wait_for_function(READY_OR_ERROR, timeout=LOAD_TIMEOUT_MS)
    status = page.inner_text("#status")
    assert len(hasher_requests) == 1
    assert page.eval_on_selector("#status", "e => e.dataset.state") == "error"
    assert "The model file is damaged (its sha256 does not match the manifest)" in status, status
    context.close()


def test_missing_wheel_is_named(chromium, web_server, bundled_model):
    """A wheel of the bundle that does not load (removed here) stops the boot with an error
    naming it, where Pyodide's loadPackage itself only logs it."""
    context = chromium.new_context()
    context.route("**/vendor/wheels/pywebgpu-*.whl", lambda route: route.fulfill(status=404))
    page = context.new_page()
    page.goto(f"{web_server.url}/index.html")
    page.wait_for_function(READY_OR_ERROR, timeout=LOAD_TIMEOUT_MS)
    status = page.inner_text("#status")
    assert page.eval_on_selector("#status", "e => e.dataset.state") == "error"
    assert "Python failed to start: pywebgpu could not be installed:" in status and "/vendor/wheels/pywebgpu-" in status, status
    context.close()


# Each script runs before the page's own: it takes WebGPU (or part of it) away.
NO_WEBGPU = "Object.defineProperty(Navigator.prototype, 'gpu', { get: () => undefined });"
NO_ADAPTER = "GPU.prototype.requestAdapter = async () => null;"
# 512 KiB bindings: below the bundled model's gate and up projections (884,736 bytes).
SMALL_ADAPTER = (
    "GPU.prototype.requestAdapter = async () => "
    "({ limits: { maxBufferSize: 512 << 10, maxStorageBufferBindingSize: 512 << 10 } });"
)


@pytest.mark.parametrize(
    "script, expected",
    [
        (NO_WEBGPU, "does not offer WebGPU (navigator.gpu is missing)"),
        (NO_ADAPTER, "found no usable GPU"),
        (SMALL_ADAPTER, "This GPU is too small for the model"),
    ],
    ids=["no-navigator-gpu", "no-adapter", "adapter-too-small"],
)
def test_missing_webgpu_is_explained(chromium, web_server, bundled_model, script, expected):
    context = chromium.new_context()
    context.add_init_script(script)
    page = context.new_page()
    errors = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    requests = []
    page.on("request", lambda request: requests.append(request.url))
    page.goto(f"{web_server.url}/index.html")
    page.wait_for_function(READY_OR_ERROR, timeout=60_000)
    assert page.eval_on_selector("#status", "e => e.dataset.state") == "error"
    assert expected in page.inner_text("#status")
    assert not errors
    # Nothing heavy starts on a browser that cannot run the model.
    assert not [url for url in requests if url.endswith((".pte", "chat-worker.mjs"))]
    context.close()


# ChatSession sampling as the demo does at a temperature, seeded: every token drawn on the
# GPU from the top k at the uniforms of the seed's generator, the steps run ahead.
SAMPLING = {"temperature": 0.5, "top_k": 40, "top_p": 0.9, "seed": 3}
# Draws compared until one whose uniform lies this close to an edge of eager's shares
# (float32 logits may then decide otherwise and the replies part).
DRAW_MARGIN = 1e-3

SAMPLED_REPLY_SOURCE = """
from pywebgpu.llm import ChatSession, LanguageModel, SamplingParams

async def sampled_reply(manifest_url, question, sampling, max_tokens, decode_block_steps):
    model = await LanguageModel.load(manifest_url)
    model.decode_block_steps = decode_block_steps
    chat = ChatSession(model)
    chat.block_max_token_s = float("inf")  # blocks from the third token, though SwiftShader's are slow
    pieces = [piece async for piece in chat.send(question, sampling=SamplingParams(**sampling), max_tokens=max_tokens)]
    return {"text": "".join(pieces), "stats": chat.stats}
"""


@pytest.mark.parametrize("penalty, decode_block_steps", [(1.0, 1), (1.3, 1), (1.3, 3)])
def test_sampled_reply_matches_eager_pytorch_draws(python_page, bundled_model, penalty, decode_block_steps):
    """Each token drawn on the GPU, the steps run ahead; with a repetition penalty, its
    window of recent tokens growing on the GPU; the steps submitted one at a time (as on
    this CPU adapter) and three at a time (as on GPUs, four)."""
    question = "Tell me about the sea."
    uniforms = random.Random(SAMPLING["seed"])
    top = (SAMPLING["top_k"], SAMPLING["temperature"], SAMPLING["top_p"])
    reply, margins, decode = eager_reply(
        bundled_model, question, MAX_TOKENS, lambda logits: expected_draw(logits, *top, uniforms.random()), penalty
    )
    sampling = {**SAMPLING, "repetition_penalty": penalty}
    python_page.load_module("chat_programs", SAMPLED_REPLY_SOURCE)
    args = (f"/models/{bundled_model.name}", question, sampling, MAX_TOKENS, decode_block_steps)
    answer = python_page.call("chat_programs", "sampled_reply", *args)
    compared = next((i for i, margin in enumerate(margins) if margin < DRAW_MARGIN), len(margins))
    assert compared >= MAX_TOKENS // 2, margins
    if compared == len(margins):
        assert answer["text"] == decode(reply)
        assert answer["stats"]["decode_tokens"] == len(reply)
    else:
        assert answer["text"].startswith(decode(reply[:compared]).rstrip("\ufffd"))
    assert len(set(reply[:compared])) > 1


UPGRADED_REPLY_SOURCE = """
from pywebgpu.llm import ChatSession, LanguageModel

def note_kernels(graph, kernels):
    # Each op's resize also notes the kernels (`kernel` attributes) it and its parts chose.
    for index, op in enumerate(graph.ops):
        def resize(index=index, resize=op.resize):
            resize()
            kernels.update(part.kernel for part, _ in graph.shape_states.op_parts(index) if isinstance(getattr(part, "kernel", None), str))
        op.resize = resize

async def greedy_reply_after_upgrades(manifest_url, first_question, question, max_tokens):
    model = await LanguageModel.load(manifest_url)
    started_at_load = model.upgrades is not None
    first = ChatSession(model)
    async for _ in first.send(first_question, max_tokens=2):
        pass
    started_by_the_chat = model.upgrades is not None
    await model.upgrades
    kernels = set()
    note_kernels(model.graph, kernels)
    chat = ChatSession(model)  # a new conversation: prefilled from position 0
    pieces = [piece async for piece in chat.send(question, max_tokens=max_tokens)]
    return {
        "text": "".join(pieces), "stats": chat.stats, "kernels": sorted(kernels),
        "started_at_load": started_at_load, "started_by_the_chat": started_by_the_chat,
    }
"""


def test_greedy_reply_after_upgrades_matches_eager_pytorch(python_page, bundled_model):
    """A chat's first reply starts the graph's faster kernels' build in the page, not the
    load (on this CPU adapter gemv_rows' 16-row kernel, from 64 rows of x on, and
    attention's of 4 rows a quad); a prompt of over 64 tokens then runs them, and the
    greedy reply is eager PyTorch's."""
    question = (
        "Here is a short story. A lighthouse keeper lived alone on a rocky island far from the coast. "
        "Every night she climbed the stairs, lit the great lamp and watched the ships pass in the dark. "
        "One winter a storm broke the lamp. What did she do?"
    )
    python_page.load_module("chat_programs", UPGRADED_REPLY_SOURCE)
    args = (f"/models/{bundled_model.name}", "Hi!", question, MAX_TOKENS)
    answer = python_page.call("chat_programs", "greedy_reply_after_upgrades", *args)
    assert not answer["started_at_load"] and answer["started_by_the_chat"]
    assert answer["stats"]["prefilled_tokens"] >= 64, answer["stats"]
    assert {"gemv_rows16", "sdpa_cpu_rows4"} <= set(answer["kernels"]), answer["kernels"]
    assert answer["text"] == eager_greedy_reply(bundled_model, question, MAX_TOKENS)


TWO_TURNS_SOURCE = """
from pywebgpu.llm import ChatSession, LanguageModel, SamplingParams

async def two_turns(manifest_url, first_question, question, max_tokens, temperature, seed):
    model = await LanguageModel.load(manifest_url)
    chat = ChatSession(model)
    sampling = SamplingParams(temperature=temperature, seed=seed)
    first = "".join([piece async for piece in chat.send(first_question, sampling=sampling, max_tokens=max_tokens)])
    first_stats = chat.stats
    reencoded = len(model.tokenizer.encode(first, add_special_tokens=False))
    second = "".join([piece async for piece in chat.send(question, max_tokens=max_tokens)])
    return {"first_stats": first_stats, "reencoded": reencoded, "stats": chat.stats, "second": second}
"""


def test_next_turn_keeps_a_reply_generated_in_uncommon_pieces(python_page, bundled_model):
    """The bundled model's story, sampled at temperature 1 (seed 3), holds tokens its
    tokenizer would merge otherwise: the next turn keeps the reply's tokens as generated
    (the KV cache holds them), so it prefills only what the chat template adds after the
    reply, not the reply from the first such token on."""
    python_page.load_module("chat_programs", TWO_TURNS_SOURCE)
    args = (f"/models/{bundled_model.name}", "Write a short story about a lighthouse keeper.", "Write a poem about the sea.", 48, 1.0, 3)
    answer = python_page.call("chat_programs", "two_turns", *args)
    first = answer["first_stats"]
    assert answer["reencoded"] != first["decode_tokens"], "this reply encodes as generated: pick a question whose reply does not"
    assert answer["second"].strip()
    added = answer["stats"]["prompt_tokens"] - first["prompt_tokens"] - first["decode_tokens"]
    assert answer["stats"]["prefilled_tokens"] == added + (first["stop_reason"] == "max_tokens")


# LanguageModel.load's own checks of a .pte handed to it (the chat page's worker hands it a
# file the page has checked, and skips its sha256: see chat-worker.mjs).
LOAD_CHECK_SOURCE = """
import js
from pywebgpu.llm import LanguageModel

async def load_error(manifest_url, pte_url, truncate_to, flip_byte):
    data = await (await js.fetch(pte_url)).arrayBuffer()
    if truncate_to is not None:
        data = data.slice(0, truncate_to)
    if flip_byte is not None:
        view = js.Uint8Array.new(data)
        view[flip_byte] = view[flip_byte] ^ 1
    try:
        await LanguageModel.load(manifest_url, pte_data=data)
    except Exception as error:
        return [type(error).__name__, str(error)]
"""


@pytest.mark.parametrize(
    "truncate_to, flip_byte, detail",
    [(None, 1 << 20, "sha256 does not match its manifest"), (1 << 20, None, "it is truncated or damaged")],
    ids=["wrong-sha256", "truncated"],
)
def test_language_model_refuses_a_damaged_file(python_page, bundled_model, truncate_to, flip_byte, detail):
    pte_file = json.loads(bundled_model.read_text())["pte"]["file"]
    python_page.load_module("load_check", LOAD_CHECK_SOURCE)
    error = python_page.call("load_check", "load_error", f"/models/{bundled_model.name}", f"/models/{pte_file}", truncate_to, flip_byte)
    assert error is not None and error[0] == "ModelFileError" and detail in error[1], error


# LanguageModel.load reading a .pte piece by piece (runtime.RangedFile): by HTTP Range
# requests as the build goes, or from a Blob, each piece checked against its chunk sha256.
PIECES_SOURCE = """
import js
from pywebgpu.llm import ChatSession, LanguageModel

async def greedy_reply_by_pieces(manifest_url, source, question, max_tokens):
    pte_data = None
    if source == "blob":
        pte_url = js.URL.new(js.JSON.parse(await (await js.fetch(manifest_url)).text()).pte.file, js.URL.new(manifest_url, js.location.href)).href
        pte_data = await (await js.fetch(pte_url)).blob()
    progress = []
    try:
        model = await LanguageModel.load(manifest_url, pte_data=pte_data, by_pieces=source == "range", on_progress=lambda done, total: progress.append(done))
    except Exception as error:
        return {"error": [type(error).__name__, str(error)]}
    chat = ChatSession(model)
    text = "".join([piece async for piece in chat.send(question, max_tokens=max_tokens)])
    return {"text": text, "progress": progress}
"""


@pytest.mark.parametrize("source", ["range", "blob"])
def test_model_loaded_by_pieces_replies_like_eager(python_page, bundled_model, source):
    """By Range requests (the test server answers them) with progress a piece, or from a
    Blob: the greedy reply is eager PyTorch's."""
    question = "What is the capital of France?"
    python_page.load_module("pieces", PIECES_SOURCE)
    answer = python_page.call("pieces", "greedy_reply_by_pieces", f"/models/{bundled_model.name}", source, question, MAX_TOKENS)
    assert "error" not in answer, answer
    assert answer["text"] == eager_greedy_reply(bundled_model, question, MAX_TOKENS)
    if source == "range":
        size = json.loads(bundled_model.read_text())["pte"]["bytes"]
        assert answer["progress"] == sorted(answer["progress"]) and answer["progress"][-1] == size, answer["progress"]


def test_model_by_pieces_with_a_damaged_chunk_is_refused(python_page, web_server, bundled_model):
    """One byte flipped in the .pte's fourth chunk of 4 MiB: refused as that chunk comes."""
    folder = web_server.files_dir / "bad-pieces"
    folder.mkdir(exist_ok=True)
    manifest = json.loads(bundled_model.read_text())
    manifest["pte"] = pte_entry_with_chunks(bundled_model)
    data = bytearray(bundled_model.with_name(manifest["pte"]["file"]).read_bytes())
    data[3 * TEST_CHUNK_BYTES + 100] ^= 0x10
    (folder / manifest["pte"]["file"]).write_bytes(data)
    shutil.copyfile(bundled_model.with_name(manifest["tokenizer"]["file"]), folder / manifest["tokenizer"]["file"])
    (folder / "model.json").write_text(json.dumps(manifest))
    python_page.load_module("pieces", PIECES_SOURCE)
    answer = python_page.call("pieces", "greedy_reply_by_pieces", "/files/bad-pieces/model.json", "range", "Hi", 1)
    assert answer["error"] == ["ModelFileError", "the model file's sha256 of bytes 12,582,912-16,777,215 does not match its manifest: the file is damaged"]


# LanguageModel.load's download of a .pte (no pte_data given): the body read in JS into one
# buffer, with progress reports, each chunk hashed in a Worker where the manifest has chunk
# sha256s.
READ_CHECK_SOURCE = """
import hashlib
from pywebgpu.llm import model

async def read_report(pte_url, expected):
    reports = []
    data, verified = await model._read_model_bytes(pte_url, expected, lambda received, expected: reports.append([received, expected]))
    return [data.byteLength, hashlib.sha256(data.to_bytes()).hexdigest(), verified, reports]

async def read_report_without_workers(pte_url, expected):
    from pyodide.code import run_js

    worker = run_js("const w = globalThis.Worker; globalThis.Worker = undefined; w")
    try:
        return await read_report(pte_url, expected)
    finally:
        run_js("(w) => { globalThis.Worker = w; }")(worker)

async def read_error(pte_url, expected):
    try:
        await model._read_model_bytes(pte_url, expected, None)
    except Exception as error:
        return [type(error).__name__, str(error)]
"""

# Chunks of 4 MiB: the bundled model's 90 MB make 22, the last one shorter.
TEST_CHUNK_BYTES = 4 << 20


def pte_entry_with_chunks(bundled_model):
    """The manifest's pte entry with chunk sha256s computed here with hashlib (the
    browser's are WebCrypto's, in a Worker)."""
    expected = json.loads(bundled_model.read_text())["pte"]
    data = bundled_model.with_name(expected["file"]).read_bytes()
    chunks = [hashlib.sha256(data[i : i + TEST_CHUNK_BYTES]).hexdigest() for i in range(0, len(data), TEST_CHUNK_BYTES)]
    return {**expected, "chunk_bytes": TEST_CHUNK_BYTES, "chunk_sha256": chunks}


@pytest.mark.parametrize("chunks", [True, False], ids=["chunk-sha256s", "no-chunk-sha256s"])
def test_model_download_is_whole_with_progress(python_page, bundled_model, chunks):
    """The bytes read are the file's (its manifest's sha256, from the export), reported as
    they arrive: increasing, at most every hundredth of the size, the last one the whole;
    checked on the way where the manifest has chunk sha256s, else left to the caller."""
    expected = pte_entry_with_chunks(bundled_model)
    if not chunks:
        expected = {key: value for key, value in expected.items() if not key.startswith("chunk_")}
    python_page.load_module("read_check", READ_CHECK_SOURCE)
    size, sha256, verified, reports = python_page.call("read_check", "read_report", f"/models/{expected['file']}", expected)
    assert (size, sha256, verified) == (expected["bytes"], expected["sha256"], chunks)
    received = [r for r, _ in reports]
    assert received == sorted(set(received)) and reports[-1] == [size, size]
    assert all(e == size for _, e in reports) and 2 <= len(reports) <= 101


def test_model_download_without_workers_is_left_to_the_whole_sha256(python_page, bundled_model):
    """Where no Worker can start, the bytes come whole and unchecked: LanguageModel.load
    then hashes the whole (its sha256_checked is False)."""
    expected = pte_entry_with_chunks(bundled_model)
    python_page.load_module("read_check", READ_CHECK_SOURCE)
    size, sha256, verified, _ = python_page.call("read_check", "read_report_without_workers", f"/models/{expected['file']}", expected)
    assert (size, sha256, verified) == (expected["bytes"], expected["sha256"], False)


@pytest.mark.parametrize("damaged_chunk", [0, 5, 21], ids=["first-chunk", "a-middle-chunk", "last-chunk"])
def test_model_download_with_a_damaged_chunk_is_refused(python_page, web_server, bundled_model, damaged_chunk):
    """One flipped byte: the error names the chunk's bytes (the last chunk is shorter)."""
    expected = pte_entry_with_chunks(bundled_model)
    data = bytearray(bundled_model.with_name(expected["file"]).read_bytes())
    first = damaged_chunk * TEST_CHUNK_BYTES
    last = min(first + TEST_CHUNK_BYTES, len(data)) - 1
    data[(first + last) // 2] ^= 0x10
    (web_server.files_dir / "damaged-chunk.pte").write_bytes(data)
    python_page.load_module("read_check", READ_CHECK_SOURCE)
    error = python_page.call("read_check", "read_error", "/files/damaged-chunk.pte", expected)
    assert error == ["ModelFileError", f"the model file's sha256 of bytes {first:,}-{last:,} does not match its manifest: the file is damaged"]


def test_model_download_larger_than_its_manifest_says_is_refused(python_page, bundled_model):
    """The size check alone (with chunk sha256s, a chunk short of the manifest's last one
    may be refused as damaged first)."""
    expected = {k: v for k, v in json.loads(bundled_model.read_text())["pte"].items() if not k.startswith("chunk_")}
    python_page.load_module("read_check", READ_CHECK_SOURCE)
    error = python_page.call("read_check", "read_error", f"/models/{expected['file']}", {**expected, "bytes": expected["bytes"] - 1})
    assert error == ["ModelFileError", f"/models/{expected['file']} is larger than the {expected['bytes'] - 1} bytes its manifest says"]
