/* dataset.c: the folder and list-file sources. See dataset.h. */
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

static int ds_add(stk__dataset *ds, const char *path, int32_t label) {
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

/* A growable list of strings, for directory listings. */
typedef struct {
  char **v;
  size_t n, cap;
} strlist;

static int strlist_push(strlist *l, const char *s) {
  if (l->n == l->cap) {
    size_t cap = l->cap ? l->cap * 2 : 64;
    char **v = realloc(l->v, cap * sizeof *v);
    if (!v) return STK_ENOMEM;
    l->v = v;
    l->cap = cap;
  }
  if (!(l->v[l->n] = strdup(s))) return STK_ENOMEM;
  l->n++;
  return STK_OK;
}

static void strlist_free(strlist *l) {
  for (size_t i = 0; i < l->n; i++) free(l->v[i]);
  free(l->v);
  memset(l, 0, sizeof *l);
}

/* Python sorts str by code point; strcmp on UTF-8 bytes gives that order. */
static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static char *join(const char *a, const char *b) {
  size_t la = strlen(a), lb = strlen(b);
  char *s = malloc(la + lb + 2);
  if (!s) return NULL;
  memcpy(s, a, la);
  size_t k = la;
  if (la && a[la - 1] != '/') s[k++] = '/';
  memcpy(s + k, b, lb + 1);
  return s;
}

/* Lists the entries of `dir`: sub-folders (following links, as os.walk with
 * followlinks=True does) into dirs, the rest into files. */
static int list_dir(const char *dir, strlist *dirs, strlist *files, char *msg, size_t msglen) {
  DIR *d = opendir(dir);
  if (!d) return stk__fail(msg, msglen, STK_EIO, "cannot open folder %s: %s", dir, strerror(errno));
  int rc = STK_OK;
  struct dirent *e;
  while (rc == STK_OK && (e = readdir(d))) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    char *full = join(dir, e->d_name);
    if (!full) {
      rc = STK_ENOMEM;
      break;
    }
    struct stat st;
    int is_dir = stat(full, &st) == 0 && S_ISDIR(st.st_mode);
    free(full);
    if (is_dir && dirs)
      rc = strlist_push(dirs, e->d_name);
    else if (!is_dir && files)
      rc = strlist_push(files, e->d_name);
  }
  closedir(d);
  return rc;
}

/* All folders below `top` (itself included), as full paths, unsorted.
 * Depth is bounded so that a link cycle cannot recurse forever. */
static int walk_dirs(const char *top, strlist *out, int depth, char *msg, size_t msglen) {
  if (depth > 64)
    return stk__fail(msg, msglen, STK_EIO, "folder nesting deeper than 64 (a link cycle?) at %s",
                     top);
  int rc = strlist_push(out, top);
  if (rc) return rc;
  strlist subs = {0};
  rc = list_dir(top, &subs, NULL, msg, msglen);
  for (size_t i = 0; rc == STK_OK && i < subs.n; i++) {
    char *p = join(top, subs.v[i]);
    if (!p) {
      rc = STK_ENOMEM;
      break;
    }
    rc = walk_dirs(p, out, depth + 1, msg, msglen);
    free(p);
  }
  strlist_free(&subs);
  return rc;
}

