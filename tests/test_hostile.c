/*
 * test_hostile.c: the hostile-file matrix. One folder holds broken files
 * (empty, truncated at 10/50/99%, random bytes and text with image names,
 * decompression bombs, zero sizes, bad checksums), damaged ones (flipped
 * bits in the entropy-coded data, which libjpeg recovers from as Pillow
 * does, or refuses) and valid but odd ones (progressive, arithmetic,
 * restart markers, CMYK, greyscale, every subsampling, tiny, huge and thin
 * images, 16-bit, palette, interlaced and RGBA PNGs, a PNG named .JPEG).
 * The same set is read from the folder, from a cache and from tar shards,
 * under raise and under skip, and by `stoker check`; every outcome is
 * checked against the file's known kind.
 *
 * `test_hostile --write DIR` writes the matrix only, with DIR/manifest.tsv
 * (relative path, kind, width, height), for the Python tests of the GPU path.
 * Under valgrind (make test-valgrind) this is the memcheck pass.
 */
#define _DEFAULT_SOURCE /* wait4 */
#include "util.h"

#include <sys/resource.h>
#include <sys/wait.h>

#include "check.h"
#include "codecs/codec.h"
#include "core/common.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define STK_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || \
    __has_feature(memory_sanitizer)
#define STK_SANITIZED 1
#endif
#endif
#ifndef STK_SANITIZED
#define STK_SANITIZED 0
#endif

typedef enum { VALID, BROKEN, DAMAGED } kind;
static const char *kind_name[] = {"valid", "broken", "damaged"};

typedef struct {
  char rel[64];   /* class/name below the root */
  kind k;
  int w, h;       /* valid files: the size they decode to */
  int code;       /* broken files: the expected error, 0 = any */
  const char *why; /* broken files: a word the reason must hold, or NULL */
  const uint8_t *pix; /* lossless files: the RGB8 pixels they must decode to */
  /* found by the tests */
  int bad;        /* stk_check_file refused it */
  int header_bad; /* its header alone is refused (such files stay out of tar shards) */
} entry;

#define MAXE 64
static entry E[MAXE];
static int NE;
static char *g_tmp, *g_root;
static uint8_t *g_keep[16]; /* pixels referenced by entries */
static int g_nkeep;

/* ---- writing the matrix --------------------------------------------------- */

static uint32_t g_rng = 12345;
static uint32_t rnd(void) {
  g_rng = g_rng * 1664525u + 1013904223u;
  return g_rng >> 8;
}

static uint8_t *render(int w, int h, uint64_t seed) {
  uint8_t *p = malloc((size_t)w * h * 3);
  if (p) stk__synth_render(p, w, h, seed);
  return p;
}

static entry *add(const char *rel, kind k, const void *bytes, size_t n) {
  if (NE >= MAXE) return NULL;
  entry *e = &E[NE++];
  memset(e, 0, sizeof *e);
  snprintf(e->rel, sizeof e->rel, "%s", rel);
  e->k = k;
  char path[4200];
  snprintf(path, sizeof path, "%s/%s", g_root, rel);
  CHECK_MSG(tu_write_bytes(path, bytes, n) == STK_OK, "write %s", path);
  return e;
}

static void add_valid(const char *rel, const void *bytes, size_t n, int w, int h) {
  entry *e = add(rel, VALID, bytes, n);
  if (e) e->w = w, e->h = h;
}

static void add_broken(const char *rel, const void *bytes, size_t n, int code, const char *why) {
  entry *e = add(rel, BROKEN, bytes, n);
  if (e) e->code = code, e->why = why;
}

static uint8_t *jpeg_of(const uint8_t *px, int w, int h, stk__jpeg_enc_opts *o, size_t *n) {
  uint8_t *out = NULL;
  *n = 0;
  CHECK_EQ_INT(stk__jpeg_encode(px, w, h, o, &out, n), STK_OK);
  return out;
}

static uint8_t *jpeg_rgb(int w, int h, uint64_t seed, size_t *n, void (*tweak)(stk__jpeg_enc_opts *)) {
  uint8_t *px = render(w, h, seed);
  stk__jpeg_enc_opts o;
  stk__jpeg_enc_defaults(&o);
  if (tweak) tweak(&o);
  uint8_t *j = px ? jpeg_of(px, w, h, &o, n) : NULL;
  free(px);
  return j;
}

static void t_prog(stk__jpeg_enc_opts *o) { o->progressive = 1; }
static void t_arith(stk__jpeg_enc_opts *o) { o->arithmetic = 1; }
static void t_restart(stk__jpeg_enc_opts *o) { o->restart_interval = 1; }
static void t_444(stk__jpeg_enc_opts *o) { o->h_samp = 1, o->v_samp = 1; }
static void t_422(stk__jpeg_enc_opts *o) { o->h_samp = 2, o->v_samp = 1; }
static void t_411(stk__jpeg_enc_opts *o) { o->h_samp = 4, o->v_samp = 1; }
static void t_440(stk__jpeg_enc_opts *o) { o->h_samp = 1, o->v_samp = 2; }

static uint8_t *png_of(const uint8_t *px, int w, int h, stk__png_color c, int depth,
                       const uint8_t *pal, int npal, size_t *n) {
  uint8_t *out = NULL;
  *n = 0;
  CHECK_EQ_INT(stk__png_encode(px, w, h, c, depth, pal, npal, &out, n), STK_OK);
  return out;
}

/* Appends a PNG chunk (length, type, data, CRC) at *at. */
static void png_chunk(uint8_t *buf, size_t *at, const char *type, const uint8_t *d, size_t n) {
  tu_put_be32(buf + *at, (uint32_t)n);
  memcpy(buf + *at + 4, type, 4);
  if (n) memcpy(buf + *at + 8, d, n);
  tu_put_be32(buf + *at + 8 + n, tu_crc32(buf + *at + 4, n + 4));
  *at += 12 + n;
}

/* An Adam7-interlaced 8-bit RGB PNG of `px`, written by hand (the encoder
 * does not interlace): each pass's filter-0 rows, in stored deflate blocks. */
