/* dataset.c: the sample table every source fills. See dataset.h. */
#define _POSIX_C_SOURCE 200809L
#include "sources/dataset.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "core/common.h"

/* torchvision's IMG_EXTENSIONS. The content decides how a file is decoded;
 * the extension only decides whether a file counts as a sample. */
static const char *const k_exts[] = {".jpg", ".jpeg", ".png", ".ppm", ".bmp",
                                     ".pgm", ".tif",  ".tiff", ".webp"};

int stk__has_image_extension(const char *name) {
  size_t n = strlen(name);
  for (size_t i = 0; i < sizeof k_exts / sizeof k_exts[0]; i++) {
    size_t e = strlen(k_exts[i]);
    if (n > e && strcasecmp(name + n - e, k_exts[i]) == 0) return 1;
  }
  return 0;
}

int stk__dataset_add(stk__dataset *ds, const char *path, int32_t label) {
  size_t len = strlen(path) + 1;
  if (ds->arena_len + len > ds->arena_cap) {
    size_t cap = ds->arena_cap ? ds->arena_cap * 2 : 1 << 16;
    while (cap < ds->arena_len + len) cap *= 2;
    char *a = realloc(ds->arena, cap);
    if (!a) return STK_ENOMEM;
    ds->arena = a;
    ds->arena_cap = cap;
  }
  if (ds->n == ds->cap) {
    int64_t cap = ds->cap ? ds->cap * 2 : 1024;
    size_t *o = realloc(ds->path_off, (size_t)cap * sizeof *o);
    if (!o) return STK_ENOMEM;
    ds->path_off = o;
    int32_t *l = realloc(ds->labels, (size_t)cap * sizeof *l);
    if (!l) return STK_ENOMEM;
    ds->labels = l;
    ds->cap = cap;
  }
  memcpy(ds->arena + ds->arena_len, path, len);
  ds->path_off[ds->n] = ds->arena_len;
  ds->labels[ds->n] = label;
  ds->arena_len += len;
  ds->n++;
  return STK_OK;
}

void stk__dataset_free(stk__dataset *ds) {
  free(ds->arena);
  free(ds->path_off);
  free(ds->labels);
  if (ds->class_block)
    free(ds->class_block);
  else if (ds->classes)
    for (int i = 0; i < ds->nclasses; i++) free(ds->classes[i]);
  free(ds->classes);
  memset(ds, 0, sizeof *ds);
}

int stk__dataset_number_classes(stk__dataset *ds, int n) {
  /* the names' bytes: the numbers of lo..hi-1 have d digits and a NUL */
  size_t len = 0;
  for (int64_t lo = 0, hi = 10, d = 1; lo < n; lo = hi, hi *= 10, d++)
    len += (size_t)((n < hi ? n : hi) - lo) * (size_t)(d + 1);
  char **names = calloc((size_t)(n > 0 ? n : 1), sizeof(char *));
  char *block = malloc(len + 1);
  if (!names || !block) {
    free(names);
    free(block);
    return STK_ENOMEM;
  }
  /* Counts in a decimal string rather than formatting each number: a list
   * with a label near the limit names a million classes. */
  char num[16] = "0";
  size_t d = 1;
  char *o = block;
  for (int i = 0; i < n; i++) {
    names[i] = o;
    memcpy(o, num, d + 1);
    o += d + 1;
    size_t k = d;
    while (k > 0 && num[k - 1] == '9') num[--k] = '0';
    if (k > 0) {
      num[k - 1]++;
    } else { /* 9...9 + 1 */
      memmove(num + 1, num, d + 1);
      num[0] = '1';
      d++;
    }
  }
  ds->classes = names;
  ds->class_block = block;
  ds->nclasses = n;
  return STK_OK;
}


char *stk__path_join(const char *a, const char *b) {
  size_t la = strlen(a), lb = strlen(b);
  char *s = malloc(la + lb + 2);
  if (!s) return NULL;
  memcpy(s, a, la);
  size_t k = la;
  if (la && a[la - 1] != '/') s[k++] = '/';
  memcpy(s + k, b, lb + 1);
  return s;
}

uint64_t stk__dataset_list_fp(const stk__dataset *ds) {
  uint64_t h = stk__hash64(&ds->n, sizeof ds->n, 1);
  for (int64_t i = 0; i < ds->n; i++) {
    const char *name = stk__dataset_path(ds, i);
    h = stk__hash64(name, strlen(name), h);
    h = stk__hash64(&ds->labels[i], sizeof ds->labels[i], h);
  }
  return h;
}
