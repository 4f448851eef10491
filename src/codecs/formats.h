/*
 * formats.h: the decoders that decode a whole image at once into 8-bit RGB
 * (BMP, PPM/PGM, WebP, TIFF), as rows of decoder.c's codec table.
 *
 * Each works in the two steps decoder.c drives: `header` parses the file's
 * header without allocating anything for the image and says how much memory
 * the decode will take beside its RGB pixels (`scratch_need`), so that
 * decoder.c can apply max_pixels and max_decode_bytes first; `decode` then
 * fills `pixels` (width * height * 3 bytes, rows packed) or fails; `abort`
 * drops what a header left open. They share one state per decoder, so the
 * pixel and scratch buffers grow to the largest image seen and are reused.
 */
#ifndef STK_CODECS_FORMATS_H
#define STK_CODECS_FORMATS_H

#include <stddef.h>
#include <stdint.h>

#include "codecs/codec.h"
#include "core/common.h"

/* What bmp.c reads from a BMP header. */
typedef struct {
  uint32_t data_off;    /* where the rows start */
  uint32_t stride;      /* bytes per stored row, padded to 4 */
  int bits;             /* 1, 4, 8, 16, 24 or 32 */
  int top_down;         /* rows stored top row first */
  uint32_t mask[3];     /* 16/32-bit: R, G, B bit masks */
  uint8_t palette[256 * 3]; /* 1/4/8-bit: RGB of each index */
} stk__bmp_hdr;

/* What pnm.c reads from a netpbm header. */
typedef struct {
  int kind;             /* the digit of "P1".."P6" */
  uint32_t maxval;      /* 1 for P1/P4 */
  size_t data_off;      /* first byte after the header */
} stk__pnm_hdr;

/* tiff.c's stream state, opaque here: it lives in the decoder, whose
 * address is stable, because libtiff keeps a pointer to it from header to
 * decode. */
typedef struct {
  _Alignas(8) unsigned char state[512];
} stk__tiff_hdr;

typedef struct stk__fmtdec {
  const uint8_t *buf;   /* the file, from header to decode */
  size_t n;
  stk__image_info info;
  uint64_t max_bytes;   /* the decode's budget beside its pixels; 0 = none */
  uint64_t scratch_need; /* set by header: bytes the decode needs beside its pixels */
  stk__buf pixels;      /* the decoded RGB8 image */
  stk__buf scratch;     /* a format's working memory (rows, RGBA canvas) */
  void *handle;         /* a library's handle between header and decode (TIFF) */
  union {
    stk__bmp_hdr bmp;
    stk__pnm_hdr pnm;
    stk__tiff_hdr tiff;
  } h;
} stk__fmtdec;

typedef struct {
  stk__format format;
  int (*header)(stk__fmtdec *f, char *msg, size_t msglen);
  int (*decode)(stk__fmtdec *f, char *msg, size_t msglen);
  void (*abort)(stk__fmtdec *f); /* NULL: nothing to drop */
} stk__codec;

int stk__bmp_header(stk__fmtdec *f, char *msg, size_t msglen);
int stk__bmp_decode(stk__fmtdec *f, char *msg, size_t msglen);
int stk__pnm_header(stk__fmtdec *f, char *msg, size_t msglen);
int stk__pnm_decode(stk__fmtdec *f, char *msg, size_t msglen);
int stk__webp_header(stk__fmtdec *f, char *msg, size_t msglen);
int stk__webp_decode(stk__fmtdec *f, char *msg, size_t msglen);
int stk__tiff_header(stk__fmtdec *f, char *msg, size_t msglen);
int stk__tiff_decode(stk__fmtdec *f, char *msg, size_t msglen);
void stk__tiff_abort(stk__fmtdec *f);

/* The pixel buffer for the image of f->info, reserved; NULL when out of
 * memory (msg says so). */
uint8_t *stk__fmtdec_pixels(stk__fmtdec *f, char *msg, size_t msglen);

#endif