static uint8_t *png_interlaced(const uint8_t *px, int w, int h, size_t *n) {
  static const int x0[7] = {0, 4, 0, 2, 0, 1, 0}, y0[7] = {0, 0, 4, 0, 2, 0, 1};
  static const int dx[7] = {8, 8, 4, 4, 2, 2, 1}, dy[7] = {8, 8, 8, 4, 4, 2, 2};
  size_t raw_cap = (size_t)h * (w * 3 + 7) * 2, raw_n = 0;
  uint8_t *raw = malloc(raw_cap);
  for (int p = 0; p < 7; p++) {
    int pw = (w - x0[p] + dx[p] - 1) / dx[p], ph = (h - y0[p] + dy[p] - 1) / dy[p];
    if (pw <= 0 || ph <= 0) continue; /* an empty pass has no rows at all */
    for (int y = y0[p]; y < h; y += dy[p]) {
      raw[raw_n++] = 0;
      for (int x = x0[p]; x < w; x += dx[p]) memcpy(raw + raw_n, px + ((size_t)y * w + x) * 3, 3), raw_n += 3;
    }
  }
  /* zlib: header, stored blocks of at most 65535 bytes, Adler-32 */
  size_t zcap = raw_n + raw_n / 65535 * 5 + 16, zn = 0;
  uint8_t *z = malloc(zcap);
  z[zn++] = 0x78, z[zn++] = 0x01;
  size_t off = 0;
  do {
    size_t len = raw_n - off > 65535 ? 65535 : raw_n - off;
    z[zn++] = off + len == raw_n; /* BFINAL, BTYPE 00 */
    z[zn++] = (uint8_t)len, z[zn++] = (uint8_t)(len >> 8);
    z[zn++] = (uint8_t)~len, z[zn++] = (uint8_t)(~len >> 8);
    memcpy(z + zn, raw + off, len);
    zn += len, off += len;
  } while (off < raw_n);
  uint32_t a = 1, b = 0;
  for (size_t i = 0; i < raw_n; i++) a = (a + raw[i]) % 65521, b = (b + a) % 65521;
  tu_put_be32(z + zn, b << 16 | a);
  zn += 4;
  uint8_t *png = malloc(zn + 128);
  memcpy(png, "\x89PNG\r\n\x1a\n", 8);
  size_t at = 8;
  uint8_t ihdr[13];
  tu_put_be32(ihdr, (uint32_t)w);
  tu_put_be32(ihdr + 4, (uint32_t)h);
  ihdr[8] = 8, ihdr[9] = 2, ihdr[10] = 0, ihdr[11] = 0, ihdr[12] = 1; /* RGB8, Adam7 */
  png_chunk(png, &at, "IHDR", ihdr, 13);
  png_chunk(png, &at, "IDAT", z, zn);
  png_chunk(png, &at, "IEND", NULL, 0);
  free(raw);
  free(z);
  *n = at;
  return png;
}

/* Offset of the first byte of entropy-coded data: after the SOS segment. */
static size_t entropy_start(const uint8_t *p, size_t n) {
  size_t sos = tu_find_marker(p, n, 0xDA);
  if (!sos || sos + 4 > n) return 0;
  return sos + 2 + ((size_t)p[sos + 2] << 8 | p[sos + 3]);
}

static uint8_t *dup_bytes(const uint8_t *p, size_t n) {
  uint8_t *q = malloc(n ? n : 1);
  if (n) memcpy(q, p, n);
  return q;
}

