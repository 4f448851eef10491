/*
 * make_corpus.c: writes the seed corpora of the fuzz targets into
 * OUT/<target>/ (fuzz/make_corpus.sh runs it with OUT = fuzz/corpus). The
 * images come from stoker's own encoders and synthetic renderer, small so
 * that the fuzzers run fast; the tar shards and caches are laid out here,
 * byte by byte, with a few of the odd forms each reader must handle. The
 * same build writes the same bytes.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "codecs/encode.h"
#include "core/common.h"
#include "sources/cache_format.h"
#include "sources/index.h"
#include "sources/store.h"
#include "sources/tar.h"
#include "synth/synth.h"

static const char *g_out;

static void die(const char *what) {
  fprintf(stderr, "make_corpus: %s\n", what);
  exit(1);
}

static void put(const char *target, const char *name, const void *p, size_t n) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", g_out, target);
  if (mkdir(path, 0755) != 0 && errno != EEXIST) die(path);
  snprintf(path, sizeof path, "%s/%s/%s", g_out, target, name);
  if (stk__write_file(path, p, n) != STK_OK) die(path);
}

/* A growable byte string. */
typedef struct {
  uint8_t *p;
  size_t n, cap;
} bytes;

static void add(bytes *b, const void *p, size_t n) {
  if (b->n + n > b->cap) {
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->n + n) cap *= 2;
    if (!(b->p = realloc(b->p, cap))) die("out of memory");
    b->cap = cap;
  }
  if (n) memcpy(b->p + b->n, p, n);
  b->n += n;
}

static void add_zeros(bytes *b, size_t n) {
  static const uint8_t z[512];
  while (n) {
    size_t k = n < sizeof z ? n : sizeof z;
    add(b, z, k);
    n -= k;
  }
}

/* ---- images ------------------------------------------------------------- */

static uint8_t *render(int w, int h, int channels, uint64_t seed) {
  uint8_t *rgb = malloc((size_t)w * h * 3);
  uint8_t *px = malloc((size_t)w * h * 4);
  if (!rgb || !px) die("out of memory");
  stk__synth_render(rgb, w, h, seed);
  for (int i = 0; i < w * h; i++) {
    if (channels == 1) px[i] = rgb[3 * i + 1];
    else if (channels == 3) memcpy(px + 3 * i, rgb + 3 * i, 3);
    else if (channels == 2) { px[2 * i] = rgb[3 * i]; px[2 * i + 1] = (uint8_t)(i * 7); }
    else { memcpy(px + 4 * i, rgb + 3 * i, 3); px[4 * i + 3] = (uint8_t)(i * 13); }
  }
  free(rgb);
  return px;
}

typedef struct {
  const char *name;
  int w, h;
  int progressive, arithmetic, hs, vs, restart, optimize, quality;
  stk__jpeg_color color;
} jpeg_kind;

static const jpeg_kind k_jpegs[] = {
    {"base420_33x17", 33, 17, 0, 0, 2, 2, 0, 0, 75, STK__JCOLOR_YCC},
    {"base444_16x16", 16, 16, 0, 0, 1, 1, 0, 0, 96, STK__JCOLOR_YCC},
    {"base422_40x24", 40, 24, 0, 0, 2, 1, 0, 0, 85, STK__JCOLOR_YCC},
    {"base440_24x40", 24, 40, 0, 0, 1, 2, 0, 0, 85, STK__JCOLOR_YCC},
    {"base411_64x16", 64, 16, 0, 0, 4, 1, 0, 0, 85, STK__JCOLOR_YCC},
    {"tiny_7x5", 7, 5, 0, 0, 2, 2, 0, 0, 90, STK__JCOLOR_YCC},
    {"prog420_48x32", 48, 32, 1, 0, 2, 2, 0, 0, 80, STK__JCOLOR_YCC},
    {"arith420_32x32", 32, 32, 0, 1, 2, 2, 0, 0, 80, STK__JCOLOR_YCC},
    {"progarith_24x24", 24, 24, 1, 1, 1, 1, 0, 0, 80, STK__JCOLOR_YCC},
    {"restart_48x48", 48, 48, 0, 0, 2, 2, 1, 0, 80, STK__JCOLOR_YCC},
    {"optimized_32x24", 32, 24, 0, 0, 2, 2, 0, 1, 80, STK__JCOLOR_YCC},
    {"grey_30x20", 30, 20, 0, 0, 1, 1, 0, 0, 85, STK__JCOLOR_GREY},
    {"cmyk_20x20", 20, 20, 0, 0, 1, 1, 0, 0, 85, STK__JCOLOR_CMYK},
    {"rgb_20x12", 20, 12, 0, 0, 1, 1, 0, 0, 85, STK__JCOLOR_RGB},
    {"tall_8x200", 8, 200, 0, 0, 2, 2, 0, 0, 60, STK__JCOLOR_YCC},
    {"wide_200x8", 200, 8, 0, 0, 2, 2, 0, 0, 60, STK__JCOLOR_YCC},
};

