/* md5.c: MD5 (RFC 1321). See md5.h. */
#define _POSIX_C_SOURCE 200809L
#include "sources/md5.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <string.h>

#include "core/common.h"

static const uint32_t K[64] = {
    0xd76aa478, 0xe8c7b756, 0x242070db, 0xc1bdceee, 0xf57c0faf, 0x4787c62a, 0xa8304613, 0xfd469501,
    0x698098d8, 0x8b44f7af, 0xffff5bb1, 0x895cd7be, 0x6b901122, 0xfd987193, 0xa679438e, 0x49b40821,
    0xf61e2562, 0xc040b340, 0x265e5a51, 0xe9b6c7aa, 0xd62f105d, 0x02441453, 0xd8a1e681, 0xe7d3fbc8,
    0x21e1cde6, 0xc33707d6, 0xf4d50d87, 0x455a14ed, 0xa9e3e905, 0xfcefa3f8, 0x676f02d9, 0x8d2a4c8a,
    0xfffa3942, 0x8771f681, 0x6d9d6122, 0xfde5380c, 0xa4beea44, 0x4bdecfa9, 0xf6bb4b60, 0xbebfbc70,
    0x289b7ec6, 0xeaa127fa, 0xd4ef3085, 0x04881d05, 0xd9d4d039, 0xe6db99e5, 0x1fa27cf8, 0xc4ac5665,
    0xf4292244, 0x432aff97, 0xab9423a7, 0xfc93a039, 0x655b59c3, 0x8f0ccc92, 0xffeff47d, 0x85845dd1,
    0x6fa87e4f, 0xfe2ce6e0, 0xa3014314, 0x4e0811a1, 0xf7537e82, 0xbd3af235, 0x2ad7d2bb, 0xeb86d391};
static const uint8_t R[64] = {7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22,
                              5, 9,  14, 20, 5, 9,  14, 20, 5, 9,  14, 20, 5, 9,  14, 20,
                              4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23,
                              6, 10, 15, 21, 6, 10, 15, 21, 6, 10, 15, 21, 6, 10, 15, 21};

static uint32_t rotl(uint32_t x, int c) { return (x << c) | (x >> (32 - c)); }

static void block(uint32_t h[4], const uint8_t *p) {
  uint32_t w[16];
  for (int i = 0; i < 16; i++) /* little-endian words, whatever the host */
    w[i] = (uint32_t)p[4 * i] | (uint32_t)p[4 * i + 1] << 8 | (uint32_t)p[4 * i + 2] << 16 |
           (uint32_t)p[4 * i + 3] << 24;
  uint32_t a = h[0], b = h[1], c = h[2], d = h[3];
  for (int i = 0; i < 64; i++) {
    uint32_t f;
    int g;
    if (i < 16) f = (b & c) | (~b & d), g = i;
    else if (i < 32) f = (d & b) | (~d & c), g = (5 * i + 1) & 15;
    else if (i < 48) f = b ^ c ^ d, g = (3 * i + 5) & 15;
    else f = c ^ (b | ~d), g = (7 * i) & 15;
    uint32_t t = d;
    d = c;
    c = b;
    b = b + rotl(a + f + K[i] + w[g], R[i]);
    a = t;
  }
  h[0] += a, h[1] += b, h[2] += c, h[3] += d;
}

/* block() for three states over the same 64 bytes, unrolled, each step
 * done for the three before the next: three independent chains in flight. */
#define ROTL(x, c) (((x) << (c)) | ((x) >> (32 - (c))))
#define F1(b, c, d) (d ^ (b & (c ^ d)))
#define F2(b, c, d) (c ^ (d & (b ^ c)))
#define F3(b, c, d) (b ^ c ^ d)
#define F4(b, c, d) (c ^ (b | ~d))
#define S3(F, a, b, c, d, k, x, r)                             \
  a##0 = b##0 + ROTL(a##0 + F(b##0, c##0, d##0) + k + x, r); \
  a##1 = b##1 + ROTL(a##1 + F(b##1, c##1, d##1) + k + x, r); \
  a##2 = b##2 + ROTL(a##2 + F(b##2, c##2, d##2) + k + x, r);
