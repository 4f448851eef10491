/*
 * folder.c: the ImageFolder source: a scan of root/<class>/<image>, and the
 * index that lets a later open skip it (index.c). See dataset.h and index.h.
 *
 * The scan reads every folder once, taking each entry's type from readdir
 * (d_type), as os.scandir does; only links and entries of unknown type are
 * stat'ed, because a link to a folder must be followed. Class folders are
 * scanned by a few threads at once: the work is system calls, which on
 * network storage wait on round trips, so threads overlap them even beyond
 * the core count. Each class's result is sorted on its own and the classes
 * are put together in class order, so the table does not depend on the
 * thread count or on timing.
 */
#define _POSIX_C_SOURCE 200809L
#define _DEFAULT_SOURCE /* d_type and DT_* of struct dirent */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/common.h"
#include "core/workers.h"
#include "sources/index.h"
#include "sources/source.h"
#include "sources/store.h"

/* Beyond this many nested folders below a class, a link cycle is assumed. */
#define MAX_DEPTH 64
/* Auto mode writes an index for trees of at least this many files. */
#define AUTO_INDEX_FILES 10000
#define MAX_SCAN_THREADS 16

/* A growable list of strings, for the class names of the root. */
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

/* Grows *p (n elements of `size` bytes, capacity *cap) to hold one more. */
static int grow(void **p, size_t *cap, size_t n, size_t size, size_t first) {
  if (n < *cap) return STK_OK;
  size_t c = *cap ? *cap * 2 : first;
  void *q = realloc(*p, c * size);
  if (!q) return STK_ENOMEM;
  *p = q;
  *cap = c;
  return STK_OK;
}

/* Whether the entry e of the open folder d is a folder, following links as
 * os.walk(followlinks=True) and os.scandir's is_dir() do. Only links and
 * unknown types cost a stat; a dangling link is a file, as in Python. */
static int entry_is_dir(DIR *d, const struct dirent *e) {
#ifdef DT_DIR
  if (e->d_type == DT_DIR) return 1;
  if (e->d_type != DT_LNK && e->d_type != DT_UNKNOWN) return 0;
#endif
  struct stat st;
  return fstatat(dirfd(d), e->d_name, &st, 0) == 0 && S_ISDIR(st.st_mode);
}

static int is_dot(const char *n) { return n[0] == '.' && (!n[1] || (n[1] == '.' && !n[2])); }

/* ---- one class --------------------------------------------------------- */

/* A folder below a class: its path relative to the root, its image files
 * (a contiguous run of class_scan.f) and what the signature records. */
typedef struct {
  size_t path;         /* offset into class_scan.a while scanning */
  const char *p;       /* the same, as a pointer, once the arena is final */
  size_t first, n;     /* image files: f[first .. first + n) */
  int64_t sec, nsec;
  uint64_t ino;
} dent;

/* Everything one class's scan produces. Names live in one arena and are
 * referred to by offset while it grows, then by pointer for sorting. */
typedef struct {
  char *a;
  size_t len, cap;
  dent *d;
  size_t nd, dcap;
  size_t *f;           /* offsets of image file names */
  size_t nf, fcap;
  const char **fp;     /* the same as pointers, sorted per folder */
  int64_t files;       /* entries that are not folders, images or not */
  int rc;
  char msg[768];
} class_scan;

static void class_scan_free(class_scan *cs) {
  free(cs->a);
  free(cs->d);
  free(cs->f);
  free(cs->fp);
  memset(cs, 0, sizeof *cs);
}

/* Copies n bytes of s and a NUL into the arena; the offset goes to *off. */
static int arena_put(class_scan *cs, const char *s, size_t n, size_t *off) {
  if (cs->len + n + 1 > cs->cap) {
    size_t cap = cs->cap ? cs->cap : 4096;
    while (cap < cs->len + n + 1) cap *= 2;
    char *a = realloc(cs->a, cap);
    if (!a) return STK_ENOMEM;
    cs->a = a;
    cs->cap = cap;
  }
  memcpy(cs->a + cs->len, s, n);
  cs->a[cs->len + n] = 0;
  *off = cs->len;
  cs->len += n + 1;
  return STK_OK;
}

