// gemm_wide with two stages in workgroup memory: the next stage's loads are issued before
// the current stage's products and stored into the other stage after them, one barrier
// a stage (devtools/gemm_variant_probe.py appends this to linear_q4gsw.wgsl): whether
// staging, which does not overlap the products in gemm_wide, can. The same sums in the
// same order as gemm_wide.
const STAGE_VEC4S: u32 = WIDE_TILE_K * WIDE_TILE / 4u;
var<workgroup> x_stages: array<vec4<f32>, 2u * STAGE_VEC4S>;
var<workgroup> w_stages: array<vec4<f32>, 2u * STAGE_VEC4S>;

struct Staged {
  x0: vec4<f32>, x1: vec4<f32>,  // the thread's two x vec4s (elements lid and lid + 256)
  word: u32, scale: f32,         // its weight word (element lid) and its scale
}

// The thread's share of the stage at k0, loaded (zeros past M, N or K).
fn load_step(lid: u32, m0: u32, n0: u32, k0: u32) -> Staged {
  var s = Staged();
  // x: WIDE_TILE rows x WIDE_TILE_K / 4 vec4s = 512 elements, two per thread.
  for (var i = 0u; i < 2u; i++) {
    let e = lid + 256u * i;
    let row = e / (WIDE_TILE_K / 4u);
    let kv = k0 / 4u + e % (WIDE_TILE_K / 4u);
    var v = vec4<f32>(0.0);
    if (m0 + row < p.m && kv < p.k / 4u) {
      v = x_vec(x_row_start(m0 + row), kv);
    }
    if (i == 0u) { s.x0 = v; } else { s.x1 = v; }
  }
  // weights: WIDE_TILE columns x WIDE_TILE_K / 8 words = 256 elements, one per thread.
  let col = lid / (WIDE_TILE_K / 8u);
  let w = k0 / 8u + lid % (WIDE_TILE_K / 8u);
  let n = n0 + col;
  if (n < p.n && w * 8u < p.k) {
    s.word = weights[n * p.weight_row_words + w];
    s.scale = scales[(w * 8u) / p.group_size * p.scale_stride + n];
  }
  return s;
}

// Writes a loaded share into the stage at `base` (vec4s), as stage_x_tile and
// stage_w_tile do, the weights dequantized.
fn store_stage(lid: u32, s: Staged, base: u32) {
  for (var i = 0u; i < 2u; i++) {
    let e = lid + 256u * i;
    let row = e / (WIDE_TILE_K / 4u);
    let kq = e % (WIDE_TILE_K / 4u);
    let v = select(s.x1, s.x0, i == 0u);
    for (var c = 0u; c < 4u; c++) {
      x_stages[base + (4u * kq + c) * (WIDE_TILE / 4u) + row / 4u][row % 4u] = v[c];
    }
  }
  let col = lid / (WIDE_TILE_K / 8u);
  let wq = lid % (WIDE_TILE_K / 8u);
  let even = s.scale * q4_even(s.word);
  let odd = s.scale * q4_odd(s.word);
  for (var c = 0u; c < 4u; c++) {
    w_stages[base + (8u * wq + 2u * c) * (WIDE_TILE / 4u) + col / 4u][col % 4u] = even[c];
    w_stages[base + (8u * wq + 2u * c + 1u) * (WIDE_TILE / 4u) + col / 4u][col % 4u] = odd[c];
  }
}

@compute @workgroup_size(256)
fn gemm_wide_double(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wg: vec3<u32>) {
  let m0 = wg.y * WIDE_TILE;
  let n0 = wg.x * WIDE_TILE;
  let tx = lid % 16u;
  let ty = lid / 16u;
  var left = Rows8();
  var right = Rows8();
  let k_range = split_range(wg.z, WIDE_TILE_K);
  var next = load_step(lid, m0, n0, k_range.x);
  store_stage(lid, next, 0u);
  workgroupBarrier();
  var base = 0u;
  for (var k0 = k_range.x; k0 < k_range.y; k0 += WIDE_TILE_K) {
    let more = k0 + WIDE_TILE_K < k_range.y;
    if (more) {
      next = load_step(lid, m0, n0, k0 + WIDE_TILE_K);
    }
    for (var kk = 0u; kk < WIDE_TILE_K; kk++) {
      let row = base + kk * (WIDE_TILE / 4u);
      let a0 = x_stages[row + ty];
      let a1 = x_stages[row + ty + 16u];
      left = add_products8(left, a0, a1, w_stages[row + tx]);
      right = add_products8(right, a0, a1, w_stages[row + tx + 16u]);
    }
    base = STAGE_VEC4S - base;
    if (more) {
      store_stage(lid, next, base);
    }
    workgroupBarrier();
  }
  store_rows8(wg.z, m0, ty, n0 + 4u * tx, left);
  store_rows8(wg.z, m0, ty, n0 + 4u * (tx + 16u), right);
}