int stk__dataset_from_folder(stk__dataset *ds, const char *root, char *msg, size_t msglen) {
  memset(ds, 0, sizeof *ds);
  strlist classes = {0}, empty = {0};
  int rc = list_dir(root, &classes, NULL, msg, msglen);
  if (rc) goto done;
  if (classes.n == 0) {
    rc = stk__fail(msg, msglen, STK_EEMPTY, "no class folders found in %s", root);
    goto done;
  }
  qsort(classes.v, classes.n, sizeof(char *), cmp_str);
  for (size_t c = 0; rc == STK_OK && c < classes.n; c++) {
    char *cdir = join(root, classes.v[c]);
    if (!cdir) {
      rc = STK_ENOMEM;
      break;
    }
    strlist dirs = {0};
    rc = walk_dirs(cdir, &dirs, 0, msg, msglen);
    free(cdir);
    if (rc == STK_OK) qsort(dirs.v, dirs.n, sizeof(char *), cmp_str);
    int64_t before = ds->n;
    for (size_t d = 0; rc == STK_OK && d < dirs.n; d++) {
      strlist files = {0};
      rc = list_dir(dirs.v[d], NULL, &files, msg, msglen);
      if (rc == STK_OK && files.n) qsort(files.v, files.n, sizeof(char *), cmp_str);
      for (size_t f = 0; rc == STK_OK && f < files.n; f++) {
        if (!stk__has_image_extension(files.v[f])) continue;
        char *p = join(dirs.v[d], files.v[f]);
        if (!p) {
          rc = STK_ENOMEM;
          break;
        }
        rc = ds_add(ds, p, (int32_t)c);
        free(p);
      }
      strlist_free(&files);
    }
    strlist_free(&dirs);
    if (rc == STK_OK && ds->n == before) rc = strlist_push(&empty, classes.v[c]);
  }
  if (rc) goto done;
  if (empty.n) {
    /* torchvision refuses a class with no valid file; so do we, naming them. */
    char names[512] = "";
    for (size_t i = 0; i < empty.n; i++) {
      size_t l = strlen(names);
      snprintf(names + l, sizeof names - l, "%s%s", i ? ", " : "", empty.v[i]);
    }
    rc = stk__fail(msg, msglen, STK_EEMPTY, "found no valid image file for the classes %s in %s",
                   names, root);
    goto done;
  }
  ds->nclasses = (int)classes.n;
  ds->classes = classes.v; /* ownership moves to the dataset */
  memset(&classes, 0, sizeof classes);
done:
  strlist_free(&classes);
  strlist_free(&empty);
  if (rc) stk__dataset_free(ds);
  return rc;
}

int stk__dataset_from_list(stk__dataset *ds, const char *list, const char *base, char *msg,
                           size_t msglen) {
  memset(ds, 0, sizeof *ds);
  FILE *f = fopen(list, "r");
  if (!f) return stk__fail(msg, msglen, STK_EIO, "cannot open list file %s: %s", list, strerror(errno));
  char *dirbuf = NULL;
  if (!base) {
    dirbuf = strdup(list);
    if (!dirbuf) {
      fclose(f);
      return STK_ENOMEM;
    }
    char *slash = strrchr(dirbuf, '/');
    if (slash)
      slash[slash == dirbuf ? 1 : 0] = '\0';
    else
      strcpy(dirbuf, ".");
    base = dirbuf;
  }
  char *line = NULL;
  size_t cap = 0;
  ssize_t len;
  int64_t lineno = 0;
  int rc = STK_OK;
  int32_t maxlabel = -1;
  while (rc == STK_OK && (len = getline(&line, &cap, f)) >= 0) {
    lineno++;
    while (len > 0 && isspace((unsigned char)line[len - 1])) line[--len] = '\0';
    char *s = line;
    while (isspace((unsigned char)*s)) s++;
    if (*s == '\0' || *s == '#') continue;
    char *sp = s + strlen(s);
    while (sp > s && !isspace((unsigned char)sp[-1])) sp--;
    char *end = NULL;
    errno = 0;
    long lab = sp > s ? strtol(sp, &end, 10) : -1;
    if (sp == s || errno || !end || *end || lab < 0 || lab > INT32_MAX) {
      rc = stk__fail(msg, msglen, STK_EINVAL,
                     "%s:%lld: expected \"path label\" with a non-negative integer label",
                     list, (long long)lineno);
      break;
    }
    char *pe = sp;
    while (pe > s && isspace((unsigned char)pe[-1])) pe--;
    *pe = '\0';
    char *path = s[0] == '/' ? strdup(s) : join(base, s);
    if (!path) {
      rc = STK_ENOMEM;
      break;
    }
    rc = ds_add(ds, path, (int32_t)lab);
    free(path);
    if (lab > maxlabel) maxlabel = (int32_t)lab;
  }
  free(line);
  free(dirbuf);
  fclose(f);
  if (rc == STK_OK && ds->n == 0)
    rc = stk__fail(msg, msglen, STK_EEMPTY, "list file %s names no samples", list);
  if (rc == STK_OK) {
    /* A list has no class names: classes are the label numbers. */
    ds->nclasses = maxlabel + 1;
    ds->classes = calloc((size_t)ds->nclasses, sizeof(char *));
    if (!ds->classes) rc = STK_ENOMEM;
    for (int i = 0; rc == STK_OK && i < ds->nclasses; i++) {
      char num[16];
      snprintf(num, sizeof num, "%d", i);
      if (!(ds->classes[i] = strdup(num))) rc = STK_ENOMEM;
    }
  }
  if (rc) stk__dataset_free(ds);
  return rc;
}