/* A growable path buffer: the full path of the folder being read. */
typedef struct {
  char *p;
  size_t len, cap;
} pathbuf;

static int pathbuf_set(pathbuf *b, size_t len, const char *add, size_t n) {
  if (len + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 256;
    while (cap < len + n + 1) cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) return STK_ENOMEM;
    b->p = p;
    b->cap = cap;
  }
  memcpy(b->p + len, add, n);
  b->len = len + n;
  b->p[b->len] = 0;
  return STK_OK;
}

/* Reads the folder whose full path is in pb (relative path: pb->p + rel0)
 * and then, one by one, its sub-folders. Only one folder is open at a time
 * per thread (sub-folders are opened by path after it is closed), so deep
 * trees cannot run a process out of descriptors. */
static int walk(class_scan *cs, pathbuf *pb, size_t rel0, int depth) {
  if (depth > MAX_DEPTH)
    return stk__fail(cs->msg, sizeof cs->msg, STK_EIO,
                     "folder nesting deeper than %d (a link cycle?) at %s", MAX_DEPTH, pb->p);
  if (grow((void **)&cs->d, &cs->dcap, cs->nd, sizeof *cs->d, 16)) return STK_ENOMEM;
  size_t di = cs->nd;
  dent *de = &cs->d[di];
  memset(de, 0, sizeof *de);
  if (arena_put(cs, pb->p + rel0, pb->len - rel0, &de->path)) return STK_ENOMEM;
  cs->nd++;
  DIR *d = opendir(pb->p);
  if (!d)
    return stk__fail(cs->msg, sizeof cs->msg, STK_EIO, "cannot open folder %s: %s", pb->p,
                     strerror(errno));
  struct stat st;
  if (fstat(dirfd(d), &st) == 0) {
    cs->d[di].sec = (int64_t)st.st_mtim.tv_sec;
    cs->d[di].nsec = (int64_t)st.st_mtim.tv_nsec;
    cs->d[di].ino = (uint64_t)st.st_ino;
  }
  cs->d[di].first = cs->nf;
  /* sub-folder names go to the arena too; their offsets wait here */
  size_t *subs = NULL, nsub = 0, subcap = 0;
  int rc = STK_OK;
  struct dirent *e;
  /* errno tells the end of a folder from a failed read; a stat in the loop
   * may set it, so it is cleared before each call */
  while (rc == STK_OK && (errno = 0, e = readdir(d))) {
    if (is_dot(e->d_name)) continue;
    size_t off;
    if (entry_is_dir(d, e)) {
      if (!(rc = grow((void **)&subs, &subcap, nsub, sizeof *subs, 8)) &&
          !(rc = arena_put(cs, e->d_name, strlen(e->d_name), &off)))
        subs[nsub++] = off;
      continue;
    }
    cs->files++;
    if (!stk__has_image_extension(e->d_name)) continue;
    if (!(rc = grow((void **)&cs->f, &cs->fcap, cs->nf, sizeof *cs->f, 256)) &&
        !(rc = arena_put(cs, e->d_name, strlen(e->d_name), &off)))
      cs->f[cs->nf++] = off;
  }
  if (rc == STK_OK && errno != 0)
    rc = stk__fail(cs->msg, sizeof cs->msg, STK_EIO, "cannot read folder %s: %s", pb->p,
                   strerror(errno));
  closedir(d);
  if (rc == STK_ENOMEM) stk__fail(cs->msg, sizeof cs->msg, rc, "out of memory scanning %s", pb->p);
  cs->d[di].n = cs->nf - cs->d[di].first;
  size_t len = pb->len;
  for (size_t i = 0; rc == STK_OK && i < nsub; i++) {
    /* by offset: the walks below grow (and move) the arena */
    const char *name = cs->a + subs[i];
    if ((rc = pathbuf_set(pb, len, "/", 1)) || (rc = pathbuf_set(pb, len + 1, name, strlen(name)))) {
      stk__fail(cs->msg, sizeof cs->msg, rc, "out of memory scanning %s", pb->p);
      break;
    }
    rc = walk(cs, pb, rel0, depth + 1);
  }
  pb->len = len;
  if (pb->p) pb->p[len] = 0;
  free(subs);
  return rc;
}

