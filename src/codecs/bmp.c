/*
 * bmp.c: BMP decoding to 8-bit RGB, our own reader (the format is simple and
 * Pillow's rules are easier to follow exactly in our own code than through
 * a library's). What is read, and how, follows Pillow's BmpImagePlugin so
 * that the pixels equal Image.open(f).convert("RGB"):
 *
 *   - info headers of 12 (OS/2 1.x), 40, 64, 108 and 124 bytes, as Pillow;
 *   - 1, 4 and 8 bits through the palette (an index past the palette is the
 *     grey (i, i, i), Pillow's default palette), 16-bit 5-5-5, 24-bit BGR,
 *     32-bit BGRX, and BI_BITFIELDS masks (each channel scaled to 8 bits as
 *     Pillow's unpackers do: v * 255 / (2^bits - 1), truncated);
 *   - bottom-up rows, or top-down when the height is negative;
 *   - alpha is ignored; RLE, JPEG and PNG compression are refused.
 *
 * The file is untrusted: every offset and size is checked against the bytes
 * there are before it is used, in 64-bit arithmetic.
 */
#include <inttypes.h>
#include <string.h>

#include "codecs/formats.h"

#define BI_RGB 0
#define BI_RLE8 1
#define BI_RLE4 2
#define BI_BITFIELDS 3

static uint32_t le16(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8; }
static uint32_t le32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* A mask is usable when its bits are one run (0x7E0, not 0x505). */
static int mask_ok(uint32_t m) {
  if (!m) return 0;
  while (!(m & 1)) m >>= 1;
  return (m & (m + 1)) == 0;
}

/* The masks of BI_BITFIELDS (after a 40-byte header, or inside a longer
 * one at the same place), checked; *pal_pos moves past them for a 40-byte
 * header. */
static int read_masks(stk__fmtdec *f, uint32_t hsize, size_t *pal_pos, char *msg,
                      size_t msglen) {
  const uint8_t *b = f->buf;
  stk__bmp_hdr *h = &f->h.bmp;
  int bits = h->bits;
  if (f->n < 14 + 40 + 12)
    return stk__fail(msg, msglen, STK_EDECODE, "truncated BMP file (in the bit masks)");
  uint32_t a = hsize >= 52 ? le32(b + 66) : 0;
  for (int c = 0; c < 3; c++) h->mask[c] = le32(b + 54 + 4 * c);
  if (hsize == 40) *pal_pos += 12;
  if (bits < 16)
    return stk__fail(msg, msglen, STK_EDECODE, "BMP: bit masks on a %d-bit image", bits);
  if (bits == 32 && !h->mask[0] && !h->mask[1] && !h->mask[2] && !a) {
    /* Pillow reads all-zero masks as BGRA */
    h->mask[0] = 0xFF0000, h->mask[1] = 0xFF00, h->mask[2] = 0xFF;
  }
  uint32_t limit = bits == 16 ? 0xFFFFu : bits == 24 ? 0xFFFFFFu : 0xFFFFFFFFu;
  for (int c = 0; c < 3; c++)
    if (!mask_ok(h->mask[c]) || (h->mask[c] & ~limit))
      return stk__fail(msg, msglen, STK_EDECODE,
                       "BMP: unsupported bit-field layout (masks %08" PRIx32 " %08" PRIx32
                       " %08" PRIx32 ")", h->mask[0], h->mask[1], h->mask[2]);
  return STK_OK;
}

/* The palette of a 1, 4 or 8-bit image (at pal_pos, `pad` bytes an entry,
 * `colors` of them or 0 for all), and where the pixel data starts. */
static int read_palette(stk__fmtdec *f, uint32_t off, uint32_t hsize, size_t pal_pos, int pad,
                        uint32_t colors, uint64_t *data_off, char *msg, size_t msglen) {
  const uint8_t *b = f->buf;
  size_t n = f->n;
  stk__bmp_hdr *h = &f->h.bmp;
  uint64_t ncol = colors ? colors : (uint64_t)1 << h->bits;
  if (ncol > 65536)
    return stk__fail(msg, msglen, STK_EDECODE, "BMP: unsupported palette size (%" PRIu64 ")",
                     ncol);
  /* Pillow reads the palette with a read that may come back short: the
   * entries the file has are used, the grey ramp stands for the rest */
  uint64_t used = ncol < 256 ? ncol : 256;
  uint64_t have = pal_pos < n ? (n - pal_pos) / (uint64_t)pad : 0;
  if (used > have) used = have;
  /* Pillow's default palette is the grey ramp; the file's entries
   * replace its first ones */
  for (int i = 0; i < 256; i++) memset(h->palette + 3 * i, i, 3);
  for (uint64_t i = 0; i < used; i++) {
    const uint8_t *e = b + pal_pos + i * (uint64_t)pad; /* B, G, R(, X) */
    h->palette[3 * i] = e[2], h->palette[3 * i + 1] = e[1], h->palette[3 * i + 2] = e[0];
  }
  /* Pillow's repair of writers that point the data offset at the palette */
  if (off == 14 + hsize) *data_off += 4 * ncol;
  if (!off) *data_off = pal_pos + ncol * (uint64_t)pad;
  return STK_OK;
}

