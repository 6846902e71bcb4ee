"""Firefox (firefox-esr headless, WebGPU through wgpu/naga on lavapipe) as a second engine:
every op case, the tiny Llama token for token (its float16 programs too), a slice of the
1B geometry, and the chat page's and the PyScript page's greedy SmolLM2 replies, each
against the same references as in Chromium.

Firefox's adapter has no `subgroups` and 128 MiB storage bindings, and offers
`shader-f16`: the runtime picks its kernels by those features, and so do the op cases'
expectations. One Firefox serves the module: a harness page in one tab every Python test,
the chat page a tab of its own.
"""

import json
import time
import types

import pytest

from devtools.browser import PythonPage
from devtools.firefox import Firefox
from llama_fixtures import PROGRAMS, check_decode_resizes, tiny_llama_trace
from op_harness import check_case, export_case
from test_chat_page import MAX_TOKENS, READY_OR_ERROR, bundled_model, eager_greedy_reply, user_turn_rest  # noqa: F401
from test_llama_browser import run_and_check, run_llama_1b_slice
from test_ops_browser import CASES, load_graph_programs, run_cases

LOAD_TIMEOUT_S = 600
REPLY_TIMEOUT_S = 600

# In the page: resolves once `condition` (a JS expression) holds, polling; fails after
# `timeout_s` seconds.
WAIT_FOR = """async ([condition, timeout_s]) => {
    const deadline = Date.now() + timeout_s * 1000;
    while (!(0, eval)(condition)) {
        if (Date.now() > deadline) throw new Error(`not within ${timeout_s} s: ${condition}`);
        await new Promise((resolve) => setTimeout(resolve, 100));
    }
}"""
# In the chat page: type `question` and send it.
SEND = """(question) => {
    const prompt = document.getElementById("prompt");
    prompt.value = question;
    prompt.dispatchEvent(new Event("input", { bubbles: true }));
    document.getElementById("send").click();
}"""
REPLY_ENDED = "[...document.querySelectorAll('#messages .assistant')].pop()?.dataset.state !== 'streaming'"
# The last reply's text and state, and the page's stats.
LAST_REPLY = """() => {
    const reply = [...document.querySelectorAll("#messages .assistant")].pop();
    return { text: reply.querySelector(".body").textContent, state: reply.dataset.state, stats: { ...document.getElementById("stats").dataset } };
}"""


@pytest.fixture(scope="module")
def firefox():
    with Firefox() as browser:
        yield browser


@pytest.fixture(scope="module")
def _firefox_python(firefox, web_server):
    python = PythonPage(firefox.open(f"{web_server.url}/e2e/harness.html"))
    python.problems = types.SimpleNamespace(take=firefox.take_problems)
    python.server = web_server
    return python


@pytest.fixture
def firefox_python(_firefox_python):
    """Python (Pyodide + pywebgpu) in Firefox's harness page; page problems fail the test."""
    _firefox_python.problems.take()
    yield _firefox_python
    problems = _firefox_python.problems.take()
    assert not problems, "\n".join(problems)


def test_adapter_is_lavapipe_without_subgroups(firefox_python):
    """The adapter these tests are about: a CPU fallback adapter with `shader-f16`, no
    `subgroups`, and lavapipe's 128 MiB storage binding limit."""
    summary = firefox_python.run(
        "import json\nfrom pywebgpu.gpu import request_device\n_d = await request_device()\n"
        "json.dumps([sorted(_d.features), _d.limits['maxStorageBufferBindingSize']])"
    )
    features, binding = json.loads(summary)
    assert "shader-f16" in features and "subgroups" not in features
    assert binding == 128 << 20


@pytest.fixture(scope="module")
def firefox_op_results(_firefox_python):
    started = time.perf_counter()
    for case in CASES:  # exported first (once a session, shared with Chromium's op cases), to time Firefox's part alone
        export_case(case)
    exported = time.perf_counter()
    load_graph_programs(_firefox_python)
    results = run_cases(_firefox_python)
    print(f"Firefox: op cases exported in {exported - started:.0f} s, run in {time.perf_counter() - exported:.0f} s")
    return results


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_op(case, firefox_op_results):
    answer = firefox_op_results[case.id]
    assert "error" not in answer, answer.get("error")
    check_case(case, answer)


# Both kernel sets; the float16 programs (force_fp16) widen their constants on the GPU and,
# with the kernels for GPUs, keep float16 KV caches.
@pytest.mark.parametrize("float_dtype, vocab_size", PROGRAMS)
def test_tiny_llama_prefill_and_decode(firefox_python, tmp_path_factory, float_dtype, vocab_size):
    folder = str(tmp_path_factory.getbasetemp())
    traces = {ks: tiny_llama_trace(folder, float_dtype == "float16", ks, vocab_size) for ks in ("cpu", "gpu")}
    answers = run_and_check(firefox_python, "tiny_llama.pte", traces)
    check_decode_resizes(answers[1]["resized"])


def test_llama_1b_slice_within_128_mib_bindings(firefox_python, tmp_path_factory):
    """Llama-3.2-1B's embedding and LM head (131,334,144 bytes each) around one of its
    layers, in Firefox's 128 MiB storage bindings."""
    run_llama_1b_slice(firefox_python, str(tmp_path_factory.getbasetemp()))


def test_chat_page_greedy_reply_matches_eager_pytorch(firefox, web_server, bundled_model):  # noqa: F811
    """The chat page (web/index.html) loads the bundled SmolLM2 in Firefox; its greedy
    reply is eager PyTorch's."""
    question = "What is the capital of France?"
    firefox.take_problems()
    started = time.perf_counter()
    page = firefox.open(f"{web_server.url}/index.html?max_tokens={MAX_TOKENS}")
    try:
        page.evaluate(WAIT_FOR, [READY_OR_ERROR, LOAD_TIMEOUT_S])
        status = page.evaluate("() => [document.getElementById('status').dataset.state, document.getElementById('status').innerText]")
        assert status[0] != "error", status[1]
        print(f"Firefox: the chat page loaded the bundled model in {time.perf_counter() - started:.0f} s")
        page.evaluate(SEND, question)
        page.evaluate(WAIT_FOR, [REPLY_ENDED, REPLY_TIMEOUT_S])
        reply = page.evaluate(LAST_REPLY)
        problems = firefox.take_problems()  # before the tab closes: closing ends the page's pending work
    finally:
        page.close()
    assert reply["state"] == "done"
    assert reply["text"] == eager_greedy_reply(bundled_model, question, MAX_TOKENS)
    assert int(reply["stats"]["prefilledTokens"]) == len(user_turn_rest(bundled_model, question))
    assert reply["stats"]["stopReason"] in ("eos", "max_tokens")
    assert not problems, "\n".join(problems)


def test_pyscript_page_replies(firefox, web_server, bundled_model):  # noqa: F811
    """web/pyscript.html, which installs pywebgpu by name from the server's package index
    (PyScript's `packages`), runs in Firefox offline; its greedy reply is eager PyTorch's."""
    firefox.take_problems()
    page = firefox.open(f"{web_server.url}/pyscript.html")
    try:
        page.evaluate(WAIT_FOR, ["document.querySelector('#reply[data-done=\"1\"], .py-error')", LOAD_TIMEOUT_S])
        error = page.evaluate("() => document.querySelector('.py-error')?.textContent ?? null")
        reply = page.evaluate("() => document.getElementById('reply').textContent")
        problems = firefox.take_problems()
    finally:
        page.close()
    assert error is None, error
    assert reply == eager_greedy_reply(bundled_model, "What is the capital of France?", 32)
    assert not problems, "\n".join(problems)
