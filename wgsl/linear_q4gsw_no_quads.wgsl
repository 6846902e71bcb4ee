// gemv_rows' x values for adapters without subgroups: ops/linear.py appends this file to
// linear_q4gsw.wgsl where it cannot append linear_q4gsw_quads.wgsl, whose x_slots hands
// the values round a quad instead of loading them all in every lane.

// x values at word w for the 4 rows of a lane's slots (x_rows: where they start; see
// XSlots), each loaded.
fn x_slots(x_rows: vec4<u32>, w: u32) -> XSlots {
  return XSlots(x_word(x_rows.x, w), x_word(x_rows.y, w), x_word(x_rows.z, w), x_word(x_rows.w, w));
}
