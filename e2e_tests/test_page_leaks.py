"""Nothing leaks or grows in the page (Pyodide on the main thread, WebGPU on SwiftShader),
through the Python the chat page runs: 20 load/close cycles of the bundled model on one
device, each with a short greedy reply (the device's counts of bytes and buffers back to
their start after each close; the JS heap, its ArrayBuffers, the bytes Pyodide's malloc
has in use and the Python objects the collector tracks flat after the first cycle), and a generation of
2,000+ tokens by the tiny Llama over context resets (GPU bytes and buffers constant; the
JS heap, wasm memory and Python heap flat after a warm-up)."""


import pytest

from conftest import open_page
from devtools.browser import PythonPage
from llama_fixtures import tiny_chat_export
from test_chat_page import bundled_model  # noqa: F401 (fixture)

CYCLES = 20
REPLY_TOKENS = 4
WARM_UP_TOKENS = 1000
GENERATED_TOKENS = 2000

# Growth allowed over cycles 2-20, after the first has filled the caches (pipelines,
# kernel sources, JIT code): V8's heap grows a little more as its optimizing compiler
# takes up hot functions, but a load's objects kept each cycle (765 buffers' wrappers, a
# module imported per load) would pass 256 KiB; ArrayBuffers hold the downloads (the .pte
# is 128 MB) and nothing should stay; a model kept in Python would keep thousands of the
# collector's objects each cycle (a Buffer for each of its 765 buffers alone).
CYCLE_JS_HEAP_BYTES = 256 * 1024
CYCLE_ARRAY_BUFFER_BYTES = 4 * 1024
CYCLE_PYTHON_OBJECTS = 2000
# Of Pyodide's malloc heap in use (its wasm memory only ever grows, to the peak of a load
# and the heap's fragmentation, so its size says nothing of what stays): the Buffer objects
# of one load kept would pass this, a tokenizer kept (megabytes) by far.
CYCLE_WASM_IN_USE_BYTES = 64 * 1024
# Growth allowed over GENERATED_TOKENS after WARM_UP_TOKENS: anything kept per token (a
# JS object is 16 bytes at least, a Python one 16 in Pyodide's 32-bit heap) would pass
# these; the Python heap's bound is passed by one object kept every fourth token.
TOKEN_JS_HEAP_BYTES = 24 * 1024
TOKEN_PYTHON_HEAP_BYTES = 8 * 1024

PAGE_SOURCE = """
import gc, sys, tracemalloc
from pywebgpu.gpu import request_device
from pywebgpu.llm import ChatSession, LanguageModel, SamplingParams

GREEDY = SamplingParams(temperature=0)
state = {}

def counts():
    device = state["device"]
    return [device.allocated_bytes, device.allocated_buffers]

async def open_device():
    state["device"] = await request_device()
    return counts()

async def _reply(chat, text, max_tokens):
    return "".join([piece async for piece in chat.send(text, sampling=GREEDY, max_tokens=max_tokens)])

async def cycle(manifest_url, max_tokens):
    model = await LanguageModel.load(manifest_url, device=state["device"])
    loaded = counts()
    text = await _reply(ChatSession(model), "Hello", max_tokens)
    model.close()
    del model
    gc.collect()
    return {"loaded": loaded, "closed": counts(), "text": text, "objects": len(gc.get_objects())}

async def open_model(manifest_url):
    state["model"] = await LanguageModel.load(manifest_url, device=state["device"])
    state["chat"] = ChatSession(state["model"])
    # The faster kernels are built in the background and taken up once, rebuilding the
    # graph's kept per-shape state: done before the warm-up, not inside what is measured.
    upgrades = state["model"].start_upgrades()
    if upgrades is not None:
        await upgrades
    return state["model"].max_context

async def generation_round():
    # Traced from the warm-up on, so that what fills once (caches) is in the baseline.
    if not tracemalloc.is_tracing():
        tracemalloc.start()
    chat = state["chat"]
    chat.reset()
    await _reply(chat, "Go", state["model"].max_context)
    gc.collect()
    # CPython's type-attribute cache (4,096 entries) keeps the last name looked up in each
    # entry alive; asyncio's Task, woken by one of Pyodide's futures, looks up "result" by
    # a new string each time, so the cache fills with them: bounded, but not what is measured.
    sys._clear_internal_caches()
    return {"stats": dict(chat.stats), "counts": counts(), "python": tracemalloc.get_traced_memory()[0]}
"""


# Bytes of Pyodide's malloc heap in use: mallinfo's uordblks (its eighth int).
_WASM_IN_USE_JS = """async () => {
  const module = (await window.pyodideReady)._module;
  const info = module._malloc(40);
  module._mallinfo(info);
  const inUse = module.HEAP32[(info >> 2) + 7];
  module._free(info);
  return inUse;
}"""


