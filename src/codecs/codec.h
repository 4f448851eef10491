/*
 * codec.h: decoding one encoded image held in memory into 8-bit RGB.
 *
 * A decoder is per-thread state (a libjpeg handle, scratch buffers) that is
 * reused from image to image, so that steady-state decoding allocates nothing
 * of its own. The format comes from the bytes, never from the file name.
 *
 * The JPEG path decodes only the requested region: the rows it covers
 * (skipping the ones above it, stopping after the last) and the iMCU columns
 * it covers, optionally at a DCT scale of 1/2, 1/4 or 1/8.
 */
#ifndef STK_CODEC_H
#define STK_CODEC_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
  STK__FMT_UNKNOWN = 0,
  STK__FMT_JPEG,
  STK__FMT_PNG,
  STK__FMT_GIF,
  STK__FMT_BMP,
  STK__FMT_WEBP,
  STK__FMT_TIFF,
  STK__FMT_PNM,   /* PPM/PGM/PBM (netpbm): in ImageFolder's extensions, not decoded */
  STK__FMT_RAW,   /* decoded RGB8 from a cache: never sniffed from bytes */
} stk__format;

/* Format from the first bytes. */
stk__format stk__sniff(const uint8_t *buf, size_t n);
const char *stk__format_name(stk__format f);

typedef struct {
  int width, height;   /* full image size */
  stk__format format;
  int components;      /* channels in the file: 1 grey, 3 colour, 4 CMYK/RGBA */
  int progressive;     /* JPEG: progressive scan */
  uint64_t work_bytes; /* what the decode allocates beside its output pixels,
                          as the header tells (a progressive or multi-scan
                          JPEG's coefficient buffers, a table format's
                          scratch); the loader's shared budget counts it */
} stk__image_info;

/* A rectangle in pixel coordinates: x, y of the top-left corner, width, height. */
typedef struct {
  int x, y, w, h;
} stk__rect;

/* A decoded region, owned by the decoder, valid until its next call. */
typedef struct {
  const uint8_t *pixels; /* RGB8, interleaved */
  size_t stride;         /* bytes between rows */
  int x, y, w, h;        /* the region, in the coordinates of the scaled image.
                            It covers at least the requested region (scaled)
                            and may be larger: iMCU alignment of columns. */
  int scale_denom;       /* the image was decoded at 1/scale_denom */
  int image_w, image_h;  /* size of the whole scaled image */
} stk__region;

typedef struct stk__decoder stk__decoder;

stk__decoder *stk__decoder_create(void);
void stk__decoder_destroy(stk__decoder *d);

/* Limits applied by both calls below; 0 means no limit. */
void stk__decoder_set_limits(stk__decoder *d, uint64_t max_pixels);
/* The memory one decode may take beside its pixels (stk_options.
 * max_decode_bytes; 384 MiB until set); 0 = none. Over it: STK_ELIMIT. */
void stk__decoder_set_max_bytes(stk__decoder *d, uint64_t max_bytes);

/* Reads the header only. Returns STK_OK, or STK_EFORMAT / STK_EDECODE /
 * STK_ELIMIT with a reason (no file name) in msg. */
int stk__decoder_header(stk__decoder *d, const uint8_t *buf, size_t n,
                        stk__image_info *info, char *msg, size_t msglen);

/* Decodes the region `want` (full-resolution coordinates; NULL = the whole
 * image) at 1/scale_denom (1, 2, 4 or 8; JPEG only, other formats use 1).
 * The scaled region is want scaled by 1/scale_denom, rounded outwards.
 * Errors as for the header; a truncated file is an error (STK_EDECODE), as
 * it is for PIL. */
int stk__decoder_decode(stk__decoder *d, const uint8_t *buf, size_t n,
                        const stk__rect *want, int scale_denom,
                        stk__region *out, char *msg, size_t msglen);

/* Bytes of scratch the decoder holds now (statistics). */
size_t stk__decoder_scratch_bytes(const stk__decoder *d);

/* Compile-time capabilities, for stk_build_info(). */
int stk__jpeg_has_arith(void);
const char *stk__jpeg_lib_version(void);
const char *stk__png_lib_version(void);
const char *stk__webp_lib_version(void);
const char *stk__tiff_lib_version(void);

#endif