static void encode_jpeg(const jpeg_kind *k, uint8_t **out, size_t *len) {
  int ch = k->color == STK__JCOLOR_GREY ? 1 : k->color == STK__JCOLOR_CMYK ? 4 : 3;
  uint8_t *px = render(k->w, k->h, ch, (uint64_t)k->w * 31 + (uint64_t)k->h);
  stk__jpeg_enc_opts o;
  stk__jpeg_enc_defaults(&o);
  o.quality = k->quality;
  o.progressive = k->progressive;
  o.arithmetic = k->arithmetic;
  o.h_samp = k->hs;
  o.v_samp = k->vs;
  o.color = k->color;
  o.restart_interval = k->restart;
  o.optimize = k->optimize;
  if (stk__jpeg_encode(px, k->w, k->h, &o, out, len) != STK_OK) die(k->name);
  free(px);
}

/* fuzz_jpeg's input: five control bytes (scale, crop), then the file. */
static void put_jpeg_case(const char *name, const uint8_t ctl[5], const uint8_t *f, size_t n) {
  bytes b = {0};
  add(&b, ctl, 5);
  add(&b, f, n);
  put("jpeg", name, b.p, b.n);
  free(b.p);
}

static void jpegs(uint8_t **tiny, size_t *tiny_len) {
  for (size_t i = 0; i < sizeof k_jpegs / sizeof k_jpegs[0]; i++) {
    const jpeg_kind *k = &k_jpegs[i];
    uint8_t *f;
    size_t n;
    encode_jpeg(k, &f, &n);
    char name[128];
    /* a crop in the middle at each scale in turn, and the whole image */
    uint8_t ctl[5] = {(uint8_t)i, 64, 48, 128, 160};
    put_jpeg_case(k->name, ctl, f, n);
    snprintf(name, sizeof name, "%s.jpg", k->name);
    put("markers", name, f, n);
    if (i == 0 || i == 6) {
      uint8_t whole[5] = {3, 0, 0, 255, 255};
      snprintf(name, sizeof name, "%s_whole_1_8", k->name);
      put_jpeg_case(name, whole, f, n);
      /* cut short: in the scan, and just before the end marker */
      snprintf(name, sizeof name, "%s_cut_half", k->name);
      put_jpeg_case(name, ctl, f, n / 2);
      snprintf(name, sizeof name, "%s_no_eoi", k->name);
      put_jpeg_case(name, ctl, f, n - 2);
      snprintf(name, sizeof name, "%s_cut_half.jpg", k->name);
      put("markers", name, f, n / 2);
      /* a flipped bit in the entropy-coded data */
      uint8_t *g = malloc(n);
      memcpy(g, f, n);
      g[n - 40] ^= 0x10;
      snprintf(name, sizeof name, "%s_flipped", k->name);
      put_jpeg_case(name, ctl, g, n);
      free(g);
    }
    if (i == 5) {
      *tiny = f;
      *tiny_len = n;
    } else {
      free(f);
    }
  }
  /* Hand-made marker layouts: fill bytes, JFIF and Adobe segments, a
   * frame claiming 65500x65500, a segment length running past the end. */
  static const uint8_t adobe[] = {
      0xFF, 0xD8, 0xFF, 0xFF, 0xEE, 0x00, 0x0E, 'A', 'd', 'o', 'b', 'e', 0, 100, 0, 0, 0, 0, 0,
      0xFF, 0xC0, 0x00, 0x11, 8, 0xFF, 0xDC, 0xFF, 0xDC, 3, 'R', 0x11, 0, 'G', 0x11, 0, 'B', 0x11, 0,
      0xFF, 0xDA, 0x00, 0x0C, 3, 'R', 0, 'G', 0, 'B', 0, 0, 63, 0, 0x12, 0x34, 0xFF, 0xD9};
  put("markers", "adobe_rgb_huge.jpg", adobe, sizeof adobe);
  static const uint8_t jfif[] = {0xFF, 0xD8, 0xFF, 0xE0, 0x00, 0x10, 'J', 'F', 'I', 'F', 0, 1, 1,
                                 0, 0, 1, 0, 1, 0, 0, 0xFF, 0xD0, 0xFF, 0xC2, 0x00, 0x0B, 8, 0, 8,
                                 0, 8, 1, 1, 0x11, 0, 0xFF, 0xDA, 0x00, 0x08, 1, 1, 0, 0, 63, 0};
  put("markers", "jfif_grey_prog_no_eoi.jpg", jfif, sizeof jfif);
  static const uint8_t overrun[] = {0xFF, 0xD8, 0xFF, 0xE1, 0x7F, 0xFF, 'E', 'x', 'i', 'f'};
  put("markers", "segment_overrun.jpg", overrun, sizeof overrun);
  uint8_t ctl[5] = {0, 0, 0, 255, 255};
  put_jpeg_case("adobe_rgb_huge", ctl, adobe, sizeof adobe);
}