static void write_matrix(void) {
  char p[4200];
  const char *classes[] = {"a", "b"};
  for (int c = 0; c < 2; c++) {
    snprintf(p, sizeof p, "%s/%s", g_root, classes[c]);
    tu_mkdir(p);
  }
  size_t n;
  uint8_t *j;

  /* plain files, so that the odd ones sit among ordinary samples */
  for (int i = 0; i < 6; i++) {
    char rel[64];
    snprintf(rel, sizeof rel, "%s/plain%d.jpg", classes[i % 2], i);
    j = jpeg_rgb(64 + 4 * i, 48, (uint64_t)i, &n, NULL);
    add_valid(rel, j, n, 64 + 4 * i, 48);
    free(j);
  }

  /* ---- valid but odd ---- */
  static const struct {
    const char *rel;
    int w, h;
    void (*tweak)(stk__jpeg_enc_opts *);
  } odd[] = {
      {"a/progressive.jpg", 96, 72, t_prog}, {"b/arithmetic.jpg", 96, 72, t_arith},
      {"a/restart.jpg", 96, 72, t_restart},  {"b/s444.jpg", 90, 70, t_444},
      {"a/s422.jpg", 90, 70, t_422},         {"b/s411.jpg", 90, 70, t_411},
      {"a/s440.jpg", 90, 70, t_440},         {"b/tiny7x5.jpg", 7, 5, NULL},
      {"a/large4000x3000.jpg", 4000, 3000, NULL}, {"b/strip3000x50.jpg", 3000, 50, NULL},
  };
  for (size_t i = 0; i < sizeof odd / sizeof odd[0]; i++) {
    j = jpeg_rgb(odd[i].w, odd[i].h, 100 + i, &n, odd[i].tweak);
    add_valid(odd[i].rel, j, n, odd[i].w, odd[i].h);
    free(j);
  }
  {
    int w = 80, h = 60;
    uint8_t *rgb = render(w, h, 200), *cmyk = malloc((size_t)w * h * 4), *grey = malloc((size_t)w * h);
    for (int i = 0; i < w * h; i++) {
      uint8_t r = rgb[3 * i], g = rgb[3 * i + 1], b = rgb[3 * i + 2];
      uint8_t k = (uint8_t)(255 - (r > g ? (r > b ? r : b) : (g > b ? g : b)));
      cmyk[4 * i] = (uint8_t)(255 - r - k), cmyk[4 * i + 1] = (uint8_t)(255 - g - k);
      cmyk[4 * i + 2] = (uint8_t)(255 - b - k), cmyk[4 * i + 3] = k;
      grey[i] = (uint8_t)((r * 77 + g * 150 + b * 29) >> 8);
    }
    stk__jpeg_enc_opts o;
    stk__jpeg_enc_defaults(&o);
    o.color = STK__JCOLOR_CMYK;
    j = jpeg_of(cmyk, w, h, &o, &n);
    add_valid("a/cmyk.jpg", j, n, w, h);
    free(j);
    o.color = STK__JCOLOR_GREY;
    j = jpeg_of(grey, w, h, &o, &n);
    add_valid("b/grey.jpg", j, n, w, h);
    free(j);
    free(rgb), free(cmyk), free(grey);
  }
  {
    /* lossless PNGs: each must decode to exactly these pixels */
    int w = 37, h = 29;
    uint8_t *rgb = render(w, h, 300);
    g_keep[g_nkeep++] = rgb;
    uint8_t *wide = malloc((size_t)w * h * 6), *rgba = malloc((size_t)w * h * 4);
    uint8_t *idx = malloc((size_t)w * h), pal[16 * 3];
    for (int i = 0; i < w * h; i++) {
      for (int c = 0; c < 3; c++) wide[6 * i + 2 * c] = rgb[3 * i + c], wide[6 * i + 2 * c + 1] = (uint8_t)(i * 7 + c);
      memcpy(rgba + 4 * i, rgb + 3 * i, 3);
      rgba[4 * i + 3] = (uint8_t)(i * 13); /* alpha is dropped, as convert("RGB") does */
    }
    uint8_t *palpx = malloc((size_t)w * h * 3);
    for (int k = 0; k < 16; k++) pal[3 * k] = (uint8_t)(k * 16), pal[3 * k + 1] = (uint8_t)(255 - k * 9), pal[3 * k + 2] = (uint8_t)(k * k);
    for (int i = 0; i < w * h; i++) idx[i] = (uint8_t)((i / w + i % w) % 16), memcpy(palpx + 3 * i, pal + 3 * idx[i], 3);
    g_keep[g_nkeep++] = palpx;
    j = png_of(wide, w, h, STK__PNG_RGB, 16, NULL, 0, &n);
    add_valid("a/deep16.png", j, n, w, h), E[NE - 1].pix = rgb; /* 16 -> 8 bits keeps the high byte */
    free(j);
    j = png_of(idx, w, h, STK__PNG_PALETTE, 8, pal, 16, &n);
    add_valid("b/palette.png", j, n, w, h), E[NE - 1].pix = palpx;
    free(j);
    j = png_of(rgba, w, h, STK__PNG_RGBA, 8, NULL, 0, &n);
    add_valid("a/rgba.png", j, n, w, h), E[NE - 1].pix = rgb;
    free(j);
    j = png_interlaced(rgb, w, h, &n);
    add_valid("b/interlaced.png", j, n, w, h), E[NE - 1].pix = rgb;
    free(j);
    j = png_of(rgb, w, h, STK__PNG_RGB, 8, NULL, 0, &n);
    add_valid("a/png-named.JPEG", j, n, w, h), E[NE - 1].pix = rgb;
    free(j);
    j = png_of(rgb, 7, 5, STK__PNG_RGB, 8, NULL, 0, &n);
    add_valid("b/tinypng7x5.png", j, n, 7, 5);
    free(j);
    free(wide), free(rgba), free(idx);
  }

  /* ---- broken ---- */
  add_broken("a/empty.jpg", "", 0, STK_EDECODE, "empty");
  add_broken("b/empty.png", "", 0, STK_EDECODE, "empty");
  size_t nj, np;
  uint8_t *jpg = jpeg_rgb(160, 120, 7, &nj, NULL);
  uint8_t *rgb = render(120, 90, 8);
  uint8_t *png = png_of(rgb, 120, 90, STK__PNG_RGB, 8, NULL, 0, &np);
  free(rgb);
  static const int pct[] = {10, 50, 99};
  for (int i = 0; i < 3; i++) {
    char rel[64];
    snprintf(rel, sizeof rel, "a/cut%02d.jpg", pct[i]);
    add_broken(rel, jpg, nj * pct[i] / 100, 0, NULL);
    snprintf(rel, sizeof rel, "b/cut%02d.png", pct[i]);
    add_broken(rel, png, np * pct[i] / 100, 0, NULL);
  }
  uint8_t noise[3000];
  for (size_t i = 0; i < sizeof noise; i++) noise[i] = (uint8_t)rnd();
  noise[0] = 0x42; /* no image signature by chance */
  add_broken("a/random.jpg", noise, sizeof noise, STK_EFORMAT, "not an image");
  noise[0] = 0x17;
  add_broken("b/random.png", noise, sizeof noise, STK_EFORMAT, "not an image");
  static const char text[] = "This is a text file that someone saved with an image name.\n";
  add_broken("a/text.jpeg", text, sizeof text - 1, STK_EFORMAT, "not an image");
  add_broken("b/text.PNG", text, sizeof text - 1, STK_EFORMAT, "not an image");
  {
    size_t sof = tu_find_marker(jpg, nj, 0xC0);
    CHECK(sof > 0);
    uint8_t *q = dup_bytes(jpg, nj);
    q[sof + 5] = 0xFF, q[sof + 6] = 0xDC, q[sof + 7] = 0xFF, q[sof + 8] = 0xDC; /* 65500 x 65500 */
    add_broken("a/bomb65500.jpg", q, nj, STK_ELIMIT, "65500x65500");
    q[sof + 5] = 0, q[sof + 6] = 120, q[sof + 7] = 0, q[sof + 8] = 0; /* width 0 */
    add_broken("b/zerowidth.jpg", q, nj, STK_EDECODE, NULL);
    free(q);
    q = dup_bytes(png, np);
    tu_put_be32(q + 16, 65500), tu_put_be32(q + 20, 65500);
    tu_put_be32(q + 29, tu_crc32(q + 12, 17));
    add_broken("b/bomb65500png.png", q, np, STK_ELIMIT, "65500x65500");
    tu_put_be32(q + 16, 0x7FFFFFFFu), tu_put_be32(q + 20, 1); /* 2^31 - 1 pixels, the most PNG allows */
    tu_put_be32(q + 29, tu_crc32(q + 12, 17));
    add_broken("b/bomb2g.png", q, np, STK_ELIMIT, "limit");
    tu_put_be32(q + 16, 120), tu_put_be32(q + 20, 0);
    tu_put_be32(q + 29, tu_crc32(q + 12, 17));
    add_broken("a/zeroheight.png", q, np, STK_EDECODE, NULL);
    free(q);
    /* a bad CRC on the first IDAT: the header is sound, the data is not */
    q = dup_bytes(png, np);
    size_t idat = 33, len = (size_t)q[idat] << 24 | (size_t)q[idat + 1] << 16 | (size_t)q[idat + 2] << 8 | q[idat + 3];
    CHECK(memcmp(q + idat + 4, "IDAT", 4) == 0);
    q[idat + 8 + len] ^= 0x5A;
    add_broken("b/badcrc.png", q, np, STK_EDECODE, NULL);
    free(q);
  }

  /* ---- damaged: flipped bits in the first quarter of the entropy-coded
   * data (which every region decode reads), baseline and progressive ---- */
  for (int pr = 0; pr < 2; pr++) {
    uint8_t *base = pr ? jpeg_rgb(128, 128, 9, &n, t_prog) : dup_bytes(jpg, nj);
    size_t bn = pr ? n : nj, es = entropy_start(base, bn);
    CHECK(es > 0 && es < bn);
    for (int t = 0; t < 4; t++) {
      uint8_t *q = dup_bytes(base, bn);
      for (int f = 0; f < 1 + 3 * t; f++) q[es + rnd() % ((bn - es) / 4)] ^= (uint8_t)(1u << (rnd() % 8));
      char rel[64];
      snprintf(rel, sizeof rel, "%s/flip%s%d.jpg", t % 2 ? "b" : "a", pr ? "prog" : "", t);
      add(rel, DAMAGED, q, bn);
      free(q);
    }
    free(base);
  }
  free(jpg);
  free(png);
}

