/*
 * test_codec_bad.c: odd and broken files, each with its expected outcome.
 * Truncated files fail as they do in PIL; corrupt entropy data decodes or
 * fails cleanly; sizes over the limit are refused from the header, before
 * any pixel memory exists; the content decides the format, not the name.
 * Run under the sanitizer build, this is also the crash test.
 */
#include "util.h"

#include "check.h"
#include "codecs/codec.h"
#include "codecs/encode.h"

static stk__decoder *dec;
static char msg[512];

static int decode(const uint8_t *buf, size_t n) {
  stk__region r;
  msg[0] = '\0';
  return stk__decoder_decode(dec, buf, n, NULL, 1, &r, msg, sizeof msg);
}

static int decode_region(const uint8_t *buf, size_t n, stk__rect want, int d) {
  stk__region r;
  msg[0] = '\0';
  return stk__decoder_decode(dec, buf, n, &want, d, &r, msg, sizeof msg);
}

static uint8_t *make_jpeg(int w, int h, int progressive, size_t *n) {
  uint8_t *rgb = malloc((size_t)w * h * 3);
  stk__synth_render(rgb, w, h, 42);
  stk__jpeg_enc_opts o;
  stk__jpeg_enc_defaults(&o);
  o.progressive = progressive;
  uint8_t *jpg = NULL;
  CHECK(stk__jpeg_encode(rgb, w, h, &o, &jpg, n) == STK_OK);
  free(rgb);
  return jpg;
}

static uint8_t *make_png(int w, int h, size_t *n) {
  uint8_t *rgb = malloc((size_t)w * h * 3);
  stk__synth_render(rgb, w, h, 43);
  uint8_t *png = NULL;
  CHECK(stk__png_encode(rgb, w, h, STK__PNG_RGB, 8, NULL, 0, &png, n) == STK_OK);
  free(rgb);
  return png;
}

static uint8_t *copy_of(const uint8_t *p, size_t n) {
  uint8_t *q = malloc(n ? n : 1);
  memcpy(q, p, n);
  return q;
}

/* A copy of `png` whose IHDR says w x h, with a valid checksum. */
static uint8_t *png_with_size(const uint8_t *png, size_t n, uint32_t w, uint32_t h) {
  uint8_t *p = copy_of(png, n);
  tu_put_be32(p + 16, w); /* signature 8, length 4, "IHDR" 4 */
  tu_put_be32(p + 20, h);
  tu_put_be32(p + 29, tu_crc32(p + 12, 17)); /* over type and 13 data bytes */
  return p;
}

static void test_empty_and_garbage(void) {
  CHECK_EQ_INT(decode((const uint8_t *)"", 0), STK_EDECODE);
  CHECK(strstr(msg, "empty") != NULL);
  CHECK_EQ_INT(decode(NULL, 0), STK_EDECODE);
  stk__image_info info;
  CHECK_EQ_INT(stk__decoder_header(dec, (const uint8_t *)"", 0, &info, msg, sizeof msg), STK_EDECODE);

  uint8_t noise[4096];
  uint32_t s = 99;
  for (size_t i = 0; i < sizeof noise; i++) {
    s = s * 1664525u + 1013904223u;
    noise[i] = (uint8_t)(s >> 24);
  }
  noise[0] = 0x17;
  CHECK_EQ_INT(decode(noise, sizeof noise), STK_EFORMAT);
  CHECK(strstr(msg, "not an image") != NULL);
  CHECK_EQ_INT(decode((const uint8_t *)"hello", 5), STK_EFORMAT);

  /* JPEG markers with no image in between */
  CHECK_EQ_INT(decode((const uint8_t *)"\xFF\xD8\xFF\xD9", 4), STK_EDECODE);
  /* a JPEG signature followed by noise */
  noise[0] = 0xFF, noise[1] = 0xD8, noise[2] = 0xFF;
  CHECK_EQ_INT(decode(noise, sizeof noise), STK_EDECODE);
  /* a PNG signature followed by noise */
  memcpy(noise, "\x89PNG\r\n\x1A\n", 8);
  CHECK_EQ_INT(decode(noise, sizeof noise), STK_EDECODE);
}

