"""A tiny 4-bit Llama (random weights, 2 layers, grouped-query attention) exported with
export_tools, and eager PyTorch's logits on the same quantized module: prefill of 5 tokens
at position 0, then 10 greedy decode steps; and, from an export that takes longer calls, a
call of 70 tokens after the prefill and a decode step; a chat of three prompts and
greedy steps (CHAT_CALLS); and the tokens sampled decoding
draws after the prefill (each from the top k of eager's logits, at the uniforms a seeded
generator gives). Shared by the native and browser tests. Also
exported with force_fp16 (every float tensor float16), whose eager module then holds the
program's float16 constants (export_tools' EagerLlama), computed in f32 as pywebgpu does,
with float16 KV caches as pywebgpu's kernels for GPUs keep them, or f32 ones as its
kernels for CPU adapters do."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import torch

from topk_cases import expected_draw

PREFILL_TOKENS = [1, 17, 300, 42, 511]
DECODE_STEPS = 10
# A later call long enough for the prefill kernels of many rows (on GPUs the tiled
# attention over cached and new keys, ops/attention/selection.py's TILED_MIN_ROWS, and GEMMs with K
# split), in an export of LONG_MAX_SEQ_LEN.
LONG_CHUNK = [(37 * i + 5) % 512 for i in range(70)]
LONG_MAX_SEQ_LEN = 80
# A chat: a prompt and greedy steps, a second prompt of another length and a step, a
# third prompt of the first one's length and steps. Calls 4-6 each return to the shape of
# an earlier call after a call of another shape: the runtime restores what it kept for
# that shape (runtime/shape_states.py) instead of resizing.
CHAT_CALLS = [PREFILL_TOKENS, None, None, [7, 260, 33], None, [90, 5, 411, 64, 2], None, None]
CHAT_RETURNS = (4, 5, 6)
# What the runtime's fusion pass makes of each block (runtime/fusion/), by kernel set:
# the attention norm and q, k and v as one linear; the MLP norm and gate and up as one;
# where the kernels for GPUs run, the down projection reads that as silu(gate) * up,
# adding the residual (on CPU adapters the gate|up linear writes silu(gate) * up, and the
# down projection adds the residual like the attention output projection); the final norm
# and the LM head; RoPE reading its tables at the position, inside attention where the
# kernels for GPUs run.
_LINEARS = (
    "rms_norm + linear_q4gsw x3 (fused)",
    "rms_norm + linear_q4gsw (fused)",
    "linear_q4gsw + add (fused)",
)
FUSED_OPS = {
    "cpu": (
        *_LINEARS,
        "rms_norm + linear_q4gsw gate|up + silu_mul (fused)",
        "rope + sdpa_with_kv_cache (fused)",
    ),
    "gpu": (
        *_LINEARS,
        "rms_norm + linear_q4gsw gate|up (fused)",
        "silu_mul + linear_q4gsw + add (fused)",
        "rope + sdpa_with_kv_cache (fused)",
    ),
}


@dataclass
class LlamaTrace:
    pte: bytes
    runs: list  # per call: [[shape, dtype, bytes] tokens, [shape, dtype, bytes] input_pos]
    logits: list  # eager fp32 logits [1, vocab] per call


def _encoded(values, shape):
    return [list(shape), "int64", torch.tensor(values, dtype=torch.int64).numpy().tobytes()]


# The tiny preset's vocabulary, and one large enough that ExecuTorch's f16 export puts a
# clone between the final norm and the LM head (a change of storage), which the runtime's
# norm · linear fusion looks through.
TINY_VOCAB = 512
LARGE_VOCAB = 20000
# (float dtype, vocabulary) of the programs the native and browser tests run: float16 is
# the export with force_fp16.
PROGRAMS = [("float32", TINY_VOCAB), ("float16", TINY_VOCAB), ("float16", LARGE_VOCAB)]


@cache
def _tiny_llama_export(tmp_dir: str, force_fp16: bool, vocab_size: int, max_seq_len: int = 16, max_context_len: int = 0):
    """The tiny Llama's export (a context of 2 * max_seq_len unless given)."""
    from export_tools import PRESETS, RandomSource, export_llama

    name = f"tiny-{vocab_size}{'-fp16' if force_fp16 else ''}-{max_seq_len}{f'-ctx{max_context_len}' if max_context_len else ''}.pte"
    max_context_len = max_context_len or 2 * max_seq_len
    return export_llama(
        RandomSource({**PRESETS["tiny"], "vocab_size": vocab_size}, seed=7),
        Path(tmp_dir) / name, max_seq_len=max_seq_len, max_context_len=max_context_len, qmode="4w", force_fp16=force_fp16,
    )  # fmt: skip


