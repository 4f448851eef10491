/*
 * fuzz_tiff.c: the TIFF (libtiff, read from memory) decode path: header, then the whole image to
 * RGB8, through one reused stk__decoder. Input: the file.
 */
#include "fuzz_whole.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  return fuzz_decode_whole("tiff", data, size);
}