typedef struct {
  const char *name;
  int w, h;
  stk__png_color color;
  int depth;
} png_kind;

static const png_kind k_pngs[] = {
    {"rgb8_17x9", 17, 9, STK__PNG_RGB, 8},       {"rgb16_9x7", 9, 7, STK__PNG_RGB, 16},
    {"grey8_13x5", 13, 5, STK__PNG_GREY, 8},     {"grey16_5x5", 5, 5, STK__PNG_GREY, 16},
    {"greya8_8x8", 8, 8, STK__PNG_GREY_ALPHA, 8}, {"rgba8_12x6", 12, 6, STK__PNG_RGBA, 8},
    {"rgba16_6x4", 6, 4, STK__PNG_RGBA, 16},     {"palette_16x16", 16, 16, STK__PNG_PALETTE, 8},
};

static void pngs(uint8_t **tiny, size_t *tiny_len) {
  for (size_t i = 0; i < sizeof k_pngs / sizeof k_pngs[0]; i++) {
    const png_kind *k = &k_pngs[i];
    int ch = k->color == STK__PNG_GREY ? 1 : k->color == STK__PNG_GREY_ALPHA ? 2
             : k->color == STK__PNG_RGBA ? 4 : k->color == STK__PNG_RGB ? 3 : 1;
    uint8_t *px8 = render(k->w, k->h, ch, i + 1);
    size_t samples = (size_t)k->w * k->h * (size_t)ch;
    uint8_t *px = px8;
    if (k->depth == 16) { /* big-endian 16-bit samples */
      px = malloc(samples * 2);
      for (size_t s = 0; s < samples; s++) {
        px[2 * s] = px8[s];
        px[2 * s + 1] = (uint8_t)(s * 5);
      }
    }
    uint8_t pal[3 * 16];
    for (int c = 0; c < 16; c++) {
      pal[3 * c] = (uint8_t)(c * 16);
      pal[3 * c + 1] = (uint8_t)(255 - c * 16);
      pal[3 * c + 2] = (uint8_t)(c * 5);
    }
    if (k->color == STK__PNG_PALETTE)
      for (size_t s = 0; s < samples; s++) px[s] &= 15;
    uint8_t *f;
    size_t n;
    if (stk__png_encode(px, k->w, k->h, k->color, k->depth, pal, 16, &f, &n) != STK_OK)
      die(k->name);
    char name[128];
    snprintf(name, sizeof name, "%s.png", k->name);
    put("png", name, f, n);
    if (i == 0) {
      /* a bad checksum in IHDR's CRC, and the file cut short */
      uint8_t *g = malloc(n);
      memcpy(g, f, n);
      g[29] ^= 1;
      put("png", "rgb8_bad_crc.png", g, n);
      free(g);
      put("png", "rgb8_cut.png", f, n * 2 / 3);
      *tiny = f;
      *tiny_len = n;
    } else {
      free(f);
    }
    if (px != px8) free(px);
    free(px8);
  }
}