def float16_caches(force_fp16: bool, kernel_set: str) -> bool:
    """Whether pywebgpu keeps the program's KV caches float16 (ops/attention/)."""
    return force_fp16 and kernel_set == "gpu"


@cache
def tiny_llama_trace(tmp_dir: str, force_fp16: bool = False, kernel_set: str = "gpu", vocab_size: int = TINY_VOCAB) -> LlamaTrace:
    """The trace of the tiny Llama (with force_fp16: its eager caches as `kernel_set`'s)."""
    export = _tiny_llama_export(tmp_dir, force_fp16, vocab_size)
    return _trace(export, force_fp16, kernel_set, [PREFILL_TOKENS] + [None] * DECODE_STEPS)


@cache
def tiny_llama_long_trace(tmp_dir: str, force_fp16: bool, kernel_set: str) -> LlamaTrace:
    """The prefill, a decode step, LONG_CHUNK, and a decode step."""
    export = _tiny_llama_export(tmp_dir, force_fp16, TINY_VOCAB, LONG_MAX_SEQ_LEN)
    return _trace(export, force_fp16, kernel_set, [PREFILL_TOKENS, None, LONG_CHUNK, None])


# A long-context export: its cache of LONG_CONTEXT tokens filled by prompts of 511 tokens
# (the most a call of max_seq_len 512 takes), then decode steps up to its last position.
LONG_CONTEXT = 8192
LONG_CONTEXT_CALLS = [[(37 * i + 5) % TINY_VOCAB for i in range(start, min(start + 511, LONG_CONTEXT - 2))] for start in range(0, LONG_CONTEXT - 2, 511)] + [None, None]


@cache
def tiny_llama_long_context_trace(tmp_dir: str, kernel_set: str) -> LlamaTrace:
    """LONG_CONTEXT_CALLS on the tiny Llama exported with a LONG_CONTEXT-token cache."""
    return _trace(_tiny_llama_export(tmp_dir, False, TINY_VOCAB, 512, LONG_CONTEXT), False, kernel_set, LONG_CONTEXT_CALLS)


@cache
def tiny_llama_chat_trace(tmp_dir: str, kernel_set: str) -> LlamaTrace:
    """CHAT_CALLS on the tiny Llama."""
    return _trace(_tiny_llama_export(tmp_dir, False, TINY_VOCAB), False, kernel_set, CHAT_CALLS)


def _trace(export, force_fp16: bool, kernel_set: str, calls) -> LlamaTrace:
    """The runs and eager logits of `calls`, one after another from position 0: each a
    list of tokens, or None for the last call's greedy token."""
    eager = export.eager
    if force_fp16:
        eager.float16_caches = float16_caches(force_fp16, kernel_set)
    eager.reset()
    runs, logits, position = [], [], 0
    for call in calls:
        tokens = list(call) if call is not None else [int(logits[-1].argmax())]
        runs.append([_encoded(tokens, (1, len(tokens))), _encoded([position], (1,))])
        with torch.no_grad():
            logits.append(eager.forward(tokens, position).float().reshape(1, -1))
        position += len(tokens)
    return LlamaTrace(export.pte_path.read_bytes(), runs, logits)


# A slice of Llama-3.2-1B's geometry: its embedding and LM head (128,256 x 2,048, each
# 131,334,144 bytes packed: just within WebGPU's default 128 MiB binding) around one of
# its layers, random weights; a prefill and greedy decode steps.
LLAMA_1B_SLICE_CALLS = [[1, 128255, 65535, 65536, 300], None, None, None]


@cache
def llama_1b_slice_trace(tmp_dir: str) -> LlamaTrace:
    from export_tools import PRESETS, RandomSource, export_llama

    export = export_llama(
        RandomSource({**PRESETS["llama3.2-1b"], "n_layers": 1}, seed=11), Path(tmp_dir) / "llama-1b-slice.pte",
        max_seq_len=8, max_context_len=16, qmode="4w", hqq_scales=False,
    )  # fmt: skip
    return _trace(export, False, "gpu", LLAMA_1B_SLICE_CALLS)


