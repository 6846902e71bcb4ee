// Causal attention over a KV cache for GPUs, a row at a time: grid (Hq, S), a workgroup per
// query head and row takes all the row's keys (at most MAX_CHUNK), so that a decode step's
// attention is one dispatch with no combine pass. p.splits is 1.
#include "attention/row_attention.wgsl"

@compute @workgroup_size(WORKGROUP_SIZE)
fn whole_row(@builtin(workgroup_id) group: vec3<u32>, @builtin(local_invocation_index) thread: u32) {
  let head = group.x;
  let row = group.y;
  let group_size = p.q_heads / p.kv_heads;
  let kv_head = head / group_size;
  let keys = position.input_pos + row + 1u;
  let q_base = (row * p.q_heads + head) * HEAD_DIM;

  load_scaled_q(thread, q_base, row);
  if (UPDATE_CACHE && head % group_size == 0u) {
    store_new_row(thread, WORKGROUP_SIZE, row, kv_head);
  }
  workgroupBarrier();

  let weight_sum = softmax_weights(thread, WORKGROUP_SIZE, 0u, keys, kv_head).y;

  let dim_group = thread % DIM_GROUPS;
  let subset = thread / DIM_GROUPS;
  if (subset < SUBSETS) {
    subset_sums[subset * DIM_GROUPS + dim_group] = chunk_values(0u, keys, subset, SUBSETS, kv_head, 4u * dim_group);
  }
  workgroupBarrier();
  store_output(thread, WORKGROUP_SIZE, SUBSETS, q_base, weight_sum, 0u);
}
