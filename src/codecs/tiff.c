/*
 * tiff.c: TIFF decoding with libtiff to 8-bit RGB, the first page (as
 * Pillow opens it). Strips and tiles, read from memory.
 *
 * The common layouts are converted here, sample by sample, as Pillow's
 * unpackers and convert("RGB") do, so that the pixels are Pillow's exactly:
 *
 *   - unsigned 8 and 16-bit samples, chunky (interleaved) planes;
 *   - greyscale (min-is-black, min-is-white; 1, 2, 4, 8 bits), and 16-bit
 *     greyscale clipped at 255: Pillow's "I;16" image converts to RGB by
 *     clipping, not scaling, so a 16-bit grey TIFF is nearly white there;
 *   - RGB (with or without an extra alpha, dropped; premultiplied alpha is
 *     undone as Pillow's "RGBa" unpacker does) at 8 bits, and at 16 bits by
 *     the high byte of each sample (Pillow's "RGB;16" unpackers);
 *   - palette (1, 2, 4, 8 bits), each 16-bit colour map entry by its high
 *     byte (Pillow: b // 256);
 *   - CMYK at 8 bits with Pillow's cmyk2rgb: R = (255 - K) - C(255 - K)/255,
 *     rounded as its MULDIV255;
 *   - JPEG-compressed YCbCr, which libtiff's JPEG codec turns into RGB (as
 *     Pillow asks it to).
 *
 * Anything else (planar separate, float or 32-bit samples, YCbCr without
 * JPEG, CIELab, LogLuv, ...) goes through libtiff's TIFFRGBAImage, whose
 * conversions may differ from Pillow's by a level or, for what Pillow cannot
 * read, have no Pillow counterpart.
 *
 * The file is untrusted: libtiff is given the decode's memory budget as its
 * largest single allocation (libtiff 4.5 and later), the buffers here are
 * sized from libtiff's own checked sizes, and the budget is checked from
 * the header before decoding.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <tiffio.h>

#include "codecs/formats.h"

/* The memory stream libtiff reads, and the first error it reported. */
typedef struct {
  const uint8_t *buf;
  uint64_t n, pos;
  char err[200];
  int use_rgba; /* the TIFFRGBAImage path */
  uint16_t photometric, bits, spp, extra_assoc, planar;
  uint16_t *cmap[3];
} tiff_state;

_Static_assert(sizeof(tiff_state) <= sizeof(stk__tiff_hdr), "stk__tiff_hdr is too small");

static tmsize_t t_read(thandle_t h, void *p, tmsize_t n) {
  tiff_state *s = h;
  if (n < 0) return 0;
  uint64_t left = s->pos < s->n ? s->n - s->pos : 0;
  uint64_t k = (uint64_t)n < left ? (uint64_t)n : left;
  memcpy(p, s->buf + s->pos, (size_t)k);
  s->pos += k;
  return (tmsize_t)k;
}
static tmsize_t t_write(thandle_t h, void *p, tmsize_t n) {
  (void)h, (void)p, (void)n;
  return -1;
}
static toff_t t_seek(thandle_t h, toff_t off, int whence) {
  tiff_state *s = h;
  uint64_t base = whence == SEEK_CUR ? s->pos : whence == SEEK_END ? s->n : 0;
  if (off > UINT64_MAX - base) return (toff_t)-1;
  s->pos = base + off; /* past the end is allowed: reads there return nothing */
  return s->pos;
}
static int t_close(thandle_t h) {
  (void)h;
  return 0;
}
static toff_t t_size(thandle_t h) { return ((tiff_state *)h)->n; }
/* The file is already in memory: libtiff reads strips straight from it. */
static int t_map(thandle_t h, void **base, toff_t *size) {
  tiff_state *s = h;
  *base = (void *)(uintptr_t)s->buf;
  *size = s->n;
  return 1;
}
static void t_unmap(thandle_t h, void *base, toff_t size) { (void)h, (void)base, (void)size; }

#if TIFFLIB_VERSION >= 20221213
/* Errors are kept for the message (the first one, the cause); warnings are
 * dropped. Nothing is printed. */
