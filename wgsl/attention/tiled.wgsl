// Causal attention over a KV cache for a prefill's many rows on GPUs with subgroups, for
// head dims that are multiples of 4 up to 128, without ROPE (a prefill's RoPE runs as its
// own op before). The split and whole_row kernels read every key once per row and head;
// here a workgroup takes TILE_PAIRS (query row, head) pairs, the heads of one kv head
// (Hq / Hkv of them) at TILE_PAIRS / (Hq / Hkv) consecutive rows, and walks their keys
// KEY_BLOCK at a time, staging each block's keys and values in workgroup memory, where
// every pair reads them (16 KiB: 32 keys of head dims up to 64, 16 of head dims up to 128).
// A quad per pair: lane j holds q and the output at the dims' vec4 groups j, j + 4, j + 8,
// j + 12 (and j + 16 .. j + 28 past head dim 64), dots them with a key, and two quad swaps
// add the four partial scores. Softmax online: each 8 keys' scores raise the pair's
// running max, which rescales its sum and outputs so far (flash attention).
// With UPDATE_CACHE each workgroup also stores its rows' new keys and values in the caches
// (the attention reads new keys from k and v, never from the rows being written).
// Grid: (Hkv, ceil(S / rows per workgroup)). The host puts the subgroup directives first.
#include "attention/rows.wgsl"

const TILE_PAIRS: u32 = 32u;  // the handler's pairs per workgroup
const TILED_THREADS: u32 = 4u * TILE_PAIRS;
const TILE_VECS: u32 = 512u;  // vec4s of a staged block of keys (or values): 8 KiB
// vec4 groups of a staged key: 16, or 32 past head dim 64 (TILED_MAX_HEAD_DIM / 4).
override TILE_GROUPS: u32 = 16u * ((DIM_GROUPS + 15u) / 16u);
override KEY_BLOCK: u32 = TILE_VECS / TILE_GROUPS;  // a multiple of 8
// Past head dim 64 a lane holds 8 vec4 groups of q and of the output, else 4: the second
// four are written out under `if (WIDE_HEADS)`, a branch fixed in the pipeline.
override WIDE_HEADS: bool = TILE_GROUPS > 16u;

// A block's keys and values, [KEY_BLOCK][TILE_GROUPS] (zeros past the head dim and past
// the last key).
var<workgroup> key_tile: array<vec4<f32>, TILE_VECS>;
var<workgroup> value_tile: array<vec4<f32>, TILE_VECS>;

// Stages keys [first, first + KEY_BLOCK) of kv head `kv_head` below `end`, by the
// workgroup's threads.
fn stage_keys(thread: u32, first: u32, end: u32, kv_head: u32) {
  for (var e = thread; e < TILE_VECS; e += TILED_THREADS) {
    let key = first + e / TILE_GROUPS;
    let g = e % TILE_GROUPS;
    var staged_key = vec4<f32>();
    var staged_value = vec4<f32>();
    if (key < end && g < DIM_GROUPS) {
      let i = row_offset(key, kv_head) + 4u * g;
      let from_cache = key < cached_len();
      if (from_cache) {
        staged_key = cached_key4(i);
      } else {
        staged_key = as_cached(new_key4(i));
      }
      staged_value = value4(from_cache, i);
    }
    key_tile[e] = staged_key;
    value_tile[e] = staged_value;
  }
}

// A lane's vec4 groups of q (scaled) or of an output: j + 4i for i < 4, or < 8 with
// WIDE_HEADS (else a, b, c, d stay zero).
struct LaneGroups {
  g0: vec4<f32>, g1: vec4<f32>, g2: vec4<f32>, g3: vec4<f32>,
  a: vec4<f32>, b: vec4<f32>, c: vec4<f32>, d: vec4<f32>,
}

// The (scaled) dot product of a pair's q with staged key j: this lane's vec4 groups, then
// the quad's four partial sums added up.
fn tile_score(q: LaneGroups, j: u32, lane: u32) -> f32 {
  let at = j * TILE_GROUPS + lane;
  var s = dot(q.g0, key_tile[at]) + dot(q.g1, key_tile[at + 4u]) + dot(q.g2, key_tile[at + 8u]) + dot(q.g3, key_tile[at + 12u]);
  if (WIDE_HEADS) {
    s += dot(q.a, key_tile[at + 16u]) + dot(q.b, key_tile[at + 20u]) + dot(q.c, key_tile[at + 24u]) + dot(q.d, key_tile[at + 28u]);
  }
  s += quadSwapX(s);
  return s + quadSwapY(s);
}

// This lane's vec4 group `g` of q at (row, head), times the scale (zeros past the head dim).
fn tile_q(row: u32, head: u32, g: u32) -> vec4<f32> {
  if (g >= DIM_GROUPS) {
    return vec4<f32>();
  }
  let i = (row * p.q_heads + head) * HEAD_DIM + 4u * g;
  return vec4<f32>(q[i], q[i + 1u], q[i + 2u], q[i + 3u]) * p.scale;
}

fn tile_q_groups(row: u32, head: u32, lane: u32) -> LaneGroups {
  var groups = LaneGroups();
  groups.g0 = tile_q(row, head, lane);
  groups.g1 = tile_q(row, head, lane + 4u);
  groups.g2 = tile_q(row, head, lane + 8u);
  groups.g3 = tile_q(row, head, lane + 12u);
  if (WIDE_HEADS) {
    groups.a = tile_q(row, head, lane + 16u);
    groups.b = tile_q(row, head, lane + 20u);
    groups.c = tile_q(row, head, lane + 24u);
    groups.d = tile_q(row, head, lane + 28u);
  }
  return groups;
}

