"""An eager PyTorch SmolLM2 that computes as llama.cpp's CPU backend (ggml) does, checked
against the llama.cpp run that bench.fidelity recorded.

    .venv/bin/python -m bench.ggml_reference [--fidelity PATH] [--out PATH]

The weights are `gguf.quants.dequantize` of the bundled GGUF, as in the fp32 reference.
Each emulated step of ggml's computation is switched on by a setting, so that its effect
shows on its own:

- activations: each matrix product with a quantized weight first quantizes its input
  rows to the weight type's `vec_dot_type` (Q4_1 -> Q8_1, Q8_0 -> Q8_0; blocks of 32,
  d = amax / 127 and Q8_1's s = sum(q) * d stored as float16) and sums block by block as
  `ggml_vec_dot_q4_1_q8_1` / `ggml_vec_dot_q8_0_q8_0` do (the Q4_1 minimum times Q8_1's
  float16 s). The values round to nearest, half away from zero (`quantize_row_q8_*_ref`,
  roundf, the generic C code wllama's build runs), or towards zero
  (`wasm_i32x4_trunc_sat_f32x4` in llama.cpp's wasm SIMD quantizers).
- kv: K and V stored as float16 (llama.cpp's default cache types; its flash attention
  casts a float32 cache to float16 too).
- flash: ggml's CPU flash attention (what llama.cpp's flash_attn "auto" picks on the
  CPU): fewer than 64 query rows take the row-by-row kernel, which rounds Q to float16
  and keeps the softmax-weighted V sum in a float16 accumulator, rescaled at each new
  maximum; a single query over at least 512 cache cells splits the cells between the 2
  threads and merges their partial sums in float32; 64 rows or more take the tiled
  kernel, float32 throughout on the float16 cache.
- float64_sums: the matrix products summed in float64 instead of float32, a perturbation of
  about an ulp per product, to show how far such a change moves the results.

It reads bench-results/fidelity-*.json (llama.cpp's tokens and margins) and reports, for
fp32 and each setting: the margin of pywebgpu's token over llama.cpp's at every recorded
difference (sign agreement with llama.cpp's, mean |difference|), the greedy replies to
the ten chat prompts (identical to llama.cpp's or not) and teacher-forced top-1 over the
same prefixes; and against fp32: replies identical to pywebgpu's, top-1 changed from fp32's.
Writes bench-results/ggml-reference-<commit>.json unless --out says otherwise.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import shlex
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

from devtools.bundle import ROOT

BLOCK = 32  # values per Q8_0 / Q8_1 / Q4_1 block
FLASH_TILE_ROWS = 64  # query rows from which ggml's flash attention takes its tiled kernel
SPLIT_KV_CELLS = 512  # cache cells from which a single query's flash attention is split over threads
KV_PAD = 256  # llama.cpp pads the cache cells a graph reads to a multiple of this
THREADS = 2  # wllama's threads in the recorded run


@dataclasses.dataclass(frozen=True)
class Setting:
    """Which of ggml's numerics the model emulates."""

    name: str
    activations: str = "f32"  # "f32", "q8-nearest" or "q8-truncate"
    kv_f16: bool = False
    flash: bool = False
    # Matrix products summed in float64, then rounded to float32: a change of about an ulp in each product's output.
    float64_sums: bool = False


SETTINGS = (
    Setting("fp32"),
    Setting("q8 activations (roundf)", activations="q8-nearest"),
    Setting("q8 activations (truncated)", activations="q8-truncate"),
    Setting("f16 KV + flash attention", kv_f16=True, flash=True),
    Setting("q8 (roundf) + f16 KV + flash attention", activations="q8-nearest", kv_f16=True, flash=True),
    Setting("the same, float64 sums", activations="q8-nearest", kv_f16=True, flash=True, float64_sums=True),
)


def round_half_away(values: torch.Tensor) -> torch.Tensor:
    """C's roundf: to nearest, halves away from zero (torch.round takes halves to even)."""
    truncated = torch.trunc(values)
    return truncated + torch.where((values - truncated).abs() >= 0.5, torch.sign(values), torch.zeros_like(values))


