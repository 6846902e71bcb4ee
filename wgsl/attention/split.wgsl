// Causal attention over a KV cache for GPUs, split-KV: grid (Hq, S, splits), a workgroup
// per query head, row and split of that row's keys, [split * chunk, (split + 1) * chunk),
// so that a single decode row still fills the GPU. With one split its result is the
// output; with several, (max, sum, weighted values) go to `partials` for combine.wgsl.
#include "attention/row_attention.wgsl"

@compute @workgroup_size(WORKGROUP_SIZE)
fn split(@builtin(workgroup_id) group: vec3<u32>, @builtin(local_invocation_index) thread: u32) {
  let row = group.y;
  let split = group.z;
  let keys = position.input_pos + row + 1u;  // causal: up to and including this row's position
  let first = split * p.chunk;
  if (first >= keys) {
    return;  // a split past this row's keys (rows differ in length): nothing to do
  }
  attend(thread, group.x, row, split, first, min(p.chunk, keys - first));
}
