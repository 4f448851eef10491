/*
 * test_codec_tiff.c: TIFF files written here with libtiff (strips and
 * tiles, 8-bit RGB, 16-bit RGB and grey, CMYK, palette) decode to the
 * pixels Pillow gives them: 16-bit RGB by its high byte, 16-bit grey
 * clipped at 255, CMYK by Pillow's cmyk2rgb, palette entries by their high
 * byte; a file cut short is refused.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <tiffio.h>

#include "check.h"
#include "codecs/codec.h"
#include "stoker.h"

#define W 40
#define H 24

static uint16_t val(int x, int y, int c) { return (uint16_t)(x * 1601 + y * 2711 + c * 9001 + x * y * 37); }

/* Writes a TIFF (tiled when tile > 0) and returns its bytes. */
static uint8_t *write_tiff(int photometric, int bits, int spp, int tile, size_t *n) {
  char path[] = "/tmp/stk_tiff_XXXXXX";
  int fd = mkstemp(path);
  if (fd < 0) return NULL;
  close(fd);
  TIFF *t = TIFFOpen(path, "w");
  TIFFSetField(t, TIFFTAG_IMAGEWIDTH, W);
  TIFFSetField(t, TIFFTAG_IMAGELENGTH, H);
  TIFFSetField(t, TIFFTAG_BITSPERSAMPLE, bits);
  TIFFSetField(t, TIFFTAG_SAMPLESPERPIXEL, spp);
  TIFFSetField(t, TIFFTAG_PHOTOMETRIC, photometric);
  TIFFSetField(t, TIFFTAG_PLANARCONFIG, PLANARCONFIG_CONTIG);
  TIFFSetField(t, TIFFTAG_COMPRESSION, COMPRESSION_LZW);
  if (photometric == PHOTOMETRIC_PALETTE) {
    static uint16_t r[256], g[256], b[256];
    for (int i = 0; i < 256; i++) r[i] = val(i, 0, 0), g[i] = val(i, 1, 1), b[i] = val(i, 2, 2);
    TIFFSetField(t, TIFFTAG_COLORMAP, r, g, b);
  }
  int bps = bits / 8;
  size_t row = (size_t)W * spp * bps;
  uint8_t *img = malloc(row * H);
  for (int y = 0; y < H; y++)
    for (int x = 0; x < W; x++)
      for (int c = 0; c < spp; c++) {
        uint16_t v = val(x, y, c);
        uint8_t *p = img + (size_t)y * row + ((size_t)x * spp + c) * bps;
        if (bps == 2) memcpy(p, &v, 2); else *p = (uint8_t)(v >> 8);
      }
  if (tile) {
    TIFFSetField(t, TIFFTAG_TILEWIDTH, 16);
    TIFFSetField(t, TIFFTAG_TILELENGTH, 16);
    uint8_t *tb = calloc(1, (size_t)16 * 16 * spp * bps);
    for (int ty = 0; ty < H; ty += 16)
      for (int tx = 0; tx < W; tx += 16) {
        memset(tb, 0, (size_t)16 * 16 * spp * bps);
        for (int y = 0; y < 16 && ty + y < H; y++)
          for (int x = 0; x < 16 && tx + x < W; x++)
            memcpy(tb + ((size_t)y * 16 + x) * spp * bps, img + (size_t)(ty + y) * row + (size_t)(tx + x) * spp * bps, (size_t)spp * bps);
        TIFFWriteTile(t, tb, (uint32_t)tx, (uint32_t)ty, 0, 0);
      }
    free(tb);
  } else {
    TIFFSetField(t, TIFFTAG_ROWSPERSTRIP, 5);
    for (int y = 0; y < H; y++) TIFFWriteScanline(t, img + (size_t)y * row, (uint32_t)y, 0);
  }
  TIFFClose(t);
  free(img);
  FILE *f = fopen(path, "rb");
  fseek(f, 0, SEEK_END);
  *n = (size_t)ftell(f);
  rewind(f);
  uint8_t *buf = malloc(*n);
  if (fread(buf, 1, *n, f) != *n) *n = 0;
  fclose(f);
  unlink(path);
  return buf;
}

static void expect(int photometric, int bits, int x, int y, uint8_t e[3]) {
  for (int c = 0; c < 3; c++) {
    uint16_t v = val(x, y, photometric == PHOTOMETRIC_MINISBLACK ? 0 : c);
    uint8_t v8 = (uint8_t)(v >> 8);
    if (photometric == PHOTOMETRIC_MINISBLACK) e[c] = bits == 16 ? (v > 255 ? 255 : (uint8_t)v) : v8;
    else if (photometric == PHOTOMETRIC_RGB) e[c] = v8;
    else if (photometric == PHOTOMETRIC_PALETTE) e[c] = (uint8_t)(val(val(x, y, 0) >> 8, c, c) >> 8);
    else { /* CMYK */
      uint32_t nk = 255u - (val(x, y, 3) >> 8), t = v8 * nk + 128;
      e[c] = (uint8_t)(nk - (((t >> 8) + t) >> 8));
    }
  }
}

int main(void) {
  stk__decoder *d = stk__decoder_create();
  static const struct { int photometric, bits, spp; } kinds[] = {
      {PHOTOMETRIC_RGB, 8, 3}, {PHOTOMETRIC_RGB, 16, 3}, {PHOTOMETRIC_RGB, 8, 4},
      {PHOTOMETRIC_MINISBLACK, 8, 1}, {PHOTOMETRIC_MINISBLACK, 16, 1},
      {PHOTOMETRIC_SEPARATED, 8, 4}, {PHOTOMETRIC_PALETTE, 8, 1},
  };
  char msg[256];
  for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++)
    for (int tile = 0; tile < 2; tile++) {
      size_t n = 0;
      uint8_t *buf = write_tiff(kinds[k].photometric, kinds[k].bits, kinds[k].spp, tile, &n);
      CHECK(buf && n);
      if (!buf) continue;
      stk__region r;
      int rc = stk__decoder_decode(d, buf, n, NULL, 1, &r, msg, sizeof msg);
      CHECK_MSG(rc == STK_OK, "kind %zu tile %d: %s", k, tile, msg);
      if (!rc) {
        int bad = 0;
        for (int y = 0; y < H; y++)
          for (int x = 0; x < W; x++) {
            uint8_t e[3];
            expect(kinds[k].photometric, kinds[k].bits, x, y, e);
            bad += memcmp(r.pixels + (size_t)y * r.stride + 3 * x, e, 3) != 0;
          }
        CHECK_MSG(bad == 0, "kind %zu tile %d: %d pixels differ", k, tile, bad);
      }
      /* cut short: in the pixel data or the directory, which libtiff writes
       * last (a palette file has a large colour map there; cut earlier) */
      msg[0] = 0;
      size_t cut = kinds[k].photometric == PHOTOMETRIC_PALETTE ? n / 8 : n / 2;
      rc = stk__decoder_decode(d, buf, cut, NULL, 1, &r, msg, sizeof msg);
      CHECK_MSG(rc == STK_EDECODE && strstr(msg, "TIFF"), "kind %zu cut: %d %s", k, rc, msg);
      free(buf);
    }
  stk__decoder_destroy(d);
  return CHECK_DONE();
}
