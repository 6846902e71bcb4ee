// float16 → float32: out[2i], out[2i + 1] = the two halves of word i of `halves` (low
// half first, as IEEE half floats are stored little-endian). For the float16 constants
// of f16 programs, which run with float32 tensors. unpack2x16float is core
// WGSL: no `shader-f16` needed. An odd count's last word has a padding half, widened
// into the padding of `out` (sized to a multiple of 16 bytes).
#include "common/index.wgsl"

@group(0) @binding(0) var<storage, read_write> out: array<vec2<f32>>;
@group(0) @binding(1) var<storage, read> halves: array<u32>;

@compute @workgroup_size(ELEMENT_THREADS)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
  let word = element_index(gid, groups);
  if (word < arrayLength(&halves) && word < arrayLength(&out)) {
    out[word] = unpack2x16float(halves[word]);
  }
}