/* The info header's size, depth, compression and palette count (12 bytes:
 * OS/2 1.x; else Windows'); *pad the bytes per palette entry. */
static int read_info(stk__fmtdec *f, uint32_t hsize, uint32_t *w, uint32_t *ht,
                     uint32_t *compression, uint32_t *colors, int *pad, char *msg,
                     size_t msglen) {
  const uint8_t *ih = f->buf + 14;
  stk__bmp_hdr *h = &f->h.bmp;
  *compression = BI_RGB;
  *colors = 0;
  if (hsize == 12) {
    *w = le16(ih + 4);
    *ht = le16(ih + 6);
    h->bits = (int)le16(ih + 10);
    *pad = 3;
  } else {
    *w = le32(ih + 4);
    *ht = le32(ih + 8);
    /* Pillow's test for a negative (top-down) height: its top byte is 0xFF */
    if (ih[11] == 0xFF) {
      h->top_down = 1;
      *ht = (uint32_t)0 - *ht;
    }
    h->bits = (int)le16(ih + 14);
    *compression = le32(ih + 16);
    *colors = le32(ih + 32);
    *pad = 4;
  }
  if (*w > INT32_MAX || *ht > INT32_MAX)
    return stk__fail(msg, msglen, STK_EDECODE, "BMP: size %" PRIu32 "x%" PRIu32 " out of range",
                     *w, *ht);
  int bits = h->bits;
  if (bits != 1 && bits != 4 && bits != 8 && bits != 16 && bits != 24 && bits != 32)
    return stk__fail(msg, msglen, STK_EDECODE, "BMP: unsupported pixel depth (%d bits)", bits);
  return STK_OK;
}

/* The channel masks of the compression (BI_BITFIELDS: the file's; BI_RGB:
 * the depth's). */
static int read_layout(stk__fmtdec *f, uint32_t hsize, uint32_t compression, size_t *pal_pos,
                       char *msg, size_t msglen) {
  stk__bmp_hdr *h = &f->h.bmp;
  int bits = h->bits;
  if (compression == BI_RLE8 || compression == BI_RLE4)
    return stk__fail(msg, msglen, STK_EDECODE,
                     "RLE-compressed BMP is not decoded by this build (uncompressed and "
                     "BI_BITFIELDS are)");
  if (compression == BI_BITFIELDS) return read_masks(f, hsize, pal_pos, msg, msglen);
  if (compression != BI_RGB)
    return stk__fail(msg, msglen, STK_EDECODE, "BMP: unsupported compression (%" PRIu32 ")",
                     compression);
  if (bits == 16) {
    h->mask[0] = 0x7C00, h->mask[1] = 0x3E0, h->mask[2] = 0x1F;
  } else if (bits == 24 || bits == 32) {
    h->mask[0] = 0xFF0000, h->mask[1] = 0xFF00, h->mask[2] = 0xFF;
  }
  return STK_OK;
}