static void test_other_formats(void) {
  /* GIF is recognised and refused; the other formats are decoded, so a
   * signature alone is a broken file of that format, named as such. */
  static const struct {
    const char *bytes;
    size_t n;
    const char *name;
    int rc;
  } sigs[] = {
      {"GIF89a\x10\0\x10\0\x80\0\0", 13, "GIF", STK_EFORMAT},
      {"GIF87a\x10\0\x10\0\x80\0\0", 13, "GIF", STK_EFORMAT},
      {"BM\x46\0\0\0\0\0\0\0\x36\0\0\0", 14, "BMP", STK_EDECODE},
      {"RIFF\x24\0\0\0WEBPVP8 ", 16, "WebP", STK_EDECODE},
      {"II*\0\x08\0\0\0", 8, "TIFF", STK_EDECODE},
      {"P6\n16 16\n255\n", 13, "PPM/PGM", STK_EDECODE},
  };
  for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) {
    CHECK_EQ_INT(decode((const uint8_t *)sigs[i].bytes, sigs[i].n), sigs[i].rc);
    if (sigs[i].rc == STK_EFORMAT) {
      char want[128];
      snprintf(want, sizeof want,
               "%s images are not decoded by this build (JPEG, PNG, WebP, TIFF, BMP and "
               "PPM/PGM are)", sigs[i].name);
      CHECK_MSG(strcmp(msg, want) == 0, "message \"%s\"", msg);
    } else {
      CHECK_MSG(strncmp(msg, sigs[i].name, strlen(sigs[i].name)) == 0 || strstr(msg, sigs[i].name),
                "message \"%s\"", msg);
    }
  }
}

static void test_truncated_jpeg(int progressive) {
  size_t n;
  uint8_t *jpg = make_jpeg(160, 120, progressive, &n);
  if (!jpg) return;
  CHECK_EQ_INT(decode(jpg, n), STK_OK);
  size_t sos = tu_find_marker(jpg, n, 0xDA);
  CHECK(sos > 0);
  size_t cuts[] = {3, 20, 100, sos, sos + 20, n / 4, n / 2, n * 3 / 4, n - 20, n - 3, n - 2, n - 1};
  for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
    uint8_t *p = copy_of(jpg, cuts[i]); /* a copy of just the prefix, so ASan sees overreads */
    int rc = decode(p, cuts[i]);
    CHECK_MSG(rc == STK_EDECODE, "%s JPEG cut to %zu of %zu bytes: %d (%s)",
              progressive ? "progressive" : "baseline", cuts[i], n, rc, msg);
    /* A region above the cut fails too: the file is broken wherever it is read. */
    stk__rect top = {0, 0, 16, 16};
    rc = decode_region(p, cuts[i], top, 1);
    CHECK_MSG(rc == STK_EDECODE, "%s JPEG cut to %zu bytes, top region: %d (%s)",
              progressive ? "progressive" : "baseline", cuts[i], rc, msg);
    free(p);
  }
  /* Two bytes are no JPEG signature yet. */
  CHECK_EQ_INT(decode(jpg, 2), STK_EFORMAT);

  /* Bytes after the end-of-image marker are ignored, as PIL ignores them. */
  uint8_t *tail = malloc(n + 100);
  memcpy(tail, jpg, n);
  memset(tail + n, 0x5A, 100);
  CHECK_EQ_INT(decode(tail, n + 100), STK_OK);
  stk__rect top = {0, 0, 16, 16};
  CHECK_EQ_INT(decode_region(tail, n + 100, top, 1), STK_OK);
  free(tail);
  free(jpg);
}

static void test_corrupt_jpeg(void) {
  for (int progressive = 0; progressive < 2; progressive++) {
    size_t n;
    uint8_t *jpg = make_jpeg(96, 80, progressive, &n);
    if (!jpg) return;
    size_t sos = tu_find_marker(jpg, n, 0xDA);
    uint32_t s = 7;
    int ok = 0, failed = 0, other = 0;
    for (int t = 0; t < 300; t++) {
      uint8_t *p = copy_of(jpg, n);
      int flips = 1 + t % 4;
      for (int f = 0; f < flips; f++) {
        s = s * 1664525u + 1013904223u;
        /* anywhere after the scan header, or (1 in 5) anywhere after SOI */
        size_t lo = t % 5 ? sos + 4 : 2;
        size_t at = lo + (s >> 8) % (n - 2 - lo);
        p[at] = (uint8_t)(s >> 3);
      }
      int rc = t % 2 ? decode(p, n) : decode_region(p, n, (stk__rect){8, 8, 40, 30}, 1 << (t / 2 % 4));
      if (rc == STK_OK)
        ok++;
      else if (rc == STK_EDECODE)
        failed++;
      else
        other++;
      free(p);
    }
    CHECK_MSG(other == 0, "%d corrupt files gave neither success nor STK_EDECODE", other);
    CHECK(ok + failed == 300);
    free(jpg);
  }
}