static entry *find_entry(const char *name) {
  /* name may be absolute, relative, or a tar member named after the path */
  for (int i = 0; i < NE; i++) {
    const char *rel = E[i].rel;
    size_t nl = strlen(name), rl = strlen(rel);
    if (nl >= rl && strcmp(name + nl - rl, rel) == 0 && (nl == rl || name[nl - rl - 1] == '/')) return &E[i];
  }
  for (int i = 0; i < NE; i++) {
    /* tar: KEY is <index>_<path without extension, '/' as '_'>, and the
     * extension comes from the content */
    char key[80];
    snprintf(key, sizeof key, "_%.63s", E[i].rel);
    char *dot = strrchr(key, '.');
    if (dot) *dot = '\0';
    for (char *c = key; *c; c++)
      if (!(*c >= 'a' && *c <= 'z') && !(*c >= 'A' && *c <= 'Z') && !(*c >= '0' && *c <= '9') && *c != '-')
        *c = '_';
    const char *m = strrchr(name, ':');
    if (!m) continue;
    const char *hit = strstr(m, key);
    if (hit && hit[strlen(key)] == '.') return &E[i];
  }
  return NULL;
}

/* ---- each file on its own ---------------------------------------------- */

static void test_each_file(void) {
  stk__decoder *dec = stk__decoder_create();
  CHECK(dec != NULL);
  int damaged_ok = 0, damaged_bad = 0;
  for (int i = 0; i < NE; i++) {
    entry *e = &E[i];
    char path[4200], msg[512] = "";
    snprintf(path, sizeof path, "%.4000s/%.63s", g_root, e->rel);
    int w = -1, h = -1;
    int rc = stk_check_file(path, NULL, &w, &h, msg, sizeof msg);
    e->bad = rc != STK_OK;
    switch (e->k) {
      case VALID:
        CHECK_MSG(rc == STK_OK, "%s: %s (%s)", e->rel, msg, stk_strerror(rc));
        CHECK_MSG(w == e->w && h == e->h, "%s: %dx%d, want %dx%d", e->rel, w, h, e->w, e->h);
        break;
      case BROKEN:
        CHECK_MSG(rc != STK_OK && msg[0], "%s: accepted", e->rel);
        if (e->code) CHECK_MSG(rc == e->code, "%s: %s, want %s (%s)", e->rel, stk_strerror(rc), stk_strerror(e->code), msg);
        if (e->why) CHECK_MSG(strstr(msg, e->why) != NULL, "%s: reason \"%s\" lacks \"%s\"", e->rel, msg, e->why);
        CHECK_MSG(rc == STK_EDECODE || rc == STK_EFORMAT || rc == STK_ELIMIT, "%s: %s", e->rel, stk_strerror(rc));
        break;
      case DAMAGED:
        CHECK_MSG(rc == STK_OK || rc == STK_EDECODE, "%s: %s (%s)", e->rel, stk_strerror(rc), msg);
        damaged_ok += rc == STK_OK, damaged_bad += rc != STK_OK;
        break;
    }
    /* The header alone decides what a tar pack leaves out. */
    FILE *f = fopen(path, "rb");
    uint8_t *buf = malloc(1 << 20);
    size_t n = f ? fread(buf, 1, 1 << 20, f) : 0;
    if (f) fclose(f);
    stk__image_info info;
    e->header_bad = stk__decoder_header(dec, buf, n, &info, msg, sizeof msg) != STK_OK;
    if (e->k == VALID) CHECK_MSG(!e->header_bad, "%s: header %s", e->rel, msg);
    /* Lossless files decode to their exact pixels. */
    if (e->pix) {
      stk__region r;
      rc = stk__decoder_decode(dec, buf, n, NULL, 1, &r, msg, sizeof msg);
      int same = rc == STK_OK && r.w == e->w && r.h == e->h;
      for (int y = 0; same && y < e->h; y++) same = !memcmp(r.pixels + (size_t)y * r.stride, e->pix + (size_t)y * e->w * 3, (size_t)e->w * 3);
      CHECK_MSG(same, "%s: pixels differ from the source (%s)", e->rel, msg);
    }
    free(buf);
  }
  /* After every hostile header the decoder holds no bomb-sized buffer. */
  CHECK(stk__decoder_scratch_bytes(dec) < (size_t)128 << 20);
  stk__decoder_destroy(dec);
  int nk[3] = {0, 0, 0};
  for (int i = 0; i < NE; i++) nk[E[i].k]++;
  printf("matrix: %d files: %d valid, %d broken, %d damaged (%d decode, %d refused)\n", NE, nk[VALID],
         nk[BROKEN], nk[DAMAGED], damaged_ok, damaged_bad);
}

/* ---- bombs: refused before any large allocation --------------------------- */

