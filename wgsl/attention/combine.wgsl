// The second pass of split.wgsl when rows were split over several workgroups: merges each
// (query row, head)'s per-split (max score m_i, sum l_i of exp(score - m_i), weighted
// value sums a_i) into out = sum_i a_i exp(m_i - m) / sum_i l_i exp(m_i - m), m = max m_i.
// One workgroup per (head, row): the threads share out the splits for m and the
// denominator, then the head dims for the output.
#include "common/limits.wgsl"
#include "common/reduce.wgsl"
#include "attention/params.wgsl"

override HEAD_DIM: u32 = 64u;

@group(0) @binding(0) var<storage, read_write> out: array<f32>;
@group(0) @binding(1) var<storage, read> partials: array<f32>;
@group(0) @binding(2) var<uniform> p: Params;
@group(0) @binding(3) var<uniform> position: Position;

const WORKGROUP_SIZE: u32 = 64u;
const MAX_SPLITS: u32 = 256u;

var<workgroup> rescale: array<f32, MAX_SPLITS>;  // exp(m_i - m)
var<workgroup> reduction: array<f32, WORKGROUP_SIZE>;

@compute @workgroup_size(WORKGROUP_SIZE)
fn combine(@builtin(workgroup_id) group: vec3<u32>, @builtin(local_invocation_index) thread: u32) {
  let head = group.x;
  let row = group.y;
  let keys = position.input_pos + row + 1u;
  let used_splits = (keys + p.chunk - 1u) / p.chunk;  // later splits had no keys of this row
  let first_slot = (row * p.q_heads + head) * p.splits;
  let stride = HEAD_DIM + 2u;

  var thread_max = LOWEST;
  for (var i = thread; i < used_splits; i += WORKGROUP_SIZE) {
    thread_max = max(thread_max, partials[(first_slot + i) * stride]);
  }
  let max_score = workgroup_max(thread, WORKGROUP_SIZE, thread_max);
  var thread_sum = 0.0;
  for (var i = thread; i < used_splits; i += WORKGROUP_SIZE) {
    let slot = (first_slot + i) * stride;
    let factor = exp(partials[slot] - max_score);
    rescale[i] = factor;
    thread_sum += partials[slot + 1u] * factor;
  }
  let inv_denominator = 1.0 / workgroup_sum(thread, WORKGROUP_SIZE, thread_sum);  // its barriers publish rescale[]

  for (var d = thread; d < HEAD_DIM; d += WORKGROUP_SIZE) {
    // Four splits per step, loaded together (latency, not bandwidth, is the limit).
    var total = 0.0;
    var i = 0u;
    for (; i + 4u <= used_splits; i += 4u) {
      let a = partials[(first_slot + i) * stride + 2u + d];
      let b = partials[(first_slot + i + 1u) * stride + 2u + d];
      let c = partials[(first_slot + i + 2u) * stride + 2u + d];
      let e = partials[(first_slot + i + 3u) * stride + 2u + d];
      total += a * rescale[i] + b * rescale[i + 1u] + c * rescale[i + 2u] + e * rescale[i + 3u];
    }
    for (; i < used_splits; i++) {
      total += partials[(first_slot + i) * stride + 2u + d] * rescale[i];
    }
    out[(row * p.q_heads + head) * HEAD_DIM + d] = total * inv_denominator;
  }
}
