// gemm_wide with stages of 32 values of K instead of 16 (twice the workgroup memory, 32
// KiB, half the barriers per value of K) (devtools/gemm_variant_probe.py appends this to
// linear_q4gsw.wgsl): whether the GPU prefill GEMM waits on its barriers.
const K32_TILE_K: u32 = 32u;
var<workgroup> x_tile_k32: array<vec4<f32>, K32_TILE_K * WIDE_TILE / 4u>;
var<workgroup> w_tile_k32: array<vec4<f32>, K32_TILE_K * WIDE_TILE / 4u>;

// stage_x_tile and stage_w_tile of gemm_wide's tile, K32_TILE_K values.
fn stage_x_tile_k32(lid: u32, m0: u32, k0: u32) {
  for (var e = lid; e < WIDE_TILE * K32_TILE_K / 4u; e += 256u) {
    let row = e / (K32_TILE_K / 4u);
    let kq = e % (K32_TILE_K / 4u);
    let kv = k0 / 4u + kq;
    var v = vec4<f32>(0.0);
    if (m0 + row < p.m && kv < p.k / 4u) {
      v = x_vec(x_row_start(m0 + row), kv);
    }
    for (var c = 0u; c < 4u; c++) {
      x_tile_k32[(4u * kq + c) * (WIDE_TILE / 4u) + row / 4u][row % 4u] = v[c];
    }
  }
}

fn stage_w_tile_k32(lid: u32, n0: u32, k0: u32) {
  for (var e = lid; e < WIDE_TILE * K32_TILE_K / 8u; e += 256u) {
    let col = e / (K32_TILE_K / 8u);
    let wq = e % (K32_TILE_K / 8u);
    let w = k0 / 8u + wq;
    let n = n0 + col;
    var even = vec4<f32>(0.0);
    var odd = vec4<f32>(0.0);
    if (n < p.n && w * 8u < p.k) {
      let word = weights[n * p.weight_row_words + w];
      let scale = scales[(w * 8u) / p.group_size * p.scale_stride + n];
      even = scale * q4_even(word);
      odd = scale * q4_odd(word);
    }
    for (var c = 0u; c < 4u; c++) {
      w_tile_k32[(8u * wq + 2u * c) * (WIDE_TILE / 4u) + col / 4u][col % 4u] = even[c];
      w_tile_k32[(8u * wq + 2u * c + 1u) * (WIDE_TILE / 4u) + col / 4u][col % 4u] = odd[c];
    }
  }
}

@compute @workgroup_size(256)
fn gemm_wide_k32(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wg: vec3<u32>) {
  let m0 = wg.y * WIDE_TILE;
  let n0 = wg.x * WIDE_TILE;
  let tx = lid % 16u;
  let ty = lid / 16u;
  var left = Rows8();
  var right = Rows8();
  let k_range = split_range(wg.z, K32_TILE_K);
  for (var k0 = k_range.x; k0 < k_range.y; k0 += K32_TILE_K) {
    stage_x_tile_k32(lid, m0, k0);
    stage_w_tile_k32(lid, n0, k0);
    workgroupBarrier();
    for (var kk = 0u; kk < K32_TILE_K; kk++) {
      let row = kk * (WIDE_TILE / 4u);
      let a0 = x_tile_k32[row + ty];
      let a1 = x_tile_k32[row + ty + 16u];
      left = add_products8(left, a0, a1, w_tile_k32[row + tx]);
      right = add_products8(right, a0, a1, w_tile_k32[row + tx + 16u]);
    }
    workgroupBarrier();
  }
  store_rows8(wg.z, m0, ty, n0 + 4u * tx, left);
  store_rows8(wg.z, m0, ty, n0 + 4u * (tx + 16u), right);
}