static void test_bombs_stay_small(void) {
  fflush(stdout), fflush(stderr);
  pid_t pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) {
    /* Outside the sanitizers and valgrind (whose shadow memory is address
     * space), cap the address space at 1 GiB more than now: a bomb-sized
     * allocation fails and shows as STK_ENOMEM instead of ELIMIT. */
    if (!STK_SANITIZED && !getenv("STK_TEST_VALGRIND")) {
      FILE *f = fopen("/proc/self/statm", "r");
      unsigned long pages = 0;
      if (f && fscanf(f, "%lu", &pages) == 1) {
        struct rlimit rl = {.rlim_cur = (rlim_t)pages * (rlim_t)sysconf(_SC_PAGESIZE) + ((rlim_t)1 << 30)};
        rl.rlim_max = rl.rlim_cur;
        setrlimit(RLIMIT_AS, &rl);
      }
      if (f) fclose(f);
    }
    int bad = 0;
    for (int i = 0; i < NE; i++) {
      if (E[i].code != STK_ELIMIT) continue;
      char path[4200], msg[512];
      snprintf(path, sizeof path, "%.4000s/%.63s", g_root, E[i].rel);
      for (int k = 0; k < 20; k++) bad |= stk_check_file(path, NULL, NULL, NULL, msg, sizeof msg) != STK_ELIMIT;
    }
    /* and through a loader, whose workers keep their buffers */
    stk_options o;
    stk_options_init(&o);
    o.root = g_root;
    o.size = 16;
    o.batch_size = 8;
    o.threads = 2;
    o.on_error = STK_ON_ERROR_SKIP;
    o.max_consecutive_failures = 0;
    o.max_skipped_fraction = 1; /* most of the matrix is bad on purpose */
    stk_loader *l = NULL;
    char err[512];
    if (STK_LOADER_CREATE(&o, &l, err, sizeof err)) _exit(3);
    for (;;) {
      stk_batch b;
      int rc = stk_loader_next(l, &b);
      if (rc) {
        bad |= rc != STK_EEND;
        break;
      }
      stk_batch_release(l, &b);
    }
    stk_loader_destroy(l);
    _exit(bad ? 2 : 0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "bomb child: status %d", status);
  struct rusage ru;
  getrusage(RUSAGE_CHILDREN, &ru);
  /* The loader reads the 4000x3000 file in the same run; one 65500x65500
   * bomb decoded would need 12 GiB. */
  long limit_kb = STK_SANITIZED || getenv("STK_TEST_VALGRIND") ? 2L << 20 : 256L << 10;
  CHECK_MSG(ru.ru_maxrss < limit_kb, "peak RSS %ld KiB", ru.ru_maxrss);
  printf("bomb child: peak RSS %ld KiB\n", ru.ru_maxrss);
}

/* ---- memory budget per decode: tiny files that ask for gigabytes ---------- */

/* A zlib stream of n zeros in fixed-Huffman blocks (RFC 1951): literal 0,
 * then (length 258, distance 1) pairs of 13 bits, about 159:1. */
typedef struct { uint8_t *p; size_t len, cap; uint32_t bits; int nb; } bitw;
static void bw_put(bitw *w, uint32_t v, int n) { /* LSB first */
  for (int i = 0; i < n; i++) {
    w->bits |= ((v >> i) & 1u) << w->nb;
    if (++w->nb == 8) {
      if (w->len == w->cap) w->p = realloc(w->p, w->cap = w->cap ? 2 * w->cap : 4096);
      w->p[w->len++] = (uint8_t)w->bits, w->bits = 0, w->nb = 0;
    }
  }
}
static void bw_huff(bitw *w, uint32_t code, int n) { /* Huffman codes go MSB first */
  for (int i = n - 1; i >= 0; i--) bw_put(w, (code >> i) & 1u, 1);
}
static uint8_t *zeros_zlib(uint64_t pairs, size_t *n) {
  bitw w = {0};
  bw_put(&w, 0x78, 8), bw_put(&w, 0x01, 8); /* zlib header, FCHECK ok */
  bw_put(&w, 1, 1), bw_put(&w, 1, 2);       /* final block, fixed Huffman */
  bw_huff(&w, 0x30, 8);                     /* literal 0 */
  for (uint64_t i = 0; i < pairs; i++) bw_huff(&w, 0xC5, 8), bw_huff(&w, 0, 5); /* 285, dist 1 */
  bw_huff(&w, 0, 7);                        /* end of block */
  while (w.nb) bw_put(&w, 0, 1);
  uint64_t total = 1 + pairs * 258;         /* Adler-32 of zeros: a = 1, b = n */
  uint32_t adler = (uint32_t)(total % 65521) << 16 | 1u;
  for (int i = 3; i >= 0; i--) bw_put(&w, adler >> (8 * i) & 0xFF, 8);
  *n = w.len;
  return w.p;
}

/* A valid 8x8 PNG with one ancillary chunk before IDAT whose zlib stream
 * inflates to `pairs * 258` bytes: zTXt ("k\0" method 0) or iCCP. */
static uint8_t *png_zbomb(const char *type, uint64_t pairs, size_t *n) {
  size_t nz, np;
  uint8_t *z = zeros_zlib(pairs, &nz);
  uint8_t px[8 * 8 * 3] = {0};
  uint8_t *png = png_of(px, 8, 8, STK__PNG_RGB, 8, NULL, 0, &np);
  uint8_t *out = malloc(np + nz + 64), *d = malloc(nz + 3);
  memcpy(d, "k\0\0", 3), memcpy(d + 3, z, nz);
  size_t at = 33;
  memcpy(out, png, at);
  png_chunk(out, &at, type, d, nz + 3);
  memcpy(out + at, png + 33, np - 33);
  *n = at + np - 33;
  free(z), free(d), free(png);
  return out;
}

/* A progressive side x side JPEG of about 200 bytes: one DC scan holding
 * two bytes, then EOI. libjpeg pads the missing data with zeros (a warning)
 * and decodes the whole image from its coefficient buffer. */
static size_t jpeg_prog_bomb(uint8_t *q, int side, int h_samp) {
  size_t k = 0;
  q[k++] = 0xFF, q[k++] = 0xD8;
  q[k++] = 0xFF, q[k++] = 0xDB, q[k++] = 0, q[k++] = 67, q[k++] = 0;
  for (int i = 0; i < 64; i++) q[k++] = 1;
  q[k++] = 0xFF, q[k++] = 0xC2, q[k++] = 0, q[k++] = 17, q[k++] = 8;
  q[k++] = (uint8_t)(side >> 8), q[k++] = (uint8_t)side, q[k++] = (uint8_t)(side >> 8), q[k++] = (uint8_t)side;
  q[k++] = 3;
  for (int c = 1; c <= 3; c++) q[k++] = (uint8_t)c, q[k++] = c == 1 ? (uint8_t)(h_samp << 4 | h_samp) : 0x11, q[k++] = 0;
  q[k++] = 0xFF, q[k++] = 0xC4, q[k++] = 0, q[k++] = 20, q[k++] = 0x00, q[k++] = 1;
  for (int i = 1; i < 16; i++) q[k++] = 0;
  q[k++] = 0;                                /* one code, length 1: DC diff 0 */
  q[k++] = 0xFF, q[k++] = 0xDA, q[k++] = 0, q[k++] = 12, q[k++] = 3;
  for (int c = 1; c <= 3; c++) q[k++] = (uint8_t)c, q[k++] = 0;
  q[k++] = 0, q[k++] = 0, q[k++] = 0;        /* Ss 0, Se 0, Ah Al 0 */
  q[k++] = 0, q[k++] = 0;
  q[k++] = 0xFF, q[k++] = 0xD9;
  return k;
}

