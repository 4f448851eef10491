/* The synthetic dataset generator: determinism, layout, file format and size. */
#define _XOPEN_SOURCE 700 /* nftw, which util.h uses */
#include "util.h"

#include <dirent.h>

#include "check.h"

/* Reads a whole file into a malloc'd buffer; NULL if it cannot. */
static uint8_t *read_all(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  uint8_t *buf = NULL;
  if (fseek(f, 0, SEEK_END) == 0) {
    long len = ftell(f);
    if (len >= 0 && fseek(f, 0, SEEK_SET) == 0 && (buf = malloc((size_t)len + 1))) {
      *n = fread(buf, 1, (size_t)len, f);
      if (*n != (size_t)len) {
        free(buf);
        buf = NULL;
      }
    }
  }
  fclose(f);
  return buf;
}

/* Width and height from a JPEG's SOF marker; 0 when there is none. */
static int jpeg_size(const uint8_t *b, size_t n, int *w, int *h) {
  size_t i = 2;
  while (i + 9 < n && b[i] == 0xFF) {
    int m = b[i + 1];
    size_t len = (size_t)b[i + 2] << 8 | b[i + 3];
    if (m == 0xC0 || m == 0xC1 || m == 0xC2) {
      *h = b[i + 5] << 8 | b[i + 6];
      *w = b[i + 7] << 8 | b[i + 8];
      return 1;
    }
    i += 2 + len;
  }
  return 0;
}

static int count_entries(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return -1;
  int n = 0;
  for (struct dirent *e; (e = readdir(d));)
    if (e->d_name[0] != '.') n++;
  closedir(d);
  return n;
}

static void test_render(void) {
  enum { W = 160, H = 120 };
  static uint8_t a[W * H * 3], b[W * H * 3];
  stk__synth_render(a, W, H, 7);
  stk__synth_render(b, W, H, 7);
  CHECK_MSG(memcmp(a, b, sizeof a) == 0, "the same seed rendered two different images");
  stk__synth_render(b, W, H, 8);
  CHECK_MSG(memcmp(a, b, sizeof a) != 0, "seeds 7 and 8 rendered the same image");

  /* Photo-like: neither flat nor saturated, with plenty of distinct values. */
  static uint8_t seen[256];
  double sum = 0, sum2 = 0;
  for (size_t i = 0; i < sizeof a; i++) {
    sum += a[i];
    sum2 += (double)a[i] * a[i];
    seen[a[i]] = 1;
  }
  double n = (double)sizeof a, mean = sum / n, var = sum2 / n - mean * mean;
  int levels = 0;
  for (int i = 0; i < 256; i++) levels += seen[i];
  CHECK_MSG(mean > 20 && mean < 235, "mean %.1f", mean);
  CHECK_MSG(var > 100, "variance %.1f: the image is nearly flat", var);
  CHECK_MSG(levels > 64, "only %d distinct values", levels);

  /* Odd sizes render too (ASan checks the bounds). */
  uint8_t tiny[3 * 5 * 3];
  stk__synth_render(tiny, 3, 5, 1);
  stk__synth_render(tiny, 1, 1, 2);
}

typedef struct {
  int64_t calls, last_done, last_total;
  int ordered;
} progress;

static void on_progress(void *ctx, int64_t done, int64_t total) {
  progress *p = ctx;
  if (done != p->last_done + 1) p->ordered = 0;
  p->calls++;
  p->last_done = done;
  p->last_total = total;
}

enum { IMAGES = 20, CLASSES = 6 };

/* Generates the reference dataset into a fresh temporary folder. */
static char *make_dataset(uint64_t seed, progress *p) {
  char *dir = tu_tempdir();
  CHECK(dir != NULL);
  if (!dir) return NULL;
  char msg[256] = "";
  int rc = stk__synth_dataset(dir, IMAGES, CLASSES, seed, p ? on_progress : NULL, p, msg,
                              sizeof msg);
  CHECK_MSG(rc == STK_OK, "synth into %s: %s (%s)", dir, stk_strerror(rc), msg);
  return dir;
}

