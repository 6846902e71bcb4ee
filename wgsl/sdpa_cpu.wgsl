// Causal scaled dot-product attention over a KV cache for CPU adapters (SwiftShader,
// lavapipe), f32, in one pass with no workgroup memory and no barriers. The same layouts,
// grouped-query heads and Params as sdpa.wgsl; every key is read from the caches (this
// call's rows were copied there before the dispatch).
//
// Such adapters run a workgroup's invocations one SIMD batch after another, and every
// barrier switches between the batches: sdpa.wgsl's reductions made attention a fifth of
// a SmolLM2 decode step on SwiftShader. Here a quad (4 neighbouring invocations, which
// those adapters run as SIMD lanes) owns one query row of one query head; lane j holds
// dims [16 j, 16 j + 16) of q and of the output. The quad walks the row's keys once
// with an online softmax (running max, rescaled sum and weighted values): each lane
// dots its 16 dims, two quad swaps add the four partial scores, each lane accumulates
// its 16 dims of the values.
//
// Needs HEAD_DIM a multiple of 4, at most 64 (attention.py picks sdpa.wgsl otherwise).
// Grid: (x, y) flatten ceil(seq_len * q_heads * 4 / WORKGROUP_SIZE) workgroups.
enable subgroups;
// Quad operations sit in the loop over this row's keys, whose trip count differs between
// rows but never within a quad.
diagnostic(off, subgroup_uniformity);

override HEAD_DIM: u32 = 64u;

struct Params {
  seq_len: u32,
  q_heads: u32,
  kv_heads: u32,
  chunk: u32,   // unused: sdpa.wgsl's key split
  splits: u32,  // unused
  scale: f32,
}

struct Position {
  input_pos: u32,
}

@group(0) @binding(0) var<storage, read_write> out: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> q: array<vec4<f32>>;
@group(0) @binding(5) var<storage, read> k_cache: array<vec4<f32>>;
@group(0) @binding(6) var<storage, read> v_cache: array<vec4<f32>>;
@group(0) @binding(7) var<uniform> p: Params;
@group(0) @binding(8) var<uniform> position: Position;

const WORKGROUP_SIZE: u32 = 64u;
const LANES: u32 = 4u;
const LANE_VEC4S: u32 = 4u;  // 16 dims per lane
override VEC4S: u32 = HEAD_DIM / 4u;
// The most negative finite f32: the running max before any key.
const LOWEST: f32 = -0x1.fffffep+127f;

// Vec4 `index` of the row at `base` in `q`, `k_cache` or `v_cache`; zero past HEAD_DIM
// (a lane's last vec4s when HEAD_DIM < 64).
fn q_vec4(base: u32, index: u32) -> vec4<f32> {
  return select(vec4<f32>(), q[base + min(index, VEC4S - 1u)], index < VEC4S);
}

fn key_vec4(base: u32, index: u32) -> vec4<f32> {
  return select(vec4<f32>(), k_cache[base + min(index, VEC4S - 1u)], index < VEC4S);
}

fn value_vec4(base: u32, index: u32) -> vec4<f32> {
  return select(vec4<f32>(), v_cache[base + min(index, VEC4S - 1u)], index < VEC4S);
}

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(
  @builtin(local_invocation_index) lid: u32,
  @builtin(workgroup_id) wg: vec3<u32>,
  @builtin(num_workgroups) groups: vec3<u32>,
) {
  let thread = (wg.x + wg.y * groups.x) * WORKGROUP_SIZE + lid;
  let tasks = p.seq_len * p.q_heads;
  // A whole quad is past the last task or none of it: no lane leaves a quad early.
  let task = thread / LANES;  // row * q_heads + head
  if (task >= tasks) {
    return;
  }
  let lane = thread % LANES;
  let row = task / p.q_heads;
  let head = task % p.q_heads;
  let kv_head = head / (p.q_heads / p.kv_heads);
  let first = lane * LANE_VEC4S;

  let q_base = task * VEC4S;
  let q0 = q_vec4(q_base, first) * p.scale;
  let q1 = q_vec4(q_base, first + 1u) * p.scale;
  let q2 = q_vec4(q_base, first + 2u) * p.scale;
  let q3 = q_vec4(q_base, first + 3u) * p.scale;

  let keys = position.input_pos + row + 1u;  // causal: up to and including this row's position
  var running_max = LOWEST;
  var weight_sum = 0.0;
  var acc0 = vec4<f32>();
  var acc1 = vec4<f32>();
  var acc2 = vec4<f32>();
  var acc3 = vec4<f32>();
  for (var key = 0u; key < keys; key++) {
    let base = (key * p.kv_heads + kv_head) * VEC4S;
    var s = dot(q0, key_vec4(base, first)) + dot(q1, key_vec4(base, first + 1u))
      + dot(q2, key_vec4(base, first + 2u)) + dot(q3, key_vec4(base, first + 3u));
    s += quadSwapX(s);
    s += quadSwapY(s);
    let new_max = max(running_max, s);
    let rescale = exp(running_max - new_max);
    let weight = exp(s - new_max);
    running_max = new_max;
    weight_sum = weight_sum * rescale + weight;
    acc0 = acc0 * rescale + weight * value_vec4(base, first);
    acc1 = acc1 * rescale + weight * value_vec4(base, first + 1u);
    acc2 = acc2 * rescale + weight * value_vec4(base, first + 2u);
    acc3 = acc3 * rescale + weight * value_vec4(base, first + 3u);
  }

  let results = array<vec4<f32>, LANE_VEC4S>(acc0, acc1, acc2, acc3);
  for (var i = 0u; i < LANE_VEC4S; i++) {
    if (first + i < VEC4S) {
      out[q_base + first + i] = results[i] / weight_sum;
    }
  }
}
