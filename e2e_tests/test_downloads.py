"""The chat page's model download when things go wrong (web/model-files.mjs): a connection
dropped part way through the .pte goes on from the bytes received (an HTTP Range request)
or, where the server cannot send a range, starts over; one that keeps breaking off ends
with a message and leaves nothing in the cache; a Cache API quota error, or no Cache API
at all, is reported with the model's size while the model runs from the download; a
cached copy of an older version of the file is replaced, never read; a manifest without
a chat template is refused before the download.

The model is the tiny Llama of test_model_picker.py, its manifest given chunk sha256s of
CHUNK_BYTES, so that a cut falls after chunks already checked and inside one. The cuts
are real: the page's requests for the .pte go (Playwright's route) to CuttingServer, which
drops the connection after the bytes a test says."""

import hashlib
import http.server
import json
import shutil
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import PageProblems
from test_chat_page import READY_OR_ERROR, ask, bundled_model, eager_greedy_tokens, wait_ready  # noqa: F401
from test_model_picker import tiny_model  # noqa: F401

CHUNK_BYTES = 512 << 10
CUT_PAUSE_S = 0.5
MAX_TOKENS = 4
QUESTION = "What is the capital of France?"
CACHE_KEYS = "async () => (await (await caches.open('pywebgpu-models')).keys()).map((r) => r.url)"
CACHED_SHA256 = """async (key) => {
    const response = await (await caches.open("pywebgpu-models")).match(key);
    const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", await response.arrayBuffer()));
    return Array.from(digest, (b) => b.toString(16).padStart(2, "0")).join("");
}"""
# Every text the status line shows, from the page's start.
STATUS_LOG = """document.addEventListener("DOMContentLoaded", () => {
    const status = document.getElementById("status");
    window.statusLog = [];
    new MutationObserver(() => window.statusLog.push(status.textContent)).observe(status, { childList: true, characterData: true, subtree: true });
});"""


class CuttingServer:
    """Serves one file; the n-th request's body stops after `cuts[n]` bytes (None or past
    the list: the whole), the connection dropped there. With `ranges`, a request for the
    bytes from N on gets them (206), else the whole file (200), as a server without range
    support answers. `ranges_asked` holds each request's Range header (None: none)."""

    def __init__(self, data: bytes, cuts, ranges: bool):
        self.data, self.cuts, self.ranges, self.ranges_asked = data, list(cuts), ranges, []
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                asked = self.headers.get("Range")
                index = len(server.ranges_asked)
                server.ranges_asked.append(asked)
                start = int(asked.removeprefix("bytes=").removesuffix("-")) if asked and server.ranges else 0
                body = server.data[start:]
                self.send_response(206 if start else 200)
                if start:
                    self.send_header("Content-Range", f"bytes {start}-{len(server.data) - 1}/{len(server.data)}")
                self.send_header("Content-Type", "application/octet-stream")
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Cross-Origin-Resource-Policy", "cross-origin")
                self.end_headers()
                cut = server.cuts[index] if index < len(server.cuts) else None
                self.wfile.write(body if cut is None else body[:cut])
                if cut:
                    # Chromium may drop bytes still on their way to the page when the
                    # connection fails: the page reads these before it does.
                    self.wfile.flush()
                    time.sleep(CUT_PAUSE_S)
                self.close_connection = True

            def log_message(self, format, *args):
                pass

        self._httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}/model.pte"
        threading.Thread(target=self._httpd.serve_forever, daemon=True).start()

    def close(self):
        self._httpd.shutdown()
        self._httpd.server_close()


@dataclass
class ServedModel:
    tiny: object  # test_model_picker's TinyModel: its eager module and files
    url: str  # the manifest's, on the page's server
    manifest: dict
    data: bytes  # the .pte
    folder: Path


@pytest.fixture(scope="module")
def model(web_server, tiny_model):  # noqa: F811
    """The tiny model under /files/downloads/, with chunk sha256s of CHUNK_BYTES."""
    folder = web_server.files_dir / "downloads"
    folder.mkdir(exist_ok=True)
    manifest = json.loads(json.dumps(tiny_model.manifest))
    for path in tiny_model.files[1:]:
        shutil.copyfile(path, folder / path.name)
    data = (folder / manifest["pte"]["file"]).read_bytes()
    chunks = [hashlib.sha256(data[i : i + CHUNK_BYTES]).hexdigest() for i in range(0, len(data), CHUNK_BYTES)]
    assert len(chunks) >= 4
    manifest["pte"] |= {"chunk_bytes": CHUNK_BYTES, "chunk_sha256": chunks}
    (folder / "tiny.json").write_text(json.dumps(manifest))
    return ServedModel(tiny_model, "/files/downloads/tiny.json", manifest, data, folder)