static void test_huge_jpeg(void) {
  size_t n;
  uint8_t *jpg = make_jpeg(64, 48, 0, &n);
  if (!jpg) return;
  size_t sof = tu_find_marker(jpg, n, 0xC0);
  CHECK(sof > 0);
  uint8_t *p = copy_of(jpg, n);
  /* FF C0, length (2), precision (1), height (2), width (2) */
  p[sof + 5] = 0xFF, p[sof + 6] = 0xDC; /* 65500 */
  p[sof + 7] = 0xFF, p[sof + 8] = 0xDC;
  CHECK_EQ_INT(decode(p, n), STK_ELIMIT);
  CHECK_MSG(strstr(msg, "65500x65500 = 4290250000 pixels") != NULL, "message \"%s\"", msg);
  stk__image_info info;
  CHECK_EQ_INT(stk__decoder_header(dec, p, n, &info, msg, sizeof msg), STK_ELIMIT);
  /* The limit comes from the header: no pixel memory was sized for it. */
  CHECK(stk__decoder_scratch_bytes(dec) < (size_t)64 << 20);

  /* zero width */
  p[sof + 7] = 0, p[sof + 8] = 0;
  CHECK_EQ_INT(decode(p, n), STK_EDECODE);
  free(p);
  free(jpg);
}

/* Offset of chunk number `k` (0 = IHDR) of a PNG. */
static size_t png_chunk(const uint8_t *p, size_t n, int k) {
  size_t at = 8;
  for (int i = 0; i < k && at + 12 <= n; i++)
    at += 12 + ((size_t)p[at] << 24 | (size_t)p[at + 1] << 16 | (size_t)p[at + 2] << 8 | p[at + 3]);
  return at;
}

static void test_png(void) {
  size_t n;
  uint8_t *png = make_png(100, 80, &n);
  if (!png) return;
  CHECK_EQ_INT(decode(png, n), STK_OK);
  size_t idat2 = png_chunk(png, n, 2);
  CHECK_MSG(memcmp(png + idat2 + 4, "IDAT", 4) == 0, "expected two IDAT chunks");

  /* huge sizes, with valid checksums */
  uint8_t *p = png_with_size(png, n, 100000, 100000);
  CHECK_EQ_INT(decode(p, n), STK_ELIMIT);
  CHECK_MSG(strstr(msg, "100000x100000 = 10000000000 pixels") != NULL, "message \"%s\"", msg);
  free(p);
  p = png_with_size(png, n, 1, 200000000); /* one side alone over the limit */
  CHECK_EQ_INT(decode(p, n), STK_ELIMIT);
  free(p);
  p = png_with_size(png, n, 0, 30);
  CHECK_EQ_INT(decode(p, n), STK_EDECODE);
  free(p);

  /* truncated anywhere before the end of the image data */
  size_t cuts[] = {8, 20, 33, 40, idat2 - 2, idat2 + 10, n / 2, n - 30};
  for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
    p = copy_of(png, cuts[i]);
    int rc = decode(p, cuts[i]);
    CHECK_MSG(rc == STK_EDECODE, "PNG cut to %zu of %zu bytes: %d (%s)", cuts[i], n, rc, msg);
    free(p);
  }
  /* Without its IEND chunk the image is complete: PIL loads it too. */
  CHECK_EQ_INT(decode(png, n - 12), STK_OK);

  /* bad checksums: IHDR's, and the first IDAT's */
  p = copy_of(png, n);
  p[30] ^= 0x55;
  CHECK_EQ_INT(decode(p, n), STK_EDECODE);
  free(p);
  p = copy_of(png, n);
  p[idat2 - 1] ^= 0x55;
  CHECK_EQ_INT(decode(p, n), STK_EDECODE);
  free(p);

  /* Damaged compressed data (checksums fixed up, so that zlib sees it):
   * decodes to something or fails cleanly. */
  int ok = 0, failed = 0, other = 0;
  for (size_t at = 41; at < idat2 - 4; at += 97) {
    p = copy_of(png, n);
    p[at] ^= 0xA5;
    uint32_t len = (uint32_t)(idat2 - 4 - 33 - 8);
    tu_put_be32(p + idat2 - 4, tu_crc32(p + 37, len + 4));
    int rc = decode(p, n);
    ok += rc == STK_OK;
    failed += rc == STK_EDECODE;
    other += rc != STK_OK && rc != STK_EDECODE;
    free(p);
  }
  CHECK_MSG(other == 0 && failed > 0, "damaged PNG data: %d decoded, %d failed, %d other", ok,
            failed, other);
  free(png);
}

