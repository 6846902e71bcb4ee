"""Attention over a KV cache, as ExecuTorch's Llama export builds it (CustomKVCache's
llama::update_cache + SDPACustom's llama::custom_sdpa, which the Vulkan partitioner fuses
into sdpa_with_kv_cache). The caches are module buffers updated in place, so every case
is stateful: a prefill at position 0, single-token decode steps, and chunks at later
positions run in order on one loaded graph. Grouped-query head counts, odd head dims,
rows whose keys the kernel splits over several workgroups."""

import dataclasses

import torch
from torch.export import Dim

import executorch.extension.llm.custom_ops.custom_ops  # noqa: F401  (registers torch.ops.llama.*)
from op_cases.rope import Rope, tables
from op_harness import OpCase, in_both_kernel_sets, without_subgroups


class KVCacheAttention(torch.nn.Module):
    """Store this call's k/v at rows [input_pos, input_pos + S) of the caches, then attend
    causally over [0, input_pos + S). Inputs: q [1, S, Hq, D], k and v [1, S, Hkv, D],
    input_pos int64 [1] (a SymInt in the graph, read with .item() as Llama does)."""

    def __init__(self, context, kv_heads, head_dim, scale=None):
        super().__init__()
        self.scale = scale
        self.register_buffer("k_cache", torch.zeros(1, context, kv_heads, head_dim))
        self.register_buffer("v_cache", torch.zeros(1, context, kv_heads, head_dim))

    def forward(self, q, k, v, input_pos):
        start = input_pos[0].item()
        torch._check(start >= 0)
        torch._check(start < self.k_cache.size(1))
        return self.attend(q, k, v, start)

    def attend(self, q, k, v, start):
        if q.dtype == torch.float64:  # the float64 reference (the llama ops are float32-only)
            return self.reference(q, k, v, start)
        torch.ops.llama.update_cache(k, self.k_cache, start)
        torch.ops.llama.update_cache(v, self.v_cache, start)
        return torch.ops.llama.custom_sdpa(q, self.k_cache, self.v_cache, start, None, 0, True, self.scale)

    def reference(self, q, k, v, start):
        seq, q_heads, head_dim = q.shape[1], q.shape[2], q.shape[3]
        self.k_cache[:, start : start + seq] = k
        self.v_cache[:, start : start + seq] = v
        length = start + seq
        groups = q_heads // self.k_cache.shape[2]
        keys = self.k_cache[0, :length].repeat_interleave(groups, dim=1)  # [L, Hq, D]
        values = self.v_cache[0, :length].repeat_interleave(groups, dim=1)
        scale = self.scale if self.scale is not None else head_dim**-0.5
        scores = torch.einsum("shd,lhd->hsl", q[0], keys) * scale
        visible = torch.arange(length)[None, :] <= start + torch.arange(seq)[:, None]
        scores = scores.masked_fill(~visible, float("-inf"))
        return torch.einsum("hsl,lhd->shd", scores.softmax(-1), values)[None]


class CacheUpdate(torch.nn.Module):
    """llama::update_cache alone (its result read back through a multiply)."""

    def __init__(self, context, heads, head_dim):
        super().__init__()
        self.register_buffer("cache", torch.zeros(1, context, heads, head_dim))

    def forward(self, value, input_pos):
        start = input_pos[0].item()
        torch._check(start >= 0)
        torch._check(start < self.cache.size(1))
        if value.dtype == torch.float64:
            self.cache[:, start : start + value.shape[1]] = value
        else:
            torch.ops.llama.update_cache(value, self.cache, start)
        return self.cache * 1.0


class RopeKVCacheAttention(KVCacheAttention):
    """Llama's attention core: RoPE on q and k with the rows [input_pos, input_pos + S) of
    its tables, then KVCacheAttention. Where the kernels for GPUs run, the runtime rotates
    q and k inside attention (and stores the rotated keys)."""

    def __init__(self, context, kv_heads, head_dim):
        super().__init__(context, kv_heads, head_dim)
        cos, sin = tables(head_dim, 0, context)
        self.register_buffer("freqs_cos", cos)
        self.register_buffer("freqs_sin", sin)

    def forward(self, q, k, v, input_pos):
        start = input_pos[0].item()
        torch._check(start >= 0)
        seq = q.shape[1]
        torch._check(start + seq <= self.k_cache.size(1))
        q, k = Rope()(q, k, self.freqs_cos.narrow(0, start, seq), self.freqs_sin.narrow(0, start, seq))
        return self.attend(q, k, v, start)


