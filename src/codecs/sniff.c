/*
 * sniff.c: image format from the first bytes of the content.
 */
#include <string.h>

#include "codecs/codec.h"

static int starts_with(const uint8_t *buf, size_t n, const void *sig, size_t len) {
  return n >= len && memcmp(buf, sig, len) == 0;
}

stk__format stk__sniff(const uint8_t *buf, size_t n) {
  if (!buf)
    return STK__FMT_UNKNOWN;
  if (starts_with(buf, n, "\xFF\xD8\xFF", 3))
    return STK__FMT_JPEG;
  if (starts_with(buf, n, "\x89PNG\r\n\x1A\n", 8))
    return STK__FMT_PNG;
  if (starts_with(buf, n, "GIF87a", 6) || starts_with(buf, n, "GIF89a", 6))
    return STK__FMT_GIF;
  if (starts_with(buf, n, "BM", 2))
    return STK__FMT_BMP;
  if (n >= 12 && memcmp(buf, "RIFF", 4) == 0 && memcmp(buf + 8, "WEBP", 4) == 0)
    return STK__FMT_WEBP;
  if (starts_with(buf, n, "II*\0", 4) || starts_with(buf, n, "MM\0*", 4))
    return STK__FMT_TIFF;
  /* netpbm: "P1".."P6" then whitespace (ImageFolder lists .ppm and .pgm) */
  if (n >= 3 && buf[0] == 'P' && buf[1] >= '1' && buf[1] <= '6' &&
      (buf[2] == ' ' || buf[2] == '\n' || buf[2] == '\r' || buf[2] == '\t'))
    return STK__FMT_PNM;
  return STK__FMT_UNKNOWN;
}

const char *stk__format_name(stk__format f) {
  switch (f) {
  case STK__FMT_JPEG: return "JPEG";
  case STK__FMT_PNG: return "PNG";
  case STK__FMT_GIF: return "GIF";
  case STK__FMT_BMP: return "BMP";
  case STK__FMT_WEBP: return "WebP";
  case STK__FMT_TIFF: return "TIFF";
  case STK__FMT_PNM: return "PPM/PGM";
  case STK__FMT_RAW: return "raw RGB8";
  case STK__FMT_UNKNOWN: break;
  }
  return "unknown";
}
