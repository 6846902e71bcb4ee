// The rotary embedding of two pairs of dims (interleaved pairs, the Meta / llama2.c
// layout) by their table entries `a` and `b` (cos, sin).
fn rotate_pairs(x: vec4<f32>, a: vec2<f32>, b: vec2<f32>) -> vec4<f32> {
  return vec4<f32>(x.x * a.x - x.y * a.y, x.x * a.y + x.y * a.x, x.z * b.x - x.w * b.y, x.z * b.y + x.w * b.x);
}