class PageHeaps:
    """The page's JS heap (V8's used size, as performance.memory's usedJSHeapSize, and its
    ArrayBuffers' backing stores), Pyodide's wasm memory and the part of it malloc has in
    use, after full garbage collections: the least of a few, since work the page has in
    flight (a pipeline compiling) holds memory until it settles."""

    PASSES = 3

    def __init__(self, page):
        self.page = page
        self.cdp = page.context.new_cdp_session(page)

    def measure(self) -> dict:
        passes = []
        for _ in range(self.PASSES):
            self.page.evaluate("async () => (await window.pyodideReady).runPython('import gc; gc.collect()')")
            self.cdp.send("HeapProfiler.collectGarbage")
            usage = self.cdp.send("Runtime.getHeapUsage")
            passes.append((usage["usedSize"], usage["backingStorageSize"]))
            self.page.wait_for_timeout(200)
        wasm = self.page.evaluate("async () => (await window.pyodideReady)._module.HEAP8.buffer.byteLength")
        wasm_in_use = self.page.evaluate(_WASM_IN_USE_JS)
        return {"js": min(p[0] for p in passes), "array_buffers": min(p[1] for p in passes), "wasm": wasm, "wasm_in_use": wasm_in_use}


@pytest.fixture(scope="module")
def tiny_chat_model(web_server, bundled_model):
    """/files/ URL of llama_fixtures.tiny_chat_export's manifest."""
    return f"/files/{tiny_chat_export(str(web_server.files_dir), bundled_model).name}"


@pytest.fixture
def leak_page(fresh_page):
    """Python in a page of its own, with PAGE_SOURCE as `leaks`, and its heaps."""
    page, problems = fresh_page()
    python = PythonPage(page)
    python.load_module("leaks", PAGE_SOURCE)
    yield python, PageHeaps(page)
    assert not problems.take()


def _growth(rows, key):
    return rows[-1][key] - rows[0][key]


def test_load_close_cycles_leave_nothing(leak_page, bundled_model):
    python, heaps = leak_page
    start = python.call("leaks", "open_device")
    rows = []
    for cycle in range(CYCLES):
        row = python.call("leaks", "cycle", f"/models/{bundled_model.name}", REPLY_TOKENS)
        rows.append({**row, **heaps.measure()})
        assert row["loaded"][0] > start[0] and row["closed"] == start, f"cycle {cycle}: {row}"
        assert row["text"] == rows[0]["text"] and row["text"], f"cycle {cycle}: {row['text']!r}"
    after_warm_up = rows[1:]
    print("cycles:", {k: _growth(after_warm_up, k) for k in ("js", "array_buffers", "wasm", "wasm_in_use", "objects")}, rows[-1])
    assert _growth(after_warm_up, "js") < CYCLE_JS_HEAP_BYTES, rows
    assert _growth(after_warm_up, "array_buffers") < CYCLE_ARRAY_BUFFER_BYTES, rows
    assert _growth(after_warm_up, "wasm_in_use") < CYCLE_WASM_IN_USE_BYTES, rows
    assert _growth(after_warm_up, "objects") < CYCLE_PYTHON_OBJECTS, rows


@pytest.fixture(scope="module")
def long_generation(chromium, web_server, tiny_chat_model):
    """The rounds of a generation of WARM_UP_TOKENS, then GENERATED_TOKENS more, each
    measured, in a page of its own; each round fills the context from a reset."""
    page, problems = open_page(chromium, f"{web_server.url}/e2e/harness.html")
    python = PythonPage(page)
    python.load_module("leaks", PAGE_SOURCE)
    heaps = PageHeaps(page)
    start = python.call("leaks", "open_device")
    python.call("leaks", "open_model", tiny_chat_model)
    generated, rounds = 0, []
    while generated < WARM_UP_TOKENS + GENERATED_TOKENS:
        row = python.call("leaks", "generation_round")
        assert row["stats"]["stop_reason"] in ("context_full", "eos"), row
        generated += row["stats"]["decode_tokens"]
        if generated >= WARM_UP_TOKENS:
            rounds.append({"generated": generated, **row, **heaps.measure()})
    assert not problems.take()
    page.context.close()
    print("generation:", {k: _growth(rounds, k) for k in ("js", "array_buffers", "wasm", "python")}, "Python heap by round:", [r["python"] for r in rounds])
    return start, rounds


def test_long_generation_does_not_grow(long_generation):
    start, rounds = long_generation
    assert rounds[-1]["generated"] - rounds[0]["generated"] >= GENERATED_TOKENS and len(rounds) > 3
    assert {tuple(r["counts"]) for r in rounds} == {tuple(rounds[0]["counts"])} and rounds[0]["counts"][0] > start[0], rounds
    assert _growth(rounds, "js") < TOKEN_JS_HEAP_BYTES, rounds
    assert _growth(rounds, "array_buffers") < CYCLE_ARRAY_BUFFER_BYTES, rounds
    assert _growth(rounds, "wasm") == 0, rounds


def test_long_generation_python_heap_does_not_grow(long_generation):
    _, rounds = long_generation
    assert _growth(rounds, "python") < TOKEN_PYTHON_HEAP_BYTES, rounds
