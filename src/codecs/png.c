/*
 * png.c: PNG decoding with libspng to 8-bit RGB. Like jpeg.c it works in two
 * steps, header then pixels, so that decoder.c can apply its limits before
 * the image buffer is sized.
 */
#include <stdio.h>
#include <stdlib.h>

#include <spng.h>

#include "codecs/codec.h"
#include "core/common.h"

typedef struct stk__pngdec {
  spng_ctx *ctx;  /* one per image, between header and decode */
  stk__buf pixels;
  uint64_t max_bytes; /* the decode's budget beside the pixels; 0 = none */
} stk__pngdec;

stk__pngdec *stk__pngdec_create(void) { return calloc(1, sizeof(stk__pngdec)); }

void stk__pngdec_set_budget(stk__pngdec *p, uint64_t max_bytes) { p->max_bytes = max_bytes; }

/* libspng keeps every ancillary chunk it reads, zTXt, iTXt and iCCP inflated,
 * and by default without a limit: a 1.5 MB zTXt inflates to 1 GB before the
 * first row. Pillow keeps at most 64 MiB of text per image (MAX_TEXT_MEMORY)
 * and refuses a compressed chunk that inflates past 1 MiB (MAX_TEXT_CHUNK);
 * the cache limit here is the first, and it also bounds each inflation
 * (libspng inflates into what is left of it). No single chunk may be larger
 * than the budget either, IDAT excepted (libspng reads those in pieces). */
#define PNG_CACHE_LIMIT ((uint64_t)64 << 20)

void stk__pngdec_abort(stk__pngdec *p) {
  spng_ctx_free(p->ctx);
  p->ctx = NULL;
}

void stk__pngdec_destroy(stk__pngdec *p) {
  if (!p)
    return;
  stk__pngdec_abort(p);
  stk__buf_free(&p->pixels);
  free(p);
}

size_t stk__pngdec_scratch_bytes(const stk__pngdec *p) { return p->pixels.cap; }

static int spng_failure(stk__pngdec *p, int e, char *msg, size_t msglen) {
  stk__pngdec_abort(p);
  if (e == SPNG_EMEM)
    return stk__fail(msg, msglen, STK_ENOMEM, "PNG: %s", spng_strerror(e));
  if (e == SPNG_EUSER_WIDTH || e == SPNG_EUSER_HEIGHT)
    return stk__fail(msg, msglen, STK_ELIMIT, "PNG: %s", spng_strerror(e));
  if (e == SPNG_ECHUNK_LIMITS)
    return stk__fail(msg, msglen, STK_ELIMIT,
                     "PNG: ancillary chunks (text, ICC profile) over the decode's memory "
                     "budget (max_decode_bytes=%llu)", (unsigned long long)p->max_bytes);
  if (e == SPNG_EOF)
    return stk__fail(msg, msglen, STK_EDECODE, "truncated PNG file");
  return stk__fail(msg, msglen, STK_EDECODE, "PNG: %s", spng_strerror(e));
}

/* Reads the header. `max_side` bounds each dimension (spng's own check; the
 * pixel-count limit is decoder.c's). On success the context waits for
 * stk__pngdec_decode() or stk__pngdec_abort(). */
int stk__pngdec_header(stk__pngdec *p, const uint8_t *buf, size_t n, uint32_t max_side,
                       stk__image_info *info, char *msg, size_t msglen) {
  stk__pngdec_abort(p);
  p->ctx = spng_ctx_new(0);
  if (!p->ctx)
    return stk__fail(msg, msglen, STK_ENOMEM, "out of memory");
  /* PIL refuses a bad checksum in any chunk it reads, not only critical ones. */
  int e = spng_set_crc_action(p->ctx, SPNG_CRC_ERROR, SPNG_CRC_ERROR);
  if (!e)
    e = spng_set_image_limits(p->ctx, max_side, max_side);
  if (!e && p->max_bytes) {
    uint64_t cache = p->max_bytes < PNG_CACHE_LIMIT ? p->max_bytes : PNG_CACHE_LIMIT;
    /* libspng wants the chunk limit no larger than the cache's */
    e = spng_set_chunk_limits(p->ctx, (size_t)cache, (size_t)cache);
  }
  if (!e)
    e = spng_set_png_buffer(p->ctx, buf, n);
  struct spng_ihdr ihdr;
  if (!e)
    e = spng_get_ihdr(p->ctx, &ihdr);
  if (e)
    return spng_failure(p, e, msg, msglen);
  info->width = (int)ihdr.width;
  info->height = (int)ihdr.height;
  info->format = STK__FMT_PNG;
  switch (ihdr.color_type) {
  case SPNG_COLOR_TYPE_GRAYSCALE: info->components = 1; break;
  case SPNG_COLOR_TYPE_GRAYSCALE_ALPHA: info->components = 2; break;
  case SPNG_COLOR_TYPE_TRUECOLOR_ALPHA: info->components = 4; break;
  default: info->components = 3; break; /* RGB and palette */
  }
  info->progressive = ihdr.interlace_method != SPNG_INTERLACE_NONE; /* Adam7 */
  return STK_OK;
}

/* Decodes the whole image to RGB8. Transparency is dropped and 16-bit
 * samples keep their high byte, as PIL's convert("RGB") does. */
int stk__pngdec_decode(stk__pngdec *p, stk__region *out, char *msg, size_t msglen) {
  struct spng_ihdr ihdr;
  size_t size = 0;
  int e = spng_get_ihdr(p->ctx, &ihdr);
  if (!e)
    e = spng_decoded_image_size(p->ctx, SPNG_FMT_RGB8, &size);
  if (e)
    return spng_failure(p, e, msg, msglen);
  if (stk__buf_reserve(&p->pixels, size)) {
    stk__pngdec_abort(p);
    return stk__fail(msg, msglen, STK_ENOMEM, "out of memory for a %ux%u image",
                     (unsigned)ihdr.width, (unsigned)ihdr.height);
  }
  e = spng_decode_image(p->ctx, p->pixels.p, size, SPNG_FMT_RGB8, 0);
  if (e)
    return spng_failure(p, e, msg, msglen);
  stk__pngdec_abort(p);
  out->pixels = p->pixels.p;
  out->stride = (size_t)ihdr.width * 3;
  out->x = 0;
  out->y = 0;
  out->w = (int)ihdr.width;
  out->h = (int)ihdr.height;
  out->scale_denom = 1;
  out->image_w = out->w;
  out->image_h = out->h;
  return STK_OK;
}

#define STK__STR2(x) #x
#define STK__STR(x) STK__STR2(x)

const char *stk__png_lib_version(void) {
  return "libspng " STK__STR(SPNG_VERSION_MAJOR) "." STK__STR(SPNG_VERSION_MINOR) "." STK__STR(
      SPNG_VERSION_PATCH);
}