static int t_error(TIFF *tif, void *user, const char *module, const char *fmt, va_list ap) {
  (void)tif, (void)module;
  tiff_state *s = user;
  if (!s->err[0]) vsnprintf(s->err, sizeof s->err, fmt, ap);
  return 1;
}
static int t_warning(TIFF *tif, void *user, const char *module, const char *fmt, va_list ap) {
  (void)tif, (void)user, (void)module, (void)fmt, (void)ap;
  return 1;
}
#endif

void stk__tiff_abort(stk__fmtdec *f) {
  if (f->handle) TIFFClose(f->handle);
  f->handle = NULL;
}

static int tiff_failure(stk__fmtdec *f, tiff_state *s, int code, const char *what, char *msg,
                        size_t msglen) {
  stk__tiff_abort(f);
  if (s->err[0] && strstr(s->err, "emory"))
    return stk__fail(msg, msglen, STK_ELIMIT, "TIFF: %s (%s; max_decode_bytes=%" PRIu64 ")", what,
                     s->err, f->max_bytes);
  if (s->err[0]) return stk__fail(msg, msglen, code, "TIFF: %s (%s)", what, s->err);
  return stk__fail(msg, msglen, code, "TIFF: %s", what);
}

int stk__tiff_header(stk__fmtdec *f, char *msg, size_t msglen) {
  stk__tiff_abort(f);
  tiff_state *s = (tiff_state *)(void *)f->h.tiff.state;
  memset(s, 0, sizeof *s);
  s->buf = f->buf;
  s->n = f->n;
  TIFF *tif;
#if TIFFLIB_VERSION >= 20221213
  TIFFOpenOptions *o = TIFFOpenOptionsAlloc();
  if (!o) return stk__fail(msg, msglen, STK_ENOMEM, "out of memory");
  if (f->max_bytes) TIFFOpenOptionsSetMaxSingleMemAlloc(o, (tmsize_t)f->max_bytes);
  TIFFOpenOptionsSetErrorHandlerExtR(o, t_error, s);
  TIFFOpenOptionsSetWarningHandlerExtR(o, t_warning, s);
  tif = TIFFClientOpenExt("tiff", "rm", s, t_read, t_write, t_seek, t_close, t_size, t_map,
                          t_unmap, o);
  TIFFOpenOptionsFree(o);
#else
  tif = TIFFClientOpen("tiff", "rm", s, t_read, t_write, t_seek, t_close, t_size, t_map, t_unmap);
#endif
  if (!tif) return tiff_failure(f, s, STK_EDECODE, "cannot read the header", msg, msglen);
  f->handle = tif;
  uint32_t w = 0, h = 0;
  uint16_t comp = 1, fmt = SAMPLEFORMAT_UINT, nextra = 0, *extra = NULL, inkset = INKSET_CMYK;
  TIFFGetField(tif, TIFFTAG_IMAGEWIDTH, &w);
  TIFFGetField(tif, TIFFTAG_IMAGELENGTH, &h);
  TIFFGetFieldDefaulted(tif, TIFFTAG_BITSPERSAMPLE, &s->bits);
  TIFFGetFieldDefaulted(tif, TIFFTAG_SAMPLESPERPIXEL, &s->spp);
  TIFFGetFieldDefaulted(tif, TIFFTAG_PLANARCONFIG, &s->planar);
  TIFFGetFieldDefaulted(tif, TIFFTAG_SAMPLEFORMAT, &fmt);
  TIFFGetFieldDefaulted(tif, TIFFTAG_COMPRESSION, &comp);
  TIFFGetFieldDefaulted(tif, TIFFTAG_EXTRASAMPLES, &nextra, &extra);
  TIFFGetFieldDefaulted(tif, TIFFTAG_INKSET, &inkset);
  if (!TIFFGetField(tif, TIFFTAG_PHOTOMETRIC, &s->photometric)) {
    /* The tag is required, but files without it exist. Pillow reads a
     * missing tag as 0, white-is-zero (so 1- and 8-bit grey are inverted;
     * it opens nothing of three or more samples); libtiff's RGBA reader
     * would assume black-is-zero for one sample. As Pillow for fewer than
     * three samples, RGB (libtiff's guess) for more; the tag is set so that
     * the RGBA reader, should it be used, reads the same. (libtiff sets
     * YCbCr itself for old-style JPEG.) */
    s->photometric = s->spp >= 3 ? PHOTOMETRIC_RGB : PHOTOMETRIC_MINISWHITE;
    TIFFSetField(tif, TIFFTAG_PHOTOMETRIC, s->photometric);
  }
  if (w > INT32_MAX || h > INT32_MAX)
    return tiff_failure(f, s, STK_EDECODE, "size out of range", msg, msglen);
  s->extra_assoc = nextra && extra && extra[0] == EXTRASAMPLE_ASSOCALPHA;
  if (s->photometric == PHOTOMETRIC_YCBCR && comp == COMPRESSION_JPEG) {
    /* libtiff's JPEG codec converts to RGB itself */
    TIFFSetField(tif, TIFFTAG_JPEGCOLORMODE, JPEGCOLORMODE_RGB);
    s->photometric = PHOTOMETRIC_RGB;
  }
  int b = s->bits, p = s->photometric, spp = s->spp;
  /* one sample a pixel is the same bytes in either planar layout */
  int ok = (s->planar == PLANARCONFIG_CONTIG || spp == 1) && fmt == SAMPLEFORMAT_UINT;
  if (p == PHOTOMETRIC_MINISBLACK || p == PHOTOMETRIC_MINISWHITE)
    /* Grey with any number of extra samples is read here (the first sample,
     * as TIFFRGBAImage reads it), so that 16-bit grey never reaches
     * TIFFRGBAImage: its 16-bit grey tile writer steps over a clipped tile's
     * skipped columns in bytes, not samples, and so misplaces (and
     * misaligns) every row after the first of a tiled image whose width is
     * not a whole number of tiles. decode_rgba refuses what is left. */
    ok = ok && spp >= 1 && (b == 1 || b == 2 || b == 4 || b == 8 || b == 16);
  else if (p == PHOTOMETRIC_PALETTE)
    ok = ok && spp == 1 && (b == 1 || b == 2 || b == 4 || b == 8) &&
         TIFFGetField(tif, TIFFTAG_COLORMAP, &s->cmap[0], &s->cmap[1], &s->cmap[2]);
  else if (p == PHOTOMETRIC_RGB)
    ok = ok && (spp == 3 || spp == 4) && (b == 8 || (b == 16 && !s->extra_assoc));
  else if (p == PHOTOMETRIC_SEPARATED)
    ok = ok && inkset == INKSET_CMYK && (spp == 4 || spp == 5) && b == 8;
  else
    ok = 0;
  s->use_rgba = !ok;
  uint64_t buf = 0;
  if (s->use_rgba) {
    char why[1024];
    if (!TIFFRGBAImageOK(tif, why)) {
      stk__tiff_abort(f);
      return stk__fail(msg, msglen, STK_EDECODE, "TIFF: unsupported layout (%s)", why);
    }
    buf = (uint64_t)w * h * 4; /* TIFFRGBAImage's ABGR raster */
  } else {
    buf = TIFFIsTiled(tif) ? TIFFTileSize64(tif) : TIFFStripSize64(tif);
    if (!buf) return tiff_failure(f, s, STK_EDECODE, "bad strip or tile size", msg, msglen);
  }
  f->info.width = (int)w;
  f->info.height = (int)h;
  f->info.format = STK__FMT_TIFF;
  f->info.components = p == PHOTOMETRIC_SEPARATED ? 4 : (p == PHOTOMETRIC_RGB ? 3 : 1);
  f->info.progressive = 0;
  /* the strip or tile buffer (or the RGBA raster), and libtiff's own
   * codec state, bounded by this allowance */
  f->scratch_need = buf + (1u << 20);
  return STK_OK;
}