/* ---- lists ------------------------------------------------------------ */

static void lists(void) {
  static const char *const k[][2] = {
      {"plain.txt", "a/1.jpg 0\nb/2.jpg 1\nc/3.jpg 2\n"},
      {"comments.txt", "# a comment\n\n  a.jpg 0  \n\t\n#x 1\nb.png\t3\n"},
      {"spaces.txt", "my folder/my file.jpg 4\n/abs/path/x.jpg 0\nno_newline.jpg 1"},
      {"crlf.txt", "a.jpg 0\r\nb.jpg 1\r\n"},
      {"bad_label.txt", "a.jpg 0\nb.jpg -1\n"},
      {"no_label.txt", "a.jpg\n"},
      {"big_label.txt", "a.jpg 99999\n"},
      {"overflow_label.txt", "a.jpg 99999999999999999999\n"},
      {"only_comments.txt", "# nothing\n\n"},
      {"leading_base.txt", "\x01rel/a.jpg 2\n"},
  };
  for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) put("list", k[i][0], k[i][1], strlen(k[i][1]));
  static const char nul[] = "a.jpg 0\nb\0c.jpg 1\n";
  put("list", "nul_byte.txt", nul, sizeof nul - 1);
}

/* ---- tar shards ----------------------------------------------------------- */

static void octal(uint8_t *f, size_t n, uint64_t v) {
  f[n - 1] = '\0';
  for (size_t i = n - 1; i-- > 0;) {
    f[i] = (uint8_t)('0' + (v & 7));
    v >>= 3;
  }
}

/* A member: a 512-byte header (ustar, or GNU's magic), the data, padding. */
static void member(bytes *b, const char *name, char type, const void *data, size_t n, int gnu) {
  uint8_t h[512];
  memset(h, 0, sizeof h);
  memcpy(h, name, strlen(name) < 100 ? strlen(name) : 100);
  octal(h + 100, 8, 0644);
  octal(h + 108, 8, 0);
  octal(h + 116, 8, 0);
  octal(h + 124, 12, n);
  octal(h + 136, 12, 0);
  h[156] = (uint8_t)type;
  memcpy(h + 257, gnu ? "ustar  " : "ustar", gnu ? 8 : 6);
  if (!gnu) memcpy(h + 263, "00", 2);
  memset(h + 148, ' ', 8);
  unsigned sum = 0;
  for (int i = 0; i < 512; i++) sum += h[i];
  octal(h + 148, 7, sum);
  add(b, h, sizeof h);
  add(b, data, n);
  add_zeros(b, (512 - n % 512) % 512);
}

static void pax(bytes *b, const char *records) {
  member(b, "PaxHeader", 'x', records, strlen(records), 0);
}

/* Appends the pax record "LEN key=value\n" to r, LEN counting itself. */
static void pax_rec(char *r, size_t cap, const char *kv) {
  size_t body = strlen(kv) + 2, len = body + 1;
  while (len != body + (size_t)snprintf(NULL, 0, "%zu", len)) len++;
  size_t at = strlen(r);
  snprintf(r + at, cap - at, "%zu %s\n", len, kv);
}

