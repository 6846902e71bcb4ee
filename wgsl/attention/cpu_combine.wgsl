// The second pass of cpu.wgsl with key splits: a thread per vec4 of the output (row, head,
// dims) merges the head's splits, out = sum_i a_i exp(m_i - m) / sum_i l_i exp(m_i - m)
// with m = max m_i, with no barriers (combine.wgsl's workgroup reductions cost CPU
// adapters more than the merge itself).
// Grid: (x, y) flatten ceil(seq_len * q_heads * VEC4S / COMBINE_WORKGROUP_SIZE) workgroups.
#include "attention/cpu_bindings.wgsl"

const COMBINE_WORKGROUP_SIZE: u32 = 64u;

@compute @workgroup_size(COMBINE_WORKGROUP_SIZE)
fn combine(
  @builtin(local_invocation_index) lid: u32,
  @builtin(workgroup_id) wg: vec3<u32>,
  @builtin(num_workgroups) groups: vec3<u32>,
) {
  // (row * q_heads + head) * VEC4S + the vec4 of the head's dims
  let index = (wg.x + wg.y * groups.x) * COMBINE_WORKGROUP_SIZE + lid;
  if (index >= p.seq_len * p.q_heads * VEC4S) {
    return;
  }
  let first_slot = index / VEC4S * p.splits;
  let dims = 2u + 4u * (index % VEC4S);  // the vec4's first dim in a slot
  var max_score = LOWEST;
  for (var i = 0u; i < p.splits; i++) {
    max_score = max(max_score, partials[(first_slot + i) * (HEAD_DIM + 2u)]);
  }
  var weight_sum = 0.0;
  var total = vec4<f32>();
  for (var i = 0u; i < p.splits; i++) {
    let slot = (first_slot + i) * (HEAD_DIM + 2u);
    let factor = exp(partials[slot] - max_score);
    weight_sum += partials[slot + 1u] * factor;
    let a = slot + dims;
    total += vec4<f32>(partials[a], partials[a + 1u], partials[a + 2u], partials[a + 3u]) * factor;
  }
  out[index] = total / weight_sum;
}