static int cmp_dent(const void *a, const void *b) {
  return strcmp(((const dent *)a)->p, ((const dent *)b)->p);
}

/* Scans class folder root/<name>: Python's sorted(os.walk(...)) sorts the
 * (dirpath, dirnames, filenames) tuples, i.e. folders by full path string
 * (not depth-first: "a/b-c" comes before "a/b/x"), then files by name. */
static void scan_class(class_scan *cs, const char *prefix, size_t plen, const char *name) {
  pathbuf pb = {0};
  if (pathbuf_set(&pb, 0, prefix, plen) || pathbuf_set(&pb, plen, name, strlen(name))) {
    cs->rc = stk__fail(cs->msg, sizeof cs->msg, STK_ENOMEM, "out of memory");
    free(pb.p);
    return;
  }
  cs->rc = walk(cs, &pb, plen, 0);
  free(pb.p);
  if (cs->rc) return;
  /* the arena is final: offsets become pointers, and sorting can start */
  for (size_t i = 0; i < cs->nd; i++) cs->d[i].p = cs->a + cs->d[i].path;
  if (cs->nf && !(cs->fp = malloc(cs->nf * sizeof *cs->fp))) {
    cs->rc = stk__fail(cs->msg, sizeof cs->msg, STK_ENOMEM, "out of memory");
    return;
  }
  for (size_t i = 0; i < cs->nf; i++) cs->fp[i] = cs->a + cs->f[i];
  free(cs->f);
  cs->f = NULL;
  for (size_t i = 0; i < cs->nd; i++)
    if (cs->d[i].n > 1) qsort(cs->fp + cs->d[i].first, cs->d[i].n, sizeof *cs->fp, cmp_str);
  qsort(cs->d, cs->nd, sizeof *cs->d, cmp_dent);
}

/* ---- the whole tree ---------------------------------------------------- */

typedef struct {
  const char *prefix; /* root followed by '/' (none when root ends in one) */
  size_t plen;
  char **classes;
  size_t nclasses;
  class_scan *res;
  atomic_size_t next;     /* the next class to take */
  atomic_size_t fail_min; /* the lowest class that failed, or SIZE_MAX */
} scan_job;

/* Takes classes one at a time. After a failure, classes above the lowest
 * failed one are skipped: a serial scan would have stopped there, and the
 * error reported must be that one, whatever the timing. */
static void scan_worker(void *arg) {
  scan_job *j = arg;
  for (;;) {
    size_t c = atomic_fetch_add(&j->next, 1);
    if (c >= j->nclasses) break;
    if (c > atomic_load(&j->fail_min)) continue;
    scan_class(&j->res[c], j->prefix, j->plen, j->classes[c]);
    if (j->res[c].rc) {
      size_t m = atomic_load(&j->fail_min);
      while (c < m && !atomic_compare_exchange_weak(&j->fail_min, &m, c)) {
      }
    }
  }
}

static int default_threads(size_t nclasses) {
  long t = MAX_SCAN_THREADS;
  const char *e = getenv("STOKER_SCAN_THREADS");
  if (e && *e) {
    char *end;
    long v = strtol(e, &end, 10);
    if (!*end && v >= 1 && v <= 256) t = v;
  }
  return (int)((size_t)t < nclasses ? (size_t)t : nclasses);
}

/* The class folders of the root, sorted; the root's stat into *st. */
static int list_classes(const char *root, strlist *out, struct stat *st, int64_t *files,
                        char *msg, size_t msglen) {
  DIR *d = opendir(root);
  if (!d) return stk__fail(msg, msglen, STK_EIO, "cannot open folder %s: %s", root, strerror(errno));
  if (fstat(dirfd(d), st) != 0) memset(st, 0, sizeof *st);
  int rc = STK_OK;
  struct dirent *e;
  /* errno tells the end of a folder from a failed read; a stat in the loop
   * may set it, so it is cleared before each call */
  while (rc == STK_OK && (errno = 0, e = readdir(d))) {
    if (is_dot(e->d_name)) continue;
    if (entry_is_dir(d, e))
      rc = strlist_push(out, e->d_name);
    else
      (*files)++;
  }
  if (rc == STK_OK && errno != 0)
    rc = stk__fail(msg, msglen, STK_EIO, "cannot read folder %s: %s", root, strerror(errno));
  closedir(d);
  if (rc == STK_ENOMEM) stk__fail(msg, msglen, rc, "out of memory listing %s", root);
  if (rc == STK_OK && out->n) qsort(out->v, out->n, sizeof(char *), cmp_str);
  return rc;
}