int stk__bmp_header(stk__fmtdec *f, char *msg, size_t msglen) {
  const uint8_t *b = f->buf;
  size_t n = f->n;
  stk__bmp_hdr *h = &f->h.bmp;
  if (n < 18) return stk__fail(msg, msglen, STK_EDECODE, "truncated BMP file (no header)");
  uint32_t off = le32(b + 10), hsize = le32(b + 14);
  if (hsize != 12 && hsize != 40 && hsize != 64 && hsize != 108 && hsize != 124)
    return stk__fail(msg, msglen, STK_EDECODE, "BMP: unsupported header size %" PRIu32, hsize);
  if (n < 14 + (size_t)hsize)
    return stk__fail(msg, msglen, STK_EDECODE, "truncated BMP file (in the header)");
  uint32_t w, ht, compression, colors;
  int pad; /* bytes per palette entry */
  h->top_down = 0;
  memset(h->mask, 0, sizeof h->mask);
  int rc = read_info(f, hsize, &w, &ht, &compression, &colors, &pad, msg, msglen);
  size_t pal_pos = 14 + (size_t)hsize;
  if (rc == STK_OK) rc = read_layout(f, hsize, compression, &pal_pos, msg, msglen);
  if (rc) return rc;
  int bits = h->bits;
  uint64_t data_off = off;
  if (bits <= 8) {
    rc = read_palette(f, off, hsize, pal_pos, pad, colors, &data_off, msg, msglen);
    if (rc) return rc;
  } else if (!off) {
    data_off = pal_pos;
  }
  uint64_t stride = (((uint64_t)w * (uint64_t)bits + 31) >> 3) & ~(uint64_t)3;
  if (data_off > n) return stk__fail(msg, msglen, STK_EDECODE, "truncated BMP file (no pixel data)");
  h->data_off = (uint32_t)data_off;
  h->stride = stride > UINT32_MAX ? UINT32_MAX : (uint32_t)stride; /* decode checks the size */
  f->info.width = (int)w;
  f->info.height = (int)ht;
  f->info.format = STK__FMT_BMP;
  f->info.components = bits == 32 && compression == BI_BITFIELDS ? 4 : 3;
  f->info.progressive = 0;
  f->scratch_need = 0; /* decoded straight into the pixels */
  return STK_OK;
}

/* One channel of a bit-field pixel scaled to 8 bits, as Pillow's BGR;15,
 * BGR;16 unpackers do for fewer bits (truncating), by its top 8 for more. */
static uint8_t channel(uint32_t px, uint32_t mask, int shift, int width) {
  uint32_t v = (px & mask) >> shift;
  if (width == 8) return (uint8_t)v;
  if (width > 8) return (uint8_t)(v >> (width - 8));
  return (uint8_t)(v * 255u / ((1u << width) - 1));
}

int stk__bmp_decode(stk__fmtdec *f, char *msg, size_t msglen) {
  const stk__bmp_hdr *h = &f->h.bmp;
  int w = f->info.width, ht = f->info.height, bits = h->bits;
  uint64_t rowbytes = ((uint64_t)w * (uint64_t)bits + 7) / 8;
  /* the last row needs only its own bytes, not its padding (as Pillow) */
  uint64_t need = (uint64_t)h->data_off + (uint64_t)(ht - 1) * h->stride + rowbytes;
  if (need > f->n)
    return stk__fail(msg, msglen, STK_EDECODE,
                     "truncated BMP file (%zu bytes, the pixels need %" PRIu64 ")", f->n, need);
  uint8_t *out = stk__fmtdec_pixels(f, msg, msglen);
  if (!out) return STK_ENOMEM;
  int sh[3] = {0, 0, 0}, wd[3] = {0, 0, 0}; /* each mask's first bit and width */
  for (int c = 0; c < 3 && bits >= 16; c++) {
    while (!((h->mask[c] >> sh[c]) & 1)) sh[c]++;
    while (sh[c] + wd[c] < 32 && ((h->mask[c] >> (sh[c] + wd[c])) & 1)) wd[c]++;
  }
  for (int y = 0; y < ht; y++) {
    int sy = h->top_down ? y : ht - 1 - y;
    const uint8_t *s = f->buf + h->data_off + (size_t)sy * h->stride;
    uint8_t *o = out + (size_t)y * w * 3;
    if (bits <= 8) {
      int per = 8 / bits, m = (1 << bits) - 1;
      for (int x = 0; x < w; x++) {
        int shift = 8 - bits * (x % per + 1); /* the first pixel is in the high bits */
        int i = (s[x / per] >> shift) & m;
        memcpy(o + 3 * x, h->palette + 3 * i, 3);
      }
    } else if (bits == 24 && h->mask[0] == 0xFF0000 && h->mask[1] == 0xFF00 &&
               h->mask[2] == 0xFF) { /* B, G, R: the common case, without masks */
      for (int x = 0; x < w; x++) {
        o[3 * x] = s[3 * x + 2], o[3 * x + 1] = s[3 * x + 1], o[3 * x + 2] = s[3 * x];
      }
    } else {
      int bpp = bits / 8;
      for (int x = 0; x < w; x++) {
        const uint8_t *p = s + (size_t)x * bpp;
        uint32_t px = bpp == 2 ? le16(p) : bpp == 3 ? le16(p) | (uint32_t)p[2] << 16 : le32(p);
        for (int c = 0; c < 3; c++) o[3 * x + c] = channel(px, h->mask[c], sh[c], wd[c]);
      }
    }
  }
  return STK_OK;
}
