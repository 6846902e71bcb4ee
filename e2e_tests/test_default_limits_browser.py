"""Under WebGPU's default limits only (`request_device(limits="default")`), in headless
Chromium: the limits are enforced (Dawn checks workgroup memory too), every embedding case
matches PyTorch with its table split by row blocks and the wide linears' cases with their
weights stored by blocks of outputs, the tiny Llama and a slice of the 1B
geometry match PyTorch, and the bundled SmolLM2 chats as eager PyTorch does (every op
case runs under them in test_ops_browser)."""

import pytest

from llama_fixtures import check_run, tiny_llama_trace
from op_harness import all_cases, check_case
from pywebgpu.gpu import DEFAULT_LIMITS
from test_chat_page import MAX_TOKENS, bundled_model, eager_greedy_reply  # noqa: F401 (fixture)
from test_default_limits import SPLIT_LINEAR_CASES
from test_llama_browser import run_llama_1b_slice
from test_ops_browser import load_graph_programs, run_cases

EMBEDDING_CASES = [c for c in all_cases() if c.id.startswith("embedding")]
LINEAR_CASES = [c for c in all_cases() if c.id in SPLIT_LINEAR_CASES]

# In the page: graph_programs' device replaced by one with the default limits (and put
# back); every embedding table split by row blocks of at most 256 bytes (and not).
PAGE_HELPERS = '''
import graph_programs
from pywebgpu.gpu import ShaderError, request_device
from pywebgpu.ops import embedding, row_blocks
from pywebgpu.ops.linear import q4gsw

_kept = {}

OVER_WORKGROUP_STORAGE = """
var<workgroup> big: array<f32, 8192>;
@group(0) @binding(0) var<storage, read_write> out: array<f32>;
@compute @workgroup_size(64)
fn main(@builtin(local_invocation_index) i: u32) {
  big[i * 128u] = f32(i);
  workgroupBarrier();
  out[i] = big[(63u - i) * 128u];
}
"""

async def use_default_limits():
    """Returns the device's limits and the error building a 32 KiB-workgroup kernel."""
    _kept["device"] = graph_programs._device
    device = graph_programs._device = await request_device(limits="default")
    try:
        await device.compute_pipeline(OVER_WORKGROUP_STORAGE, label="over_16k")
        error = None
    except ShaderError as e:
        error = str(e)
    return device.limits, error

async def greedy_reply(manifest_url, question, max_tokens):
    """The bundled model's greedy reply to `question`, loaded on the default-limits device."""
    from pywebgpu.llm import ChatSession, LanguageModel, SamplingParams

    model = await LanguageModel.load(manifest_url, device=graph_programs._device)
    try:
        chat = ChatSession(model)
        return "".join([p async for p in chat.send(question, sampling=SamplingParams(temperature=0), max_tokens=max_tokens)])
    finally:
        model.close()

class _Limits:
    def __init__(self, binding_bytes):
        self.limits = {"maxStorageBufferBindingSize": binding_bytes, "maxBufferSize": binding_bytes}

async def split_linears(on):
    """Store every linear that can be by blocks of the fewest outputs (off: as the limits
    ask); returns the blocks of the linears built since the last call."""
    made = _kept.setdefault("linear_blocks", [])
    if not on:
        q4gsw.row_blocks = _kept.pop("linear_row_blocks")
    else:
        _kept["linear_row_blocks"] = q4gsw.row_blocks

        def smallest(rows, row_bytes, device, multiple=1):
            made.append(row_blocks.row_blocks(rows, row_bytes, _Limits(multiple * max(row_bytes)), multiple))
            return made[-1]

        q4gsw.row_blocks = smallest
    blocks = list(made)
    made.clear()
    return blocks

async def restore_device():
    graph_programs._device = _kept.pop("device")

async def split_tables(binding_bytes):
    """Split tables over `binding_bytes` (None: back to the device's limits); returns the
    blocks of the embeddings built since the last call."""
    made = _kept.setdefault("blocks", [])
    if binding_bytes is None:
        row_blocks.binding_bytes, embedding.row_blocks = _kept.pop("functions")
    else:
        _kept["functions"] = (row_blocks.binding_bytes, embedding.row_blocks)
        row_blocks.binding_bytes = lambda device: binding_bytes

        def noted(*args):
            made.append(row_blocks.row_blocks(*args))
            return made[-1]

        embedding.row_blocks = noted
    blocks = list(made)
    made.clear()
    return blocks
'''


