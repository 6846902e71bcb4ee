"""The chat page's model picker (web/model-picker.mjs) with a second model: the tiny Llama
(random weights, SmolLM2-135M's vocabulary, with SmolLM2's tokenizer and chat template in
its manifest) from a manifest URL and from the reader's own files; its size and the
adapter's limits shown before the download, the load's stages as the worker reaches them,
its greedy reply equal to eager PyTorch's, the cached copy listed and deleted; a manifest
too big for the adapter refused before its download with both sizes named; and the GPU
device lost in the middle of a reply.

One page serves the tests in order (opened with ?pick: nothing loads until a model is
chosen)."""

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import open_page
from llama_fixtures import _tiny_llama_export
from test_chat_page import LOAD_TIMEOUT_MS, READY_OR_ERROR, ask, bundled_model, eager_greedy_tokens, last_reply, stats, wait_ready  # noqa: F401

MAX_TOKENS = 12
TINY_MAX_SEQ_LEN = 64
SMOLLM2_VOCAB = 49152
QUESTION = "What is the capital of France?"
ADAPTER_LIMITS = """async () => {
    const { limits } = await navigator.gpu.requestAdapter({ powerPreference: "high-performance" });
    return { maxBufferSize: limits.maxBufferSize, maxStorageBufferBindingSize: limits.maxStorageBufferBindingSize };
}"""
# The stages of #load-stages that leave the active state, in order, from now on.
WATCH_STAGES = """() => {
    window.stagesLeft = [];
    window.stageObserver?.disconnect();
    window.stageObserver = new MutationObserver((records) => {
        for (const r of records) if (r.oldValue === "active") window.stagesLeft.push(r.target.dataset.stage);
    });
    window.stageObserver.observe(document.getElementById("load-stages"), { subtree: true, attributeFilter: ["data-state"], attributeOldValue: true });
}"""
STAGES = ["download", "program", "build", "warm-up"]


@dataclass
class TinyModel:
    manifest_path: Path  # under the server's /files/tiny/, with its .pte and tokenizer
    manifest: dict
    eager: object  # export_tools' EagerLlama

    @property
    def files(self):
        folder = self.manifest_path.parent
        return [self.manifest_path, folder / self.manifest["pte"]["file"], folder / self.manifest["tokenizer"]["file"]]


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory, web_server, bundled_model):  # noqa: F811
    """The tiny Llama as export_tools writes it, its manifest given SmolLM2's tokenizer,
    special tokens and chat template (the export of random weights has none)."""
    export = _tiny_llama_export(str(tmp_path_factory.getbasetemp()), False, SMOLLM2_VOCAB, TINY_MAX_SEQ_LEN)
    bundled = json.loads(bundled_model.read_text())
    manifest = json.loads(export.manifest_path.read_text())
    manifest["tokenizer"] = {"file": "tiny.tokenizer.json", "add_bos": False}
    manifest["special_tokens"] = bundled["special_tokens"]
    manifest["chat_template"] = bundled["chat_template"]
    folder = web_server.files_dir / "tiny"
    folder.mkdir(exist_ok=True)
    shutil.copyfile(export.pte_path, folder / manifest["pte"]["file"])
    shutil.copyfile(bundled_model.with_name(bundled["tokenizer"]["file"]), folder / "tiny.tokenizer.json")
    (folder / "tiny.json").write_text(json.dumps(manifest))
    return TinyModel(folder / "tiny.json", manifest, export.eager)


@pytest.fixture(scope="module")
def picker(chromium, web_server, tiny_model):
    page, problems = open_page(chromium, f"{web_server.url}/index.html?pick&max_tokens={MAX_TOKENS}")
    page.problems = problems
    page.pte_requests = []
    page.on("request", lambda request: request.url.split("?")[0].endswith(".pte") and page.pte_requests.append(request.url))
    page.wait_for_selector("#picker:not([hidden])")
    page.limits = page.evaluate(ADAPTER_LIMITS)
    yield page
    page.context.close()


@pytest.fixture
def picker_page(picker):
    picker.problems.take()
    picker.pte_requests.clear()
    yield picker
    problems = picker.problems.take()
    assert not problems, "\n".join(problems)