static void test_dataset(void) {
  progress prog = {.ordered = 1};
  char *a = make_dataset(123, &prog);
  char *b = make_dataset(123, NULL);
  char *c = make_dataset(124, NULL);
  if (!a || !b || !c) goto done;

  CHECK_EQ_INT(prog.calls, IMAGES);
  CHECK_EQ_INT(prog.last_done, IMAGES);
  CHECK_EQ_INT(prog.last_total, IMAGES);
  CHECK(prog.ordered);

  CHECK_EQ_INT(count_entries(a), CLASSES);
  char p[4096];
  int total = 0, differ = 0, dims_ok = 0;
  size_t bytes = 0;
  for (int k = 0; k < CLASSES; k++) {
    snprintf(p, sizeof p, "%s/n%04d", a, k);
    int files = count_entries(p);
    /* Round-robin: 20 images over 6 classes are 4, 4, 3, 3, 3, 3. */
    CHECK_EQ_INT(files, IMAGES / CLASSES + (k < IMAGES % CLASSES));
    total += files;
  }
  CHECK_EQ_INT(total, IMAGES);

  for (int i = 0; i < IMAGES; i++) {
    char name[64];
    snprintf(name, sizeof name, "n%04d/img_%08d.JPEG", i % CLASSES, i);
    size_t na = 0, nb = 0, nc = 0;
    snprintf(p, sizeof p, "%s/%s", a, name);
    uint8_t *fa = read_all(p, &na);
    snprintf(p, sizeof p, "%s/%s", b, name);
    uint8_t *fb = read_all(p, &nb);
    snprintf(p, sizeof p, "%s/%s", c, name);
    uint8_t *fc = read_all(p, &nc);
    CHECK_MSG(fa && fb && fc, "%s is missing", name);
    if (fa && fb && fc) {
      CHECK_MSG(na == nb && memcmp(fa, fb, na) == 0, "%s differs between two runs", name);
      CHECK_MSG(na > 3 && fa[0] == 0xFF && fa[1] == 0xD8 && fa[2] == 0xFF, "%s is no JPEG", name);
      differ += na != nc || memcmp(fa, fc, na) != 0;
      int w = 0, h = 0;
      /* ImageNet-like: the long side is 500, the short one at least 280. */
      if (jpeg_size(fa, na, &w, &h) && (w == 500 || h == 500) && w >= 280 && h >= 280) dims_ok++;
      else fprintf(stderr, "%s: unexpected size %dx%d\n", name, w, h);
      bytes += na;
    }
    free(fa);
    free(fb);
    free(fc);
  }
  CHECK_EQ_INT(differ, IMAGES);
  CHECK_EQ_INT(dims_ok, IMAGES);
  double mean_kb = (double)bytes / IMAGES / 1000.0;
  CHECK_MSG(mean_kb > 60 && mean_kb < 200, "mean file size %.1f KB", mean_kb);

done:;
  char *dirs[] = {a, b, c};
  for (int k = 0; k < 3; k++) {
    if (dirs[k]) tu_rmtree(dirs[k]);
    free(dirs[k]);
  }
}

static void test_parents_and_errors(void) {
  char *root = tu_tempdir();
  CHECK(root != NULL);
  if (!root) return;
  char dir[1024], p[4096], msg[256] = "";
  snprintf(dir, sizeof dir, "%s/x/y/z", root);
  int rc = stk__synth_dataset(dir, 2, 1, 0, NULL, NULL, msg, sizeof msg);
  CHECK_MSG(rc == STK_OK, "nested folder: %s", msg);
  snprintf(p, sizeof p, "%s/n0000", dir);
  CHECK_EQ_INT(count_entries(p), 2);

  msg[0] = '\0';
  CHECK_EQ_INT(stk__synth_dataset(dir, 3, 0, 0, NULL, NULL, msg, sizeof msg), STK_EINVAL);
  CHECK(msg[0] != '\0');
  CHECK_EQ_INT(stk__synth_dataset(dir, 2, 3, 0, NULL, NULL, msg, sizeof msg), STK_EINVAL);
  CHECK_EQ_INT(stk__synth_dataset("", 2, 1, 0, NULL, NULL, msg, sizeof msg), STK_EINVAL);

  /* A file where a folder should go. */
  snprintf(p, sizeof p, "%s/file", root);
  CHECK_EQ_INT(tu_write_bytes(p, "x", 1), STK_OK);
  msg[0] = '\0';
  CHECK_EQ_INT(stk__synth_dataset(p, 1, 1, 0, NULL, NULL, msg, sizeof msg), STK_EIO);
  CHECK(strstr(msg, "file") != NULL);

  tu_rmtree(root);
  free(root);
}

int main(void) {
  test_render();
  test_dataset();
  test_parents_and_errors();
  return CHECK_DONE();
}