@pytest.fixture
def open_chat(chromium, web_server, model):
    """Opens the chat page loading `model` in a new context (an empty cache), its .pte
    requests sent to `server` where given; returns (page, problems, pte_requests). The
    contexts and servers are closed after the test."""
    contexts, servers = [], []

    def open_(*, server=None, init_script=None, query=None):
        context = chromium.new_context()
        contexts.append(context)
        context.add_init_script(STATUS_LOG)
        if init_script:
            context.add_init_script(init_script)
        page = context.new_page()
        pte_requests = []
        page.on("request", lambda request: request.url.split("?")[0].endswith(".pte") and pte_requests.append(request.url))
        if server:
            servers.append(server)
            page.route("**/files/downloads/*.pte", lambda route: route.continue_(url=server.url))
        problems = PageProblems(page)
        page.goto(f"{web_server.url}/index.html?{query or 'model=' + model.url}&max_tokens={MAX_TOKENS}")
        return page, problems, pte_requests

    yield open_
    for context in contexts:
        context.close()
    for server in servers:
        server.close()


def pte_key(web_server, model, sha256=None):
    manifest = model.manifest
    return f"{web_server.url}/files/downloads/{manifest['pte']['file']}?sha256={sha256 or manifest['pte']['sha256']}"


def cut_errors(problems):
    """The page's problems other than Chromium's console report of each cut response."""
    return [item for item in problems.take() if item != "console error: Failed to load resource: net::ERR_CONTENT_LENGTH_MISMATCH"]


def check_reply(page, model):
    tokens, text = eager_greedy_tokens(model.tiny.manifest_path, QUESTION, MAX_TOKENS, None, model.tiny.eager)
    reply, state, numbers = ask(page, QUESTION)
    assert (reply, state, int(numbers["decodeTokens"])) == (text, "done", len(tokens))


@pytest.mark.parametrize("ranges", [True, False], ids=["resumed-with-a-range", "restarted-without-ranges"])
def test_a_cut_download_goes_on_and_the_cached_copy_is_whole(open_chat, model, ranges, web_server):
    data, size = model.data, len(model.data)
    cut = 2 * CHUNK_BYTES + CHUNK_BYTES // 3  # two chunks checked, the third begun
    server = CuttingServer(data, [cut], ranges)
    page, problems, _ = open_chat(server=server)
    wait_ready(page)
    assert server.ranges_asked == [None, f"bytes={cut}-"]
    log = page.evaluate("window.statusLog")
    assert any(f"The download broke off after {cut:,} of {size:,} bytes" in text for text in log), log
    resumed = f"Downloading the model from byte {cut:,} on" if ranges else "Downloading the model again from its start"
    assert any(resumed in text for text in log), log
    assert page.evaluate(CACHE_KEYS) == [pte_key(web_server, model)]
    assert page.evaluate(CACHED_SHA256, pte_key(web_server, model)) == model.manifest["pte"]["sha256"]
    check_reply(page, model)
    assert not cut_errors(problems)


def test_a_download_that_keeps_breaking_off_ends_with_a_message_and_caches_nothing(open_chat, web_server, model):
    """Cut after some bytes, then three times with none: the page gives up, saying how
    far it came; nothing is cached, so the next visit downloads the whole file again."""
    size, cut = len(model.data), CHUNK_BYTES + 1000
    server = CuttingServer(model.data, [cut, 0, 0, 0, 0], ranges=True)
    page, problems, _ = open_chat(server=server)
    page.wait_for_function(READY_OR_ERROR, timeout=60_000)
    status = page.inner_text("#status")
    assert page.eval_on_selector("#status", "e => e.dataset.state") == "error", status
    assert f"The model download broke off after {cut:,} of {size:,} bytes and could not be taken up again" in status, status
    assert "Check your connection and reload" in status
    assert server.ranges_asked == [None] + [f"bytes={cut}-"] * 3
    assert page.evaluate(CACHE_KEYS) == []
    assert not cut_errors(problems)
    page.unroute("**/files/downloads/*.pte")
    pte_requests = []
    page.on("request", lambda request: request.url.split("?")[0].endswith(".pte") and pte_requests.append(request.headers.get("range")))
    page.reload()
    page.wait_for_function("document.getElementById('progress').dataset.state === 'done' || document.getElementById('status').dataset.state === 'error'")
    assert page.get_attribute("#progress", "data-from-cache") == "0", page.inner_text("#status")
    assert pte_requests == [None]
    assert page.evaluate(CACHED_SHA256, pte_key(web_server, model)) == model.manifest["pte"]["sha256"]
    assert not problems.take()


