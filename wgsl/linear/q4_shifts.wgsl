// The 8 signed 4-bit values of a word, split by parity of k, for the kernels for GPUs
// (those for CPU adapters unpack by masks: see cpu_common.wgsl). Converted through i32:
// a signed conversion to f32 is one instruction where an unsigned one may take several
// (the nibbles are small either way).
fn q4_even(word: u32) -> vec4<f32> {
  let bytes = vec4<u32>(word, word >> 8u, word >> 16u, word >> 24u);
  return vec4<f32>(bitcast<vec4<i32>>(bytes & vec4<u32>(0xFu))) - 8.0;
}

fn q4_odd(word: u32) -> vec4<f32> {
  let bytes = vec4<u32>(word >> 4u, word >> 12u, word >> 20u, word >> 28u);
  return vec4<f32>(bitcast<vec4<i32>>(bytes & vec4<u32>(0xFu))) - 8.0;
}
