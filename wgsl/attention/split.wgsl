// Causal attention over a KV cache for GPUs, split-KV: grid (Hq, S, splits), a workgroup
// per query head, row and split of that row's keys, [split * chunk, (split + 1) * chunk),
// so that a single decode row still fills the GPU. With one split its result is the
// output; with several, (max, sum, weighted values) go to `partials` for combine.wgsl.
#include "attention/row_attention.wgsl"

@compute @workgroup_size(WORKGROUP_SIZE)
fn split(@builtin(workgroup_id) group: vec3<u32>, @builtin(local_invocation_index) thread: u32) {
  let head = group.x;
  let row = group.y;
  let split = group.z;
  let group_size = p.q_heads / p.kv_heads;
  let kv_head = head / group_size;
  let keys = position.input_pos + row + 1u;  // causal: up to and including this row's position
  let first = split * p.chunk;
  if (first >= keys) {
    return;  // a split past this row's keys (rows differ in length): nothing to do
  }
  let count = min(p.chunk, keys - first);
  let q_base = (row * p.q_heads + head) * HEAD_DIM;

  load_scaled_q(thread, q_base, row);
  if (UPDATE_CACHE && split == 0u && head % group_size == 0u) {
    store_new_row(thread, WORKGROUP_SIZE, row, kv_head);
  }
  workgroupBarrier();

  let softmax = softmax_weights(thread, WORKGROUP_SIZE, first, count, kv_head);
  let max_score = softmax.x;
  let weight_sum = softmax.y;

  let dim_group = thread % DIM_GROUPS;
  let subset = thread / DIM_GROUPS;
  if (subset < SUBSETS) {
    subset_sums[subset * DIM_GROUPS + dim_group] = chunk_values(first, count, subset, SUBSETS, kv_head, 4u * dim_group);
  }
  workgroupBarrier();

  let slot = ((row * p.q_heads + head) * p.splits + split) * (HEAD_DIM + 2u);
  if (p.splits > 1u && thread == 0u) {
    partials[slot] = max_score;
    partials[slot + 1u] = weight_sum;
  }
  store_output(thread, WORKGROUP_SIZE, SUBSETS, q_base, weight_sum, slot);
}
