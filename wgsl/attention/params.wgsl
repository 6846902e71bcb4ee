// The uniforms every attention kernel reads. Layouts (contiguous): q and out [S, Hq, D];
// this call's k and v [S, Hkv, D]; the caches [C, Hkv, D]; query head h reads kv head
// h / (Hq / Hkv), and query row s sits at position input_pos + s, attending keys
// [0, input_pos + s].

struct Params {
  seq_len: u32,
  q_heads: u32,
  kv_heads: u32,
  chunk: u32,   // keys per split (the GPU kernels'; the CPU kernel shares keys out evenly)
  splits: u32,  // the grid's splits per row; splits past a row's keys return at once
  scale: f32,
}

// The position, read on the GPU rather than written into Params, so that a decode step
// changes no parameter and no grid of the op.
struct Position {
  input_pos: u32,
}

// The RoPE table row of query row 0 (the rotary op's own position), read like the
// position.
struct FirstRow {
  row: u32,
}