/* torchvision refuses a class with no valid file; so do we, naming them. */
static int refuse_empty(const class_scan *res, const strlist *classes, const char *root,
                        char *msg, size_t msglen) {
  char names[512] = "";
  int nempty = 0;
  for (size_t c = 0; c < classes->n; c++) {
    if (res[c].nf) continue;
    size_t l = strlen(names);
    snprintf(names + l, sizeof names - l, "%s%s", nempty++ ? ", " : "", classes->v[c]);
  }
  if (!nempty) return STK_OK;
  return stk__fail(msg, msglen, STK_EEMPTY, "found no valid image file for the class%s %s in %s",
                   nempty > 1 ? "es" : "", names, root);
}

/* The table's size first, so that it is allocated once and exactly: *total
 * samples, *arena bytes of names; *files counts every file seen. */
static void table_size(const class_scan *res, size_t nclasses, size_t plen, size_t *total,
                       size_t *arena, int64_t *files) {
  *total = *arena = 0;
  for (size_t c = 0; c < nclasses; c++) {
    const class_scan *cs = &res[c];
    *files += cs->files;
    for (size_t d = 0; d < cs->nd; d++) {
      size_t dl = strlen(cs->d[d].p);
      for (size_t f = 0; f < cs->d[d].n; f++)
        *arena += plen + dl + 1 + strlen(cs->fp[cs->d[d].first + f]) + 1;
      *total += cs->d[d].n;
    }
  }
}

/* The samples of every class into the table (allocated), and the folders'
 * times into sig; each class's scan freed as it goes: the peak is one
 * table, not two. */
static int fill_table(stk__dataset *ds, class_scan *res, size_t nclasses, const char *prefix,
                      size_t plen, stk__dirsig *sig) {
  int rc = STK_OK;
  for (size_t c = 0; rc == STK_OK && c < nclasses; c++) {
    class_scan *cs = &res[c];
    for (size_t d = 0; rc == STK_OK && d < cs->nd; d++) {
      const dent *de = &cs->d[d];
      size_t dl = strlen(de->p);
      if (sig) rc = stk__dirsig_add(sig, de->p, de->sec, de->nsec, de->ino);
      for (size_t f = 0; f < de->n; f++) {
        const char *name = cs->fp[de->first + f];
        size_t nl = strlen(name);
        char *o = ds->arena + ds->arena_len;
        memcpy(o, prefix, plen);
        memcpy(o + plen, de->p, dl);
        o[plen + dl] = '/';
        memcpy(o + plen + dl + 1, name, nl + 1);
        ds->path_off[ds->n] = ds->arena_len;
        ds->labels[ds->n] = (int32_t)c;
        ds->arena_len += plen + dl + 1 + nl + 1;
        ds->n++;
      }
    }
    class_scan_free(cs);
  }
  return rc;
}

/* The class folders scanned in parallel (the calling thread works too;
 * threads that fail to start are not needed): res[c] per class. */
static int scan_classes(const strlist *classes, const char *prefix, size_t plen, int threads,
                        class_scan *res, char *msg, size_t msglen) {
  scan_job job = {.prefix = prefix, .plen = plen, .classes = classes->v,
                  .nclasses = classes->n, .res = res};
  atomic_init(&job.next, 0);
  atomic_init(&job.fail_min, SIZE_MAX);
  if (threads <= 0) threads = default_threads(classes->n);
  if ((size_t)threads > classes->n) threads = (int)classes->n;
  stk__workers_fanout("stk-scan", threads, scan_worker, &job);
  size_t fail = atomic_load(&job.fail_min);
  if (fail != SIZE_MAX) return stk__fail(msg, msglen, res[fail].rc, "%s", res[fail].msg);
  return STK_OK;
}

/* The sample table of the scanned classes (the root's stat rst and the
 * scan's start t0 into sig). */
