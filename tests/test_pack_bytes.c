/* The bytes stk_pack writes: a raw cache, a JPEG cache and tar shards of one
 * generated folder, each reduced to a digest that must equal the one the
 * writers gave for the same folder before the pack engine was split into
 * producers and a writer table (one code path per output since). A change to the pack
 * engine or its writers that moves a single byte of an output fails here;
 * a deliberate format change updates the digests (STK_PRINT_DIGESTS=1 prints
 * them) together with the format's version.
 *
 * Two things in an output depend on where the test runs, not on the
 * writer: the folder's path (in the cache's names and source description,
 * and so in its list fingerprint and two header hashes) and the files'
 * mtimes (in the cache's stats). The folder's path is padded to a fixed
 * length and each of its occurrences replaced by one letter, the three
 * path-dependent header fields are zeroed, and every file's mtime is set to
 * a fixed instant; everything else is compared as written. */
#include "util.h"

#include <fcntl.h>

#include "check.h"
#include "sources/cache_format.h"

#define ROOT_LEN 160 /* the folder's padded path, whatever the temporary folder */

static const char *g_root;

/* Fixed mtimes: the cache records each source file's. */
static int set_mtime(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb;
  (void)ftw;
  if (flag == FTW_F) {
    struct timespec t[2] = {{1700000000, 123456789}, {1700000000, 123456789}};
    utimensat(AT_FDCWD, p, t, 0);
  }
  return 0;
}

static uint8_t *read_all(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long len = ftell(f);
  fseek(f, 0, SEEK_SET);
  uint8_t *p = malloc(len > 0 ? (size_t)len : 1);
  if (p && fread(p, 1, (size_t)len, f) != (size_t)len) {
    free(p);
    p = NULL;
  }
  fclose(f);
  *n = (size_t)len;
  return p;
}

/* Every occurrence of the folder's path becomes 'R's of the same length. */
static void mask_root(uint8_t *p, size_t n) {
  size_t rl = strlen(g_root);
  for (size_t i = 0; i + rl <= n; i++)
    if (p[i] == (uint8_t)g_root[0] && memcmp(p + i, g_root, rl) == 0) memset(p + i, 'R', rl);
}

static uint64_t cache_digest(const char *path) {
  size_t n = 0;
  uint8_t *p = read_all(path, &n);
  CHECK_MSG(p && n > sizeof(stk__cache_header), "cannot read %s", path);
  if (!p || n <= sizeof(stk__cache_header)) return 0;
  mask_root(p, n);
  stk__cache_header *h = (stk__cache_header *)p;
  h->list_fp = 0;
  h->meta_hash = 0;
  h->header_hash = 0;
  uint64_t d = stk__hash64(p, n, 0);
  free(p);
  return d;
}

static int by_name(const struct dirent **a, const struct dirent **b) {
  return strcmp((*a)->d_name, (*b)->d_name);
}

/* The shards folder: each file's name and bytes, in name order. */
static uint64_t tar_digest(const char *dir, int *files) {
  struct dirent **list = NULL;
  int m = scandir(dir, &list, NULL, by_name);
  uint64_t d = 0;
  *files = 0;
  for (int k = 0; k < m; k++) {
    if (list[k]->d_name[0] != '.') {
      char p[4600];
      snprintf(p, sizeof p, "%s/%s", dir, list[k]->d_name);
      size_t n = 0;
      uint8_t *b = read_all(p, &n);
      CHECK_MSG(b != NULL, "cannot read %s", p);
      if (b) {
        mask_root(b, n);
        d = stk__hash64(list[k]->d_name, strlen(list[k]->d_name), d);
        d = stk__hash64(b, n, d);
        (*files)++;
      }
      free(b);
    }
    free(list[k]);
  }
  free(list);
  return d;
}

static void pack(stk_pack_options *p, const char *out, int format, int encoding, int threads) {
  stk_pack_options_init(p);
  p->root = g_root;
  p->output = out;
  p->format = format;
  p->encoding = encoding;
  p->threads = threads;
  p->max_side = 40;
  p->quality = 85;
  p->shard_bytes = 24 * 1024;
}