/* The four bombs: a 3.4 MB PNG whose zTXt inflates to 540 MB, the
 * same as iCCP, and 200-byte progressive 13000x13000 JPEGs in 4:4:4 (1 GB of
 * coefficients) and 4:2:0 (0.5 GB). Each must be refused with STK_ELIMIT
 * naming max_decode_bytes, fast; a loader of 2 threads over them must stay
 * under 512 MB; and with max_decode_bytes = 0 (no budget) they decode past
 * it, so the check can fail. */
static void write_bombs(const char *dir) {
  char p[4300];
  snprintf(p, sizeof p, "%s/b", dir);
  tu_mkdir(dir), tu_mkdir(p);
  size_t n;
  uint8_t *b = png_zbomb("zTXt", 2u << 20, &n);
  snprintf(p, sizeof p, "%s/b/ztxt.png", dir), tu_write_bytes(p, b, n), free(b);
  b = png_zbomb("iCCP", 2u << 20, &n);
  snprintf(p, sizeof p, "%s/b/iccp.png", dir), tu_write_bytes(p, b, n), free(b);
  uint8_t q[512];
  n = jpeg_prog_bomb(q, 13000, 1);
  snprintf(p, sizeof p, "%s/b/prog444.jpg", dir), tu_write_bytes(p, q, n);
  n = jpeg_prog_bomb(q, 13000, 2);
  snprintf(p, sizeof p, "%s/b/prog420.jpg", dir), tu_write_bytes(p, q, n);
}

static long bomb_loader_rss_kb(const char *dir, uint64_t budget, int *bad) {
  fflush(stdout), fflush(stderr);
  pid_t pid = fork();
  if (pid == 0) {
    stk_options o;
    stk_options_init(&o);
    o.root = dir;
    o.size = 16;
    o.batch_size = 2;
    o.threads = 2;
    o.pipeline = STK_PIPELINE_EVAL;
    o.on_error = STK_ON_ERROR_SKIP;
    o.max_skipped_fraction = 1;
    o.max_decode_bytes = budget;
    stk_loader *l = NULL;
    char err[512];
    if (STK_LOADER_CREATE(&o, &l, err, sizeof err)) _exit(3);
    stk_batch b;
    int rc;
    while ((rc = stk_loader_next(l, &b)) == STK_OK) stk_batch_release(l, &b);
    int wrong = rc != STK_EEND && rc != STK_ETOOMANY;
    for (uint64_t i = 0; i < stk_loader_skipped_count(l); i++) {
      const char *path, *why;
      if (stk_loader_skipped(l, i, &path, &why) == STK_OK && budget && !strstr(why, "max_decode_bytes"))
        wrong = 1;
    }
    stk_loader_destroy(l);
    _exit(wrong ? 2 : 0);
  }
  int status = 0;
  struct rusage ru;
  memset(&ru, 0, sizeof ru);
  wait4(pid, &status, 0, &ru);
  *bad = !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  return ru.ru_maxrss;
}

static void test_decode_budget(void) {
  char dir[4200];
  snprintf(dir, sizeof dir, "%s/bombs", g_tmp);
  write_bombs(dir);
  static const char *names[] = {"ztxt.png", "iccp.png", "prog444.jpg", "prog420.jpg"};
  for (int i = 0; i < 4; i++) {
    char p[4300], msg[512];
    snprintf(p, sizeof p, "%s/b/%s", dir, names[i]);
    double t0 = stk__now();
    int rc = stk_check_file(p, NULL, NULL, NULL, msg, sizeof msg);
    double dt = stk__now() - t0;
    CHECK_MSG(rc == STK_ELIMIT && strstr(msg, "max_decode_bytes"), "%s: rc %d: %s", names[i], rc, msg);
    printf("decode budget: %s refused in %.3f s: %s\n", names[i], dt, msg);
  }
  if (STK_SANITIZED || getenv("STK_TEST_VALGRIND")) return; /* RSS is the tools' there */
  int bad = 0;
  long kb = bomb_loader_rss_kb(dir, (uint64_t)128 << 20, &bad);
  printf("decode budget: 2 threads over the 4 bombs: peak RSS %ld KiB\n", kb);
  CHECK_MSG(!bad, "budget child failed");
  CHECK_MSG(kb < 512L << 10, "peak RSS %ld KiB with the default budget", kb);
  if (getenv("STK_BOMB_NO_BUDGET")) { /* the figure before: no budget at all */
    kb = bomb_loader_rss_kb(dir, 0, &bad);
    printf("decode budget: the same with max_decode_bytes=0: peak RSS %ld KiB\n", kb);
  }
}

/* ---- the loader ---------------------------------------------------------- */

static void base_opts(stk_options *o, const char *root) {
  stk_options_init(o);
  o->root = root;
  o->size = 24;
  o->threads = 2;
  o->seed = 5;
  o->max_consecutive_failures = 0;
  o->max_skipped_fraction = 1; /* most of the matrix is bad on purpose */
}

/* Under raise, batch i of an unshuffled epoch of batch size 1 is sample i:
 * each bad file fails its batch with a message naming it, the others come. */