/* fuzz_tar's input: a control byte, [classes.txt length and bytes], shard. */
static void put_tar(const char *name, int flags, const char *classes, bytes *shard) {
  bytes b = {0};
  uint8_t f = (uint8_t)flags;
  add(&b, &f, 1);
  if (flags & 1) {
    size_t n = strlen(classes);
    uint8_t len[2] = {(uint8_t)n, (uint8_t)(n >> 8)};
    add(&b, len, 2);
    add(&b, classes, n);
  }
  add(&b, shard->p, shard->n);
  put("tar", name, b.p, b.n);
  free(b.p);
  free(shard->p);
  memset(shard, 0, sizeof *shard);
}

static void tars(const uint8_t *jpg, size_t jl, const uint8_t *png, size_t pl) {
  bytes s = {0};
  member(&s, "k0.jpg", '0', jpg, jl, 0);
  member(&s, "k0.cls", '0', "0", 1, 0);
  member(&s, "k1.png", '0', png, pl, 0);
  member(&s, "k1.cls", '0', " 1\n", 3, 0);
  add_zeros(&s, 1024);
  put_tar("plain", 0, NULL, &s);

  member(&s, "dir/", '5', NULL, 0, 0);
  member(&s, "dir/a.b.jpg", '0', jpg, jl, 0);
  member(&s, "dir/a.b.cls", '0', "1", 1, 0);
  member(&s, "dir/c.JPEG", '0', jpg, jl, 0);
  member(&s, "dir/c.cls", '0', "0", 1, 0);
  add_zeros(&s, 1024);
  put_tar("classes_shuffled", 1 | 4, "cat\ndog\n", &s);

  static char longname[300];
  memset(longname, 'n', 200);
  memcpy(longname + 200, ".jpg", 5);
  member(&s, "././@LongLink", 'L', longname, strlen(longname) + 1, 1);
  member(&s, "nnnnnnnn", '0', jpg, jl, 1);
  longname[200] = '\0';
  strcat(longname, ".cls");
  member(&s, "././@LongLink", 'L', longname, strlen(longname) + 1, 1);
  member(&s, "nnnnnnnn", '0', "3", 1, 1);
  add_zeros(&s, 1024);
  put_tar("gnu_longname", 2, NULL, &s);

  char rec[128] = "";
  pax_rec(rec, sizeof rec, "path=p/\xc3\xa9t\xc3\xa9.jpg");
  pax(&s, rec);
  member(&s, "ignored.jpg", '0', jpg, jl, 0);
  rec[0] = '\0';
  pax_rec(rec, sizeof rec, "path=p/\xc3\xa9t\xc3\xa9.cls");
  pax_rec(rec, sizeof rec, "size=1");
  pax(&s, rec);
  member(&s, "ignored.cls", '0', "2\n", 2, 0); /* pax size 1 overrides the header's 2 */
  member(&s, "link.jpg", '2', NULL, 0, 0);
  member(&s, "../escape.jpg", '0', jpg, jl, 0);
  member(&s, "fifo.jpg", '6', NULL, 0, 0);
  member(&s, "nocls.jpg", '0', jpg, jl, 0);
  member(&s, "onlycls.cls", '0', "1", 1, 0);
  member(&s, "bad.jpg", '0', jpg, jl, 0);
  member(&s, "bad.cls", '0', "x", 1, 0);
  add_zeros(&s, 1024);
  put_tar("pax_and_left_out", 0, NULL, &s);

  member(&s, "t0.jpg", '0', jpg, jl, 0);
  member(&s, "t0.cls", '0', "0", 1, 0);
  member(&s, "t1.jpg", '0', jpg, jl, 0);
  s.n -= jl / 2; /* the shard ends inside the last member */
  put_tar("truncated", 0, NULL, &s);

  member(&s, "e0.jpg", '0', jpg, jl, 0);
  member(&s, "e0.cls", '0', "0", 1, 0);
  put_tar("no_end_blocks", 0, NULL, &s);
}

/* ---- caches ----------------------------------------------------------------- */

/* A cache of n samples laid out as the writer lays it out: the header, the
 * samples at multiples of 64 from 4096, the index, the strings. Raw samples
 * are w x h RGB8 (w = 3 + i, h = 2 + i); JPEG samples are the given file. */