# Decoding as ChatSession runs it ahead, each decode step taking the last call's token on
# the GPU: greedy (temperature 0: the top 1), or sampled (every call drawing its token
# from the top DRAW_K of its logits on the GPU at a uniform the host drew, DRAW_SEED's
# generator); with a repetition penalty the window of tokens fed grows on the GPU too.
# (temperature, repetition penalty) of the traces the tests run:
DRAW_RUNS = [(0.7, 1.0), (0.7, 1.3), (0.0, 1.3)]
DRAW_K = 8
DRAW_TOP_P = 0.9
DRAW_SEED = 5
DRAW_STEPS = 10
# Calls compared until one that float32 logits may decide otherwise and the sequences
# part: a uniform this close to an edge of eager's shares, or (greedy) the two largest
# logits this close.
DRAW_MARGIN = 1e-3


@dataclass
class DrawTrace:
    pte: bytes
    prefill: list  # the prefill's run (as LlamaTrace.runs')
    k: int
    penalty: float
    draws: list  # per call [temperature, top_p, u], or None (greedy)
    tokens: list  # eager's token per call
    margins: list  # how safely eager decided each (see DRAW_MARGIN)


def penalized(logits, window, penalty):
    """CTRL's repetition penalty on the distinct tokens of `window`."""
    logits = logits.clone()
    for token in set(window):
        logits[token] = logits[token] / penalty if logits[token] > 0 else logits[token] * penalty
    return logits


@cache
def tiny_llama_draw_trace(tmp_dir: str, temperature: float, penalty: float) -> DrawTrace:
    """The prefill, then DRAW_STEPS decode steps, on eager PyTorch."""
    from pywebgpu.ops.topk import PENALIZED_MAX

    export = _tiny_llama_export(tmp_dir, False, TINY_VOCAB)
    eager = export.eager
    eager.reset()
    uniforms = random.Random(DRAW_SEED)
    draws, tokens, margins, fed = [], [], [], []
    call, position = PREFILL_TOKENS, 0
    for _ in range(1 + DRAW_STEPS):
        with torch.no_grad():
            logits = eager.forward(call, position).float().reshape(-1)
        position += len(call)
        fed += call
        logits = penalized(logits, fed[-PENALIZED_MAX:], penalty)
        if temperature > 0:
            u = uniforms.random()
            token, margin = expected_draw(logits, DRAW_K, temperature, DRAW_TOP_P, u)
            draws.append([temperature, DRAW_TOP_P, u])
        else:
            top = torch.topk(logits, 2)
            token, margin = int(top.indices[0]), float(top.values[0] - top.values[1])
            draws.append(None)
        tokens.append(token)
        margins.append(margin)
        call = [token]
    prefill = [_encoded(PREFILL_TOKENS, (1, len(PREFILL_TOKENS))), _encoded([0], (1,))]
    k = DRAW_K if temperature > 0 else 1
    return DrawTrace(export.pte_path.read_bytes(), prefill, k, penalty, draws, tokens, margins)


def check_draw_trace(trace: DrawTrace, drawn):
    """The GPU's [value, id] per call (its top 1 or its draw) against eager's tokens, up
    to the first call that float32 may decide otherwise (DRAW_MARGIN); at least half of
    them."""
    compared = next((i for i, margin in enumerate(trace.margins) if margin < DRAW_MARGIN), len(trace.margins))
    assert compared >= len(trace.margins) // 2, trace.margins
    assert len(drawn) == len(trace.tokens)
    assert [token for _, token in drawn[:compared]] == trace.tokens[:compared]
    assert len(set(trace.tokens[:compared])) > 1  # not the same token each time


def check_upgraded_kernels(kernels):
    """run_graph's kernels per run of tiny_llama_long_trace's calls, the graph's upgrades
    built before the third (LONG_CHUNK): only it runs gemv_rows' 16-row kernel."""
    assert [("gemv_rows16" in ran) for ran in kernels] == [False, False, True, False], kernels