def quantize_q8_0(rows: torch.Tensor, rounding: str = "nearest") -> tuple[torch.Tensor, torch.Tensor]:
    """Q8_0 blocks of float32 rows [..., k] as `quantize_row_q8_0` makes them: the int8
    values [..., k/32, 32] (as float32) and the float16 scales d [..., k/32]."""
    blocks = rows.reshape(*rows.shape[:-1], -1, BLOCK)
    scale = blocks.abs().amax(-1, keepdim=True) / 127.0
    inverse = torch.where(scale == 0, torch.zeros_like(scale), 1.0 / scale)
    scaled = blocks * inverse
    values = round_half_away(scaled) if rounding == "nearest" else torch.trunc(scaled)
    return values, scale.squeeze(-1).half()


def quantize_q8_1(rows: torch.Tensor, rounding: str = "nearest") -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Q8_1 blocks as `quantize_row_q8_1` makes them: Q8_0's values and d, and s, the
    float32 d times the values' sum, stored as float16."""
    blocks = rows.reshape(*rows.shape[:-1], -1, BLOCK)
    scale = blocks.abs().amax(-1, keepdim=True) / 127.0
    inverse = torch.where(scale == 0, torch.zeros_like(scale), 1.0 / scale)
    scaled = blocks * inverse
    values = round_half_away(scaled) if rounding == "nearest" else torch.trunc(scaled)
    sums = values.sum(-1) * scale.squeeze(-1)
    return values, scale.squeeze(-1).half(), sums.half()