static void cache(const char *name, uint32_t enc, int n, int nclasses, const uint8_t *jpg,
                  size_t jl) {
  bytes b = {0};
  add_zeros(&b, STK__CACHE_DATA_OFF);
  stk__cache_entry *ent = calloc((size_t)n, sizeof *ent);
  for (int i = 0; i < n; i++) {
    uint32_t w = 3 + (uint32_t)i, h = 2 + (uint32_t)i;
    uint8_t *px = NULL;
    size_t len = jl;
    if (enc == STK_CACHE_RAW) {
      len = (size_t)w * h * 3;
      px = malloc(len);
      for (size_t k = 0; k < len; k++) px[k] = (uint8_t)(k * 29 + (size_t)i);
    }
    ent[i].off = b.n;
    ent[i].len = len;
    ent[i].w = enc == STK_CACHE_RAW ? w : 7;
    ent[i].h = enc == STK_CACHE_RAW ? h : 5;
    ent[i].label = i % nclasses;
    ent[i].hash = stk__hash64(px ? px : jpg, len, 0);
    add(&b, px ? px : jpg, len);
    add_zeros(&b, (STK__CACHE_ALIGN - b.n % STK__CACHE_ALIGN) % STK__CACHE_ALIGN);
    free(px);
  }
  stk__cache_header hd;
  memset(&hd, 0, sizeof hd);
  memcpy(hd.magic, STK__CACHE_MAGIC, 8);
  hd.version = STK__CACHE_VERSION;
  hd.encoding = enc;
  hd.max_side = 512;
  hd.quality = enc == STK_CACHE_JPEG ? 90 : 0;
  hd.n = (uint64_t)n;
  hd.nclasses = (uint32_t)nclasses;
  hd.source_kind = STK__CACHE_SRC_FOLDER;
  hd.data_end = b.n;
  hd.meta_off = b.n;
  add(&b, ent, (size_t)n * sizeof *ent);
  size_t at = b.n;
  for (int i = 0; i < n; i++) {
    char nm[32];
    snprintf(nm, sizeof nm, "c%d/img_%d.JPEG", i % nclasses, i);
    add(&b, nm, strlen(nm) + 1);
  }
  hd.names_len = b.n - at;
  at = b.n;
  for (int c = 0; c < nclasses; c++) {
    char cn[16];
    snprintf(cn, sizeof cn, "c%d", c);
    add(&b, cn, strlen(cn) + 1);
  }
  hd.classes_len = b.n - at;
  at = b.n;
  add(&b, "folder\0\0", 9); /* the kind, no source folder, no base */
  hd.source_len = b.n - at;
  hd.meta_len = b.n - hd.meta_off;
  hd.meta_hash = stk__hash64(b.p + hd.meta_off, (size_t)hd.meta_len, 0);
  hd.header_hash = stk__hash64(&hd, offsetof(stk__cache_header, header_hash), 0);
  memcpy(b.p, &hd, sizeof hd);
  put("cache", name, b.p, b.n);
  /* the same with the checksums kept as they are (reserved bit 0), and
   * with the header's checksum off: the refusal paths */
  hd.reserved = 1;
  hd.header_hash = stk__hash64(&hd, offsetof(stk__cache_header, header_hash), 0);
  memcpy(b.p, &hd, sizeof hd);
  char nm[128];
  snprintf(nm, sizeof nm, "%s_checked", name);
  put("cache", nm, b.p, b.n);
  b.p[offsetof(stk__cache_header, header_hash)] ^= 1;
  snprintf(nm, sizeof nm, "%s_bad_header_hash", name);
  put("cache", nm, b.p, b.n);
  free(ent);
  free(b.p);
}

/* ---- folder indexes ------------------------------------------------------- */

/* An index as index.c lays it out (see its opening comment), for the root
 * /data with classes a and b and the given sample paths (labels 0, 1),
 * sealed with its checksum. */