fn store_tile_output(row: u32, head: u32, g: u32, value: vec4<f32>) {
  if (g < DIM_GROUPS) {
    let i = (row * p.q_heads + head) * HEAD_DIM + 4u * g;
    out[i] = value.x;
    out[i + 1u] = value.y;
    out[i + 2u] = value.z;
    out[i + 3u] = value.w;
  }
}

// The weighted sum of 8 staged values' vec4 group at `at` (key j's at at + j * TILE_GROUPS).
fn weighted_values8(a: vec4<f32>, b: vec4<f32>, at: u32) -> vec4<f32> {
  let g = TILE_GROUPS;
  return a.x * value_tile[at] + a.y * value_tile[at + g] + a.z * value_tile[at + 2u * g] + a.w * value_tile[at + 3u * g]
    + b.x * value_tile[at + 4u * g] + b.y * value_tile[at + 5u * g] + b.z * value_tile[at + 6u * g]
    + b.w * value_tile[at + 7u * g];
}

@compute @workgroup_size(TILED_THREADS)
fn tiled(
  @builtin(workgroup_id) group: vec3<u32>,
  @builtin(num_workgroups) groups: vec3<u32>,
  @builtin(local_invocation_index) thread: u32,
) {
  let group_size = p.q_heads / p.kv_heads;
  let rows = TILE_PAIRS / group_size;  // per workgroup
  let kv_head = group.x;
  // The last rows first: they have the most keys to walk, and GPUs start workgroups
  // about in the order of their index (x first), so the longest ones do not start last.
  let first_row = (groups.y - 1u - group.y) * rows;
  let pair = thread / 4u;
  let lane = thread % 4u;
  // Pairs past the rows of this workgroup, or past S, compute with the others (they hold
  // the barriers and the quads) and store nothing.
  let row = first_row + pair / group_size;
  let head = kv_head * group_size + pair % group_size;
  let stores = pair < rows * group_size && row < p.seq_len;
  let last_key = position.input_pos + row;  // the pair's keys: [0, last_key]
  let keys_end = position.input_pos + min(first_row + rows, p.seq_len);  // the workgroup's

  if (UPDATE_CACHE) {
    for (var r = first_row; r < min(first_row + rows, p.seq_len); r++) {
      store_new_row(thread, TILED_THREADS, r, kv_head);
    }
  }
  let q = tile_q_groups(min(row, p.seq_len - 1u), head, lane);
  var running_max = LOWEST;
  var sum = 0.0;
  var o = LaneGroups();
  for (var first = 0u; first < keys_end; first += KEY_BLOCK) {
    stage_keys(thread, first, keys_end, kv_head);
    workgroupBarrier();
    // 8 keys at a time, their scores held in two vec4s (registers; an array indexed in a
    // loop may live in memory). Key 0 is in every pair's first 8, so the max is a score
    // from then on and the masked keys' exp(LOWEST - max) is 0.
    for (var j = 0u; j < KEY_BLOCK; j += 8u) {
      let key = first + j;
      if (key >= keys_end) {
        break;  // past every pair's keys (the same for the whole workgroup)
      }
      let masked_a = vec4<u32>(key, key + 1u, key + 2u, key + 3u) > vec4<u32>(last_key);
      let masked_b = vec4<u32>(key + 4u, key + 5u, key + 6u, key + 7u) > vec4<u32>(last_key);
      let scores_a = select(vec4<f32>(
        tile_score(q, j, lane), tile_score(q, j + 1u, lane),
        tile_score(q, j + 2u, lane), tile_score(q, j + 3u, lane),
      ), vec4<f32>(LOWEST), masked_a);
      let scores_b = select(vec4<f32>(
        tile_score(q, j + 4u, lane), tile_score(q, j + 5u, lane),
        tile_score(q, j + 6u, lane), tile_score(q, j + 7u, lane),
      ), vec4<f32>(LOWEST), masked_b);
      let top = max(scores_a, scores_b);
      let new_max = max(running_max, max(max(top.x, top.y), max(top.z, top.w)));
      let rescale = exp(running_max - new_max);
      running_max = new_max;
      let weights_a = exp(scores_a - new_max);
      let weights_b = exp(scores_b - new_max);
      sum = sum * rescale + dot(weights_a + weights_b, vec4<f32>(1.0));
      let at = j * TILE_GROUPS + lane;
      o.g0 = o.g0 * rescale + weighted_values8(weights_a, weights_b, at);
      o.g1 = o.g1 * rescale + weighted_values8(weights_a, weights_b, at + 4u);
      o.g2 = o.g2 * rescale + weighted_values8(weights_a, weights_b, at + 8u);
      o.g3 = o.g3 * rescale + weighted_values8(weights_a, weights_b, at + 12u);
      if (WIDE_HEADS) {
        o.a = o.a * rescale + weighted_values8(weights_a, weights_b, at + 16u);
        o.b = o.b * rescale + weighted_values8(weights_a, weights_b, at + 20u);
        o.c = o.c * rescale + weighted_values8(weights_a, weights_b, at + 24u);
        o.d = o.d * rescale + weighted_values8(weights_a, weights_b, at + 28u);
      }
    }
    workgroupBarrier();
  }
  if (stores) {
    store_tile_output(row, head, lane, o.g0 / sum);
    store_tile_output(row, head, lane + 4u, o.g1 / sum);
    store_tile_output(row, head, lane + 8u, o.g2 / sum);
    store_tile_output(row, head, lane + 12u, o.g3 / sum);
    if (WIDE_HEADS) {
      store_tile_output(row, head, lane + 16u, o.a / sum);
      store_tile_output(row, head, lane + 20u, o.b / sum);
      store_tile_output(row, head, lane + 24u, o.c / sum);
      store_tile_output(row, head, lane + 28u, o.d / sum);
    }
  }
}
