/* folder.c: the ImageFolder source: a scan of root/<class>/<image>. See dataset.h. */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/common.h"
#include "sources/source.h"

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


/* Lists the entries of `dir`: sub-folders (following links, as os.walk with
 * followlinks=True does) into dirs, the rest into files. */
static int list_dir(const char *dir, strlist *dirs, strlist *files, char *msg, size_t msglen) {
  DIR *d = opendir(dir);
  if (!d) return stk__fail(msg, msglen, STK_EIO, "cannot open folder %s: %s", dir, strerror(errno));
  int rc = STK_OK;
  struct dirent *e;
  while (rc == STK_OK && (e = readdir(d))) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    char *full = stk__path_join(dir, e->d_name);
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
    char *p = stk__path_join(top, subs.v[i]);
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
    char *cdir = stk__path_join(root, classes.v[c]);
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
        char *p = stk__path_join(dirs.v[d], files.v[f]);
        if (!p) {
          rc = STK_ENOMEM;
          break;
        }
        rc = stk__dataset_add(ds, p, (int32_t)c);
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


int stk__folder_open(stk__source *s, const stk_options *opt, char *msg, size_t msglen) {
  s->ops = &stk__folder_ops;
  return stk__dataset_from_folder(&s->ds, opt->root, msg, msglen);
}
