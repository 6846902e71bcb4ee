"""Export Llama-family models to ExecuTorch `.pte` programs for the WebGPU runtime.

Offline CPython tool (needs torch 2.13 + executorch 1.5.1; not for Pyodide). Every source
is converted to a Meta-style fp32 state dict plus a `LlamaParams`, then lowered by
ExecuTorch's own Llama export with the VulkanPartitioner (KV cache, `sdpa_with_kv_cache`,
dynamic sequence length, fp32 activations) -- the same as
`python -m executorch.examples.models.llama.export_llama -kv --use_sdpa_with_kv_cache -V
-d fp32 -qmode 4w -G 32 -E 4,32`.

Command line: `python -m export_tools {random,meta,gguf,hf} ... -o OUT.pte` (see --help).

Python API (stable; tests and the runtime's checks build on it)
----------------------------------------------------------------
Sources (`load()` happens inside the export; bad input raises `ExportError`):
  RandomSource(params: str | Mapping, seed: int = 0)
      `params` is a preset name (`"tiny"`, `"llama3.2-1b"`, see `PRESETS`) or a
      Meta-style params dict (dim, n_layers, n_heads, n_kv_heads, vocab_size, hidden_dim
      or ffn_dim_multiplier/multiple_of, head_dim, norm_eps, rope_theta, use_scaled_rope,
      rope_scale_factor, high_freq_factor, tied_embeddings). Seeded random weights.
  MetaCheckpointSource(checkpoint: PathLike, params_json: PathLike)
  GGUFSource(path: PathLike)      -- llama.cpp GGUF, architecture `llama`; exported
                                     exactly by default (see below)
  HFSource(folder: PathLike)      -- LlamaForCausalLM: config.json, *.safetensors,
                                     tokenizer.json, tokenizer_config.json

export_llama(source, out_path, *, max_seq_len, max_context_len, qmode=None,
             group_size=None, embedding_4bit=None, hqq_scales=None, requantize=False,
             force_fp16=False, progress=False, verbose=False) -> ExportResult
    Writes `out_path` (must end in .pte), `<stem>.json` (manifest) and, when the source
    has a tokenizer, `<stem>.tokenizer.json`. qmode: "4w" (et_vk.linear_q4gsw), "8da4w"
    (et_vk.linear_dq8ca_q4gsw) or "fp32"; embedding_4bit -> et_vk.embedding_q4gsw.
    hqq_scales: HQQ-chosen 4-bit scales (ExecuTorch's default; most of a large model's
    export time on CPU) or, if False, plain min/max scales.
    Left out (None), they are "4w", 32, True, True.
    A GGUF source is exported exactly unless requantize=True or one of qmode, group_size,
    embedding_4bit, hqq_scales is given: its Q4_0/Q4_1/Q8_0/Q4_K/Q5_K/Q6_K matrices
    become 4-bit planes plus per-group offsets (gguf_blocks, exact_modules) whose f32 sum
    is bit for bit what `gguf.quants.dequantize` gives (checked per tensor at export);
    its F32/F16/BF16 matrices stay fp32. The graph holds et_vk.linear_q4gsw and
    aten.view_copy/aten.sum.dim_IntList/aten.linear/aten.add per linear, and
    et_vk.embedding_q4gsw + aten.embedding/view_copy/add for the embedding. Any other
    GGUF type raises ExportError naming the tensor and type.
    max_seq_len is ExecuTorch's: one forward call takes 1..max_seq_len-1 tokens.
    force_fp16: the Vulkan partitioner's option of that name: every float tensor float16,
    constants rounded to it (half their bytes). pywebgpu runs such programs with float32
    tensors, widening their constants at load but for the KV caches where its kernels
    for GPUs run; `.eager` then holds the rounded constants and float16 caches.

ExportResult: .pte_path, .manifest_path (Path), .manifest (dict), .eager (EagerLlama)

EagerLlama: the same source-transformed, quantized eager module that was lowered.
    .forward(tokens: Sequence[int], start_pos: int) -> torch.Tensor   (also callable)
        Same semantics as the .pte's forward(tokens int64 [1, S], input_pos int64 [1]):
        fp32 logits [1, vocab] of the last token; the KV cache persists across calls.
    .reset()                       -- zero the KV cache (a freshly loaded .pte)
    .module, .params, .max_prefill_tokens, .max_context_len
    .float16_caches                -- force_fp16 only: whether the KV caches round what
                                      they store to float16 (default True, as the
                                      program's; pywebgpu's kernels for CPU adapters
                                      keep f32 caches)

build_eager(source, *, max_seq_len, max_context_len, qmode=None, group_size=None,
            embedding_4bit=None, hqq_scales=None, requantize=False, progress=False,
            verbose=False)
        -> EagerLlama
    The module export_llama would lower, without lowering it (seconds, not a minute).

Manifest (`<stem>.json`, format "pywebgpu.llama-export", format_version 1; both in
pywebgpu.llm.manifest, whose parse_manifest checks what LanguageModel.load reads):
  pte: {file, bytes, sha256, chunk_bytes, chunk_sha256}; chunk_sha256 is the sha256 of
       each chunk_bytes (16 MiB) of the .pte in order, the last one shorter, which a
       browser checks as the download brings them
  model: {dim, n_layers, n_heads, n_kv_heads, head_dim, ffn_dim, vocab_size, norm_eps,
          rope_theta, rope_scaling (null or {type "llama3", factor, high_freq_factor,
          low_freq_factor, original_max_position_embeddings}), tied_embeddings,
          max_seq_len, max_prefill_tokens (= max_seq_len - 1), max_context_len}
  quantization: {mode, group_size (null for fp32), embedding (null or {bits, group_size}),
                 scale_algorithm, float_dtype ("float32", or "float16" with force_fp16)};
                 an exact GGUF export: {mode "gguf", exact true, gguf_types (type name ->
                 tensor count in the file), group_size (one, or the sorted list of those
                 used; null if none), float_linears (the roles of the linears whose GGUF
                 tensors are floats, kept float32: "attention.wo", "output", ...), float_dtype}
  tokenizer: null or {file, add_bos}; add_bos = encoding with the tokenizer (special
             tokens on) already puts BOS first, as HF tokenizer.json files do
  special_tokens: {bos: null or {id, text}, eos: [{id, text}, ...]}
  chat_template: null or the Jinja template string
  source: where the weights came from; exported_with: {torch, executorch}
The .pte also gets ExecuTorch's constant methods get_bos_id / get_eos_ids when known.
"""

from .errors import ExportError, ExportWarning
from .exporter import EagerLlama, ExportResult, build_eager, export_llama
from .params import PRESETS, Llama3RopeScaling, LlamaParams
from .sources import GGUFSource, HFSource, MetaCheckpointSource, ModelSource, RandomSource

__all__ = [
    "EagerLlama",
    "ExportError",
    "ExportResult",
    "ExportWarning",
    "GGUFSource",
    "HFSource",
    "Llama3RopeScaling",
    "LlamaParams",
    "MetaCheckpointSource",
    "ModelSource",
    "PRESETS",
    "RandomSource",
    "build_eager",
    "export_llama",
]
