/*
 * test_codec_jpeg.c: JPEG decoding. Full decodes must be bit-identical to
 * djpeg (the libjpeg reference tool, same as PIL), region decodes must equal
 * the same pixels of a full decode at the same scale, CMYK files must come
 * out as PIL converts them, and the header must describe the file.
 */
#include "util.h"

#include "check.h"
#include "codecs/codec.h"
#include "codecs/encode.h"

typedef struct {
  const char *name;
  int h_samp, v_samp, progressive, arithmetic;
  stk__jpeg_color color;
  int restart, optimize;
} variant;

static const variant variants[] = {
    {"4:4:4", 1, 1, 0, 0, STK__JCOLOR_YCC, 0, 0},
    {"4:2:2", 2, 1, 0, 0, STK__JCOLOR_YCC, 0, 0},
    {"4:2:0", 2, 2, 0, 0, STK__JCOLOR_YCC, 0, 0},
    {"4:4:0", 1, 2, 0, 0, STK__JCOLOR_YCC, 0, 0},
    {"4:1:1", 4, 1, 0, 0, STK__JCOLOR_YCC, 0, 0},
    {"4:2:0 progressive", 2, 2, 1, 0, STK__JCOLOR_YCC, 0, 0},
    {"4:4:4 progressive", 1, 1, 1, 0, STK__JCOLOR_YCC, 0, 0},
    {"4:2:0 arithmetic", 2, 2, 0, 1, STK__JCOLOR_YCC, 0, 0},
    {"4:2:2 arithmetic progressive", 2, 1, 1, 1, STK__JCOLOR_YCC, 0, 0},
    {"4:2:0 restarts", 2, 2, 0, 0, STK__JCOLOR_YCC, 1, 0},
    {"4:2:2 restarts optimised", 2, 1, 0, 0, STK__JCOLOR_YCC, 2, 1},
    {"greyscale", 1, 1, 0, 0, STK__JCOLOR_GREY, 0, 0},
    {"greyscale progressive", 1, 1, 1, 0, STK__JCOLOR_GREY, 0, 0},
    {"RGB", 1, 1, 0, 0, STK__JCOLOR_RGB, 0, 0},
};
#define NVARIANTS (int)(sizeof variants / sizeof variants[0])

static const int sizes[][2] = {{1, 1}, {17, 9}, {9, 17}, {64, 48}, {513, 377}};
#define NSIZES (int)(sizeof sizes / sizeof sizes[0])

static uint32_t rng_state = 2463534242u;
static int rnd(int n) { /* uniform enough in [0, n) */
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 17;
  rng_state ^= rng_state << 5;
  return (int)(rng_state % (uint32_t)n);
}

static uint8_t *encode(const variant *v, int w, int h, uint64_t seed, size_t *n) {
  uint8_t *rgb = malloc((size_t)w * h * 3);
  stk__synth_render(rgb, w, h, seed);
  if (v->color == STK__JCOLOR_GREY) /* keep one channel */
    for (size_t i = 0; i < (size_t)w * h; i++) rgb[i] = rgb[3 * i + 1];
  stk__jpeg_enc_opts o;
  stk__jpeg_enc_defaults(&o);
  o.quality = 90;
  o.h_samp = v->h_samp;
  o.v_samp = v->v_samp;
  o.progressive = v->progressive;
  o.arithmetic = v->arithmetic;
  o.color = v->color;
  o.restart_interval = v->restart;
  o.optimize = v->optimize;
  uint8_t *jpg = NULL;
  int rc = stk__jpeg_encode(rgb, w, h, &o, &jpg, n);
  free(rgb);
  CHECK_MSG(rc == STK_OK, "encoding %s %dx%d: %d", v->name, w, h, rc);
  return rc ? NULL : jpg;
}

