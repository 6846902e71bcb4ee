// Causal attention over a KV cache for GPUs, a row at a time: grid (Hq, S), a workgroup per
// query head and row takes all the row's keys (at most MAX_CHUNK), so that a decode step's
// attention is one dispatch with no combine pass. p.splits is 1.
#include "attention/row_attention.wgsl"

@compute @workgroup_size(WORKGROUP_SIZE)
fn whole_row(@builtin(workgroup_id) group: vec3<u32>, @builtin(local_invocation_index) thread: u32) {
  let row = group.y;
  attend(thread, group.x, row, 0u, 0u, position.input_pos + row + 1u);
}
