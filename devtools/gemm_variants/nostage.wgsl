// A diagnostic, wrong sums: gemm_wide (as the inline variant) staging only its first
// stage, then running every stage's products on it (devtools/gemm_variant_probe.py
// appends this to linear_q4gsw.wgsl): the time of the products alone.
@compute @workgroup_size(256)
fn gemm_wide_nostage(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wg: vec3<u32>) {
  let m0 = wg.y * WIDE_TILE;
  let n0 = wg.x * WIDE_TILE;
  let tx = lid % 16u;
  let ty = lid / 16u;
  var l0 = vec4<f32>();
  var r0 = vec4<f32>();
  var l1 = vec4<f32>();
  var r1 = vec4<f32>();
  var l2 = vec4<f32>();
  var r2 = vec4<f32>();
  var l3 = vec4<f32>();
  var r3 = vec4<f32>();
  var l4 = vec4<f32>();
  var r4 = vec4<f32>();
  var l5 = vec4<f32>();
  var r5 = vec4<f32>();
  var l6 = vec4<f32>();
  var r6 = vec4<f32>();
  var l7 = vec4<f32>();
  var r7 = vec4<f32>();
  let k_range = split_range(wg.z, WIDE_TILE_K);
  stage_x_tile(lid, m0, k_range.x, WIDE_TILE, WIDE_TILE_K);
  stage_w_tile(lid, n0, k_range.x, WIDE_TILE, WIDE_TILE_K);
  for (var k0 = k_range.x; k0 < k_range.y; k0 += WIDE_TILE_K) {
    workgroupBarrier();
    for (var kk = 0u; kk < WIDE_TILE_K; kk++) {
      let row = kk * (WIDE_TILE / 4u);
      let a0 = x_tile[row + ty];
      let a1 = x_tile[row + ty + 16u];
      let bl = w_tile[row + tx];
      let br = w_tile[row + tx + 16u];
      l0 += a0.x * bl;
      l1 += a0.y * bl;
      l2 += a0.z * bl;
      l3 += a0.w * bl;
      l4 += a1.x * bl;
      l5 += a1.y * bl;
      l6 += a1.z * bl;
      l7 += a1.w * bl;
      r0 += a0.x * br;
      r1 += a0.y * br;
      r2 += a0.z * br;
      r3 += a0.w * br;
      r4 += a1.x * br;
      r5 += a1.y * br;
      r6 += a1.z * br;
      r7 += a1.w * br;
    }
    workgroupBarrier();
  }
  store_rows8(wg.z, m0, ty, n0 + 4u * tx, Rows8(l0, l1, l2, l3, l4, l5, l6, l7));
  store_rows8(wg.z, m0, ty, n0 + 4u * (tx + 16u), Rows8(r0, r1, r2, r3, r4, r5, r6, r7));
}
