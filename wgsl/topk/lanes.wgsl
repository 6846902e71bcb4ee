// What the top-k passes for CPU adapters share. There a workgroup's invocations run one
// SIMD batch after another and every barrier switches between all of them, so these
// passes use none: each invocation works alone, on its own chunk or lists.

const LANE_THREADS: u32 = 4u;  // invocations per workgroup: the host's grids count them

@group(0) @binding(0) var<storage, read> logits: array<f32>;
@group(0) @binding(1) var<storage, read_write> candidates: array<vec2<u32>>;  // (bits of value, index)
// Each chunk's largest logit, then at [chunks] the bound lane_threshold finds.
@group(0) @binding(9) var<storage, read_write> chunk_maxima: array<f32>;

// The invocation's index in a grid whose (x, y) flatten the workgroups.
fn lane_index(group: vec3<u32>, groups: vec3<u32>, thread: u32) -> u32 {
  return (group.x + group.y * groups.x) * LANE_THREADS + thread;
}