def check_decode_resizes(resized):
    """With the kernels for GPUs, attention with its RoPE reads the position on the GPU:
    after the first decode step (whose length differs from the prefill's) a decode step
    resizes only the ops that read the position on the host (select_as_symint), never an
    attention op; no slice of the RoPE tables is left, nor the arithmetic of their end
    (input_pos + seq_len) and length (runtime/fusion/)."""
    for step, names in enumerate(resized[2:], start=2):
        assert names, f"run {step}: nothing was resized, though the position changed"
        assert set(names) == {"et_vk.select_as_symint.default"}, f"run {step} resized {names}"


def check_returns_resize_the_position_only(resized):
    """With the kernels for GPUs, a call returning to an earlier call's shape (CHAT_RETURNS)
    resizes only what a decode step does (check_decode_resizes): the position's ops."""
    for call in CHAT_RETURNS:
        names = resized[call]
        assert names, f"call {call}: nothing was resized, though the position changed"
        assert set(names) == {"et_vk.select_as_symint.default"}, f"call {call} resized {names}"


def check_float16_caches(trace: LlamaTrace, kernel_set: str, held):
    """With the kernels for GPUs an f16 program's KV caches (k and v of every layer) stay
    float16; nothing else does."""
    from pywebgpu.pte import load_program

    graph = load_program(trace.pte).vulkan_graph()
    caches = {op.args[i] for op in graph.chain if op.name == "sdpa_with_kv_cache.default" for i in (3, 4)}
    assert len(caches) == 4  # the tiny Llama's 2 layers
    force_fp16 = graph.compile_specs.get("force_fp16") == b"\x01"
    assert set(held) == (caches if float16_caches(force_fp16, kernel_set) else set()), held


def check_run(trace: LlamaTrace, kernel_set: str, answer):
    """A graph_programs.run_graph answer against the trace: the fusions `kernel_set`
    makes, the logits (check_trace), and which tensors are float16."""
    assert set(FUSED_OPS[kernel_set]) <= set(answer["ops"]), answer["ops"]
    check_trace(trace, answer["results"])
    check_float16_caches(trace, kernel_set, answer["float16"])


def check_trace(trace: LlamaTrace, results):
    """Every call's logits within 1e-3 of eager PyTorch, and the same argmax."""
    assert len(results) == len(trace.logits)
    for step, (outputs, want) in enumerate(zip(results, trace.logits)):
        ((shape, data),) = outputs
        got = torch.frombuffer(bytearray(data), dtype=torch.float32).reshape(shape)
        assert tuple(got.shape) == tuple(want.shape), f"step {step}: shape {list(got.shape)}"
        torch.testing.assert_close(got, want, atol=1e-3, rtol=1e-3, msg=lambda m: f"step {step}: {m}")
        assert int(got.argmax()) == int(want.argmax()), f"step {step}: argmax differs"


# SmolLM2's first merges: every id of the cut tokenizer lies in the tiny vocabulary.
TINY_CHAT_TOKENIZER_MERGES = 150


def tiny_chat_export(folder: str, bundled_manifest: Path) -> Path:
    """The manifest of the tiny Llama's export in `folder` (a context of 2 *
    LONG_MAX_SEQ_LEN) naming a cut SmolLM2 tokenizer and SmolLM2's chat template and end
    token, taken from the bundled model's manifest at `bundled_manifest`."""
    from devtools.fuzz_model_files import cut_tokenizer

    export = _tiny_llama_export(folder, False, TINY_VOCAB, LONG_MAX_SEQ_LEN)
    tokenizer = cut_tokenizer(json.loads(bundled_manifest.with_suffix(".tokenizer.json").read_text()), TINY_CHAT_TOKENIZER_MERGES)
    assert max(tokenizer["model"]["vocab"].values()) < TINY_VOCAB
    tokenizer_path = export.manifest_path.with_name("tiny.tokenizer.json")
    tokenizer_path.write_text(json.dumps(tokenizer))
    bundled = json.loads(bundled_manifest.read_text())
    manifest = json.loads(export.manifest_path.read_text())
    manifest.update(
        tokenizer={"file": tokenizer_path.name, "add_bos": False},
        special_tokens=bundled["special_tokens"],
        chat_template=bundled["chat_template"],
    )
    export.manifest_path.write_text(json.dumps(manifest))
    return export.manifest_path