static void check_digest(const char *what, uint64_t got, uint64_t want) {
  if (getenv("STK_PRINT_DIGESTS")) printf("%s 0x%016llxULL\n", what, (unsigned long long)got);
  CHECK_MSG(got == want, "%s: digest 0x%016llx, expected 0x%016llx", what,
            (unsigned long long)got, (unsigned long long)want);
}

int main(void) {
  char *tmp = tu_tempdir();
  char root[ROOT_LEN + 1];
  size_t tl = strlen(tmp);
  if (tl + 2 >= ROOT_LEN) {
    fprintf(stderr, "temporary folder path too long\n");
    return 1;
  }
  /* TMP/ppp...p: the same length wherever TMP is */
  snprintf(root, sizeof root, "%s/", tmp);
  memset(root + tl + 1, 'p', ROOT_LEN - tl - 1);
  root[ROOT_LEN] = '\0';
  g_root = root;
  tu_mkdir(root);
  CHECK_EQ_INT(tu_make_folder(root, 3, 7, 61, 47), STK_OK);
  char p[4096];
  /* a PNG among the JPEGs, and a file that is no image (left out, counted) */
  snprintf(p, sizeof p, "%s/class001/zz.png", root);
  uint8_t px[20 * 13 * 3];
  for (size_t i = 0; i < sizeof px; i++) px[i] = (uint8_t)(i * 37 + i / 7);
  uint8_t *png = NULL;
  size_t pnglen = 0;
  CHECK_EQ_INT(stk__png_encode(px, 20, 13, STK__PNG_RGB, 8, NULL, 0, &png, &pnglen), 0);
  CHECK_EQ_INT(tu_write_bytes(p, png, pnglen), STK_OK);
  free(png);
  snprintf(p, sizeof p, "%s/class002/broken.jpg", root);
  CHECK_EQ_INT(tu_write_bytes(p, "\xff\xd8\xff\xe0not a jpeg", 14), STK_OK);
  nftw(root, set_mtime, 16, FTW_PHYS);

  struct {
    const char *name;
    int format, encoding, threads;
    uint64_t want;
  } runs[] = {
      {"raw cache", STK_PACK_CACHE, STK_CACHE_RAW, 3, 0x6f2bf256a717ab53ULL},
      {"jpeg cache", STK_PACK_CACHE, STK_CACHE_JPEG, 2, 0xc5d7630c5864ab57ULL},
      /* (the shards' bytes as before; the index beside each, STKTIDX3 since
       * it records the shard's ETags, is part of the digest) */
      {"tar shards", STK_PACK_TAR, STK_CACHE_RAW, 2, 0xba935ff748beb94fULL},
  };
  for (size_t k = 0; k < sizeof runs / sizeof runs[0]; k++) {
    char out[4200], err[1024] = "";
    snprintf(out, sizeof out, "%s/out-%zu%s", tmp, k, runs[k].format == STK_PACK_TAR ? "" : ".stkc");
    stk_pack_options o;
    pack(&o, out, runs[k].format, runs[k].encoding, runs[k].threads);
    stk_pack_result r;
    int rc = stk_pack(&o, STK_VERSION, &r, err, sizeof err);
    CHECK_MSG(rc == STK_OK, "%s: %s", runs[k].name, err);
    CHECK_EQ_INT(r.packed, 22);
    CHECK_EQ_INT(r.failed, 1);
    if (runs[k].format == STK_PACK_TAR) {
      int files = 0;
      uint64_t d = tar_digest(out, &files);
      CHECK_MSG(files >= 5, "%s: %d files", runs[k].name, files); /* shards, indexes, classes */
      check_digest(runs[k].name, d, runs[k].want);
    } else {
      check_digest(runs[k].name, cache_digest(out), runs[k].want);
    }
  }
  tu_rmtree(tmp);
  free(tmp);
  return CHECK_DONE();
}