static int make_table(stk__dataset *ds, class_scan *res, const strlist *classes,
                      const char *prefix, size_t plen, const char *root, const struct stat *rst,
                      const struct timespec *t0, stk__dirsig *sig, int64_t *files, char *msg,
                      size_t msglen) {
  size_t total, arena;
  table_size(res, classes->n, plen, &total, &arena, files);
  int rc = refuse_empty(res, classes, root, msg, msglen);
  if (rc) return rc;
  ds->arena = malloc(arena);
  ds->path_off = malloc(total * sizeof *ds->path_off);
  ds->labels = malloc(total * sizeof *ds->labels);
  if (!ds->arena || !ds->path_off || !ds->labels)
    return stk__fail(msg, msglen, STK_ENOMEM, "out of memory for %zu samples", total);
  ds->arena_cap = arena;
  ds->cap = (int64_t)total;
  if (sig) {
    rc = stk__dirsig_add(sig, "", (int64_t)rst->st_mtim.tv_sec, (int64_t)rst->st_mtim.tv_nsec,
                         (uint64_t)rst->st_ino);
    sig->scan_sec = (int64_t)t0->tv_sec;
    sig->scan_nsec = (int64_t)t0->tv_nsec;
  }
  if (rc == STK_OK) rc = fill_table(ds, res, classes->n, prefix, plen, sig);
  return rc ? stk__fail(msg, msglen, rc, "out of memory") : STK_OK;
}

int stk__folder_scan(stk__dataset *ds, const char *root, int threads, stk__dirsig *sig,
                     int64_t *files_out, char *msg, size_t msglen) {
  memset(ds, 0, sizeof *ds);
  struct timespec t0;
  clock_gettime(CLOCK_REALTIME, &t0); /* before the first readdir: see index.c */
  strlist classes = {0};
  class_scan *res = NULL;
  char *prefix = NULL;
  int64_t files = 0;
  struct stat rst;
  int rc = list_classes(root, &classes, &rst, &files, msg, msglen);
  if (rc == STK_OK && classes.n == 0)
    rc = stk__fail(msg, msglen, STK_EEMPTY, "no class folders found in %s", root);
  /* sample paths are root + "/" + relative path, as stk__path_join makes them */
  size_t rl = strlen(root);
  size_t plen = rl + (rl && root[rl - 1] != '/');
  if (rc == STK_OK) {
    prefix = malloc(plen + 1);
    res = calloc(classes.n, sizeof *res);
    if (!prefix || !res) rc = stk__fail(msg, msglen, STK_ENOMEM, "out of memory");
  }
  if (rc == STK_OK) {
    memcpy(prefix, root, rl);
    if (plen > rl) prefix[rl] = '/';
    prefix[plen] = 0;
    rc = scan_classes(&classes, prefix, plen, threads, res, msg, msglen);
  }
  if (rc == STK_OK)
    rc = make_table(ds, res, &classes, prefix, plen, root, &rst, &t0, sig, &files, msg, msglen);
  if (rc == STK_OK) {
    ds->nclasses = (int)classes.n;
    ds->classes = classes.v; /* ownership moves to the dataset */
    memset(&classes, 0, sizeof classes);
    if (files_out) *files_out = files;
  }
  if (res)
    for (size_t c = 0; c < classes.n; c++) class_scan_free(&res[c]);
  free(res);
  free(prefix);
  strlist_free(&classes);
  if (rc) {
    stk__dataset_free(ds);
    if (sig) stk__dirsig_free(sig);
  }
  return rc;
}

int stk__dataset_from_folder(stk__dataset *ds, const char *root, char *msg, size_t msglen) {
  return stk__folder_scan(ds, root, 0, NULL, NULL, msg, msglen);
}

/* ---- open: the index, or a scan --------------------------------------- */

/* Per thread, so that loaders created at once on several threads each see
 * their own. */
static _Thread_local stk__folder_stats g_last;

const stk__folder_stats *stk__folder_last(void) { return &g_last; }

/* True when `dir` (which may not exist yet) would lie inside the folder
 * whose real path is `real`: the index must not be written into the tree
 * it describes (its own write would change the mtimes it records). */