static void folder_index(const char *name, const char *path_a, const char *path_b) {
  static const char root[] = "/data", classes[] = "a\0b", dirs[] = "\0a\0b";
  uint64_t hd[12] = {0};
  memcpy(hd, "STKINDEX", 8);
  uint32_t ver[2] = {1, 0x01020304u};
  memcpy(&hd[1], ver, 8);
  hd[2] = 2; /* classes */
  hd[3] = 2; /* samples */
  hd[4] = 3; /* folders */
  hd[5] = sizeof root;
  hd[6] = sizeof classes;
  hd[7] = sizeof dirs;
  hd[8] = strlen(path_a) + strlen(path_b) + 2;
  hd[9] = 1000000000; /* scan start: long after the folders' mtimes below */
  bytes b = {0};
  add(&b, hd, sizeof hd);
  add(&b, root, sizeof root);
  for (int i = 0; i < 3; i++) {
    int64_t rec[3] = {900000000 + i, 0, (int64_t)(100 + i)};
    add(&b, rec, sizeof rec);
  }
  int32_t lab[2] = {0, 1};
  add(&b, lab, sizeof lab);
  add(&b, classes, sizeof classes);
  add(&b, dirs, sizeof dirs);
  add(&b, path_a, strlen(path_a) + 1);
  add(&b, path_b, strlen(path_b) + 1);
  stk__index_seal(b.p, b.n);
  put("index", name, b.p, b.n);
  free(b.p);
}

/* ---- what comes from the network ------------------------------------------ */

/* ListObjectsV2 pages (fuzz_s3_list's input: a control byte, the body). */
static void s3_lists(void) {
  static const char *const k[][2] = {
      {"two",
       "\x00<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<ListBucketResult "
       "xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Name>b</Name><Prefix>train/</Prefix>"
       "<KeyCount>2</KeyCount><MaxKeys>1000</MaxKeys><IsTruncated>false</IsTruncated>"
       "<Contents><Key>train/shard-000000.tar</Key><LastModified>2026-01-01T00:00:00.000Z"
       "</LastModified><ETag>&quot;9b2cf535f27731c974343645a3985328&quot;</ETag>"
       "<Size>1048576</Size><StorageClass>STANDARD</StorageClass></Contents>"
       "<Contents><Key>train/shard-000001.tar</Key><ETag>\"5d41402abc4b2a76b9719d911017c592-3\""
       "</ETag><Size>524288</Size></Contents></ListBucketResult>"},
      {"truncated",
       "\x02<ListBucketResult><IsTruncated>true</IsTruncated><Contents><Key>a &amp; b/c&lt;d&gt;"
       ".tar</Key><Size>0</Size></Contents><NextContinuationToken>1ueGcxLPRx1Tr/XYExHnhbYLgveDs2"
       "J/wm36Hy4vbOwM=</NextContinuationToken></ListBucketResult>"},
      {"odd",
       "\x01<ListBucketResult><Contents><Key></Key></Contents><Contents><Size>12</Size>"
       "<Key>k</Key><Size>-1</Size></Contents><Contents><Key>big</Key><Size>"
       "99999999999999999999</Size><ETag>W/\"x\"</ETag></Contents><Contents><Key>open"
       "</Contents></ListBucketResult>"},
      {"error", "\x00<?xml version=\"1.0\"?><Error><Code>AccessDenied</Code><Message>Access "
                "Denied</Message></Error>"},
  };
  for (size_t i = 0; i < sizeof k / sizeof k[0]; i++)
    put("s3_list", k[i][0], k[i][1], strlen(k[i][1] + 1) + 1);
}