#define R4(F, i, g0, g1, g2, g3, r0, r1, r2, r3) \
  S3(F, a, b, c, d, K[i], w[g0], r0)            \
  S3(F, d, a, b, c, K[i + 1], w[g1], r1)        \
  S3(F, c, d, a, b, K[i + 2], w[g2], r2)        \
  S3(F, b, c, d, a, K[i + 3], w[g3], r3)

static void block3(stk__md5 *const m[3], const uint8_t *p) {
  uint32_t w[16];
  for (int i = 0; i < 16; i++)
    w[i] = (uint32_t)p[4 * i] | (uint32_t)p[4 * i + 1] << 8 | (uint32_t)p[4 * i + 2] << 16 |
           (uint32_t)p[4 * i + 3] << 24;
  uint32_t a0 = m[0]->h[0], b0 = m[0]->h[1], c0 = m[0]->h[2], d0 = m[0]->h[3];
  uint32_t a1 = m[1]->h[0], b1 = m[1]->h[1], c1 = m[1]->h[2], d1 = m[1]->h[3];
  uint32_t a2 = m[2]->h[0], b2 = m[2]->h[1], c2 = m[2]->h[2], d2 = m[2]->h[3];
  /* the g and R of block(), written out */
  R4(F1, 0, 0, 1, 2, 3, 7, 12, 17, 22) R4(F1, 4, 4, 5, 6, 7, 7, 12, 17, 22)
  R4(F1, 8, 8, 9, 10, 11, 7, 12, 17, 22) R4(F1, 12, 12, 13, 14, 15, 7, 12, 17, 22)
  R4(F2, 16, 1, 6, 11, 0, 5, 9, 14, 20) R4(F2, 20, 5, 10, 15, 4, 5, 9, 14, 20)
  R4(F2, 24, 9, 14, 3, 8, 5, 9, 14, 20) R4(F2, 28, 13, 2, 7, 12, 5, 9, 14, 20)
  R4(F3, 32, 5, 8, 11, 14, 4, 11, 16, 23) R4(F3, 36, 1, 4, 7, 10, 4, 11, 16, 23)
  R4(F3, 40, 13, 0, 3, 6, 4, 11, 16, 23) R4(F3, 44, 9, 12, 15, 2, 4, 11, 16, 23)
  R4(F4, 48, 0, 7, 14, 5, 6, 10, 15, 21) R4(F4, 52, 12, 3, 10, 1, 6, 10, 15, 21)
  R4(F4, 56, 8, 15, 6, 13, 6, 10, 15, 21) R4(F4, 60, 4, 11, 2, 9, 6, 10, 15, 21)
  m[0]->h[0] += a0, m[0]->h[1] += b0, m[0]->h[2] += c0, m[0]->h[3] += d0;
  m[1]->h[0] += a1, m[1]->h[1] += b1, m[1]->h[2] += c1, m[1]->h[3] += d1;
  m[2]->h[0] += a2, m[2]->h[1] += b2, m[2]->h[2] += c2, m[2]->h[3] += d2;
}

void stk__md5_init(stk__md5 *m) {
  m->h[0] = 0x67452301, m->h[1] = 0xefcdab89, m->h[2] = 0x98badcfe, m->h[3] = 0x10325476;
  m->len = 0;
}

void stk__md5_update(stk__md5 *m, const void *data, size_t n) {
  const uint8_t *p = data;
  size_t have = (size_t)(m->len & 63);
  m->len += n;
  if (have) {
    size_t k = 64 - have < n ? 64 - have : n;
    memcpy(m->buf + have, p, k);
    p += k, n -= k, have += k;
    if (have < 64) return;
    block(m->h, m->buf);
  }
  for (; n >= 64; p += 64, n -= 64) block(m->h, p);
  memcpy(m->buf, p, n);
}

