/*
 * decoder.c: the stk__decoder object. It sniffs the format, applies the
 * limits between reading the header and decoding the pixels, and dispatches
 * to jpeg.c or png.c, or to a row of the codec table of whole-image formats
 * (formats.h: BMP, PPM/PGM, WebP, TIFF), whose per-thread state it owns.
 */
#include <inttypes.h>
#include <stdlib.h>

#include "codecs/codec.h"
#include "codecs/formats.h"
#include "core/common.h"
#include "core/options.h"

/* jpeg.c */
typedef struct stk__jpegdec stk__jpegdec;
stk__jpegdec *stk__jpegdec_create(void);
void stk__jpegdec_destroy(stk__jpegdec *j);
size_t stk__jpegdec_scratch_bytes(const stk__jpegdec *j);
int stk__jpegdec_header(stk__jpegdec *j, const uint8_t *buf, size_t n, stk__image_info *info,
                        char *msg, size_t msglen);
int stk__jpegdec_decode(stk__jpegdec *j, const stk__rect *want, int scale_denom,
                        stk__region *out, char *msg, size_t msglen);
void stk__jpegdec_abort(stk__jpegdec *j);
void stk__jpegdec_set_budget(stk__jpegdec *j, uint64_t max_bytes);

/* png.c */
typedef struct stk__pngdec stk__pngdec;
stk__pngdec *stk__pngdec_create(void);
void stk__pngdec_destroy(stk__pngdec *p);
size_t stk__pngdec_scratch_bytes(const stk__pngdec *p);
int stk__pngdec_header(stk__pngdec *p, const uint8_t *buf, size_t n, uint32_t max_side,
                       stk__image_info *info, char *msg, size_t msglen);
int stk__pngdec_decode(stk__pngdec *p, stk__region *out, char *msg, size_t msglen);
void stk__pngdec_abort(stk__pngdec *p);
void stk__pngdec_set_budget(stk__pngdec *p, uint64_t max_bytes);

/* Every decoder starts with the options' max_pixels and max_decode_bytes
 * defaults (core/options.h), until stk__decoder_set_limits() and
 * stk__decoder_set_max_bytes() say otherwise. */
#define DEFAULT_MAX_PIXELS ((uint64_t)STK__MAX_PIXELS_DEFAULT)
#define DEFAULT_MAX_DECODE_BYTES ((uint64_t)STK__MAX_DECODE_BYTES_DEFAULT)

/* The formats decoded whole by formats.h's decoders, one row each. */
static const stk__codec k_codecs[] = {
    {STK__FMT_BMP, stk__bmp_header, stk__bmp_decode, NULL},
    {STK__FMT_PNM, stk__pnm_header, stk__pnm_decode, NULL},
    {STK__FMT_WEBP, stk__webp_header, stk__webp_decode, NULL},
    {STK__FMT_TIFF, stk__tiff_header, stk__tiff_decode, stk__tiff_abort},
};

static const stk__codec *codec_of(stk__format f) {
  for (size_t i = 0; i < sizeof k_codecs / sizeof k_codecs[0]; i++)
    if (k_codecs[i].format == f) return &k_codecs[i];
  return NULL;
}

struct stk__decoder {
  uint64_t max_pixels;
  stk__jpegdec *jpeg;
  stk__pngdec *png;
  stk__fmtdec fmt; /* the state of the table's formats */
};

uint8_t *stk__fmtdec_pixels(stk__fmtdec *f, char *msg, size_t msglen) {
  /* decoder.c checked the pixel count, so this cannot overflow */
  size_t size = (size_t)f->info.width * (size_t)f->info.height * 3;
  if (stk__buf_reserve(&f->pixels, size)) {
    stk__fail(msg, msglen, STK_ENOMEM, "out of memory for a %dx%d image", f->info.width,
              f->info.height);
    return NULL;
  }
  return f->pixels.p;
}

stk__decoder *stk__decoder_create(void) {
  stk__decoder *d = calloc(1, sizeof *d);
  if (!d)
    return NULL;
  d->max_pixels = DEFAULT_MAX_PIXELS;
  d->jpeg = stk__jpegdec_create();
  d->png = stk__pngdec_create();
  if (!d->jpeg || !d->png) {
    stk__decoder_destroy(d);
    return NULL;
  }
  stk__decoder_set_max_bytes(d, DEFAULT_MAX_DECODE_BYTES);
  return d;
}

void stk__decoder_destroy(stk__decoder *d) {
  if (!d)
    return;
  stk__jpegdec_destroy(d->jpeg);
  stk__pngdec_destroy(d->png);
  const stk__codec *c = codec_of(d->fmt.info.format);
  if (c && c->abort) c->abort(&d->fmt);
  stk__buf_free(&d->fmt.pixels);
  stk__buf_free(&d->fmt.scratch);
  free(d);
}

void stk__decoder_set_limits(stk__decoder *d, uint64_t max_pixels) { d->max_pixels = max_pixels; }

void stk__decoder_set_max_bytes(stk__decoder *d, uint64_t max_bytes) {
  stk__jpegdec_set_budget(d->jpeg, max_bytes);
  stk__pngdec_set_budget(d->png, max_bytes);
  d->fmt.max_bytes = max_bytes;
}

size_t stk__decoder_scratch_bytes(const stk__decoder *d) {
  return stk__jpegdec_scratch_bytes(d->jpeg) + stk__pngdec_scratch_bytes(d->png) +
         d->fmt.pixels.cap + d->fmt.scratch.cap;
}

