/* SHA-256: libcrypto's (sha256.c, loaded at run time) and the portable one
 * of s3.c give the same digests on the same inputs (empty, around the
 * 64-byte block and its 56-byte padding limit, unaligned, multi-MB), both
 * match the FIPS 180-4 vectors, and the hex form SigV4 sends uses the one
 * that was loaded. Without libcrypto on the machine the portable one is
 * checked alone, and the test says so. */
#include <stdint.h>

#include "check.h"
#include "sources/s3.h"
#include "sources/sha256.h"

static void to_hex(const uint8_t d[32], char out[65]) {
  for (int i = 0; i < 32; i++) snprintf(out + 2 * i, 3, "%02x", d[i]);
}

/* Both agree on data[0..n), and the portable one on `want` when given. */
static void same(const uint8_t *data, size_t n, const char *want) {
  uint8_t a[32], b[32];
  char ha[65], hb[65];
  stk__sha256_portable(data, n, a);
  to_hex(a, ha);
  if (want) CHECK_MSG(!strcmp(ha, want), "portable, %zu bytes: %s, not %s", n, ha, want);
  if (stk__sha256_libcrypto(data, n, b)) {
    to_hex(b, hb);
    CHECK_MSG(!memcmp(a, b, 32), "%zu bytes: portable %s, libcrypto %s", n, ha, hb);
  }
  char hx[65];
  stk__sha256_hex(data, n, hx);
  CHECK_MSG(!strcmp(hx, ha), "%zu bytes: stk__sha256_hex %s, portable %s", n, hx, ha);
}

int main(void) {
  const char *impl = stk__sha256_impl();
  printf("SHA-256 in use: %s\n", impl);
  if (!strcmp(impl, "portable")) printf("libcrypto not loaded: the portable one checked alone\n");
  same((const uint8_t *)"", 0, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  same(NULL, 0, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  same((const uint8_t *)"abc", 3,
       "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  const char *two = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  same((const uint8_t *)two, strlen(two),
       "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  /* a million 'a's (FIPS 180-4's third vector) */
  size_t big = 9u << 20;
  uint8_t *buf = malloc(big + 1);
  CHECK(buf != NULL);
  if (!buf) return CHECK_DONE();
  memset(buf, 'a', 1000000);
  same(buf, 1000000, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  /* pseudo-random bytes: every length around the block and padding edges,
   * from an aligned and an unaligned start, then multi-MB lengths */
  uint64_t x = 0x9e3779b97f4a7c15ull;
  for (size_t i = 0; i < big + 1; i++) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    buf[i] = (uint8_t)x;
  }
  for (size_t n = 0; n <= 200; n++) {
    same(buf, n, NULL);
    same(buf + 1, n, NULL);
  }
  size_t sizes[] = {4095, 4096, 65537, (1u << 20) - 1, 5u << 20, (8u << 20) + 3, big};
  for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) same(buf + (k & 1), sizes[k], NULL);
  free(buf);
  return CHECK_DONE();
}