static uint8_t clip8(uint32_t v) { return (uint8_t)(v > 255 ? 255 : v); }

/* Sample i of a packed row of `bits`-bit samples (1, 2, 4: MSB first). */
static uint32_t packed(const uint8_t *row, uint64_t i, int bits) {
  if (bits == 8) return row[i];
  if (bits == 16) return ((const uint16_t *)(const void *)row)[i]; /* host order: libtiff swabbed */
  uint64_t bit = i * (uint64_t)bits;
  return (uint32_t)(row[bit / 8] >> (8 - bits - bit % 8)) & ((1u << bits) - 1);
}

/* Converts n pixels of one row of decoded samples to RGB, as Pillow. */
static void convert_row(const tiff_state *s, const uint8_t *in, uint8_t *out, int n) {
  int spp = s->spp, b = s->bits;
  switch (s->photometric) {
  case PHOTOMETRIC_MINISBLACK:
  case PHOTOMETRIC_MINISWHITE: {
    uint32_t max = (1u << (b == 16 ? 8 : b)) - 1; /* 16-bit: clipped to 255 below */
    for (int x = 0; x < n; x++) {
      uint32_t v = packed(in, (uint64_t)x * spp, b);
      uint8_t g;
      if (b == 16) g = clip8(v);
      else if (b == 8) g = (uint8_t)v;
      else g = (uint8_t)(v * 255 / max); /* Pillow's L;2, L;4 and 1 unpackers: exact multiples */
      /* Pillow reads 16-bit white-is-zero as I;16, not inverted */
      if (s->photometric == PHOTOMETRIC_MINISWHITE && b != 16) g = (uint8_t)(255 - g);
      out[3 * x] = out[3 * x + 1] = out[3 * x + 2] = g;
    }
    break;
  }
  case PHOTOMETRIC_PALETTE:
    for (int x = 0; x < n; x++) {
      uint32_t i = packed(in, (uint64_t)x, b);
      for (int c = 0; c < 3; c++) out[3 * x + c] = (uint8_t)(s->cmap[c][i] >> 8);
    }
    break;
  case PHOTOMETRIC_RGB:
    for (int x = 0; x < n; x++) {
      if (b == 16) {
        const uint16_t *p = (const uint16_t *)(const void *)in + (size_t)x * spp;
        for (int c = 0; c < 3; c++) out[3 * x + c] = (uint8_t)(p[c] >> 8);
      } else {
        const uint8_t *p = in + (size_t)x * spp;
        if (spp == 4 && s->extra_assoc) { /* Pillow's RGBa: undo the premultiplication */
          uint32_t a = p[3];
          for (int c = 0; c < 3; c++)
            out[3 * x + c] = a == 255 ? p[c] : a == 0 ? 0 : clip8(p[c] * 255u / a);
        } else {
          out[3 * x] = p[0], out[3 * x + 1] = p[1], out[3 * x + 2] = p[2];
        }
      }
    }
    break;
  case PHOTOMETRIC_SEPARATED:
    for (int x = 0; x < n; x++) {
      const uint8_t *p = in + (size_t)x * spp;
      uint32_t nk = 255u - p[3];
      for (int c = 0; c < 3; c++) {
        uint32_t t = p[c] * nk + 128; /* Pillow's MULDIV255 */
        uint32_t m = ((t >> 8) + t) >> 8;
        out[3 * x + c] = (uint8_t)(nk - m);
      }
    }
    break;
  }
}

