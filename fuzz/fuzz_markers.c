/*
 * fuzz_markers.c: the JPEG marker scan of the GPU planner (markers.c).
 * Input: the file. It must never read outside the input (the sanitizers
 * see that), and what it reports must be consistent.
 */
#include "codecs/markers.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  stk__jpeg_markers jm;
  int ok = stk__jpeg_scan(data, size, &jm);
  fuzz_note("markers: %d sof %02x comps %d rgb %d eoi %d", ok, jm.sof, jm.comps, jm.rgb, jm.eoi);
  if (!ok) return 0;
  FUZZ_CHECK(size >= 4 && data[0] == 0xFF && data[1] == 0xD8);
  FUZZ_CHECK(jm.sof >= 0xC0 && jm.sof <= 0xCF && jm.sof != 0xC4 && jm.sof != 0xC8 &&
             jm.sof != 0xCC);
  FUZZ_CHECK(jm.comps >= 0 && jm.comps <= 255);
  FUZZ_CHECK(!jm.rgb || jm.comps == 3);
  FUZZ_CHECK(jm.eoi == 0 || jm.eoi == 1);
  return 0;
}