# Cache storage full: every cache.put refuses, as Chromium's does past the origin's quota.
QUOTA_FULL = """Cache.prototype.put = function () {
    return Promise.reject(new DOMException("The quota has been exceeded.", "QuotaExceededError"));
};"""


def test_a_full_cache_is_reported_with_the_size_and_the_model_runs_from_the_download(open_chat, web_server, model):
    size = model.manifest["pte"]["bytes"]
    page, problems, pte_requests = open_chat(init_script=QUOTA_FULL)
    wait_ready(page)
    page.wait_for_selector("#notice:not([hidden])")
    notice = page.inner_text("#notice-text")
    assert f"This browser's storage has no room for it: the model needs {size:,} bytes." in notice, notice
    assert "It runs from this download, and the next visit downloads it again" in notice, notice
    assert page.is_hidden("#reload-model")
    assert page.evaluate(CACHE_KEYS) == []
    check_reply(page, model)
    assert len(pte_requests) == 1
    assert not problems.take()


# Storage blocked (as a browser's settings may block it): no Cache API for the page.
NO_CACHE_API = """CacheStorage.prototype.open = function () {
    return Promise.reject(new DOMException("Access to storage is not allowed.", "SecurityError"));
};"""


def test_no_cache_api_is_reported_and_the_model_runs_from_the_download(open_chat, model):
    page, problems, pte_requests = open_chat(init_script=NO_CACHE_API)
    wait_ready(page)
    page.wait_for_selector("#notice:not([hidden])")
    notice = page.inner_text("#notice-text")
    size = model.manifest["pte"]["bytes"]
    assert "This browser does not let the page keep the model (SecurityError: Access to storage is not allowed.)" in notice, notice
    assert f"it runs from this download of {size:,} bytes, and the next visit downloads it again" in notice, notice
    assert len(pte_requests) == 1
    page.click("#picker-toggle")
    page.wait_for_function("document.getElementById('cached-empty').textContent.startsWith('This browser keeps no models')")
    assert page.is_visible("#cached-empty") and page.locator("#cached-models li").count() == 0
    assert not problems.take()


def test_a_cached_copy_of_an_older_version_is_replaced_never_read(open_chat, web_server, model):
    """An entry for the same URL under another sha256 (an older export): the page
    downloads the file its manifest names, and the old entry is gone."""
    page, problems, pte_requests = open_chat(query="pick")
    page.wait_for_selector("#picker:not([hidden])")
    old_key = pte_key(web_server, model, sha256="0" * 64)
    page.evaluate(
        """async (key) => {
            const cache = await caches.open("pywebgpu-models");
            const old = new Uint8Array(1024).fill(7);
            await cache.put(key, new Response(old, { headers: { "Content-Length": "1024", "X-Model-Name": "tiny", "X-Model-Manifest": "/files/downloads/tiny.json" } }));
        }""",
        old_key,
    )
    page.goto(f"{web_server.url}/index.html?model={model.url}&max_tokens={MAX_TOKENS}")
    wait_ready(page)
    assert page.get_attribute("#progress", "data-from-cache") == "0"
    assert len(pte_requests) == 1
    assert page.evaluate(CACHE_KEYS) == [pte_key(web_server, model)]
    assert page.evaluate(CACHED_SHA256, pte_key(web_server, model)) == model.manifest["pte"]["sha256"]
    assert not problems.take()


def test_a_manifest_without_a_chat_template_is_refused_before_the_download(open_chat, web_server, model):
    manifest = {key: value for key, value in model.manifest.items() if key != "chat_template"}
    (model.folder / "no-template.json").write_text(json.dumps(manifest))
    page, problems, pte_requests = open_chat(query="model=/files/downloads/no-template.json")
    page.wait_for_function(READY_OR_ERROR, timeout=60_000)
    status = page.inner_text("#status")
    assert page.eval_on_selector("#status", "e => e.dataset.state") == "error"
    assert f"The model's manifest at {web_server.url}/files/downloads/no-template.json cannot be used: it has no \"chat_template\"." in status, status
    assert pte_requests == []
    assert not problems.take()