static int decode_rgba(stk__fmtdec *f, TIFF *tif, tiff_state *s, uint8_t *out, char *msg,
                       size_t msglen) {
  int w = f->info.width, h = f->info.height;
  if (stk__buf_reserve(&f->scratch, (size_t)w * h * 4))
    return stk__fail(msg, msglen, STK_ENOMEM, "out of memory");
  TIFFRGBAImage img;
  char why[1024];
  int ok = TIFFRGBAImageBegin(&img, tif, 0, why);
  if (ok && img.isContig && img.bitspersample == 16 &&
      (img.photometric == PHOTOMETRIC_MINISBLACK || img.photometric == PHOTOMETRIC_MINISWHITE)) {
    /* signed or floating 16-bit grey, or grey that libtiff's defaults call
     * so: its 16-bit grey writer (above) would misplace the rows */
    TIFFRGBAImageEnd(&img);
    snprintf(s->err, sizeof s->err, "16-bit greyscale other than unsigned samples in one plane");
    return tiff_failure(f, s, STK_EDECODE, "unsupported layout", msg, msglen);
  }
  if (ok) {
    img.req_orientation = ORIENTATION_TOPLEFT;
    ok = TIFFRGBAImageGet(&img, f->scratch.p, (uint32_t)w, (uint32_t)h);
    TIFFRGBAImageEnd(&img);
  } else {
    snprintf(s->err, sizeof s->err, "%.150s", why); /* a short reason is enough */
  }
  if (!ok)
    return tiff_failure(f, s, STK_EDECODE, "cannot decode the image", msg, msglen);
  const uint32_t *r = f->scratch.p;
  for (size_t i = 0; i < (size_t)w * h; i++) {
    out[3 * i] = (uint8_t)TIFFGetR(r[i]);
    out[3 * i + 1] = (uint8_t)TIFFGetG(r[i]);
    out[3 * i + 2] = (uint8_t)TIFFGetB(r[i]);
  }
  return STK_OK;
}