static void abort_format(stk__decoder *d, stk__format f) {
  const stk__codec *c = codec_of(f);
  if (f == STK__FMT_JPEG)
    stk__jpegdec_abort(d->jpeg);
  else if (f == STK__FMT_PNG)
    stk__pngdec_abort(d->png);
  else if (c && c->abort)
    c->abort(&d->fmt);
}

/* Reads the header and checks the limits. On success the format's decoder
 * waits for its decode step; on failure it has been reset. */
static int begin(stk__decoder *d, const uint8_t *buf, size_t n, stk__image_info *info,
                 char *msg, size_t msglen) {
  if (!buf || n == 0)
    return stk__fail(msg, msglen, STK_EDECODE, "empty file");
  stk__format f = stk__sniff(buf, n);
  int rc;
  switch (f) {
  case STK__FMT_JPEG:
    rc = stk__jpegdec_header(d->jpeg, buf, n, info, msg, msglen);
    break;
  case STK__FMT_PNG: {
    /* No side can be longer than the pixel limit; PNG allows up to 2^31-1. */
    uint32_t max_side = d->max_pixels && d->max_pixels < INT32_MAX ? (uint32_t)d->max_pixels
                                                                   : INT32_MAX;
    rc = stk__pngdec_header(d->png, buf, n, max_side, info, msg, msglen);
    break;
  }
  case STK__FMT_UNKNOWN:
    return stk__fail(msg, msglen, STK_EFORMAT, "not an image (unrecognised content)");
  default: {
    const stk__codec *c = codec_of(f);
    if (!c)
      return stk__fail(msg, msglen, STK_EFORMAT,
                       "%s images are not decoded by this build (JPEG, PNG, WebP, TIFF, BMP "
                       "and PPM/PGM are)", stk__format_name(f));
    d->fmt.buf = buf;
    d->fmt.n = n;
    d->fmt.scratch_need = 0;
    d->fmt.info.format = f;
    rc = c->header(&d->fmt, msg, msglen);
    if (!rc)
      *info = d->fmt.info;
    else if (c->abort)
      c->abort(&d->fmt);
    break;
  }
  }
  if (rc)
    return rc;
  /* JPEG's header set its coefficient buffers; PNG's row buffers are small */
  if (f == STK__FMT_PNG) info->work_bytes = 0;
  else if (f != STK__FMT_JPEG) info->work_bytes = d->fmt.scratch_need;
  if (info->width <= 0 || info->height <= 0) {
    abort_format(d, f);
    return stk__fail(msg, msglen, STK_EDECODE, "image has no pixels (%dx%d)", info->width,
                     info->height);
  }
  uint64_t pixels = (uint64_t)info->width * (uint64_t)info->height;
  if (d->max_pixels && pixels > d->max_pixels) {
    abort_format(d, f);
    return stk__fail(msg, msglen, STK_ELIMIT,
                     "image is %dx%d = %" PRIu64 " pixels, over the limit of %" PRIu64,
                     info->width, info->height, pixels, d->max_pixels);
  }
  /* what the table's formats need beside their pixels, from the header */
  if (codec_of(f) && d->fmt.max_bytes && d->fmt.scratch_need > d->fmt.max_bytes) {
    abort_format(d, f);
    return stk__fail(msg, msglen, STK_ELIMIT,
                     "%s: decoding this %dx%d image needs %" PRIu64 " bytes beside its pixels, "
                     "over the decode's memory budget (max_decode_bytes=%" PRIu64 ")",
                     stk__format_name(f), info->width, info->height, d->fmt.scratch_need,
                     d->fmt.max_bytes);
  }
  return STK_OK;
}

int stk__decoder_header(stk__decoder *d, const uint8_t *buf, size_t n, stk__image_info *info,
                        char *msg, size_t msglen) {
  int rc = begin(d, buf, n, info, msg, msglen);
  if (!rc)
    abort_format(d, info->format);
  return rc;
}

int stk__decoder_decode(stk__decoder *d, const uint8_t *buf, size_t n, const stk__rect *want,
                        int scale_denom, stk__region *out, char *msg, size_t msglen) {
  if (scale_denom != 1 && scale_denom != 2 && scale_denom != 4 && scale_denom != 8)
    return stk__fail(msg, msglen, STK_EINVAL, "scale 1/%d is not 1, 1/2, 1/4 or 1/8",
                     scale_denom);
  stk__image_info info;
  int rc = begin(d, buf, n, &info, msg, msglen);
  if (rc)
    return rc;
  if (want && (want->w <= 0 || want->h <= 0 || want->x < 0 || want->y < 0 ||
               want->x > info.width - want->w || want->y > info.height - want->h)) {
    abort_format(d, info.format);
    return stk__fail(msg, msglen, STK_EINVAL, "region %dx%d at (%d,%d) is outside the %dx%d image",
                     want->w, want->h, want->x, want->y, info.width, info.height);
  }
  if (info.format == STK__FMT_JPEG)
    return stk__jpegdec_decode(d->jpeg, want, scale_denom, out, msg, msglen);
  if (info.format == STK__FMT_PNG)
    return stk__pngdec_decode(d->png, out, msg, msglen);
  /* the table's formats decode the whole image at 1/1, as PNG does */
  const stk__codec *c = codec_of(info.format);
  rc = c->decode(&d->fmt, msg, msglen);
  if (c->abort) c->abort(&d->fmt);
  if (rc) return rc;
  out->pixels = d->fmt.pixels.p;
  out->stride = (size_t)info.width * 3;
  out->x = 0;
  out->y = 0;
  out->w = info.width;
  out->h = info.height;
  out->scale_denom = 1;
  out->image_w = info.width;
  out->image_h = info.height;
  return STK_OK;
}
