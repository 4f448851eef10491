/* test_codec_sniff.c: format detection from the first bytes. */
#include <stdint.h>
#include <string.h>

#include "check.h"
#include "codecs/codec.h"

static stk__format sniff(const char *s, size_t n) { return stk__sniff((const uint8_t *)s, n); }

int main(void) {
  CHECK_EQ_INT(sniff("\xFF\xD8\xFF\xE0\0\x10JFIF", 10), STK__FMT_JPEG);
  CHECK_EQ_INT(sniff("\xFF\xD8\xFF", 3), STK__FMT_JPEG);
  CHECK_EQ_INT(sniff("\xFF\xD8", 2), STK__FMT_UNKNOWN);
  CHECK_EQ_INT(sniff("\xFF\xD9\xFF\xE0", 4), STK__FMT_UNKNOWN);

  CHECK_EQ_INT(sniff("\x89PNG\r\n\x1A\n\0\0\0\rIHDR", 16), STK__FMT_PNG);
  CHECK_EQ_INT(sniff("\x89PNG\r\n\x1A", 7), STK__FMT_UNKNOWN);
  CHECK_EQ_INT(sniff("\x89PNG\n\r\x1A\n", 8), STK__FMT_UNKNOWN); /* line ends swapped */

  CHECK_EQ_INT(sniff("GIF87a\x01\0", 8), STK__FMT_GIF);
  CHECK_EQ_INT(sniff("GIF89a", 6), STK__FMT_GIF);
  CHECK_EQ_INT(sniff("GIF88a", 6), STK__FMT_UNKNOWN);

  CHECK_EQ_INT(sniff("BM\x36\0\0\0", 6), STK__FMT_BMP);
  CHECK_EQ_INT(sniff("B", 1), STK__FMT_UNKNOWN);

  CHECK_EQ_INT(sniff("RIFF\x24\0\0\0WEBPVP8 ", 16), STK__FMT_WEBP);
  CHECK_EQ_INT(sniff("RIFF\x24\0\0\0WAVEfmt ", 16), STK__FMT_UNKNOWN);
  CHECK_EQ_INT(sniff("RIFF\x24\0\0\0WEB", 11), STK__FMT_UNKNOWN);

  CHECK_EQ_INT(sniff("II*\0\x08\0\0\0", 8), STK__FMT_TIFF);
  CHECK_EQ_INT(sniff("MM\0*\0\0\0\x08", 8), STK__FMT_TIFF);
  CHECK_EQ_INT(sniff("P6\n4 4\n255\n", 11), STK__FMT_PNM);
  CHECK_EQ_INT(sniff("P5 4 4 255 ", 11), STK__FMT_PNM);
  CHECK_EQ_INT(sniff("P7\n", 3), STK__FMT_UNKNOWN);
  CHECK_EQ_INT(sniff("Photo", 5), STK__FMT_UNKNOWN);
  CHECK_EQ_INT(sniff("II\0*", 4), STK__FMT_UNKNOWN);

  /* garbage, text and nothing */
  CHECK_EQ_INT(sniff("hello, world", 12), STK__FMT_UNKNOWN);
  CHECK_EQ_INT(sniff("", 0), STK__FMT_UNKNOWN);
  CHECK_EQ_INT(stk__sniff(NULL, 0), STK__FMT_UNKNOWN);
  uint8_t noise[64];
  uint32_t s = 12345;
  for (size_t i = 0; i < sizeof noise; i++) {
    s = s * 1664525u + 1013904223u;
    noise[i] = (uint8_t)(s >> 24);
  }
  noise[0] = 0x00; /* no signature starts with a zero byte */
  CHECK_EQ_INT(stk__sniff(noise, sizeof noise), STK__FMT_UNKNOWN);

  /* names */
  CHECK(strcmp(stk__format_name(STK__FMT_JPEG), "JPEG") == 0);
  CHECK(strcmp(stk__format_name(STK__FMT_PNG), "PNG") == 0);
  CHECK(strcmp(stk__format_name(STK__FMT_GIF), "GIF") == 0);
  CHECK(strcmp(stk__format_name(STK__FMT_BMP), "BMP") == 0);
  CHECK(strcmp(stk__format_name(STK__FMT_WEBP), "WebP") == 0);
  CHECK(strcmp(stk__format_name(STK__FMT_TIFF), "TIFF") == 0);
  CHECK(strcmp(stk__format_name(STK__FMT_UNKNOWN), "unknown") == 0);
  return CHECK_DONE();
}