static void check_raise(const char *root, const char *what) {
  stk_options o;
  base_opts(&o, root);
  o.pipeline = STK_PIPELINE_EVAL;
  o.resize_size = o.size; /* square files are read whole */
  o.batch_size = 1;
  o.shuffle = 0;
  stk_loader *l = CHECK_CREATE(&o, STK_OK);
  if (!l) return;
  int64_t n = stk_loader_num_samples(l), good = 0, failed = 0;
  for (int64_t i = 0;; i++) {
    stk_batch b;
    int rc = stk_loader_next(l, &b);
    if (rc == STK_EEND) break;
    CHECK_MSG(i < n, "%s: more batches than samples", what);
    if (i >= n) break;
    const char *name = stk_loader_sample_path(l, i);
    entry *e = find_entry(name);
    CHECK_MSG(e != NULL, "%s: sample %s is no matrix file", what, name);
    if (!e) continue;
    if (rc == STK_OK) {
      CHECK_MSG(!e->bad, "%s: %s was accepted", what, e->rel);
      CHECK(b.n == 1 && b.indices[0] == i);
      good++;
      stk_batch_release(l, &b);
      continue;
    }
    failed++;
    const char *msg = stk_loader_error(l);
    CHECK_MSG(e->bad, "%s: %s failed: %s", what, e->rel, msg);
    /* "PATH: REASON" */
    const char *at = strstr(msg, name);
    CHECK_MSG(at != NULL && strlen(at) > strlen(name) + 2 && at[strlen(name)] == ':',
              "%s: message \"%s\" does not name %s and a reason", what, msg, name);
    if (e->why) CHECK_MSG(strstr(msg, e->why) != NULL, "%s: \"%s\" lacks \"%s\"", what, msg, e->why);
  }
  int64_t want_bad = 0;
  for (int64_t i = 0; i < n; i++) {
    entry *e = find_entry(stk_loader_sample_path(l, i));
    want_bad += e && e->bad;
  }
  CHECK_EQ_INT(failed, want_bad);
  CHECK_EQ_INT(good + failed, n);
  stk_loader_destroy(l);
}

/* Marks every bad file the skipped list names now; counts other names. */
static void poll_skipped(stk_loader *l, int *listed, int *wrong) {
  stk_stats st;
  stk_loader_stats(l, &st);
  for (uint64_t k = 0; k < st.skipped; k++) {
    const char *path = NULL, *reason = NULL;
    if (stk_loader_skipped(l, k, &path, &reason) != STK_OK) continue;
    entry *e = find_entry(path);
    if (e && e->bad && reason && reason[0])
      listed[e - E] = 1;
    else
      (*wrong)++;
  }
}

/* Under skip, with shuffling and the train pipeline, two epochs in a row:
 * every good sample exactly once per epoch, each bad one counted and
 * listed. Once an epoch ends the loader starts on the next, whose failures
 * count too, so the counts are checked as ranges and the list is read after
 * every batch. */
static void check_skip(const char *root, const char *what) {
  stk_options o;
  base_opts(&o, root);
  o.on_error = STK_ON_ERROR_SKIP;
  o.batch_size = 4;
  stk_loader *l = CHECK_CREATE(&o, STK_OK);
  if (!l) return;
  int64_t n = stk_loader_num_samples(l);
  int *seen = calloc((size_t)n, sizeof *seen);
  int listed[MAXE] = {0}, wrong = 0;
  int64_t want_bad = 0;
  for (int64_t i = 0; i < n; i++) {
    entry *e = find_entry(stk_loader_sample_path(l, i));
    CHECK_MSG(e != NULL, "%s: sample %s is no matrix file", what, stk_loader_sample_path(l, i));
    want_bad += e && e->bad;
  }
  for (int epoch = 0; epoch < 2; epoch++) {
    memset(seen, 0, (size_t)n * sizeof *seen);
    for (;;) {
      stk_batch b;
      int rc = stk_loader_next(l, &b);
      if (rc == STK_EEND) break;
      CHECK_MSG(rc == STK_OK, "%s: next: %s", what, stk_loader_error(l));
      if (rc) break;
      CHECK_EQ_INT(b.epoch, epoch);
      for (int64_t k = 0; k < b.n; k++)
        if (b.indices[k] >= 0 && b.indices[k] < n) seen[b.indices[k]]++;
      stk_batch_release(l, &b);
      if (epoch == 0) poll_skipped(l, listed, &wrong);
    }
    stk_stats st;
    stk_loader_stats(l, &st);
    CHECK_MSG((int64_t)st.skipped >= (epoch + 1) * want_bad && (int64_t)st.skipped <= (epoch + 2) * want_bad,
              "%s epoch %d: %llu skipped in all, want %lld per epoch", what, epoch,
              (unsigned long long)st.skipped, (long long)want_bad);
    for (int64_t i = 0; i < n; i++) {
      entry *e = find_entry(stk_loader_sample_path(l, i));
      if (!e) continue;
      int want = e->bad ? 0 : 1;
      CHECK_MSG(seen[i] == want, "%s epoch %d: %s seen %d times, want %d", what, epoch, e->rel, seen[i], want);
    }
  }
  /* the list named exactly the bad files of the source, each with a reason */
  CHECK_EQ_INT(wrong, 0);
  for (int i = 0; i < NE; i++) {
    int in_source = 0; /* a file a tar pack left out is no sample */
    for (int64_t s = 0; s < n; s++) in_source |= find_entry(stk_loader_sample_path(l, s)) == &E[i];
    CHECK_MSG(listed[i] == (E[i].bad && in_source), "%s: %s listed %d, want %d", what, E[i].rel, listed[i],
              E[i].bad && in_source);
  }
  free(seen);
  stk_loader_destroy(l);
}

/* ---- stoker check -------------------------------------------------------- */

/* Runs `stoker check SOURCE --json`; marks each failure listed. Returns the
 * exit status, or -1 when the command is not available. */