static int dir_inside(const char *dir, const char *real) {
  char *p = strdup(dir), *r = NULL;
  /* the nearest existing ancestor decides (the folder may not exist yet) */
  while (p) {
    r = realpath(*p ? p : ".", NULL);
    if (r || errno != ENOENT || !*p) break;
    char *slash = strrchr(p, '/');
    if (!slash)
      *p = 0; /* a relative name: the current folder */
    else if (slash == p && !p[1])
      break;
    else if (slash == p)
      p[1] = 0;
    else
      *slash = 0;
  }
  free(p);
  if (!r) return 0;
  size_t n = strlen(real);
  int in = strncmp(r, real, n) == 0 && (r[n] == 0 || r[n] == '/' || (n == 1 && real[0] == '/'));
  free(r);
  return in;
}

int stk__folder_open(stk__source *s, const stk_options *opt, char *msg, size_t msglen) {
  s->ops = &stk__folder_ops;
  stk__folder_stats *st = &g_last;
  memset(st, 0, sizeof *st);
  st->index_state = -1;
  double t = stk__now();
  if (opt->index == 0) {
    int rc = stk__folder_scan(&s->ds, opt->root, 0, NULL, NULL, msg, msglen);
    st->scan_s = stk__now() - t;
    snprintf(st->why, sizeof st->why, "index=0");
    return rc;
  }
  char *real = realpath(opt->root, NULL);
  char path[PATH_MAX + 64];
  int use = real != NULL;
  if (!use) {
    snprintf(st->why, sizeof st->why, "no real path for %s", opt->root);
  } else if (stk__index_path(path, sizeof path, opt->index_dir, real) != STK_OK) {
    snprintf(st->why, sizeof st->why, "no folder for the index (no index_dir, "
                                      "XDG_CACHE_HOME or HOME)");
    use = 0;
  } else if (dir_inside(path, real)) {
    snprintf(st->why, sizeof st->why, "the index folder is inside the dataset %s", real);
    use = 0;
  }
  if (use) {
    int state = stk__index_read(path, opt->root, real, &s->ds, st, st->why, sizeof st->why);
    st->index_state = state;
    st->load_s = stk__now() - t;
    if (state == STK__INDEX_USED) {
      st->from_index = 1;
      free(real);
      return STK_OK;
    }
    /* anything else: scan, and rewrite below; nothing read is kept */
    stk__dataset_free(&s->ds);
  }
  stk__dirsig sig = {0};
  int64_t files = 0;
  double ts = stk__now();
  int rc = stk__folder_scan(&s->ds, opt->root, 0, use ? &sig : NULL, &files, msg, msglen);
  st->scan_s = stk__now() - ts;
  if (rc || !use) {
    free(real);
    stk__dirsig_free(&sig);
    return rc;
  }
  st->dirs = (int64_t)sig.n;
  /* auto: a tree worth indexing, or one that had an index (keep it fresh) */
  int want = opt->index == 1 || files >= AUTO_INDEX_FILES || st->index_state != STK__INDEX_ABSENT;
  if (!want) {
    snprintf(st->why, sizeof st->why, "auto: %lld files, fewer than %d", (long long)files,
             AUTO_INDEX_FILES);
  } else if (stk__dirsig_racy(&sig)) {
    /* a reader would refuse it (index.c says why): do not write it */
    snprintf(st->why, sizeof st->why, "a folder changed within the last seconds; not written");
  } else {
    double tw = stk__now();
    char why[512];
    if (stk__index_write(path, opt->root, real, &s->ds, &sig, &st->index_bytes, why,
                         sizeof why) == STK_OK)
      st->written = 1;
    else
      snprintf(st->why, sizeof st->why, "%s", why); /* not an error: loading goes on */
    st->write_s = stk__now() - tw;
  }
  free(real);
  stk__dirsig_free(&sig);
  return STK_OK;
}

/* A folder's sample is its file: the name is the path. */
static int file_read(const stk__source *s, int64_t i, stk__buf *buf, uint64_t max_bytes,
                     stk__bytes *out, char *msg, size_t msglen) {
  return stk__read_whole_file(stk__dataset_path(&s->ds, i), buf, max_bytes, out, msg, msglen);
}
const stk__source_ops stk__folder_ops = {.kind = "folder", .read = file_read};