/* Whole image at 1/d into a malloc'd copy, RGB8 packed. */
static uint8_t *decode_full(stk__decoder *dec, const uint8_t *jpg, size_t n, int d, int *W, int *H) {
  stk__region r;
  char msg[256] = "";
  int rc = stk__decoder_decode(dec, jpg, n, NULL, d, &r, msg, sizeof msg);
  CHECK_MSG(rc == STK_OK, "full decode at 1/%d: %s", d, msg);
  if (rc) return NULL;
  CHECK(r.x == 0 && r.y == 0 && r.w == r.image_w && r.h == r.image_h && r.scale_denom == d);
  uint8_t *p = malloc((size_t)r.w * r.h * 3);
  for (int y = 0; y < r.h; y++) memcpy(p + (size_t)y * r.w * 3, r.pixels + y * r.stride, (size_t)r.w * 3);
  *W = r.w;
  *H = r.h;
  return p;
}

/* Reads a binary PPM as written by djpeg. */
static uint8_t *read_ppm(const char *path, int *w, int *h) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  int maxval = 0;
  uint8_t *p = NULL;
  if (fscanf(f, "P6 %d %d %d", w, h, &maxval) == 3 && maxval == 255 && fgetc(f) != EOF) {
    size_t n = (size_t)*w * *h * 3;
    p = malloc(n);
    if (fread(p, 1, n, f) != n) {
      free(p);
      p = NULL;
    }
  }
  fclose(f);
  return p;
}

/* (a) full decodes, at every scale, against djpeg. */
static void test_against_djpeg(stk__decoder *dec, const char *dir) {
  if (system("command -v djpeg >/dev/null 2>&1") != 0) {
    printf("SKIP: djpeg not found\n");
    return;
  }
  char jpath[512], ppath[512], cmd[1200];
  snprintf(jpath, sizeof jpath, "%s/in.jpg", dir);
  snprintf(ppath, sizeof ppath, "%s/out.ppm", dir);
  for (int vi = 0; vi < NVARIANTS; vi++) {
    for (int si = 0; si < NSIZES; si++) {
      const variant *v = &variants[vi];
      int w = sizes[si][0], h = sizes[si][1];
      size_t n;
      uint8_t *jpg = encode(v, w, h, (uint64_t)(vi * 31 + si), &n);
      if (!jpg) continue;
      CHECK(stk__write_file(jpath, jpg, n) == STK_OK);
      for (int d = 1; d <= 8; d *= 2) {
        snprintf(cmd, sizeof cmd, "djpeg -pnm -rgb -scale 1/%d -outfile '%s' '%s'", d, ppath, jpath);
        int dw = 0, dh = 0, W = 0, H = 0;
        uint8_t *ref = system(cmd) == 0 ? read_ppm(ppath, &dw, &dh) : NULL;
        CHECK_MSG(ref != NULL, "djpeg failed on %s %dx%d", v->name, w, h);
        uint8_t *got = decode_full(dec, jpg, n, d, &W, &H);
        if (ref && got) {
          CHECK_MSG(W == dw && H == dh, "%s %dx%d 1/%d: %dx%d, djpeg %dx%d", v->name, w, h, d, W, H,
                    dw, dh);
          CHECK_MSG(W == dw && H == dh && memcmp(ref, got, (size_t)W * H * 3) == 0,
                    "%s %dx%d at 1/%d differs from djpeg", v->name, w, h, d);
        }
        free(ref);
        free(got);
      }
      free(jpg);
    }
  }
  remove(jpath);
  remove(ppath);
}

/* Decodes `want` at 1/d and compares it with the full decode `full` (W x H). */
static int region_matches(stk__decoder *dec, const uint8_t *jpg, size_t n, stk__rect want, int d,
                          const uint8_t *full, int W, int H) {
  stk__region r;
  char msg[256] = "";
  int rc = stk__decoder_decode(dec, jpg, n, &want, d, &r, msg, sizeof msg);
  if (rc) {
    fprintf(stderr, "region %dx%d+%d+%d at 1/%d: %s\n", want.w, want.h, want.x, want.y, d, msg);
    return 0;
  }
  int x0 = want.x / d, y0 = want.y / d;
  int x1 = (want.x + want.w + d - 1) / d, y1 = (want.y + want.h + d - 1) / d;
  if (x1 > W) x1 = W;
  if (y1 > H) y1 = H;
  /* The region may be wider than asked, never narrower. */
  if (r.scale_denom != d || r.image_w != W || r.image_h != H || r.x > x0 || r.y > y0 ||
      r.x + r.w < x1 || r.y + r.h < y1 || r.x < 0 || r.y < 0 || r.x + r.w > W || r.y + r.h > H) {
    fprintf(stderr, "region %dx%d+%d+%d at 1/%d came back as %dx%d+%d+%d of %dx%d\n", want.w, want.h,
            want.x, want.y, d, r.w, r.h, r.x, r.y, r.image_w, r.image_h);
    return 0;
  }
  for (int y = 0; y < r.h; y++)
    if (memcmp(r.pixels + y * r.stride, full + ((size_t)(r.y + y) * W + r.x) * 3, (size_t)r.w * 3))
      return 0;
  return 1;
}