@pytest.fixture(scope="module")
def default_limits_page(_python_page):
    page = _python_page
    load_graph_programs(page)
    page.load_module("default_limits_helpers", PAGE_HELPERS)
    page.limits, page.over_limit_error = page.call("default_limits_helpers", "use_default_limits")
    yield page
    page.call("default_limits_helpers", "restore_device")


@pytest.fixture(scope="module")
def split_results(default_limits_page):
    page = default_limits_page
    page.call("default_limits_helpers", "split_tables", 256)
    try:
        results = run_cases(page, EMBEDDING_CASES, "split-")
    finally:
        blocks = page.call("default_limits_helpers", "split_tables", None)
    return results, blocks


@pytest.fixture(scope="module")
def linear_split_results(default_limits_page):
    page = default_limits_page
    page.call("default_limits_helpers", "split_linears", True)
    try:
        results = run_cases(page, LINEAR_CASES, "split-")
    finally:
        blocks = page.call("default_limits_helpers", "split_linears", False)
    return results, blocks


def test_device_enforces_the_default_limits(default_limits_page):
    assert default_limits_page.limits == DEFAULT_LIMITS
    assert default_limits_page.over_limit_error is not None and "over_16k" in default_limits_page.over_limit_error


@pytest.mark.parametrize("case", EMBEDDING_CASES, ids=lambda c: c.id)
def test_embedding_split_by_row_blocks(case, split_results):
    results, blocks = split_results
    assert len(blocks) == len(EMBEDDING_CASES) and all(len(b) > 1 for b in blocks)
    answer = results[case.id]
    assert "error" not in answer, answer.get("error")
    check_case(case, answer)


@pytest.mark.parametrize("case", LINEAR_CASES, ids=lambda c: c.id)
def test_linear_split_by_output_blocks(case, linear_split_results):
    results, blocks = linear_split_results
    assert sum(len(b) > 1 for b in blocks) >= len(LINEAR_CASES)
    answer = results[case.id]
    assert "error" not in answer, answer.get("error")
    check_case(case, answer)


def test_tiny_llama(default_limits_page, tmp_path_factory):
    page = default_limits_page
    folder = str(tmp_path_factory.getbasetemp())
    traces = {ks: tiny_llama_trace(folder, False, ks) for ks in ("cpu", "gpu")}
    (page.server.files_dir / "tiny_llama_default_limits.pte").write_bytes(traces["cpu"].pte)
    jobs = [["/files/tiny_llama_default_limits.pte", trace.runs, ks, [], False, None] for ks, trace in traces.items()]
    answers = page.call("graph_programs", "run_graphs_from_urls", jobs)
    for answer in answers:
        assert "error" not in answer, answer.get("error")
        check_run(traces[answer["kernel_set"]], answer["kernel_set"], answer)


def test_llama_1b_slice(default_limits_page, tmp_path_factory):
    """Llama-3.2-1B's embedding and LM head (each just within a 128 MiB binding) around one
    of its layers."""
    run_llama_1b_slice(default_limits_page, str(tmp_path_factory.getbasetemp()))


def test_bundled_model_chats(default_limits_page, bundled_model):  # noqa: F811
    """The bundled SmolLM2's greedy reply, through LanguageModel and ChatSession as the chat
    page runs them, is eager PyTorch's."""
    question = "What is the capital of France?"
    reply = default_limits_page.call("default_limits_helpers", "greedy_reply", f"/models/{bundled_model.name}", question, MAX_TOKENS)
    assert reply == eager_greedy_reply(bundled_model, question, MAX_TOKENS)