def shown_choice(page):
    """The picker's card of the model chosen: its name, size and the limits shown."""
    page.wait_for_selector("#model-choice:not([hidden]), #picker-error:not([hidden])")
    assert page.is_hidden("#picker-error"), page.inner_text("#picker-error")
    return {
        "name": page.inner_text("#model-choice-name"),
        "size": page.inner_text("#model-choice-size"),
        "bytes": int(page.get_attribute("#model-choice-size", "data-bytes")),
        "limits": page.inner_text("#model-choice-limits"),
        "limit_values": page.eval_on_selector("#model-choice-limits", "e => ({...e.dataset})"),
        "problem": page.inner_text("#model-choice-problem") if page.is_visible("#model-choice-problem") else None,
    }


def check_limits_shown(page, choice):
    assert {k: int(v) for k, v in choice["limit_values"].items()} == page.limits
    assert "maxBufferSize" in choice["limits"] and "maxStorageBufferBindingSize" in choice["limits"]


def load_and_check_reply(page, tiny_model):
    """Load the model shown, watching its stages; its greedy reply is eager PyTorch's."""
    page.evaluate(WATCH_STAGES)
    page.click("#model-load")
    wait_ready(page)
    assert page.evaluate("window.stagesLeft") == STAGES
    done = page.eval_on_selector_all("#load-stages li", "items => items.map((i) => [i.dataset.stage, i.dataset.state, i.dataset.seconds])")
    assert [(stage, state) for stage, state, _ in done] == [(stage, "done") for stage in STAGES]
    assert all(float(seconds) >= 0 for _, _, seconds in done)
    tokens, text = eager_greedy_tokens(tiny_model.manifest_path, QUESTION, MAX_TOKENS, None, tiny_model.eager)
    reply, state, numbers = ask(page, QUESTION)
    assert state == "done"
    assert reply == text
    assert int(numbers["decodeTokens"]) == len(tokens)


def test_model_from_a_url_shows_its_size_first_and_replies_like_eager(picker_page, tiny_model):
    page, expected = picker_page, tiny_model.manifest["pte"]
    page.fill("#model-url", "/files/tiny/tiny.json")
    page.click("#model-url-open")
    choice = shown_choice(page)
    assert choice["bytes"] == expected["bytes"] and f"{expected['bytes']:,} bytes" in choice["size"]
    assert choice["name"].startswith(Path(expected["file"]).stem) and choice["problem"] is None
    check_limits_shown(page, choice)
    assert page.pte_requests == []  # nothing downloaded before the reader says so
    load_and_check_reply(page, tiny_model)
    assert page.pte_requests == [f"{page.url.split('/index.html')[0]}/files/tiny/{expected['file']}"]
    assert page.get_attribute("#progress", "data-from-cache") == "0"


def test_cached_models_are_listed_and_deleted(picker_page, tiny_model):
    page, expected = picker_page, tiny_model.manifest["pte"]
    page.click("#picker-toggle")
    page.wait_for_selector("#cached-models li")
    entries = page.eval_on_selector_all("#cached-models li", "items => items.map((i) => [i.querySelector('.name').textContent, +i.dataset.bytes, i.dataset.key])")
    [(name, size, key)] = [entry for entry in entries if expected["file"] in entry[2]]
    assert name == Path(expected["file"]).stem and size == expected["bytes"]
    page.click(f"#cached-models li[data-key='{key}'] .delete")
    page.wait_for_function("(key) => ![...document.querySelectorAll('#cached-models li')].some((i) => i.dataset.key === key)", arg=key)
    assert not page.evaluate("async (key) => !!(await (await caches.open('pywebgpu-models')).match(key))", key)
    assert page.is_visible("#cached-empty") == (len(entries) == 1)


def test_model_from_local_files_replies_like_eager(picker_page, tiny_model):
    """The three files picked with the file input: the .pte read by the worker piece by
    piece, each checked against its chunk's sha256, never requested, not cached."""
    page, expected = picker_page, tiny_model.manifest["pte"]
    if page.is_hidden("#picker"):
        page.click("#picker-toggle")
    page.set_input_files("#model-files", [str(path) for path in tiny_model.files])
    choice = shown_choice(page)
    assert choice["bytes"] == expected["bytes"] and "read from this device" in choice["size"]
    assert f"your files: {expected['file']}" in choice["name"]
    check_limits_shown(page, choice)
    load_and_check_reply(page, tiny_model)
    assert page.pte_requests == []
    assert page.evaluate("async () => (await (await caches.open('pywebgpu-models')).keys()).length") == 0