def r(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def step(position, seq, q_heads, kv_heads, head_dim, seed):
    """One call's inputs: q, k, v for `seq` new tokens at `position`."""
    return (
        r(1, seq, q_heads, head_dim, seed=seed),
        r(1, seq, kv_heads, head_dim, seed=seed + 1),
        r(1, seq, kv_heads, head_dim, seed=seed + 2),
        torch.tensor([position]),
    )


def consecutive(*chunks):
    """(position, length) steps for chunks of `chunks[i]` tokens, one after another from 0."""
    steps, position = [], 0
    for length in chunks:
        steps.append((position, length))
        position += length
    return steps


def attention_case(case_id, steps, context, q_heads, kv_heads, head_dim, scale=None, **options):
    """A stateful case: one run per (position, length) step, in order, run with the
    kernels for CPU adapters and with those for GPUs."""
    runs = [step(position, length, q_heads, kv_heads, head_dim, seed=10 * i) for i, (position, length) in enumerate(steps)]
    seq = Dim("seq", min=1, max=max(length for _, length in steps))
    return in_both_kernel_sets(OpCase(
        case_id,
        KVCacheAttention(context, kv_heads, head_dim, scale),
        runs[0],
        more_runs=runs[1:],
        dynamic_shapes=({1: seq}, {1: seq}, {1: seq}, None),
        stateful=True,
        **options,
    ))


def rope_attention_case(case_id, steps, context, q_heads, kv_heads, head_dim):
    """attention_case's runs through RopeKVCacheAttention, both kernel sets expecting the
    RoPE op fused into the attention (runtime/fusion/; decode steps rotate in the
    attention kernel: attention/split.wgsl's ROPE, attention/cpu.wgsl's ROPE_DECODE)."""
    module = RopeKVCacheAttention(context, kv_heads, head_dim)
    return [
        dataclasses.replace(case, module=module, expect_ops=("rope + sdpa_with_kv_cache (fused)",))
        for case in attention_case(case_id, steps, context, q_heads, kv_heads, head_dim)
    ]


def upgraded(cases, upgrade_before_run=0):
    """The -cpu case of `cases` with the graph's upgrades built before run
    `upgrade_before_run` (GraphRuntime.build_upgrades, as a chat starts it after a reply in
    the browser): calls of several rows before it run attention/cpu.wgsl's 2-row kernel, after
    it the 4-row one; without subgroups none of attention/cpu.wgsl's kernels (the split and
    whole-row kernels run, before and after)."""
    (case,) = [case for case in cases if case.kernel_set == "cpu"]
    rows = [q.shape[1] for q, *_ in case.runs]
    expect = tuple(
        (run, "sdpa_cpu_rows4" if run >= upgrade_before_run else "sdpa_cpu_rows2") for run, m in enumerate(rows) if m > 1
    )
    case_id = case.id.removesuffix("-cpu")
    return dataclasses.replace(case, id=f"{case_id}-upgraded-cpu", upgrade_before_run=upgrade_before_run, expect_kernels=expect, expect_kernels_without_subgroups=())


# Prefill, decode steps, then a multi-token chunk at a later position.
GQA2 = attention_case("sdpa-kv-gqa2", consecutive(5, 1, 1, 1, 3, 1), 16, q_heads=4, kv_heads=2, head_dim=8)

CASES = [
    *GQA2,
    # Adapters without subgroups run attention/split.wgsl with the kernels for CPU adapters.
    without_subgroups(GQA2[0]),
    *attention_case("sdpa-kv-gqa3-odd-dim", consecutive(7, 1, 1, 2, 1), 24, q_heads=6, kv_heads=2, head_dim=20),
    *attention_case("sdpa-kv-mha-hd7", consecutive(3, 1, 1), 8, q_heads=3, kv_heads=3, head_dim=7),
    # One query head per kv head: attention/cpu.wgsl's quads take a head each (QUAD_HEADS 1),
    # over 1 to 9 keys (whole and partial blocks of keys).
    *attention_case("sdpa-kv-mha", consecutive(6, 1, 2), 12, q_heads=2, kv_heads=2, head_dim=16),
    # Over 64 keys: rows split over several workgroups, merged by the combine pass.
    *attention_case("sdpa-kv-long-context", consecutive(40, 33, 1, 1, 1), 96, q_heads=4, kv_heads=2, head_dim=64),
    # Llama-3.2-1B's head geometry (32 query heads over 8 kv heads, head dim 64).
    *attention_case("sdpa-kv-llama-heads", consecutive(4, 1, 1), 8, q_heads=32, kv_heads=8, head_dim=64),
    # Enough rows x heads that a workgroup takes many keys (up to 1024, then a split);
    # jumping ahead leaves zero rows in the cache, which the reference sees too.
    *attention_case(
        "sdpa-kv-big-chunks", [(0, 17), (1090, 17), (1107, 1)], 1110, q_heads=32, kv_heads=4, head_dim=16
    ),
    # Decode across the points where the grid of splits grows (rows up to 64, 128 keys),
    # then back to an earlier position within the grid (later splits find no keys).
    *attention_case(
        "sdpa-kv-decode-across-grids",
        [*consecutive(62, 1, 1, 1), (65, 64), *[(129 + i, 1) for i in range(3)], (20, 1), (21, 1)],
        140, q_heads=4, kv_heads=2, head_dim=16,
    ),
    # Decode past the keys one workgroup per row takes (ops/attention/selection.py's
    # WHOLE_ROW_MAX_KEYS = 1,024: then split over workgroups and merged), and back below.
    *attention_case(
        "sdpa-kv-decode-past-whole-row", [*consecutive(1022, 1, 1, 1), (500, 1)], 1030, q_heads=4, kv_heads=2, head_dim=8
    ),
    # An 8,192-token context, as long-context exports have: a chunk near its end (tiled on
    # GPUs), then decode steps up to its last position, whose row takes every key (on GPUs
    # split into 128 workgroups of 64 keys, ops/attention/selection.py's split_grid).
    *attention_case(
        "sdpa-kv-8k-context", [(0, 3), (8000, 66), (8066, 1), (8189, 1), (8191, 1)], 8192, q_heads=8, kv_heads=2, head_dim=16
    ),
    # Three query heads a kv head past 1,024 keys (split on GPUs): decode steps, and a
    # 17-row call whose splits hold some of its new keys.
    *attention_case(
        "sdpa-kv-split-gqa3", [(0, 2), (1100, 1), (1101, 1), (1040, 17)], 1104, q_heads=6, kv_heads=2, head_dim=32
    ),
    # A prefill of 70 rows and a chunk of 64 at position 70 run attention/tiled.wgsl on GPUs
    # (ops/attention/selection.py's TILED_MIN_ROWS): 8 query heads per kv head, so 4 rows per
    # workgroup; keys cached and new in one block; decode steps between.
    *attention_case(
        "sdpa-kv-tiled-gqa8", [(0, 70), (70, 1), (71, 64), (135, 1)], 140, q_heads=32, kv_heads=4, head_dim=16
    ),
    # Past head dim 64 attention/tiled.wgsl stages blocks of 16 keys and each lane holds 8
    # vec4 groups: head dim 100 (lanes holding 7 and 6 groups; 3 query heads per kv head,
    # 10 rows per workgroup), and 128 (Llama-3.2-3B's; one head per kv head, 32 rows).
    *attention_case(
        "sdpa-kv-tiled-hd100", [(0, 70), (70, 1), (71, 64)], 136, q_heads=6, kv_heads=2, head_dim=100
    ),
    *attention_case(
        "sdpa-kv-tiled-hd128", [(0, 67), (67, 1), (68, 65)], 136, q_heads=2, kv_heads=2, head_dim=128
    ),
    # head_dim 256: the kernel's largest (4 dims per thread); a scale other than 1/sqrt(D).
    *attention_case("sdpa-kv-hd256-scale", consecutive(2, 1), 4, q_heads=2, kv_heads=1, head_dim=256, scale=0.05),
    # Unfused: update_cache ops, then llama.custom_sdpa over the caches.
    *attention_case(
        "custom-sdpa-unfused", consecutive(6, 1, 2), 12, q_heads=6, kv_heads=3, head_dim=16, unfused_patterns=("causal_sdpa",)
    ),
    # The same with a prefill of 66 rows: attention/tiled.wgsl over caches that already hold
    # this call's rows (no UPDATE_CACHE).
    *attention_case(
        "custom-sdpa-unfused-tiled", [(0, 66), (66, 1)], 72, q_heads=6, kv_heads=3, head_dim=16,
        unfused_patterns=("causal_sdpa",),
    ),
    # RoPE inside attention (GPU kernels) or before it (CPU kernels): prefill, decode steps
    # and a chunk; then rows split over workgroups (head dim 64).
    *rope_attention_case("rope-sdpa-kv-gqa2", consecutive(5, 1, 1, 1, 3, 1), 16, q_heads=4, kv_heads=2, head_dim=8),
    *rope_attention_case("rope-sdpa-kv-long-context", consecutive(40, 33, 1, 1, 1), 96, q_heads=4, kv_heads=2, head_dim=64),
    # 8 query heads per kv head: two of attention/cpu.wgsl's quads per kv head, each storing
    # a decode step's new key and value; head dim 20: lanes holding 8, 4 and no dims.
    *rope_attention_case("rope-sdpa-kv-two-quads-hd20", consecutive(3, 1, 1, 2, 1), 12, q_heads=16, kv_heads=2, head_dim=20),
    # SmolLM2's heads, decode steps across ops/attention/selection.py's CPU_SPLIT_MIN_KEYS (512:
    # attention/cpu.wgsl then splits a row's keys over two quads per kv head and merges them),
    # then back below it.
    *rope_attention_case(
        "rope-sdpa-kv-cpu-decode-split", [*consecutive(510, 1, 1, 1), (100, 1)], 516, q_heads=9, kv_heads=3, head_dim=64
    ),
    # The same with RoPE: the split kernel rotating a decode step's q and new key.
    *rope_attention_case(
        "rope-sdpa-kv-split-gqa3", [(0, 2), (1100, 1), (1101, 1), (1040, 17)], 1104, q_heads=6, kv_heads=2, head_dim=32
    ),
    # attention/cpu.wgsl's 4-row kernel, built after the load: a prefill before the upgrade and
    # a 3-row chunk after it; SmolLM2-like heads over 40 and 33 rows; the 1B's (4 heads a
    # quad) over 7 and 66; two quads a kv head over 2 rows (half a quad's rows); one head
    # a quad.
    upgraded(GQA2, upgrade_before_run=2),
    upgraded(rope_attention_case("rope-sdpa-kv-long-context", consecutive(40, 33, 1, 1, 1), 96, q_heads=4, kv_heads=2, head_dim=64)),
    upgraded(attention_case("sdpa-kv-llama-heads-rows", consecutive(7, 1, 66), 80, q_heads=32, kv_heads=8, head_dim=64)),
    upgraded(rope_attention_case("rope-sdpa-kv-two-quads-hd20", consecutive(3, 1, 1, 2, 1), 12, q_heads=16, kv_heads=2, head_dim=20), 1),
    upgraded(attention_case("sdpa-kv-mha", consecutive(6, 1, 2), 12, q_heads=2, kv_heads=2, head_dim=16)),
    OpCase(
        "update-cache-alone",
        CacheUpdate(10, 2, 6),
        (r(1, 4, 2, 6), torch.tensor([0])),
        more_runs=[(r(1, 1, 2, 6, seed=1), torch.tensor([4])), (r(1, 3, 2, 6, seed=2), torch.tensor([5]))],
        dynamic_shapes=({1: Dim("seq", min=1, max=5)}, None),
        stateful=True,
    ),
    # The runs as one batch of submits: each decode step's copy at its position patches the
    # schedule the step before waits in, so the runtime records a new one; the values
    # written (the inputs) are copied in-stream before each run.
    OpCase(
        "update-cache-batched",
        CacheUpdate(10, 2, 6),
        (r(1, 2, 2, 6), torch.tensor([0])),
        more_runs=[
            *((r(1, 1, 2, 6, seed=seed), torch.tensor([seed + 1])) for seed in (1, 2, 3)),
            (r(1, 3, 2, 6, seed=4), torch.tensor([5])),
        ],
        dynamic_shapes=({1: Dim("seq", min=1, max=5)}, None),
        stateful=True,
        batched=True,
    ),
]
