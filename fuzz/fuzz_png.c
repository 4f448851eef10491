/*
 * fuzz_png.c: the PNG decode path: header, then the whole image to RGB8,
 * through one reused stk__decoder. Input: the file.
 *
 * stoker refuses a bad chunk checksum, as PIL does, so nearly every
 * mutation would stop at the first CRC. Each input is decoded twice: as it
 * is, then with every chunk's CRC made right, so that the mutated chunk
 * contents reach libspng's parsers and the inflater.
 */
#include <stdlib.h>
#include <string.h>

#include "codecs/codec.h"
#include "core/common.h"
#include "fuzz.h"

static stk__decoder *g_dec;

static uint32_t crc_table[256];

static void make_crc_table(void) {
  for (uint32_t n = 0; n < 256; n++) {
    uint32_t c = n;
    for (int k = 0; k < 8; k++) c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    crc_table[n] = c;
  }
}

static uint32_t crc32_of(const uint8_t *p, size_t n) {
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; i++) c = crc_table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

static uint32_t be32(const uint8_t *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Rewrites the CRC of every whole chunk after the signature. */
static void fix_crcs(uint8_t *d, size_t n) {
  size_t i = 8;
  while (i + 12 <= n) {
    uint32_t len = be32(d + i);
    if (len > n - i - 12) break;
    uint32_t c = crc32_of(d + i + 4, (size_t)len + 4);
    uint8_t *q = d + i + 8 + len;
    q[0] = (uint8_t)(c >> 24), q[1] = (uint8_t)(c >> 16), q[2] = (uint8_t)(c >> 8), q[3] = (uint8_t)c;
    i += 12 + (size_t)len;
  }
}

static void decode(const uint8_t *data, size_t size) {
  stk__image_info info;
  char msg[256];
  if (stk__decoder_header(g_dec, data, size, &info, msg, sizeof msg) != STK_OK) return;
  FUZZ_CHECK(info.width > 0 && info.height > 0);
  FUZZ_CHECK((uint64_t)info.width * (uint64_t)info.height <= FUZZ_MAX_PIXELS);
  stk__region r;
  int rc = stk__decoder_decode(g_dec, data, size, NULL, 1, &r, msg, sizeof msg);
  fuzz_note("png: %dx%d: rc %d %s", info.width, info.height, rc, rc ? msg : "");
  if (rc != STK_OK) return;
  FUZZ_CHECK(r.x == 0 && r.y == 0 && r.w == info.width && r.h == info.height);
  FUZZ_CHECK(r.image_w == r.w && r.image_h == r.h && r.stride >= (size_t)r.w * 3);
  for (int y = 0; y < r.h; y++) fuzz_touch(r.pixels + (size_t)y * r.stride, (size_t)r.w * 3);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!g_dec) {
    g_dec = stk__decoder_create();
    if (!g_dec) abort();
    stk__decoder_set_limits(g_dec, FUZZ_MAX_PIXELS);
    make_crc_table();
  }
  decode(data, size);
  if (size < 8) return 0;
  uint8_t *fixed = malloc(size);
  if (!fixed) abort();
  memcpy(fixed, data, size);
  fix_crcs(fixed, size);
  if (memcmp(fixed, data, size)) decode(fixed, size);
  free(fixed);
  return 0;
}
