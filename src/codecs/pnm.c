/*
 * pnm.c: netpbm decoding (P1-P6: PBM, PGM, PPM, binary and plain ASCII) to
 * 8-bit RGB, following Pillow's PpmImagePlugin so that the pixels equal
 * Image.open(f).convert("RGB"):
 *
 *   - the header is read token by token as Pillow reads it: whitespace and
 *     '#' comments skipped, at most 10 characters a token, maxval 1..65535;
 *   - maxval 255 is copied; any other is scaled as Pillow's "ppm" decoder
 *     does, round(v / maxval * out_max) with Python's round (half to even),
 *     where out_max is 255, or 65535 for a PGM of maxval above 255, which
 *     Pillow opens as a 32-bit "I" image;
 *   - convert("RGB") of that "I" image clips at 255 instead of scaling: a
 *     16-bit PGM comes out nearly white in Pillow, and so it does here;
 *   - PBM: 1 is black, 0 is white.
 *
 * The file is untrusted: the pixel data's size is checked against the bytes
 * there are before a row is read.
 */
#include <inttypes.h>
#include <math.h>
#include <string.h>

#include "codecs/formats.h"

static int is_space(uint8_t c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

/* One header token from *pos, as Pillow's _read_token: leading whitespace
 * and comments skipped, the whitespace that ends it consumed. */
static int read_token(const uint8_t *b, size_t n, size_t *pos, uint32_t *value, char *msg,
                      size_t msglen) {
  char tok[12];
  size_t len = 0, i = *pos;
  while (len <= 10) {
    if (i >= n) break;
    uint8_t c = b[i++];
    if (is_space(c)) {
      if (!len) continue;
      break;
    }
    if (c == '#') { /* to the end of the line (or of the file) */
      while (i < n && b[i] != '\r' && b[i] != '\n') i++;
      if (i < n) i++;
      continue;
    }
    tok[len++] = (char)c;
  }
  *pos = i;
  if (!len) return stk__fail(msg, msglen, STK_EDECODE, "truncated PPM/PGM file (in the header)");
  if (len > 10) return stk__fail(msg, msglen, STK_EDECODE, "PPM/PGM: header token too long");
  uint64_t v = 0;
  for (size_t k = 0; k < len; k++) {
    if (tok[k] < '0' || tok[k] > '9')
      return stk__fail(msg, msglen, STK_EDECODE, "PPM/PGM: bad number in the header");
    v = v * 10 + (uint64_t)(tok[k] - '0');
  }
  if (v > INT32_MAX) return stk__fail(msg, msglen, STK_EDECODE, "PPM/PGM: size out of range");
  *value = (uint32_t)v;
  return STK_OK;
}

int stk__pnm_header(stk__fmtdec *f, char *msg, size_t msglen) {
  stk__pnm_hdr *h = &f->h.pnm;
  /* stk__sniff checked "P1".."P6" and a whitespace after it */
  h->kind = f->buf[1] - '0';
  size_t pos = 3;
  uint32_t w, ht;
  int rc = read_token(f->buf, f->n, &pos, &w, msg, msglen);
  if (!rc) rc = read_token(f->buf, f->n, &pos, &ht, msg, msglen);
  h->maxval = 1;
  if (!rc && h->kind != 1 && h->kind != 4) {
    rc = read_token(f->buf, f->n, &pos, &h->maxval, msg, msglen);
    if (!rc && (h->maxval == 0 || h->maxval > 65535))
      rc = stk__fail(msg, msglen, STK_EDECODE, "PPM/PGM: maxval %" PRIu32 " is not 1..65535",
                     h->maxval);
  }
  if (rc) return rc;
  h->data_off = pos;
  f->info.width = (int)w;
  f->info.height = (int)ht;
  f->info.format = STK__FMT_PNM;
  f->info.components = h->kind == 3 || h->kind == 6 ? 3 : 1;
  f->info.progressive = 0;
  /* the table of every sample value's 8-bit result */
  f->scratch_need = h->maxval > 255 ? 65536 : 256;
  return STK_OK;
}

/* lut[v]: the 8-bit RGB value of sample v, as Pillow computes it. */
static void make_lut(const stk__pnm_hdr *h, int grey, uint8_t *lut, uint32_t nvals) {
  /* Pillow's "I" mode for a PGM of maxval > 255 */
  double out_max = grey && h->maxval > 255 ? 65535.0 : 255.0;
  for (uint32_t v = 0; v < nvals; v++) {
    double r;
    if (h->maxval == 255 || (grey && h->maxval == 65535)) {
      r = v; /* Pillow's raw paths: no scaling */
    } else {
      /* Python's round() of a float: to nearest, ties to even, which is
       * nearbyint() in the default rounding mode */
      r = nearbyint((double)v / (double)h->maxval * out_max);
      if (r > out_max) r = out_max;
    }
    lut[v] = (uint8_t)(r > 255 ? 255 : r); /* convert("RGB") of "I" clips */
  }
}

static void put(uint8_t *o, int comps, const uint8_t *v) {
  if (comps == 1) {
    o[0] = o[1] = o[2] = v[0];
  } else {
    o[0] = v[0], o[1] = v[1], o[2] = v[2];
  }
}

/* The plain (ASCII) formats: the next token of the pixel data, comments
 * dropped, as Pillow's PpmPlainDecoder. P1's tokens are single characters
 * that need no whitespace between them. Returns 0 at the end of the file. */
static int next_plain(const uint8_t *b, size_t n, size_t *pos, int bitonal, uint32_t *v,
                      char *msg, size_t msglen, int *rc) {
  size_t i = *pos;
  for (;;) {
    while (i < n && is_space(b[i])) i++;
    if (i < n && b[i] == '#') {
      while (i < n && b[i] != '\r' && b[i] != '\n') i++;
      continue;
    }
    break;
  }
  if (i >= n) {
    *pos = i;
    return 0;
  }
  if (bitonal) {
    *pos = i + 1;
    if (b[i] != '0' && b[i] != '1') {
      *rc = stk__fail(msg, msglen, STK_EDECODE, "PBM: invalid character in the pixel data");
      return 0;
    }
    *v = (uint32_t)(b[i] - '0');
    return 1;
  }
  uint64_t x = 0;
  size_t len = 0;
  while (i < n && !is_space(b[i]) && b[i] != '#') {
    if (b[i] < '0' || b[i] > '9' || ++len > 10) {
      *rc = stk__fail(msg, msglen, STK_EDECODE, "PPM/PGM: bad number in the pixel data");
      return 0;
    }
    x = x * 10 + (uint64_t)(b[i++] - '0');
  }
  *pos = i;
  if (x > UINT32_MAX) x = UINT32_MAX;
  *v = (uint32_t)x;
  return 1;
}

int stk__pnm_decode(stk__fmtdec *f, char *msg, size_t msglen) {
  const stk__pnm_hdr *h = &f->h.pnm;
  int w = f->info.width, ht = f->info.height, comps = f->info.components;
  const uint8_t *b = f->buf;
  size_t n = f->n, pos = h->data_off;
  int plain = h->kind <= 3, bitonal = h->kind == 1 || h->kind == 4;
  uint64_t samples = (uint64_t)w * (uint64_t)ht * (uint64_t)comps;
  if (!plain) {
    uint64_t bytes = bitonal ? (((uint64_t)w + 7) / 8) * (uint64_t)ht
                             : samples * (h->maxval > 255 ? 2u : 1u);
    if (pos > n || bytes > n - pos)
      return stk__fail(msg, msglen, STK_EDECODE,
                       "truncated PPM/PGM file (%zu bytes of pixel data, %" PRIu64 " needed)",
                       pos > n ? (size_t)0 : n - pos, bytes);
  }
  uint8_t *lut = NULL;
  uint32_t nvals = h->maxval > 255 ? 65536 : 256;
  if (!bitonal) {
    if (stk__buf_reserve(&f->scratch, nvals))
      return stk__fail(msg, msglen, STK_ENOMEM, "out of memory");
    lut = f->scratch.p;
    make_lut(h, comps == 1, lut, nvals);
  }
  uint8_t *out = stk__fmtdec_pixels(f, msg, msglen);
  if (!out) return STK_ENOMEM;
  if (!plain) {
    const uint8_t *s = b + pos;
    for (int y = 0; y < ht; y++) {
      uint8_t *o = out + (size_t)y * w * 3;
      if (bitonal) {
        const uint8_t *r = s + (size_t)y * (((size_t)w + 7) / 8);
        for (int x = 0; x < w; x++) memset(o + 3 * x, (r[x / 8] >> (7 - x % 8)) & 1 ? 0 : 255, 3);
      } else if (h->maxval > 255) {
        const uint8_t *r = s + (size_t)y * w * comps * 2;
        for (int x = 0; x < w; x++) {
          uint8_t v[3];
          for (int c = 0; c < comps; c++, r += 2) v[c] = lut[(uint32_t)r[0] << 8 | r[1]];
          put(o + 3 * x, comps, v);
        }
      } else {
        const uint8_t *r = s + (size_t)y * w * comps;
        for (int x = 0; x < w; x++) {
          uint8_t v[3];
          for (int c = 0; c < comps; c++) v[c] = lut[*r++];
          put(o + 3 * x, comps, v);
        }
      }
    }
    return STK_OK;
  }
  /* plain: samples one token at a time */
  int rc = STK_OK;
  for (uint64_t i = 0; i < samples; i += (uint64_t)comps) {
    uint8_t v[3];
    for (int c = 0; c < comps; c++) {
      uint32_t t;
      if (!next_plain(b, n, &pos, bitonal, &t, msg, msglen, &rc))
        return rc ? rc
                  : stk__fail(msg, msglen, STK_EDECODE,
                              "truncated PPM/PGM file (%" PRIu64 " of %" PRIu64 " samples)",
                              i + (uint64_t)c, samples);
      if (t > h->maxval)
        return stk__fail(msg, msglen, STK_EDECODE,
                         "PPM/PGM: sample %" PRIu32 " over maxval %" PRIu32, t, h->maxval);
      v[c] = bitonal ? (t ? 0 : 255) : lut[t];
    }
    put(out + (size_t)i / (size_t)comps * 3, comps, v);
  }
  return STK_OK;
}
