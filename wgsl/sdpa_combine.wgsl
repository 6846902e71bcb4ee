// The second pass of sdpa.wgsl when rows were split over several workgroups: merge each
// (query row, head)'s per-split (max score m_i, sum l_i of exp(score - m_i), weighted
// value sums a_i) into out = sum_i a_i exp(m_i - m) / sum_i l_i exp(m_i - m), m = max m_i.
override HEAD_DIM: u32 = 64u;

struct Params {
  seq_len: u32,
  q_heads: u32,
  kv_heads: u32,
  input_pos: u32,
  cached_len: u32,
  chunk: u32,
  splits: u32,
  scale: f32,
}

@group(0) @binding(0) var<storage, read_write> out: array<f32>;
@group(0) @binding(1) var<storage, read> partials: array<f32>;
@group(0) @binding(2) var<uniform> p: Params;

const WORKGROUP_SIZE: u32 = 64u;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) group: vec3<u32>, @builtin(local_invocation_index) thread: u32) {
  let head = group.x;
  let row = group.y;
  let keys = p.input_pos + row + 1u;
  let used_splits = (keys + p.chunk - 1u) / p.chunk;  // later splits had no keys of this row
  let first_slot = (row * p.q_heads + head) * p.splits;
  let stride = HEAD_DIM + 2u;

  var max_score = partials[first_slot * stride];
  for (var i = 1u; i < used_splits; i++) {
    max_score = max(max_score, partials[(first_slot + i) * stride]);
  }
  var weight_sum = 0.0;
  for (var i = 0u; i < used_splits; i++) {
    let slot = (first_slot + i) * stride;
    weight_sum += partials[slot + 1u] * exp(partials[slot] - max_score);
  }
  for (var d = thread; d < HEAD_DIM; d += WORKGROUP_SIZE) {
    var total = 0.0;
    for (var i = 0u; i < used_splits; i++) {
      let slot = (first_slot + i) * stride;
      total += partials[slot + 2u + d] * exp(partials[slot] - max_score);
    }
    out[(row * p.q_heads + head) * HEAD_DIM + d] = total / weight_sum;
  }
}