def q4_1_parts(raw: np.ndarray, shape: tuple[int, int]) -> tuple[torch.Tensor, torch.Tensor]:
    """A Q4_1 tensor's scaled nibbles d*q [rows, k] and block minimums m [rows, k/32],
    float32, from its stored blocks (float16 d, float16 m, 16 bytes of nibbles: value j
    in the low nibble of byte j, value j + 16 in its high nibble)."""
    blocks = np.asarray(raw, dtype=np.uint8).reshape(-1, 20)
    scales = blocks[:, 0:2].copy().view(np.float16).astype(np.float32)
    minimums = blocks[:, 2:4].copy().view(np.float16).astype(np.float32)
    packed = blocks[:, 4:]
    nibbles = np.concatenate([packed & 0x0F, packed >> 4], axis=1).astype(np.float32)
    rows, k = shape
    return torch.from_numpy(scales * nibbles).reshape(rows, k), torch.from_numpy(minimums).reshape(rows, k // BLOCK)


class GgmlLinear:
    """One weight's matrix product, in float32 or as ggml's quantized dot products."""

    def __init__(self, dense: torch.Tensor, gguf_type: str, raw: np.ndarray):
        self.dense = dense
        self.gguf_type = gguf_type
        if gguf_type == "Q4_1":
            self.scaled, self.minimums = q4_1_parts(raw, tuple(dense.shape))
        elif gguf_type not in ("Q8_0", "F32"):
            raise ValueError(f"no ggml emulation for {gguf_type} weights")

    def __call__(self, rows: torch.Tensor, setting: Setting) -> torch.Tensor:
        dtype = torch.float64 if setting.float64_sums else torch.float32

        def product(left: torch.Tensor, right: torch.Tensor) -> torch.Tensor:
            return (left.to(dtype) @ right.to(dtype).T).float()

        if setting.activations == "f32" or self.gguf_type == "F32":
            return product(rows, self.dense)
        rounding = setting.activations.removeprefix("q8-")
        if self.gguf_type == "Q8_0":
            values, scale = quantize_q8_0(rows, rounding)
            return product((values * scale.float()[..., None]).flatten(-2), self.dense)
        values, scale, sums = quantize_q8_1(rows, rounding)
        return product((values * scale.float()[..., None]).flatten(-2), self.scaled) + product(sums.float(), self.minimums)


def to_f16(values: torch.Tensor) -> torch.Tensor:
    """The values rounded to float16 (to nearest even, as GGML_FP32_TO_FP16), kept as float32."""
    return values.half().float()


def flash_one_chunk(queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, visible: torch.Tensor, scale: float):
    """ggml_compute_forward_flash_attn_ext_f16_one_chunk over the cells `visible` marks
    [rows, cells]: queries [rows, heads, d] rounded to float16, the float16 cache's keys
    and values [cells, heads, d]; the online softmax's running maximum M, sum S and the
    float16 accumulator of V, rescaled at each new maximum. Returns M, S [rows, heads] and
    the accumulator [rows, heads, d] in float32."""
    scores = torch.einsum("rhd,chd->rhc", to_f16(queries), keys) * scale
    masked = ~visible[:, None, :]
    scores = scores.masked_fill(masked, float("-inf"))
    running = torch.cummax(scores, dim=-1).values
    previous = torch.cat([torch.full_like(running[..., :1], float("-inf")), running[..., :-1]], dim=-1)
    new_maximum = ~masked & (scores > previous)
    rescale = torch.where(new_maximum, torch.exp(previous - scores), torch.ones_like(scores))
    weight = torch.where(new_maximum, torch.ones_like(scores), torch.where(masked, torch.zeros_like(scores), torch.exp(scores - previous)))
    accumulator = torch.zeros_like(queries)
    total = torch.zeros(queries.shape[:2])
    used = visible.any(0).nonzero().squeeze(1)
    for cell in range(int(used.min()), int(used.max()) + 1):
        accumulator = to_f16(to_f16(accumulator * rescale[..., cell, None]) + values[cell] * weight[..., cell, None])
        total = total * rescale[..., cell] + weight[..., cell]
    return running[..., -1], total, accumulator


def flash_attention(queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, positions: torch.Tensor, batch_rows: int, scale: float) -> torch.Tensor:
    """ggml's CPU flash attention for query rows at `positions` that llama.cpp computes in
    ubatches of `batch_rows` rows (1: each row decoded on its own)."""
    cells = torch.arange(keys.shape[0])
    visible = cells[None, :] <= positions[:, None]
    if batch_rows >= FLASH_TILE_ROWS:
        return exact_attention(queries, keys, values, visible, scale)
    padded_cells = (positions + 1 + KV_PAD - 1) // KV_PAD * KV_PAD
    split = (padded_cells >= SPLIT_KV_CELLS) if batch_rows == 1 else torch.zeros_like(positions, dtype=torch.bool)
    chunk = (padded_cells + THREADS - 1) // THREADS
    first_part = visible & ~(split[:, None] & (cells[None, :] >= chunk[:, None]))
    maximum, total, accumulator = flash_one_chunk(queries, keys, values, first_part, scale)
    if split.any():
        rows = split.nonzero().squeeze(1)
        second_part = visible[rows] & (cells[None, :] >= chunk[rows, None])
        maximum2, total2, accumulator2 = flash_one_chunk(queries[rows], keys, values, second_part, scale)
        merged = torch.maximum(maximum[rows], maximum2)
        old, new = torch.exp(maximum[rows] - merged), torch.exp(maximum2 - merged)
        accumulator = accumulator.clone()
        total = total.clone()
        accumulator[rows] = accumulator[rows] * old[..., None] + accumulator2 * new[..., None]
        total[rows] = total[rows] * old + total2 * new
    return accumulator * (1.0 / total)[..., None]


def exact_attention(queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, visible: torch.Tensor, scale: float) -> torch.Tensor:
    """Softmax attention in float32 over the cells `visible` marks [rows, cells]."""
    scores = torch.einsum("rhd,chd->rhc", queries, keys) * scale
    scores = scores.masked_fill(~visible[:, None, :], float("-inf"))
    return torch.einsum("rhc,chd->rhd", torch.softmax(scores, dim=-1), values)


class GgmlReference:
    """SmolLM2 (llama architecture) from a GGUF, computed as `setting` says."""

    def __init__(self, gguf_file: Path, setting: Setting = SETTINGS[0]):
        from export_tools.sources import GGUFSource

        loaded = GGUFSource(gguf_file).load()
        self.params = params = loaded.params
        self.setting = setting
        weights, stored = loaded.state_dict, loaded.gguf_tensors

        def linear(key: str) -> GgmlLinear:
            return GgmlLinear(weights[key], stored[key].gguf_type, stored[key].data)

        self.embedding = weights["tok_embeddings.weight"]
        self.output = linear("output.weight")
        self.norm = weights["norm.weight"]
        self.layers = []
        for index in range(params.n_layers):
            prefix = f"layers.{index}."
            self.layers.append({
                "attention_norm": weights[prefix + "attention_norm.weight"],
                "ffn_norm": weights[prefix + "ffn_norm.weight"],
                **{name: linear(prefix + key) for name, key in (
                    ("wq", "attention.wq.weight"), ("wk", "attention.wk.weight"), ("wv", "attention.wv.weight"),
                    ("wo", "attention.wo.weight"), ("gate", "feed_forward.w1.weight"), ("up", "feed_forward.w3.weight"),
                    ("down", "feed_forward.w2.weight"),
                )},
            })  # fmt: skip
        self.theta_scale = float(np.float32(params.rope_theta) ** np.float32(-2.0 / params.head_dim))
        self.reset()

    def reset(self):
        self.keys = [torch.zeros(0, self.params.n_kv_heads, self.params.head_dim) for _ in self.layers]
        self.values = [torch.zeros(0, self.params.n_kv_heads, self.params.head_dim) for _ in self.layers]

    def _rms_norm(self, rows: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """ggml_compute_forward_rms_norm_f32 (float32 squares summed in double) times the weight."""
        mean = ((rows * rows).double().sum(-1, keepdim=True) / rows.shape[-1]).float()
        return rows * (1.0 / torch.sqrt(mean + self.params.norm_eps)) * weight

    def _rope(self, rows: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """llama.cpp's normal RoPE: adjacent pairs rotated (the GGUF's Q/K rows are permuted for it)."""
        # ggml_rope_cache_init: pair i's angle is the position multiplied by theta_scale i times, in float32.
        angle = positions.float()
        angles = [angle]
        for _ in range(self.params.head_dim // 2 - 1):
            angle = angle * self.theta_scale
            angles.append(angle)
        angles = torch.stack(angles, dim=-1)
        cos, sin = torch.cos(angles)[:, None, :], torch.sin(angles)[:, None, :]
        even, odd = rows[..., 0::2], rows[..., 1::2]
        return torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1).flatten(-2)

    def forward(self, tokens: list[int], batch_rows: int | None = None) -> torch.Tensor:
        """Logits [len(tokens), vocab] of `tokens` appended to the cache, each row as
        llama.cpp computes it when it reads them in ubatches of `batch_rows` (default all)."""
        params, setting = self.params, self.setting
        start = self.keys[0].shape[0]
        positions = torch.arange(start, start + len(tokens))
        rows = self.embedding[torch.tensor(tokens)]
        group = params.n_heads // params.n_kv_heads
        scale = params.head_dim**-0.5
        for index, layer in enumerate(self.layers):
            normed = self._rms_norm(rows, layer["attention_norm"])
            queries = self._rope(layer["wq"](normed, setting).reshape(len(tokens), params.n_heads, params.head_dim), positions)
            keys = self._rope(layer["wk"](normed, setting).reshape(len(tokens), params.n_kv_heads, params.head_dim), positions)
            values = layer["wv"](normed, setting).reshape(len(tokens), params.n_kv_heads, params.head_dim)
            if setting.kv_f16:
                keys, values = to_f16(keys), to_f16(values)
            self.keys[index] = torch.cat([self.keys[index], keys])
            self.values[index] = torch.cat([self.values[index], values])
            cached_keys = self.keys[index].repeat_interleave(group, dim=1)
            cached_values = self.values[index].repeat_interleave(group, dim=1)
            if setting.flash:
                attended = flash_attention(queries, cached_keys, cached_values, positions, batch_rows or len(tokens), scale)
            else:
                visible = torch.arange(cached_keys.shape[0])[None, :] <= positions[:, None]
                attended = exact_attention(queries, cached_keys, cached_values, visible, scale)
            rows = rows + layer["wo"](attended.reshape(len(tokens), -1), setting)
            normed = self._rms_norm(rows, layer["ffn_norm"])
            gate, up = layer["gate"](normed, setting), layer["up"](normed, setting)
            rows = rows + layer["down"](gate / (1.0 + torch.exp(-gate)) * up, setting)
        return self.output(self._rms_norm(rows, self.norm), setting)

    def logits_after(self, context: list[int], batch_rows: int | None = None) -> torch.Tensor:
        """Logits of every prefix of `context`, from an empty cache."""
        self.reset()
        with torch.no_grad():
            return self.forward(context, batch_rows)

    def replay(self, prompt: list[int], reply: list[int]) -> torch.Tensor:
        """Logits after `prompt` and `reply`, read as llama.cpp generated them: the prompt in
        one ubatch, then the reply's tokens one at a time."""
        self.reset()
        with torch.no_grad():
            logits = self.forward(prompt)[-1]
            for token in reply:
                logits = self.forward([token])[-1]
        return logits

    def greedy(self, prompt: list[int], max_tokens: int, eos_ids: set[int]) -> list[int]:
        """Greedy reply as llama.cpp reads it: the prompt in one ubatch, then one token at a
        time, up to end-of-sequence (left out) or `max_tokens`."""
        self.reset()
        reply = []
        with torch.no_grad():
            logits = self.forward(prompt)[-1]
            while len(reply) < max_tokens:
                token = int(logits.argmax())
                if token in eos_ids:
                    break
                reply.append(token)
                if len(reply) < max_tokens:
                    logits = self.forward([token])[-1]
        return reply


def recorded_differences(fidelity: dict, prompt_ids: list[list[int]], forced_ids: list[int]) -> list[dict]:
    """Every difference the fidelity run recorded: its context, pywebgpu's token and
    llama.cpp's, and the margins (pywebgpu's token over llama.cpp's) it read."""
    differences = []
    for number, (row, ids) in enumerate(zip(fidelity["replies"], prompt_ids), 1):
        found = row.get("first_difference")
        if found and "pywebgpu_token" in found and found.get("wllama_margin") is not None:
            differences.append({
                "where": f"reply {number}, token {found['position']}",
                "prompt": ids,
                "reply": row["pywebgpu_ids"][: found["position"]],
                "tokens": [found["pywebgpu_token"], found["wllama_token"]],
                "llama_cpp_margin": -found["wllama_margin"],
                "recorded_fp32_margin": found.get("eager_fp32_margin"),
            })  # fmt: skip
    for found in fidelity["teacher_forced"]["disagreements"]:
        if found.get("wllama_margin") is not None:
            differences.append({
                "where": f"forced, after {found['prefix_tokens']} tokens",
                "context": forced_ids[: found["prefix_tokens"]],
                "tokens": [found["pywebgpu_token"], found["wllama_token"]],
                "llama_cpp_margin": -found["wllama_margin"],
                "recorded_fp32_margin": found.get("eager_fp32_margin"),
            })  # fmt: skip
    return differences


def without_end(ids: list[int], eos_ids: set[int]) -> list[int]:
    """A recorded reply less its final end-of-sequence token, if it has one."""
    return ids[:-1] if ids and ids[-1] in eos_ids else ids


def evaluate(model: GgmlReference, fidelity: dict, differences: list[dict], prompt_ids, forced_ids, compared_lengths, eos_ids) -> dict:
    """One setting against llama.cpp's recorded run."""
    started = time.perf_counter()
    # Teacher-forced: llama.cpp decoded each prefix's last token on its own (one row per ubatch).
    forced_logits = model.logits_after(forced_ids, batch_rows=1)
    margins = []
    for found in differences:
        ours, theirs = found["tokens"][0][0], found["tokens"][1][0]
        if "prompt" in found:
            logits = model.replay(found["prompt"], found["reply"])
        else:
            logits = forced_logits[len(found["context"]) - 1]
        margins.append(float(logits[ours] - logits[theirs]))
    recorded = [found["llama_cpp_margin"] for found in differences]
    replies = [model.greedy(ids, fidelity["settings"]["max_tokens"], eos_ids) for ids in prompt_ids]
    identical = [reply == without_end(row["wllama_ids"], eos_ids) for reply, row in zip(replies, fidelity["replies"])]
    as_pywebgpu = sum(reply == without_end(row["pywebgpu_ids"], eos_ids) for reply, row in zip(replies, fidelity["replies"]))
    top = forced_logits.argmax(-1).tolist()
    top2 = forced_logits.topk(2, dim=-1).values
    return {
        "margins": margins,
        "sign_agreement": sum((ours > 0) == (theirs > 0) for ours, theirs in zip(margins, recorded)),
        "mean_abs_margin_error": float(np.mean([abs(ours - theirs) for ours, theirs in zip(margins, recorded)])),
        "replies": replies,
        "identical_replies": sum(identical),
        "reply_identical": identical,
        "replies_as_pywebgpu": as_pywebgpu,
        "forced_top1": {length: top[length - 1] for length in compared_lengths},
        "forced_top2_gap": {length: float(top2[length - 1, 0] - top2[length - 1, 1]) for length in compared_lengths},
        "seconds": time.perf_counter() - started,
    }


def llama_cpp_forced_top1(fidelity: dict, fp32_top1: dict[int, int], fp32_gap: dict[int, float], tolerance: float) -> dict[int, int]:
    """llama.cpp's top-1 after each compared prefix: the run recorded it where it differed
    from pywebgpu's; elsewhere it is pywebgpu's, whose logits equal fp32's to ~1e-5, so
    fp32's argmax (checked to lead by more than `tolerance`, else the position is ambiguous)."""
    recorded = {found["prefix_tokens"]: found["wllama_token"][0] for found in fidelity["teacher_forced"]["disagreements"]}
    for found in fidelity["teacher_forced"]["disagreements"]:
        if fp32_top1[found["prefix_tokens"]] != found["pywebgpu_token"][0]:
            raise SystemExit(f"fp32's top-1 after {found['prefix_tokens']} tokens is not pywebgpu's recorded one")
    ambiguous = [length for length, gap in fp32_gap.items() if length not in recorded and gap <= tolerance]
    if ambiguous:
        raise SystemExit(f"fp32's top-2 are within {tolerance} after {ambiguous} tokens: pywebgpu's top-1 there is not known")
    return {length: recorded.get(length, token) for length, token in fp32_top1.items()}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.ggml_reference", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--fidelity", type=Path, help="bench.fidelity's JSON report (default: the newest bench-results/fidelity-*.json)")
    parser.add_argument("--out", type=Path, help="the JSON report (default bench-results/ggml-reference-<commit>.json)")
    args = parser.parse_args(argv)

    from export_tools.bundled import gguf_path
    from pywebgpu.llm.chat_template import ChatTemplate

    from .fidelity import canonical_prefixes, chat_prompts
    from .options import MANIFEST, PROMPT_TEXT, model_tokenizer

    fidelity_path = args.fidelity or max((ROOT / "bench-results").glob("fidelity-*.json"), key=lambda path: path.stat().st_mtime)
    fidelity = json.loads(fidelity_path.read_text())
    manifest = json.loads(MANIFEST.read_text())
    tokenizer = model_tokenizer(MANIFEST)
    prompt_ids, _ = chat_prompts(tokenizer, ChatTemplate.from_template_string(manifest.get("chat_template")))
    forced_ids = tokenizer.encode(PROMPT_TEXT.read_text(), add_special_tokens=False)[: fidelity["settings"]["forced_tokens"]]
    compared_lengths = [length for length, _ in canonical_prefixes(tokenizer, forced_ids)]
    if len(compared_lengths) != fidelity["teacher_forced"]["positions"]:
        raise SystemExit(f"{len(compared_lengths)} canonical prefixes, the fidelity run compared {fidelity['teacher_forced']['positions']}")
    eos_ids = {token["id"] for token in manifest["special_tokens"]["eos"]}
    differences = recorded_differences(fidelity, prompt_ids, forced_ids)
    torch.set_num_threads(1)

    started = time.perf_counter()
    gguf = Path(gguf_path())
    model = GgmlReference(gguf)
    results = {}
    for setting in SETTINGS:
        model.setting = setting
        results[setting.name] = evaluate(model, fidelity, differences, prompt_ids, forced_ids, compared_lengths, eos_ids)
        print(f"{setting.name}: {results[setting.name]['seconds']:.0f} s", file=sys.stderr)
    fp32 = results[SETTINGS[0].name]
    llama_top1 = llama_cpp_forced_top1(fidelity, fp32["forced_top1"], fp32["forced_top2_gap"], 1e-3)
    for result in results.values():
        result["forced_agree"] = sum(result["forced_top1"][length] == token for length, token in llama_top1.items())
        result["forced_changed_from_fp32"] = sum(result["forced_top1"][length] != token for length, token in fp32["forced_top1"].items())
    llama_changed = sum(llama_top1[length] != token for length, token in fp32["forced_top1"].items())
    llama_as_pywebgpu = sum(row["identical"] for row in fidelity["replies"])

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    report = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "commit": commit,
        "command": " ".join(shlex.quote(a) for a in [".venv/bin/python", "-m", "bench.ggml_reference", *(sys.argv[1:] if argv is None else argv)]),
        "duration_s": time.perf_counter() - started,
        "gguf": gguf.name,
        "fidelity_report": str(fidelity_path.relative_to(ROOT)) if fidelity_path.is_relative_to(ROOT) else str(fidelity_path),
        "settings": [dataclasses.asdict(setting) for setting in SETTINGS],
        "differences": [
            {"where": found["where"], "tokens": found["tokens"], "llama_cpp_margin": found["llama_cpp_margin"], "recorded_fp32_margin": found["recorded_fp32_margin"],
             "margins": {name: result["margins"][index] for name, result in results.items()}}
            for index, found in enumerate(differences)
        ],
        "summary": [
            {"setting": name, "sign_agreement": result["sign_agreement"], "differences": len(differences), "mean_abs_margin_error": result["mean_abs_margin_error"],
             "identical_replies": result["identical_replies"], "replies": len(prompt_ids), "forced_agree": result["forced_agree"], "forced_positions": len(llama_top1),
             "replies_as_pywebgpu": result["replies_as_pywebgpu"], "forced_changed_from_fp32": result["forced_changed_from_fp32"]}
            for name, result in results.items()
        ],
        "llama_cpp": {"version": fidelity["wllama"]["version"], "replies_as_pywebgpu": llama_as_pywebgpu, "forced_changed_from_fp32": llama_changed},
        "replies": {name: {"ids": result["replies"], "identical": result["reply_identical"]} for name, result in results.items()},
        "forced_llama_cpp_top1": {str(length): token for length, token in llama_top1.items()},
        "forced_top1": {name: {str(length): token for length, token in result["forced_top1"].items()} for name, result in results.items()},
    }  # fmt: skip
    out = args.out or ROOT / "bench-results" / f"ggml-reference-{commit}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1) + "\n")

    names = [setting.name for setting in SETTINGS]
    print("margin of pywebgpu's token over llama.cpp's at each recorded difference:")
    print(f"{'where':28} {'tokens':28} {'llama.cpp':>9} " + " ".join(f"{index:>8}" for index in range(len(names))))
    for entry in report["differences"]:
        tokens = f"{entry['tokens'][0][1]!r}/{entry['tokens'][1][1]!r}"
        print(f"{entry['where']:28} {tokens[:28]:28} {entry['llama_cpp_margin']:9.4f} " + " ".join(f"{entry['margins'][name]:8.4f}" for name in names))
    print()
    print("against llama.cpp: margin signs, mean |margin error|, greedy replies identical, teacher-forced top-1 agreement;")
    print("against fp32 (pywebgpu): replies identical to pywebgpu's, teacher-forced top-1 changed from fp32's")
    print(f"{'#':>2} {'setting':42} {'signs':>7} {'|error|':>8} {'replies':>7} {'forced':>9} | {'replies':>7} {'changed':>7}")
    for index, row in enumerate(report["summary"]):
        print(f"{index:2} {row['setting']:42} {row['sign_agreement']:>3}/{row['differences']:<3} {row['mean_abs_margin_error']:8.4f} {row['identical_replies']:>4}/{row['replies']:<2} {row['forced_agree']:>5}/{row['forced_positions']} | {row['replies_as_pywebgpu']:>4}/{row['replies']:<2} {row['forced_changed_from_fp32']:>7}")
    print(f"{'':2} {'llama.cpp (recorded)':42} {'':>7} {'':>8} {'':>7} {'':>9} | {llama_as_pywebgpu:>4}/{len(prompt_ids):<2} {llama_changed:>7}")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