static stk__rect random_rect(int w, int h, int i) {
  stk__rect r;
  r.x = rnd(w);
  r.y = rnd(h);
  r.w = 1 + rnd(w - r.x);
  r.h = 1 + rnd(h - r.y);
  /* Every few rectangles touch an edge or two, or are tiny. */
  if (i % 5 == 1) r.x = 0;
  if (i % 5 == 2) r.w = w - r.x;
  if (i % 7 == 3) r.y = 0;
  if (i % 7 == 4) r.h = h - r.y;
  if (i % 11 == 5) r.w = r.h = 1;
  if (r.x + r.w > w) r.w = w - r.x;
  if (r.y + r.h > h) r.h = h - r.y;
  return r;
}

/* (b) region decodes equal the same pixels of the full decode. */
static void test_regions(stk__decoder *dec) {
  for (int vi = 0; vi < NVARIANTS; vi++) {
    for (int si = 0; si < NSIZES; si++) {
      const variant *v = &variants[vi];
      int w = sizes[si][0], h = sizes[si][1];
      size_t n;
      uint8_t *jpg = encode(v, w, h, (uint64_t)(vi * 17 + si + 5), &n);
      if (!jpg) continue;
      for (int d = 1; d <= 8; d *= 2) {
        int W, H;
        uint8_t *full = decode_full(dec, jpg, n, d, &W, &H);
        if (!full) continue;
        int tries = w * h > 10000 ? 40 : 12, bad = 0;
        for (int i = 0; i < tries; i++)
          bad += !region_matches(dec, jpg, n, random_rect(w, h, i), d, full, W, H);
        /* the four corners and the whole image */
        stk__rect fixed[] = {{0, 0, 1, 1},         {w - 1, 0, 1, 1}, {0, h - 1, 1, 1},
                             {w - 1, h - 1, 1, 1}, {0, 0, w, h}};
        for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++)
          bad += !region_matches(dec, jpg, n, fixed[i], d, full, W, H);
        CHECK_MSG(bad == 0, "%s %dx%d at 1/%d: %d regions differ from the full decode", v->name, w,
                  h, d, bad);
        free(full);
      }
      free(jpg);
    }
  }
}

