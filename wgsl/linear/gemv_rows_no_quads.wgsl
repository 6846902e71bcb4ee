// gemv_rows for adapters without subgroups: every lane loads the x values of all 4 rows
// of its slots, where gemv_rows_quads.wgsl hands them round a quad.
#include "linear/gemv_rows.wgsl"

// x values at word w for the 4 rows of a lane's slots (x_rows: where they start; see
// XSlots), each loaded.
fn x_slots(x_rows: vec4<u32>, w: u32) -> XSlots {
  return XSlots(x_word(x_rows.x, w), x_word(x_rows.y, w), x_word(x_rows.z, w), x_word(x_rows.w, w));
}
