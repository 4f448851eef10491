/*
 * fuzz_pnm.c: the PPM/PGM/PBM (our own reader, binary and plain) decode path: header, then the whole image to
 * RGB8, through one reused stk__decoder. Input: the file.
 */
#include "fuzz_whole.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  return fuzz_decode_whole("pnm", data, size);
}