def test_damaged_local_file_is_refused_with_its_bytes(picker_page, tiny_model, tmp_path):
    """A byte flipped in the picked .pte: the load ends with the chunk's bytes named."""
    page, expected = picker_page, tiny_model.manifest["pte"]
    paths = []
    for path in tiny_model.files:
        paths.append(tmp_path / path.name)
        data = bytearray(path.read_bytes())
        if path.name == expected["file"]:
            data[len(data) // 2] ^= 0x10
        paths[-1].write_bytes(data)
    if page.is_hidden("#picker"):
        page.click("#picker-toggle")
    page.set_input_files("#model-files", [str(path) for path in paths])
    shown_choice(page)
    page.click("#model-load")
    page.wait_for_function(READY_OR_ERROR, timeout=LOAD_TIMEOUT_MS)
    chunk = expected["chunk_bytes"]
    first = expected["bytes"] // 2 // chunk * chunk
    last = min(first + chunk, expected["bytes"]) - 1
    assert page.eval_on_selector("#status", "e => e.dataset.state") == "error"
    assert f"sha256 of bytes {first:,}-{last:,} does not match its manifest" in page.inner_text("#status")


DROP_FILES = """async (paths) => {
    const transfer = new DataTransfer();
    for (const path of paths) {
        const blob = await (await fetch(path)).blob();
        transfer.items.add(new File([blob], path.split("/").pop()));
    }
    document.getElementById("model-drop").dispatchEvent(new DragEvent("drop", { dataTransfer: transfer, bubbles: true, cancelable: true }));
}"""


def test_dropped_files_are_the_choice(picker_page, tiny_model):
    page = picker_page
    if page.is_hidden("#picker"):
        page.click("#picker-toggle")
    page.evaluate("document.getElementById('model-choice').hidden = true")
    page.evaluate(DROP_FILES, [f"/files/tiny/{path.name}" for path in tiny_model.files])
    choice = shown_choice(page)
    assert choice["bytes"] == tiny_model.manifest["pte"]["bytes"] and "read from this device" in choice["size"]


def serve_manifest(web_server, name, manifest) -> str:
    """`manifest` served beside the tiny model's files (its .pte unchanged: the manifests
    these tests make are refused or offered before it is read); returns its URL."""
    (web_server.files_dir / "tiny" / f"{name}.json").write_text(json.dumps(manifest))
    return f"/files/tiny/{name}.json"


def open_manifest_choice(page, web_server, name, manifest):
    """Offer `manifest` (serve_manifest's) by its URL; returns the problem the picker
    shows, or None once it offers to load it."""
    url = serve_manifest(web_server, name, manifest)
    if page.is_hidden("#picker"):
        page.click("#picker-toggle")
    page.evaluate("document.getElementById('model-choice').hidden = true")
    page.fill("#model-url", url)
    page.click("#model-url-open")
    page.wait_for_selector("#model-choice:not([hidden])")
    return None if page.is_hidden("#model-choice-problem") else page.inner_text("#model-choice-problem")


def too_big_manifest(tiny_model, limits):
    """The tiny model's manifest with an MLP width whose 4-bit gate and up projections
    (concatenated by the runtime, which keeps them whole) are more bytes than the adapter
    allows a buffer; with those bytes and the adapter's allowance."""
    allowed = min(limits.values())
    dim = tiny_model.manifest["model"]["dim"]
    ffn = allowed // dim + 1
    return {**tiny_model.manifest, "model": {**tiny_model.manifest["model"], "ffn_dim": ffn}}, ffn * dim, allowed


def test_too_big_model_is_refused_before_its_download(picker_page, web_server, tiny_model):
    page = picker_page
    manifest, needed, allowed = too_big_manifest(tiny_model, page.limits)
    problem = open_manifest_choice(page, web_server, "too-big", manifest)
    assert problem and f"needs one buffer of" in problem and f"({needed:,} bytes)" in problem and f"({allowed:,} bytes" in problem, problem
    assert page.is_disabled("#model-load")
    assert page.pte_requests == []


def test_too_big_model_in_the_address_is_refused_before_its_download(fresh_page, web_server, tiny_model, picker):
    manifest, needed, allowed = too_big_manifest(tiny_model, picker.limits)
    url = serve_manifest(web_server, "too-big", manifest)
    page, problems = fresh_page(f"/index.html?model={url}")
    requests = []
    page.on("request", lambda request: requests.append(request.url))
    page.wait_for_function(READY_OR_ERROR, timeout=60_000)
    status = page.inner_text("#status")
    assert page.eval_on_selector("#status", "e => e.dataset.state") == "error"
    assert "This GPU is too small for the model" in status and f"({needed:,} bytes)" in status and f"({allowed:,} bytes" in status, status
    assert not [u for u in requests if u.split("?")[0].endswith((".pte", "chat-worker.mjs"))]
    assert not problems.take()


def test_float_linears_too_big_are_refused_before_their_download(picker_page, web_server, tiny_model):
    """The runtime keeps a float32 linear whole (ops/linear_f32.py): an fp32 model's LM
    head, or a GGUF export's float matrix (quantization.float_linears), must fit one
    buffer, where its 4-bit linears would have been stored by blocks."""
    page = picker_page
    allowed = min(page.limits.values())
    model = tiny_model.manifest["model"]
    dim, head_dim = model["dim"], model["head_dim"]
    vocab = allowed // (4 * dim) + 1
    fp32 = {**tiny_model.manifest, "model": {**model, "vocab_size": vocab}, "quantization": {"mode": "fp32", "group_size": None}}
    problem = open_manifest_choice(page, web_server, "fp32-head", fp32)
    assert problem and "the LM head (float32) needs one buffer of" in problem and f"({vocab * dim * 4:,} bytes)" in problem, problem
    assert f"({allowed:,} bytes" in problem and page.is_disabled("#model-load")

    # Heads enough that the output projection [dim, heads x head_dim] in float32 is too big,
    # and the q, k and v projections in 4 bits are not.
    heads = allowed // (4 * dim * head_dim) + 1
    wide = {**model, "n_heads": heads, "n_kv_heads": 1}
    gguf = {"mode": "gguf", "exact": True, "group_size": 32, "float_dtype": "float32"}
    float_wo = {**tiny_model.manifest, "model": wide, "quantization": {**gguf, "float_linears": ["attention.wo"]}}
    problem = open_manifest_choice(page, web_server, "gguf-float-wo", float_wo)
    assert problem and "a layer's output projection (float32) needs one buffer of" in problem, problem
    assert f"({dim * heads * head_dim * 4:,} bytes)" in problem and page.is_disabled("#model-load")
    all_4bit = {**float_wo, "quantization": {**gguf, "float_linears": []}}
    assert open_manifest_choice(page, web_server, "gguf-4bit-wo", all_4bit) is None
    assert page.is_enabled("#model-load")
    assert page.pte_requests == []


# In the chat worker, before Python starts: its GPU device kept, and destroyed as the
# worker posts the `self.loseDeviceAtToken`-th token of a reply.
DEVICE_HOOK = """() => {
    const requestDevice = GPUAdapter.prototype.requestDevice;
    GPUAdapter.prototype.requestDevice = async function (...args) {
        self.chatDevice = await requestDevice.apply(this, args);
        return self.chatDevice;
    };
    const post = self.postMessage;
    self.postMessage = function (message, ...rest) {
        post.call(self, message, ...rest);
        if (message?.type === "token" && self.loseDeviceAtToken && --self.loseDeviceAtToken === 0) self.chatDevice.destroy();
    };
}"""


def test_device_lost_in_a_reply_ends_it_and_the_model_reloads(picker_page, tiny_model):
    page = picker_page
    if page.is_hidden("#picker"):
        page.click("#picker-toggle")
    page.fill("#model-url", "/files/tiny/tiny.json")
    page.click("#model-url-open")
    shown_choice(page)
    with page.expect_worker(lambda worker: worker.url.endswith("chat-worker.mjs")) as started:
        page.click("#model-load")
    started.value.evaluate(DEVICE_HOOK)
    wait_ready(page)
    started.value.evaluate("self.loseDeviceAtToken = 3")
    _, state, _ = ask(page, QUESTION)
    assert state == "error"
    note = last_reply(page).locator(".error-note").text_content()
    assert "The GPU stopped working for this page" in note and "Reload the model" in note, note
    page.wait_for_selector("#notice:not([hidden])")
    assert page.is_disabled("#prompt") and page.is_visible("#reload-model")
    page.click("#reload-model")
    wait_ready(page)
    assert page.is_hidden("#notice") and page.locator("#messages .message").count() == 0
    tokens, text = eager_greedy_tokens(tiny_model.manifest_path, QUESTION, MAX_TOKENS, None, tiny_model.eager)
    reply, state, numbers = ask(page, QUESTION)
    assert (reply, state, int(numbers["decodeTokens"])) == (text, "done", len(tokens))