int stk__tiff_decode(stk__fmtdec *f, char *msg, size_t msglen) {
  TIFF *tif = f->handle;
  tiff_state *s = (tiff_state *)(void *)f->h.tiff.state;
  int w = f->info.width, h = f->info.height;
  uint8_t *out = stk__fmtdec_pixels(f, msg, msglen);
  if (!out) return STK_ENOMEM;
  if (s->use_rgba) return decode_rgba(f, tif, s, out, msg, msglen);
  int tiled = TIFFIsTiled(tif);
  uint64_t size = tiled ? TIFFTileSize64(tif) : TIFFStripSize64(tif);
  uint64_t row_bytes = tiled ? TIFFTileRowSize64(tif) : TIFFScanlineSize64(tif);
  if (!size || !row_bytes || size > SIZE_MAX || stk__buf_reserve(&f->scratch, (size_t)size))
    return stk__fail(msg, msglen, STK_ENOMEM, "out of memory for a TIFF strip or tile");
  stk__buf chunk = f->scratch;
  int rc = STK_OK;
  if (tiled) {
    uint32_t tw = 0, th = 0;
    TIFFGetField(tif, TIFFTAG_TILEWIDTH, &tw);
    TIFFGetField(tif, TIFFTAG_TILELENGTH, &th);
    if (!tw || !th || (uint64_t)th * row_bytes > size) {
      rc = tiff_failure(f, s, STK_EDECODE, "bad tile size", msg, msglen);
      goto done;
    }
    for (uint32_t ty = 0; ty < (uint32_t)h && !rc; ty += th)
      for (uint32_t tx = 0; tx < (uint32_t)w; tx += tw) {
        if (TIFFReadTile(tif, chunk.p, tx, ty, 0, 0) < 0) {
          rc = tiff_failure(f, s, STK_EDECODE, "corrupt or truncated tile", msg, msglen);
          break;
        }
        int cw = (int)((uint32_t)w - tx < tw ? (uint32_t)w - tx : tw);
        int ch = (int)((uint32_t)h - ty < th ? (uint32_t)h - ty : th);
        for (int y = 0; y < ch; y++)
          convert_row(s, (const uint8_t *)chunk.p + (size_t)y * row_bytes,
                      out + ((size_t)(ty + (uint32_t)y) * w + tx) * 3, cw);
      }
  } else {
    uint32_t rps = 0;
    TIFFGetFieldDefaulted(tif, TIFFTAG_ROWSPERSTRIP, &rps);
    if (rps == 0 || rps > (uint32_t)h) rps = (uint32_t)h;
    for (uint32_t y0 = 0; y0 < (uint32_t)h; y0 += rps) {
      uint32_t rows = (uint32_t)h - y0 < rps ? (uint32_t)h - y0 : rps;
      tmsize_t got = TIFFReadEncodedStrip(tif, TIFFComputeStrip(tif, y0, 0), chunk.p, (tmsize_t)-1);
      /* a strip shorter than its rows is a truncated or corrupt file (Pillow refuses it) */
      if (got < 0 || (uint64_t)got < rows * row_bytes) {
        rc = tiff_failure(f, s, STK_EDECODE, "corrupt or truncated strip", msg, msglen);
        break;
      }
      for (uint32_t y = 0; y < rows; y++)
        convert_row(s, (const uint8_t *)chunk.p + (size_t)y * row_bytes,
                    out + (size_t)(y0 + y) * w * 3, w);
    }
  }
done:
  return rc;
}

const char *stk__tiff_lib_version(void) {
  /* TIFFGetVersion() is a paragraph ("LIBTIFF, Version 4.5.0\n..."): the
   * library's own, a run-time link may be newer than the headers */
  static char buf[64];
  const char *v = TIFFGetVersion(), *at = strstr(v, "Version ");
  at = at ? at + 8 : v;
  snprintf(buf, sizeof buf, "libtiff %.*s", (int)strcspn(at, " \n"), at);
  return buf;
}