void stk__md5_final(stk__md5 *m, uint8_t out[16]) {
  uint64_t bits = m->len * 8;
  static const uint8_t pad[64] = {0x80};
  size_t have = (size_t)(m->len & 63);
  stk__md5_update(m, pad, have < 56 ? 56 - have : 120 - have);
  uint8_t lb[8];
  for (int i = 0; i < 8; i++) lb[i] = (uint8_t)(bits >> (8 * i));
  stk__md5_update(m, lb, 8);
  for (int i = 0; i < 4; i++)
    for (int k = 0; k < 4; k++) out[4 * i + k] = (uint8_t)(m->h[i] >> (8 * k));
}

void stk__md5_update3(stk__md5 *const m[3], const void *data, size_t n) {
  const uint8_t *p = data;
  size_t whole = n & ~(size_t)63;
  /* a partial block in any of them: one at a time (not in a shard's ETags,
   * whose chains start and read at 1 MiB boundaries) */
  if ((m[0]->len | m[1]->len | m[2]->len) & 63) whole = 0;
  for (size_t off = 0; off < whole; off += 64) block3(m, p + off);
  for (int k = 0; k < 3; k++) {
    m[k]->len += whole;
    stk__md5_update(m[k], p + whole, n - whole);
  }
}

/* (1 MiB reads: a part boundary, a multiple of 1 MiB, never falls inside one) */
#define READ_BYTES ((size_t)1 << 20)

/* The last part of chain k when the file ends inside one, then each
 * chain's digest as hex ("-N" after a multipart one), a line each. */
static void etags_out(stk__md5 *all, stk__md5 cur[2], stk__md5 outer[2], uint64_t nparts[2],
                      const uint64_t part[2], uint64_t off, char *out, size_t cap) {
  size_t len = 0;
  uint8_t d[16];
  for (int k = -1; k < 2; k++) {
    if (k >= 0 && off % part[k]) { /* the last part, shorter */
      stk__md5_final(&cur[k], d);
      stk__md5_update(&outer[k], d, 16);
      nparts[k]++;
    }
    stk__md5_final(k < 0 ? all : &outer[k], d);
    for (int i = 0; i < 16 && len + 3 < cap; i++) len += (size_t)snprintf(out + len, cap - len, "%02x", d[i]);
    if (k >= 0) len += (size_t)snprintf(out + len, cap - len, "-%llu", (unsigned long long)nparts[k]);
    if (k < 1) len += (size_t)snprintf(out + len, cap - len, "\n");
  }
}

int stk__md5_s3_etags(const char *path, char *out, size_t cap, char *err, size_t errlen) {
  /* the AWS CLI's part size and stoker pack's */
  static const uint64_t part[2] = {8 * (uint64_t)READ_BYTES, 16 * (uint64_t)READ_BYTES};
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  uint8_t *b = fd >= 0 ? malloc(READ_BYTES) : NULL;
  if (!b) {
    if (fd >= 0) close(fd);
    return stk__fail(err, errlen, fd < 0 ? STK_EIO : STK_ENOMEM, "cannot hash %s: %s", path,
                     fd < 0 ? strerror(errno) : "out of memory");
  }
  stk__md5 all, cur[2], outer[2];
  uint64_t off = 0, nparts[2] = {0, 0};
  stk__md5_init(&all);
  for (int k = 0; k < 2; k++) stk__md5_init(&cur[k]), stk__md5_init(&outer[k]);
  ssize_t r;
  uint8_t d[16];
  while ((r = pread(fd, b, READ_BYTES, (off_t)off)) > 0 || (r < 0 && errno == EINTR)) {
    if (r < 0) continue;
    stk__md5 *const three[3] = {&all, &cur[0], &cur[1]};
    stk__md5_update3(three, b, (size_t)r); /* the three chains at once */
    off += (uint64_t)r;
    for (int k = 0; k < 2; k++) {
      if (off % part[k]) continue;
      stk__md5_final(&cur[k], d);
      stk__md5_update(&outer[k], d, 16);
      stk__md5_init(&cur[k]);
      nparts[k]++;
    }
  }
  int e = errno;
  free(b);
  close(fd);
  if (r < 0) return stk__fail(err, errlen, STK_EIO, "cannot hash %s: %s", path, strerror(e));
  etags_out(&all, cur, outer, nparts, part, off, out, cap);
  return STK_OK;
}
