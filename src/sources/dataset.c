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
  for (int i = 0; i < ds->nclasses; i++) free(ds->classes[i]);
  free(ds->classes);
  memset(ds, 0, sizeof *ds);
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