static int run_check(const char *source, int *listed, int *unknown) {
  const char *cli = getenv("STK_CLI");
  if (!cli) return -1;
  char cmd[8800];
  snprintf(cmd, sizeof cmd, "'%s' check '%s' --json --threads 2 2>/dev/null", cli, source);
  FILE *p = popen(cmd, "r");
  if (!p) return -1;
  stk__buf out = {0};
  size_t len = 0;
  char chunk[4096];
  size_t k;
  while ((k = fread(chunk, 1, sizeof chunk, p)) > 0) {
    stk__buf_reserve(&out, len + k + 1);
    memcpy((char *)out.p + len, chunk, k);
    len += k;
  }
  int st = pclose(p);
  if (!out.p) return -1;
  ((char *)out.p)[len] = '\0';
  /* {"path": "...", "reason": ...} for each failure; names have no quotes here */
  const char *s = out.p;
  *unknown = 0;
  while ((s = strstr(s, "{\"path\": \"")) != NULL) {
    s += 10;
    const char *end = strchr(s, '"');
    if (!end) break;
    char name[4400];
    snprintf(name, sizeof name, "%.*s", (int)(end - s), s);
    entry *e = find_entry(name);
    if (e)
      listed[e - E]++;
    else
      (*unknown)++;
    s = end;
  }
  stk__buf_free(&out);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

static void check_cli(const char *source, const char *what, int tar) {
  int listed[MAXE] = {0}, unknown = 0;
  int st = run_check(source, listed, &unknown);
  if (st < 0) {
    printf("STK_CLI not set: stoker check not run on the %s\n", what);
    return;
  }
  int any = 0;
  for (int i = 0; i < NE; i++) {
    int want = tar ? E[i].bad && !E[i].header_bad : E[i].bad;
    if (!strcmp(what, "cache")) want = 0;
    any |= want;
    CHECK_MSG(listed[i] == want, "stoker check %s: %s listed %d times, want %d", what, E[i].rel, listed[i], want);
  }
  CHECK_EQ_INT(unknown, 0);
  CHECK_MSG(st == (any ? 1 : 0), "stoker check %s: exit %d", what, st);
}

/* ---- packs ---------------------------------------------------------------- */

typedef struct {
  int left[MAXE];
  int unknown;
  int no_reason;
} pack_log;

static void on_bad(void *user, const char *path, const char *reason) {
  pack_log *pl = user;
  entry *e = find_entry(path);
  if (e)
    pl->left[e - E]++;
  else
    pl->unknown++;
  if (!reason || !reason[0]) pl->no_reason++;
}

static int pack(stk_pack_format f, const char *out, pack_log *pl, stk_pack_result *res) {
  stk_pack_options p;
  stk_pack_options_init(&p);
  p.root = g_root;
  p.output = out;
  p.format = f;
  p.max_side = 0;
  p.threads = 2;
  p.bad_file = on_bad;
  p.user = pl;
  char err[1024] = "";
  int rc = STK_PACK(&p, res, err, sizeof err);
  CHECK_MSG(rc == STK_OK, "pack: %s", err);
  return rc;
}

static void test_cache(void) {
  char out[4200];
  snprintf(out, sizeof out, "%s/matrix.stkc", g_tmp);
  pack_log pl = {{0}, 0, 0};
  stk_pack_result res;
  if (pack(STK_PACK_CACHE, out, &pl, &res)) return;
  int nbad = 0;
  for (int i = 0; i < NE; i++) {
    nbad += E[i].bad;
    /* a cache pack decodes every file: it leaves out exactly the bad ones */
    CHECK_MSG(pl.left[i] == E[i].bad, "cache pack: %s left out %d times, want %d", E[i].rel, pl.left[i], E[i].bad);
  }
  CHECK_EQ_INT(pl.unknown, 0);
  CHECK_EQ_INT(pl.no_reason, 0);
  CHECK_EQ_INT(res.failed, nbad);
  CHECK_EQ_INT(res.packed, NE - nbad);
  printf("cache pack: %lld packed, %lld left out\n", (long long)res.packed, (long long)res.failed);
  /* Every packed image reads back; nothing is bad any more. */
  int saved[MAXE];
  for (int i = 0; i < NE; i++) saved[i] = E[i].bad, E[i].bad = 0;
  check_raise(out, "cache raise");
  check_skip(out, "cache skip");
  for (int i = 0; i < NE; i++) E[i].bad = saved[i];
  check_cli(out, "cache", 0);
}

static void test_tar(void) {
  char out[4200];
  snprintf(out, sizeof out, "%s/shards", g_tmp);
  pack_log pl = {{0}, 0, 0};
  stk_pack_result res;
  if (pack(STK_PACK_TAR, out, &pl, &res)) return;
  int left = 0, travelled = 0;
  for (int i = 0; i < NE; i++) {
    /* a tar pack reads headers only: it leaves out exactly the files whose
     * header fails; the other bad files travel into the shards */
    CHECK_MSG(pl.left[i] == E[i].header_bad, "tar pack: %s left out %d times, want %d", E[i].rel, pl.left[i],
              E[i].header_bad);
    left += E[i].header_bad;
    travelled += E[i].bad && !E[i].header_bad;
  }
  CHECK_EQ_INT(pl.unknown, 0);
  CHECK_EQ_INT(res.failed, left);
  CHECK_EQ_INT(res.packed, NE - left);
  /* Sanity: the bombs, empty, random and text files never reach a shard;
   * the data-only damage (a bad IDAT checksum, a cut near the end) does. */
  for (int i = 0; i < NE; i++) {
    const char *r = E[i].rel;
    if (strstr(r, "bomb") || strstr(r, "empty") || strstr(r, "random") || strstr(r, "text") || strstr(r, "zero"))
      CHECK_MSG(E[i].header_bad, "%s: header accepted", r);
    if (strstr(r, "badcrc") || strstr(r, "cut99") || strstr(r, "cut50")) CHECK_MSG(!E[i].header_bad, "%s: header refused", r);
  }
  CHECK(travelled >= 4);
  printf("tar pack: %lld packed, %lld left out by their header, %d bad files in the shards\n",
         (long long)res.packed, (long long)res.failed, travelled);
  check_raise(out, "tar raise");
  check_skip(out, "tar skip");
  check_cli(out, "tar", 1);
}

/* ---- --write DIR ---------------------------------------------------------- */

static int write_only(const char *dir) {
  g_root = strdup(dir);
  tu_mkdir(dir);
  write_matrix();
  test_each_file();
  char p[4200];
  snprintf(p, sizeof p, "%s/manifest.tsv", dir);
  FILE *f = fopen(p, "w");
  if (!f) return 1;
  for (int i = 0; i < NE; i++)
    fprintf(f, "%s\t%s\t%d\t%d\n", E[i].rel, E[i].k == DAMAGED ? (E[i].bad ? "damaged-bad" : "damaged-ok") : kind_name[E[i].k],
            E[i].w, E[i].h);
  fclose(f);
  for (int i = 0; i < g_nkeep; i++) free(g_keep[i]);
  free(g_root);
  return CHECK_DONE();
}

int main(int argc, char **argv) {
  if (argc == 3 && !strcmp(argv[1], "--write")) return write_only(argv[2]);
  g_tmp = tu_tempdir();
  CHECK(g_tmp != NULL);
  if (!g_tmp) return CHECK_DONE();
  char root[4200];
  snprintf(root, sizeof root, "%s/matrix", g_tmp);
  tu_mkdir(root);
  g_root = root;

  write_matrix();
  test_each_file();
  test_bombs_stay_small();
  test_decode_budget();
  check_raise(g_root, "folder raise");
  check_skip(g_root, "folder skip");
  check_cli(g_root, "folder", 0);
  test_cache();
  test_tar();

  for (int i = 0; i < g_nkeep; i++) free(g_keep[i]);
  tu_rmtree(g_tmp);
  free(g_tmp);
  return CHECK_DONE();
}
