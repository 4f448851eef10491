/*
 * encode.h: JPEG and PNG writers. stoker's own data generator (`stoker synth`)
 * and its tests use them to make datasets and odd files; the training path
 * never encodes.
 */
#ifndef STK_ENCODE_H
#define STK_ENCODE_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
  STK__JCOLOR_YCC = 0,   /* RGB input, stored as YCbCr */
  STK__JCOLOR_GREY = 1,  /* 1-channel input */
  STK__JCOLOR_CMYK = 2,  /* 4-channel CMYK input, stored Adobe-style (inverted) */
  STK__JCOLOR_RGB = 3,   /* RGB input stored as RGB (no colour transform) */
} stk__jpeg_color;

typedef struct {
  int quality;           /* 1..100 */
  int progressive;       /* progressive scans */
  int arithmetic;        /* arithmetic coding instead of Huffman */
  int h_samp, v_samp;    /* luma sampling factors: 1,1 = 4:4:4; 2,1 = 4:2:2;
                            2,2 = 4:2:0; 1,2 = 4:4:0; 4,1 = 4:1:1 */
  stk__jpeg_color color;
  int restart_interval;  /* in MCU rows' worth of MCUs; 0 = none */
  int optimize;          /* optimised Huffman tables */
} stk__jpeg_enc_opts;

/* Sets the defaults: quality 90, baseline Huffman, 4:2:0, YCbCr. */
void stk__jpeg_enc_defaults(stk__jpeg_enc_opts *o);

/* Encodes `pixels` (w*h*channels bytes, channels from o->color: 3, 1 or 4)
 * into a malloc'd buffer the caller frees. Returns STK_OK or an error. */
int stk__jpeg_encode(const uint8_t *pixels, int w, int h, const stk__jpeg_enc_opts *o,
                     uint8_t **out, size_t *outlen);

/* PNG color types as in the PNG specification. */
typedef enum {
  STK__PNG_GREY = 0,
  STK__PNG_RGB = 2,
  STK__PNG_PALETTE = 3,
  STK__PNG_GREY_ALPHA = 4,
  STK__PNG_RGBA = 6,
} stk__png_color;

/* Encodes interleaved pixels of `color` at `bit_depth` (8 or 16; 16-bit
 * samples are big-endian in `pixels`). For STK__PNG_PALETTE, `pixels` are
 * 8-bit indices into `palette` (n_palette RGB triples). Caller frees *out. */
int stk__png_encode(const uint8_t *pixels, int w, int h, stk__png_color color, int bit_depth,
                    const uint8_t *palette, int n_palette, uint8_t **out, size_t *outlen);

/* Writes a buffer to a file, creating or replacing it. */
int stk__write_file(const char *path, const void *buf, size_t n);

#endif