/* Response headers (fuzz_http_header's input: the lines, '\n'-ended). */
static void http_headers(void) {
  static const char *const k[][2] = {
      {"range", "HTTP/1.1 206 Partial Content\r\nContent-Length: 100\r\nContent-Range: bytes "
                "0-99/1234\r\nETag: \"9b2cf535f27731c974343645a3985328\"\r\n\r\n"},
      {"whole", "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\ncontent-length: 4096\r\n"
                "etag: W/\"abc-2\"\r\nx-amz-request-id: 1\r\n\r\n"},
      {"unknown_total", "HTTP/2 206\r\ncontent-range: bytes 0-99/*\r\n\r\n"},
      {"errors", "HTTP/1.1 503 Slow Down\r\nRetry-After: 1\r\n\r\nHTTP/1.0 404\r\n"},
      {"odd", "HTTP/1.1 -200 x\r\nContent-Length: -1\r\nContent-Range: bytes 1-2/-5\r\n"
              "Content-Range: bytes 1-2/18446744073709551615\r\nETag: \"\"\"\r\n"},
  };
  for (size_t i = 0; i < sizeof k / sizeof k[0]; i++)
    put("http_header", k[i][0], k[i][1], strlen(k[i][1]));
}

/* A tar shard's saved scan as `stoker pack --tar` writes it beside the
 * shard (fuzz_shard_index's input: a control byte, classes.txt's count, then
 * the .stkidx), from a shard laid out here. */
static void shard_index(const char *name, int nclasses, bytes *shard) {
  char dir[] = "/tmp/stoker-corpus-XXXXXX", path[256], idx[300], err[512];
  if (!mkdtemp(dir)) die("mkdtemp");
  snprintf(path, sizeof path, "%s/shard.tar", dir);
  snprintf(idx, sizeof idx, "%s%s", path, STK__TAR_INDEX_EXT);
  if (stk__write_file(path, shard->p, shard->n) != STK_OK) die(path);
  if (stk__tar_write_index(path, err, sizeof err) != STK_OK) die(err);
  stk__buf b = {0};
  stk__bytes by;
  if (stk__read_whole_file(idx, &b, 1u << 20, &by, err, sizeof err) != STK_OK) die(err);
  bytes in = {0};
  uint8_t c = (uint8_t)nclasses;
  add(&in, &c, 1);
  add(&in, by.data, by.len);
  put("shard_index", name, in.p, in.n);
  free(in.p);
  stk__buf_free(&b);
  unlink(idx);
  unlink(path);
  rmdir(dir);
  free(shard->p);
  memset(shard, 0, sizeof *shard);
}

static void shard_indexes(const uint8_t *jpg, size_t jl, const uint8_t *png, size_t pl) {
  bytes s = {0};
  member(&s, "k0.jpg", '0', jpg, jl, 0);
  member(&s, "k0.cls", '0', "0", 1, 0);
  member(&s, "k1.png", '0', png, pl, 0);
  member(&s, "k1.cls", '0', "1", 1, 0);
  add_zeros(&s, 1024);
  shard_index("plain", 2, &s);

  member(&s, "a.jpg", '0', jpg, jl, 0);
  member(&s, "a.cls", '0', "5", 1, 0);
  member(&s, "link.jpg", '2', NULL, 0, 0);
  member(&s, "nocls.jpg", '0', jpg, jl, 0);
  member(&s, "onlycls.cls", '0', "1", 1, 0);
  member(&s, "a.jpg", '0', jpg, jl, 0);
  member(&s, "t.jpg", '0', jpg, jl, 0);
  s.n -= jl / 2; /* the shard ends inside the last member: damage */
  shard_index("left_out", 0, &s);
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: make_corpus OUT\n");
    return 2;
  }
  g_out = argv[1];
  if (mkdir(g_out, 0755) != 0 && errno != EEXIST) die(g_out);
  uint8_t *jpg = NULL, *png = NULL;
  size_t jl = 0, pl = 0;
  jpegs(&jpg, &jl);
  pngs(&png, &pl);
  lists();
  tars(jpg, jl, png, pl);
  cache("raw_3", STK_CACHE_RAW, 3, 2, NULL, 0);
  cache("jpeg_2", STK_CACHE_JPEG, 2, 1, jpg, jl);
  folder_index("two", "a/x.jpg", "b/sub/y.png");
  folder_index("forged", "a/../../etc/hostname", "b/y.png");
  s3_lists();
  http_headers();
  shard_indexes(jpg, jl, png, pl);
  free(jpg);
  free(png);
  return 0;
}
