/* MD5: stk__md5_update3 (three chains over the same bytes, interleaved)
 * gives each chain the digest of three plain updates, whatever the lengths
 * and the states' offsets; and the RFC 1321 vectors. */
#include <stdint.h>

#include "check.h"
#include "sources/md5.h"

static void hexof(stk__md5 *m, char out[33]) {
  uint8_t d[16];
  stk__md5_final(m, d);
  for (int i = 0; i < 16; i++) snprintf(out + 2 * i, 3, "%02x", d[i]);
}

/* Chains that have hashed pre[k] bytes of buf already take n more of buf
 * + off by update3 and by update; the digests agree. */
static void agree(const uint8_t *buf, const size_t pre[3], size_t off, size_t n) {
  stk__md5 a[3], b[3];
  for (int k = 0; k < 3; k++) {
    stk__md5_init(&a[k]);
    stk__md5_init(&b[k]);
    stk__md5_update(&a[k], buf, pre[k]);
    stk__md5_update(&b[k], buf, pre[k]);
    stk__md5_update(&b[k], buf + off, n);
  }
  stk__md5 *const three[3] = {&a[0], &a[1], &a[2]};
  stk__md5_update3(three, buf + off, n);
  for (int k = 0; k < 3; k++) {
    char x[33], y[33];
    hexof(&a[k], x);
    hexof(&b[k], y);
    CHECK_MSG(!strcmp(x, y), "chain %d, %zu before, %zu bytes at %zu: %s, not %s", k, pre[k], n,
              off, x, y);
  }
}

int main(void) {
  static const struct {
    const char *in, *md5;
  } rfc[] = {{"", "d41d8cd98f00b204e9800998ecf8427e"},
             {"abc", "900150983cd24fb0d6963f7d28e17f72"},
             {"message digest", "f96b697d7cb7938d525a2f31aaf161d0"},
             {"12345678901234567890123456789012345678901234567890123456789012345678901234567890",
              "57edf4a22be3c955ac49da2e2107b67a"}};
  for (size_t i = 0; i < sizeof rfc / sizeof *rfc; i++) {
    stk__md5 m[3];
    for (int k = 0; k < 3; k++) stk__md5_init(&m[k]);
    stk__md5 *const three[3] = {&m[0], &m[1], &m[2]};
    stk__md5_update3(three, rfc[i].in, strlen(rfc[i].in));
    for (int k = 0; k < 3; k++) {
      char x[33];
      hexof(&m[k], x);
      CHECK_MSG(!strcmp(x, rfc[i].md5), "\"%s\": %s", rfc[i].in, x);
    }
  }
  size_t big = 3u << 20;
  uint8_t *buf = malloc(big);
  CHECK(buf != NULL);
  if (!buf) return CHECK_DONE();
  uint32_t x = 2463534242u;
  for (size_t i = 0; i < big; i++) {
    x ^= x << 13, x ^= x >> 17, x ^= x << 5;
    buf[i] = (uint8_t)x;
  }
  static const size_t lens[] = {0, 1, 63, 64, 65, 127, 128, 1000, 4096, 1u << 20, (2u << 20) + 7};
  static const size_t pres[][3] = {{0, 0, 0}, {64, 128, 0}, {1, 0, 0}, {0, 0, 63}, {5, 70, 200}};
  for (size_t p = 0; p < sizeof pres / sizeof *pres; p++)
    for (size_t l = 0; l < sizeof lens / sizeof *lens; l++) {
      agree(buf, pres[p], 0, lens[l]);
      agree(buf, pres[p], 3, lens[l]);
    }
  free(buf);
  return CHECK_DONE();
}