/* (c) CMYK, stored Adobe-style, comes out as PIL's convert("RGB") makes it. */
static void test_cmyk(stk__decoder *dec) {
  static const uint8_t inks[8][4] = {
      {0, 0, 0, 0},     {255, 0, 0, 0},   {0, 255, 0, 0},     {0, 0, 255, 0},
      {0, 0, 0, 255},   {0, 0, 0, 128},   {128, 64, 32, 16},  {200, 150, 100, 50},
  };
  int w = 128, h = 16;
  uint8_t *px = malloc((size_t)w * h * 4);
  for (int y = 0; y < h; y++)
    for (int x = 0; x < w; x++) memcpy(px + ((size_t)y * w + x) * 4, inks[x / 16], 4);
  stk__jpeg_enc_opts o;
  stk__jpeg_enc_defaults(&o);
  o.color = STK__JCOLOR_CMYK;
  o.quality = 95;
  uint8_t *jpg = NULL;
  size_t n = 0;
  CHECK(stk__jpeg_encode(px, w, h, &o, &jpg, &n) == STK_OK);
  free(px);
  if (!jpg) return;

  stk__image_info info;
  char msg[256] = "";
  CHECK(stk__decoder_header(dec, jpg, n, &info, msg, sizeof msg) == STK_OK);
  CHECK_EQ_INT(info.components, 4);

  stk__region r;
  int rc = stk__decoder_decode(dec, jpg, n, NULL, 1, &r, msg, sizeof msg);
  CHECK_MSG(rc == STK_OK, "%s", msg);
  if (!rc) {
    for (int p = 0; p < 8; p++) {
      const uint8_t *got = r.pixels + 8 * r.stride + (size_t)(p * 16 + 8) * 3;
      int nk = 255 - inks[p][3];
      for (int c = 0; c < 3; c++) {
        int want = nk - inks[p][c] * nk / 255;
        CHECK_MSG(abs(got[c] - want) <= 3, "patch %d channel %d: %d, expected %d", p, c, got[c], want);
      }
    }
  }
  /* a region of a CMYK file, at a scale */
  int W, H;
  uint8_t *full = decode_full(dec, jpg, n, 2, &W, &H);
  if (full) {
    for (int i = 0; i < 10; i++)
      CHECK(region_matches(dec, jpg, n, random_rect(w, h, i), 2, full, W, H));
    free(full);
  }
  free(jpg);
}

/* (d) header fields. */
static void test_header(stk__decoder *dec) {
  static const struct {
    int vi, components, progressive;
  } cases[] = {{0, 3, 0}, {5, 3, 1}, {8, 3, 1}, {11, 1, 0}, {12, 1, 1}, {13, 3, 0}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    size_t n;
    uint8_t *jpg = encode(&variants[cases[i].vi], 513, 377, 1, &n);
    if (!jpg) continue;
    stk__image_info info;
    memset(&info, 0xAB, sizeof info);
    char msg[256] = "";
    CHECK_EQ_INT(stk__decoder_header(dec, jpg, n, &info, msg, sizeof msg), STK_OK);
    CHECK_EQ_INT(info.width, 513);
    CHECK_EQ_INT(info.height, 377);
    CHECK_EQ_INT(info.format, STK__FMT_JPEG);
    CHECK_EQ_INT(info.components, cases[i].components);
    CHECK_EQ_INT(info.progressive, cases[i].progressive);
    free(jpg);
  }
}

/* Arguments the decoder refuses. */
static void test_bad_arguments(stk__decoder *dec) {
  size_t n;
  uint8_t *jpg = encode(&variants[2], 64, 48, 3, &n);
  if (!jpg) return;
  stk__region r;
  char msg[256];
  CHECK_EQ_INT(stk__decoder_decode(dec, jpg, n, NULL, 3, &r, msg, sizeof msg), STK_EINVAL);
  stk__rect outside[] = {{60, 0, 5, 5}, {0, 40, 5, 9}, {-1, 0, 5, 5}, {0, 0, 0, 5}};
  for (size_t i = 0; i < sizeof outside / sizeof outside[0]; i++)
    CHECK_EQ_INT(stk__decoder_decode(dec, jpg, n, &outside[i], 1, &r, msg, sizeof msg), STK_EINVAL);
  /* the decoder is still usable */
  stk__rect ok = {10, 10, 20, 20};
  CHECK_EQ_INT(stk__decoder_decode(dec, jpg, n, &ok, 1, &r, msg, sizeof msg), STK_OK);
  free(jpg);
}

int main(void) {
  char *dir = tu_tempdir();
  CHECK(dir != NULL);
  stk__decoder *dec = stk__decoder_create();
  CHECK(dec != NULL);
  if (!dir || !dec) return CHECK_DONE();

  CHECK(stk__jpeg_has_arith() == 1);
  CHECK(strstr(stk__jpeg_lib_version(), "jpeg") != NULL);

  test_against_djpeg(dec, dir);
  test_regions(dec);
  test_cmyk(dec);
  test_header(dec);
  test_bad_arguments(dec);

  CHECK(stk__decoder_scratch_bytes(dec) > 0);
  stk__decoder_destroy(dec);
  tu_rmtree(dir);
  free(dir);
  return CHECK_DONE();
}