/* The content decides: a PNG saved as .JPEG is a PNG. */
static void test_misnamed(const char *dir) {
  size_t n;
  uint8_t *png = make_png(33, 17, &n);
  if (!png) return;
  char path[512];
  snprintf(path, sizeof path, "%s/photo.JPEG", dir);
  CHECK(stk__write_file(path, png, n) == STK_OK);
  FILE *f = fopen(path, "rb");
  CHECK(f != NULL);
  if (f) {
    uint8_t *back = malloc(n);
    CHECK(fread(back, 1, n, f) == n);
    fclose(f);
    stk__image_info info;
    CHECK_EQ_INT(stk__decoder_header(dec, back, n, &info, msg, sizeof msg), STK_OK);
    CHECK_EQ_INT(info.format, STK__FMT_PNG);
    CHECK_EQ_INT(decode(back, n), STK_OK);
    free(back);
  }
  int w = 0, h = 0;
  char m[256] = "";
  CHECK_MSG(stk_check_file(path, NULL, &w, &h, m, sizeof m) == STK_OK, "%s", m);
  CHECK(w == 33 && h == 17);
  free(png);
}

/* A small decompression bomb against a low limit. */
static void test_limits(void) {
  size_t nj, np, ns;
  uint8_t *jpg = make_jpeg(100, 100, 0, &nj);
  uint8_t *png = make_png(100, 100, &np);
  uint8_t *small = make_jpeg(31, 32, 1, &ns); /* 992 pixels */
  if (!jpg || !png || !small) return;
  stk__decoder_set_limits(dec, 1000);
  stk__image_info info;
  CHECK_EQ_INT(stk__decoder_header(dec, jpg, nj, &info, msg, sizeof msg), STK_ELIMIT);
  CHECK_MSG(strstr(msg, "100x100 = 10000 pixels, over the limit of 1000") != NULL, "\"%s\"", msg);
  CHECK_EQ_INT(decode(jpg, nj), STK_ELIMIT);
  CHECK_EQ_INT(decode_region(jpg, nj, (stk__rect){0, 0, 10, 10}, 8), STK_ELIMIT);
  CHECK_EQ_INT(decode(png, np), STK_ELIMIT);
  CHECK_EQ_INT(decode(small, ns), STK_OK);
  stk__decoder_set_limits(dec, 0); /* no limit */
  CHECK_EQ_INT(decode(jpg, nj), STK_OK);
  CHECK_EQ_INT(decode(png, np), STK_OK);
  stk__decoder_set_limits(dec, 178956970);
  free(jpg);
  free(png);
  free(small);
}

int main(void) {
  char *dir = tu_tempdir();
  dec = stk__decoder_create();
  CHECK(dir != NULL && dec != NULL);
  if (!dir || !dec) return CHECK_DONE();

  test_empty_and_garbage();
  test_other_formats();
  test_truncated_jpeg(0);
  test_truncated_jpeg(1);
  test_corrupt_jpeg();
  test_huge_jpeg();
  test_png();
  test_misnamed(dir);
  test_limits();

  /* after all of that the decoder still works */
  size_t n;
  uint8_t *jpg = make_jpeg(50, 40, 0, &n);
  CHECK_EQ_INT(decode(jpg, n), STK_OK);
  free(jpg);

  stk__decoder_destroy(dec);
  tu_rmtree(dir);
  free(dir);
  return CHECK_DONE();
}
