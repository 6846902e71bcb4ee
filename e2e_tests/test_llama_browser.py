"""A tiny 4-bit Llama .pte in headless Chromium: prefill + 10 decode steps, a call of 70
tokens (after the graph's upgrades too), and a chat of three prompts match eager PyTorch."""

from pathlib import Path

import pytest

import graph_programs
from llama_fixtures import (
    DRAW_RUNS,
    PROGRAMS,
    check_decode_resizes,
    check_draw_trace,
    check_returns_resize_the_position_only,
    check_run,
    check_trace,
    check_upgraded_kernels,
    llama_1b_slice_trace,
    tiny_llama_chat_trace,
    tiny_llama_draw_trace,
    tiny_llama_long_trace,
    tiny_llama_trace,
)


# float16: the program exported with force_fp16, run with float32 tensors (its constants
# widened on the GPU at build; float16 KV caches with the kernels for GPUs); with a large
# vocabulary its final norm reaches the LM head through a clone.
@pytest.mark.parametrize("float_dtype, vocab_size", PROGRAMS)
def test_tiny_llama_prefill_and_decode(python_page, tmp_path_factory, float_dtype, vocab_size):
    # The kernels for CPU adapters (SwiftShader's own), then those for GPUs.
    folder = str(tmp_path_factory.getbasetemp())
    traces = {ks: tiny_llama_trace(folder, float_dtype == "float16", ks, vocab_size) for ks in ("cpu", "gpu")}
    answers = run_and_check(python_page, "tiny_llama.pte", traces)
    check_decode_resizes(answers[1]["resized"])


def run_and_check(python_page, file_name, traces, upgrade_before_run=None, piece_bytes=()):
    """Run each kernel set's trace (`traces`: kernel set -> LlamaTrace, one program) in the
    page, the graph's upgrades built before run `upgrade_before_run`, loaded from a Blob by
    pieces of `piece_bytes` if given, and check it (check_run); returns the answers, in
    the order of `traces`."""
    (python_page.server.files_dir / file_name).write_bytes(next(iter(traces.values())).pte)
    python_page.load_module("graph_programs", Path(graph_programs.__file__).read_text())
    jobs = [[f"/files/{file_name}", trace.runs, kernel_set, [], False, upgrade_before_run, *piece_bytes] for kernel_set, trace in traces.items()]
    answers = python_page.call("graph_programs", "run_graphs_from_urls", jobs)
    for answer in answers:
        assert "error" not in answer, answer.get("error")
        check_run(traces[answer["kernel_set"]], answer["kernel_set"], answer)
    return answers


def run_llama_1b_slice(python_page, tmp_dir: str):
    """llama_fixtures' slice of the 1B geometry in the page, loaded from a Blob by 16 MiB
    pieces (never one ArrayBuffer of the file), on the device's own kernel set, against
    eager PyTorch (check_trace)."""
    trace = llama_1b_slice_trace(tmp_dir)
    (python_page.server.files_dir / "llama_1b_slice.pte").write_bytes(trace.pte)
    python_page.load_module("graph_programs", Path(graph_programs.__file__).read_text())
    job = ["/files/llama_1b_slice.pte", trace.runs, None, [], False, None, 16 << 20]
    (answer,) = python_page.call("graph_programs", "run_graphs_from_urls", [job])
    assert "error" not in answer, answer.get("error")
    check_trace(trace, answer["results"])


@pytest.mark.parametrize("float_dtype", ["float32", "float16"])
def test_tiny_llama_piece_by_piece(python_page, tmp_path_factory, float_dtype):
    """Loaded from a Blob by pieces of an odd size (writes straddle pieces at every byte
    offset mod 4), with both kernel sets."""
    folder = str(tmp_path_factory.getbasetemp())
    traces = {ks: tiny_llama_trace(folder, float_dtype == "float16", ks) for ks in ("cpu", "gpu")}
    run_and_check(python_page, "tiny_llama_pieces.pte", traces, piece_bytes=(4099,))


@pytest.mark.parametrize("float_dtype", ["float32", "float16"])
def test_tiny_llama_long_chunk(python_page, tmp_path_factory, float_dtype):
    """A 70-token call after the prefill and a decode step, with both kernel sets (with
    those for GPUs the tiled attention over cached and new keys, float16 caches for the
    f16 program)."""
    folder = str(tmp_path_factory.getbasetemp())
    traces = {ks: tiny_llama_long_trace(folder, float_dtype == "float16", ks) for ks in ("cpu", "gpu")}
    run_and_check(python_page, "tiny_llama_long.pte", traces)


def test_tiny_llama_upgraded_kernels(python_page, tmp_path_factory):
    """The kernels for CPU adapters, the graph's upgrades built after the prefill and a
    decode step (as a chat here starts them after its first reply): the
    70-token call then runs gemv_rows' 16-row kernel."""
    trace = tiny_llama_long_trace(str(tmp_path_factory.getbasetemp()), False, "cpu")
    (answer,) = run_and_check(python_page, "tiny_llama_long.pte", {"cpu": trace}, upgrade_before_run=2)
    check_upgraded_kernels(answer["kernels"])


def test_tiny_llama_chat(python_page, tmp_path_factory):
    """Prompts of changing lengths between decode steps, both kernel sets; calls returning
    to an earlier call's shape restore what the runtime kept for it (with the kernels for
    GPUs, resizing only the position's ops)."""
    folder = str(tmp_path_factory.getbasetemp())
    traces = {ks: tiny_llama_chat_trace(folder, ks) for ks in ("cpu", "gpu")}
    answers = run_and_check(python_page, "tiny_llama_chat.pte", traces)
    check_returns_resize_the_position_only(answers[1]["resized"])


def test_tiny_llama_run_ahead_sampled_or_penalized(python_page, tmp_path_factory):
    """Decoding run ahead of the host (each step taking the last call's token on the GPU),
    sampled and/or with a repetition penalty, both kernel sets, steps submitted one and
    three at a time, against eager PyTorch."""
    folder = str(tmp_path_factory.getbasetemp())
    python_page.load_module("graph_programs", Path(graph_programs.__file__).read_text())
    for temperature, penalty in DRAW_RUNS:
        trace = tiny_llama_draw_trace(folder, temperature, penalty)
        (python_page.server.files_dir / "tiny_llama_draws.pte").write_bytes(trace.pte)
        for kernel_set in ("cpu", "gpu"):
            for block in (1, 3):
                args = ["/files/tiny_llama_draws.pte", trace.prefill, trace.draws, trace.k, trace.penalty, kernel_set, block]
                check_draw_trace(trace, python_page.call("graph_programs", "draw_from_url", *args))
