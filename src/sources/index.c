/*
 * index.c: the index file of an image folder. See index.h.
 *
 * Layout (native byte order; the header says which, and an index from a
 * machine of the other order is refused, as any mismatch is, by a rescan):
 *
 *   0   "STKINDEX"
 *   8   u32 version, u32 0x01020304 (byte order)
 *   16  u64 classes, samples, folders
 *   40  u64 bytes of: the root's real path, class names, folder paths,
 *       sample paths
 *   72  i64 scan start: seconds, nanoseconds (wall clock)
 *   88  u64 checksum of bytes 0..88 and of everything after byte 96
 *   96  the root's real path, NUL-terminated
 *       folders x {i64 mtime s, i64 mtime ns, u64 inode}
 *       samples x i32 label
 *       class names, folder paths (relative to the root, "" = the root),
 *       sample paths (relative to the root): NUL-terminated, back to back
 *
 * Nothing of a file is used before all of it has been checked: sizes
 * against the file's length, the checksum, every string terminated and
 * counted, labels in range and in class order.
 */
#define _POSIX_C_SOURCE 200809L
#include "sources/index.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/common.h"
#include "core/workers.h"

#define MAGIC "STKINDEX"
#define VERSION 1u
#define BYTE_ORDER_MARK 0x01020304u
#define HEADER 96
#define DIRREC 24
#define HASH_SEED 0x53544b494e444558ULL
/* An index holds names and labels only: anything larger is no index. */
#define MAX_FILE ((uint64_t)1 << 40)

/*
 * Coarse timestamps. A folder's mtime has a granularity (a kernel tick on
 * ext4 and tmpfs, 1 or 2 s on some network and FAT file systems), so a
 * change made in the same tick as the mtime a scan recorded leaves that
 * mtime as it was, and the index would be trusted over a changed folder.
 * Such a change can only happen after the scan began. So a scan records its
 * start time, and an index is trusted only when every folder's recorded
 * mtime is at least RACY_NS older than that start: any later change then
 * gives a later mtime, which differs. A tree still being written is thus
 * scanned each time until it has been left alone for RACY_NS; then the next
 * scan writes an index that holds. (The clock of a file server may differ
 * from ours; a server that runs more than RACY_NS behind the client on a
 * file system of coarse mtimes defeats this, and nothing short of a scan
 * can tell.)
 */
#define RACY_NS 2000000000LL

/* ---- signature --------------------------------------------------------- */

void stk__dirsig_free(stk__dirsig *g) {
  free(g->v);
  free(g->arena);
  memset(g, 0, sizeof *g);
}

int stk__dirsig_add(stk__dirsig *g, const char *rel, int64_t sec, int64_t nsec, uint64_t ino) {
  size_t l = strlen(rel) + 1;
  if (g->len + l > g->acap) {
    size_t cap = g->acap ? g->acap : 4096;
    while (cap < g->len + l) cap *= 2;
    char *a = realloc(g->arena, cap);
    if (!a) return STK_ENOMEM;
    g->arena = a;
    g->acap = cap;
  }
  if (g->n == g->cap) {
    size_t cap = g->cap ? g->cap * 2 : 256;
    stk__dirsig_ent *v = realloc(g->v, cap * sizeof *v);
    if (!v) return STK_ENOMEM;
    g->v = v;
    g->cap = cap;
  }
  memcpy(g->arena + g->len, rel, l);
  g->v[g->n] = (stk__dirsig_ent){g->len, sec, nsec, ino};
  g->len += l;
  g->n++;
  return STK_OK;
}

static int racy(int64_t sec, int64_t nsec, int64_t scan_sec, int64_t scan_nsec) {
  /* in nanoseconds: mtime + RACY_NS > scan start */
  return (sec - scan_sec) * 1000000000LL + (nsec - scan_nsec) + RACY_NS > 0;
}

int stk__dirsig_racy(const stk__dirsig *g) {
  for (size_t i = 0; i < g->n; i++)
    if (racy(g->v[i].sec, g->v[i].nsec, g->scan_sec, g->scan_nsec)) return 1;
  return 0;
}

/* ---- where ------------------------------------------------------------- */

int stk__index_path(char *out, size_t outlen, const char *index_dir, const char *real) {
  return stk__index_path_kind(out, outlen, index_dir, "folder", real);
}

int stk__index_path_kind(char *out, size_t outlen, const char *index_dir, const char *kind,
                         const char *real) {
  char dir[PATH_MAX];
  const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
  int n;
  if (index_dir && *index_dir)
    n = snprintf(dir, sizeof dir, "%s", index_dir);
  else if (xdg && xdg[0] == '/') /* the XDG spec: a relative value is to be ignored */
    n = snprintf(dir, sizeof dir, "%s/stoker", xdg);
  else if (home && *home)
    n = snprintf(dir, sizeof dir, "%s/.cache/stoker", home);
  else
    return STK_EINVAL;
  if (n < 0 || (size_t)n >= sizeof dir) return STK_EINVAL;
  uint64_t h = stk__hash64(real, strlen(real), HASH_SEED);
  n = snprintf(out, outlen, "%s/%s-%016llx.stkidx", dir, kind, (unsigned long long)h);
  return n < 0 || (size_t)n >= outlen ? STK_EINVAL : STK_OK;
}

/* ---- reading ----------------------------------------------------------- */

static uint64_t get64(const uint8_t *p) {
  uint64_t v;
  memcpy(&v, p, 8);
  return v;
}
static uint32_t get32(const uint8_t *p) {
  uint32_t v;
  memcpy(&v, p, 4);
  return v;
}
static void put64(uint8_t *p, uint64_t v) { memcpy(p, &v, 8); }
static void put32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }

/* True when blob[0..len) is exactly `count` NUL-terminated strings. */
static int strings_ok(const char *b, uint64_t len, uint64_t count, int allow_empty) {
  const char *p = b, *end = b + len;
  for (uint64_t i = 0; i < count; i++) {
    const char *z = p < end ? memchr(p, 0, (size_t)(end - p)) : NULL;
    if (!z || (!allow_empty && z == p)) return 0;
    p = z + 1;
  }
  return p == end;
}

/*
 * An index is untrusted input (a shared index folder, or one synced from a
 * bucket, is written by others), and its checksum is no signature: anyone
 * can recompute it. So every relative path must stay below the root: no
 * absolute path, no "." or ".." component, no empty one. A sample path must
 * also begin with its class's folder, as the scan makes it, and a class name
 * must be one folder name. Returns the first offending string, or NULL.
 */
static int component_ok(const char *c, size_t n) {
  return n > 0 && !(n == 1 && c[0] == '.') && !(n == 2 && c[0] == '.' && c[1] == '.');
}
static int rel_ok(const char *p, int allow_empty) {
  if (!*p) return allow_empty;
  for (;;) {
    const char *slash = strchr(p, '/');
    size_t n = slash ? (size_t)(slash - p) : strlen(p);
    if (!component_ok(p, n)) return 0;
    if (!slash) return 1;
    p = slash + 1;
  }
}
static const char *outside_root(const char *cls, uint64_t nclasses, const char *dirs,
                                uint64_t ndirs, const char *paths, uint64_t nsamples,
                                const uint8_t *lab) {
  const char **name = malloc((size_t)nclasses * sizeof *name);
  if (!name) return "(out of memory)";
  const char *bad = NULL, *p = cls;
  for (uint64_t c = 0; c < nclasses && !bad; c++, p += strlen(p) + 1)
    if (strchr(p, '/') || !rel_ok(p, 0)) bad = p;
    else name[c] = p;
  p = dirs;
  for (uint64_t i = 0; i < ndirs && !bad; i++, p += strlen(p) + 1)
    if (!rel_ok(p, 1)) bad = p;
  p = paths;
  for (uint64_t i = 0; i < nsamples && !bad; i++, p += strlen(p) + 1) {
    const char *c = name[get32(lab + i * 4)]; /* labels were checked in range */
    size_t cl = strlen(c);
    if (!rel_ok(p, 0) || strncmp(p, c, cl) != 0 || p[cl] != '/') bad = p;
  }
  free(name);
  return bad;
}

/* The folder checks: every recorded folder stat'ed, by a few threads when
 * there are many (on network storage each stat is a round trip). */
typedef struct {
  const char *prefix;
  size_t plen;
  const char *const *rel;
  const uint8_t *rec;
  size_t n;
  atomic_size_t next;
  atomic_size_t changed; /* the lowest changed folder, or SIZE_MAX */
} check_job;

#define CHECK_CHUNK 64

static void check_worker(void *arg) {
  check_job *j = arg;
  char *buf = NULL;
  size_t cap = 0;
  for (;;) {
    size_t c0 = atomic_fetch_add(&j->next, CHECK_CHUNK);
    if (c0 >= j->n || c0 > atomic_load(&j->changed)) break;
    size_t c1 = c0 + CHECK_CHUNK < j->n ? c0 + CHECK_CHUNK : j->n;
    for (size_t i = c0; i < c1; i++) {
      size_t rl = strlen(j->rel[i]);
      if (j->plen + rl + 1 > cap) {
        cap = (j->plen + rl + 1) * 2;
        char *b = realloc(buf, cap);
        if (!b) { /* cannot check it: count it as changed */
          cap = 0;
          goto changed;
        }
        buf = b;
      }
      /* the root itself is recorded as "": its path is the prefix without
       * the '/' the prefix may end in (kept for "/") */
      memcpy(buf, j->prefix, j->plen);
      memcpy(buf + j->plen, j->rel[i], rl + 1);
      if (!rl && j->plen > 1 && buf[j->plen - 1] == '/') buf[j->plen - 1] = 0;
      struct stat st;
      const uint8_t *r = j->rec + i * DIRREC;
      if (stat(buf, &st) == 0 && S_ISDIR(st.st_mode) &&
          (int64_t)st.st_mtim.tv_sec == (int64_t)get64(r) &&
          (int64_t)st.st_mtim.tv_nsec == (int64_t)get64(r + 8) &&
          (uint64_t)st.st_ino == get64(r + 16))
        continue;
    changed:;
      size_t m = atomic_load(&j->changed);
      while (i < m && !atomic_compare_exchange_weak(&j->changed, &m, i)) {
      }
      break;
    }
  }
  free(buf);
}

static int read_file(const char *path, uint8_t **out, uint64_t *size, char *why, size_t whylen) {
  /* O_NONBLOCK: never block in open (a FIFO put there); fstat refuses it */
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) {
    if (errno == ENOENT || errno == ENOTDIR) return stk__fail(why, whylen, STK__INDEX_ABSENT, "no index %s", path);
    return stk__fail(why, whylen, STK__INDEX_CORRUPT, "cannot open index %s: %s", path,
                     strerror(errno));
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size < HEADER ||
      (uint64_t)st.st_size > MAX_FILE) {
    close(fd);
    return stk__fail(why, whylen, STK__INDEX_CORRUPT, "index %s: not an index (size)", path);
  }
  uint64_t n = (uint64_t)st.st_size;
  uint8_t *b = malloc((size_t)n);
  if (!b) {
    close(fd);
    return stk__fail(why, whylen, STK_ENOMEM, "out of memory for index %s", path);
  }
  uint64_t got = 0;
  while (got < n) {
    ssize_t r = read(fd, b + got, (size_t)(n - got));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    got += (uint64_t)r;
  }
  close(fd);
  if (got != n) {
    free(b);
    return stk__fail(why, whylen, STK__INDEX_CORRUPT, "index %s: short read", path);
  }
  *out = b;
  *size = n;
  return STK_OK;
}

static int time_ok(int64_t sec, int64_t nsec) {
  const int64_t lim = (int64_t)1 << 32; /* 2 x 2^32 s in ns fits in 63 bits */
  return sec > -lim && sec < lim && nsec >= 0 && nsec < 1000000000LL;
}

/* An index file's parts, located and checked by parse_index. */
typedef struct {
  uint64_t nclasses, nsamples, ndirs, paths_len;
  int64_t scan_sec, scan_nsec;
  const char *root, *cls, *dirs, *paths;
  const uint8_t *rec, *lab;
} index_parts;

/* Every field of the file b[0..size) checked before anything is trusted:
 * sizes against the length, the checksum, the strings, the labels, and the
 * paths (outside_root). STK_OK or STK__INDEX_CORRUPT with the reason. */
static int parse_index(const char *path, const uint8_t *b, uint64_t size, index_parts *x,
                       char *why, size_t whylen) {
#define BAD(...) return stk__fail(why, whylen, STK__INDEX_CORRUPT, __VA_ARGS__)
  if (memcmp(b, MAGIC, 8) != 0) BAD("index %s: bad magic", path);
  if (get32(b + 8) != VERSION) BAD("index %s: version %u, not %u", path, get32(b + 8), VERSION);
  if (get32(b + 12) != BYTE_ORDER_MARK) BAD("index %s: written with another byte order", path);
  x->nclasses = get64(b + 16), x->nsamples = get64(b + 24), x->ndirs = get64(b + 32);
  uint64_t root_len = get64(b + 40), classes_len = get64(b + 48), dirs_len = get64(b + 56);
  x->paths_len = get64(b + 64);
  x->scan_sec = (int64_t)get64(b + 72), x->scan_nsec = (int64_t)get64(b + 80);
  /* each part bounded by the file first, so that the sum cannot overflow */
  uint64_t body = size - HEADER, ns = x->nsamples, nd = x->ndirs;
  if (x->nclasses == 0 || x->nclasses > INT32_MAX || ns == 0 || ns > body / 4 || nd == 0 ||
      nd > body / DIRREC || root_len > body || classes_len > body || dirs_len > body ||
      x->paths_len > body ||
      root_len + nd * DIRREC + ns * 4 + classes_len + dirs_len + x->paths_len != body)
    BAD("index %s: sizes do not match the file (truncated?)", path);
  uint64_t want = stk__hash64(b + HEADER, (size_t)body, stk__hash64(b, 88, HASH_SEED));
  if (get64(b + 88) != want) BAD("index %s: checksum mismatch", path);
  x->root = (const char *)b + HEADER;
  x->rec = b + HEADER + root_len;
  x->lab = x->rec + nd * DIRREC;
  x->cls = (const char *)x->lab + ns * 4;
  x->dirs = x->cls + classes_len;
  x->paths = x->dirs + dirs_len;
  if (!strings_ok(x->root, root_len, 1, 0) || !strings_ok(x->cls, classes_len, x->nclasses, 0) ||
      !strings_ok(x->dirs, dirs_len, nd, 1) || !strings_ok(x->paths, x->paths_len, ns, 0))
    BAD("index %s: malformed names", path);
  /* times as a file system gives them (within 2^32 s of 1970): racy()
   * computes in nanoseconds, which forged ones would overflow */
  if (!time_ok(x->scan_sec, x->scan_nsec)) BAD("index %s: bad scan time", path);
  for (uint64_t i = 0; i < nd; i++) {
    const uint8_t *r = x->rec + i * DIRREC;
    if (!time_ok((int64_t)get64(r), (int64_t)get64(r + 8)))
      BAD("index %s: bad folder time", path);
  }
  int32_t prev = 0;
  for (uint64_t i = 0; i < ns; i++) {
    int32_t l = (int32_t)get32(x->lab + i * 4);
    if (l < prev || (uint64_t)l >= x->nclasses)
      BAD("index %s: labels out of order or range", path);
    prev = l;
  }
  const char *bad = outside_root(x->cls, x->nclasses, x->dirs, nd, x->paths, ns, x->lab);
  if (bad) BAD("index %s: path \"%.200s\" is not a folder or file below the root", path, bad);
  return STK_OK;
#undef BAD
}

/* Whether the tree under prefix is the one the index saw: no recorded
 * folder too close to the scan, and every one unchanged (stat'ed by a few
 * threads). STK_OK, STK__INDEX_STALE or STK_ENOMEM with the reason. */
static int index_fresh(const char *path, const index_parts *x, const char *prefix, size_t plen,
                       stk__folder_stats *st, char *why, size_t whylen) {
  const char **rel = malloc((size_t)x->ndirs * sizeof *rel);
  if (!rel) return stk__fail(why, whylen, STK_ENOMEM, "out of memory");
  int rc = STK_OK;
  const char *p = x->dirs;
  for (uint64_t i = 0; i < x->ndirs && !rc; i++) {
    rel[i] = p;
    p += strlen(p) + 1;
    const uint8_t *r = x->rec + i * DIRREC;
    if (racy((int64_t)get64(r), (int64_t)get64(r + 8), x->scan_sec, x->scan_nsec))
      rc = stk__fail(why, whylen, STK__INDEX_STALE,
                     "index %s: folder %s%s changed too close to the scan to be trusted", path,
                     prefix, rel[i]);
  }
  if (!rc) {
    double t = stk__now();
    check_job job = {.prefix = prefix, .plen = plen, .rel = rel, .rec = x->rec,
                     .n = (size_t)x->ndirs};
    atomic_init(&job.next, 0);
    atomic_init(&job.changed, SIZE_MAX);
    size_t nth = (size_t)x->ndirs / (4 * CHECK_CHUNK);
    if (nth > 16) nth = 16;
    stk__workers_fanout("stk-index", (int)nth, check_worker, &job); /* the caller is one */
    if (st) {
      st->check_s = stk__now() - t;
      st->dirs = (int64_t)x->ndirs;
    }
    size_t changed = atomic_load(&job.changed);
    if (changed != SIZE_MAX)
      rc = stk__fail(why, whylen, STK__INDEX_STALE,
                     "folder %s%s changed since index %s was written", prefix, rel[changed],
                     path);
  }
  free(rel);
  return rc;
}

/* The sample table of a fresh index into ds, paths made whole as the scan
 * makes them. STK_OK or STK_ENOMEM. */
static int index_table(const index_parts *x, const char *prefix, size_t plen, stk__dataset *ds,
                       char *why, size_t whylen) {
  uint64_t ns = x->nsamples, arena = ns * plen + x->paths_len;
  ds->arena = malloc((size_t)arena);
  ds->path_off = malloc((size_t)ns * sizeof *ds->path_off);
  ds->labels = malloc((size_t)ns * sizeof *ds->labels);
  ds->classes = calloc((size_t)x->nclasses, sizeof *ds->classes);
  if (!ds->arena || !ds->path_off || !ds->labels || !ds->classes)
    return stk__fail(why, whylen, STK_ENOMEM, "out of memory for %llu samples",
                     (unsigned long long)ns);
  ds->arena_cap = (size_t)arena;
  ds->cap = (int64_t)ns;
  memcpy(ds->labels, x->lab, (size_t)ns * 4);
  const char *p = x->paths;
  char *o = ds->arena;
  for (uint64_t i = 0; i < ns; i++) {
    size_t l = strlen(p) + 1;
    ds->path_off[i] = (size_t)(o - ds->arena);
    memcpy(o, prefix, plen);
    memcpy(o + plen, p, l);
    o += plen + l;
    p += l;
  }
  ds->arena_len = (size_t)(o - ds->arena);
  ds->n = (int64_t)ns;
  p = x->cls;
  for (uint64_t i = 0; i < x->nclasses; i++, p += strlen(p) + 1) {
    if (!(ds->classes[i] = strdup(p))) {
      ds->nclasses = (int)i;
      return stk__fail(why, whylen, STK_ENOMEM, "out of memory");
    }
  }
  ds->nclasses = (int)x->nclasses;
  return STK_OK;
}

int stk__index_read(const char *path, const char *root, const char *real, stk__dataset *ds,
                    stk__folder_stats *st, char *why, size_t whylen) {
  memset(ds, 0, sizeof *ds);
  uint8_t *b = NULL;
  uint64_t size = 0;
  int rc = read_file(path, &b, &size, why, whylen);
  if (rc) return rc;
  index_parts x = {0};
  char *prefix = NULL;
  size_t rl = strlen(root);
  size_t plen = rl + (rl && root[rl - 1] != '/');
  if ((rc = parse_index(path, b, size, &x, why, whylen))) goto done;
  /* the file is sound; now, is it this tree's, unchanged? */
  if (strcmp(x.root, real) != 0) {
    rc = stk__fail(why, whylen, STK__INDEX_STALE, "index %s is for %s, not %s", path, x.root,
                   real);
    goto done;
  }
  if (!(prefix = malloc(plen + 1))) {
    rc = stk__fail(why, whylen, STK_ENOMEM, "out of memory");
    goto done;
  }
  memcpy(prefix, root, rl);
  if (plen > rl) prefix[rl] = '/';
  prefix[plen] = 0;
  if (st) st->index_bytes = (int64_t)size;
  if ((rc = index_fresh(path, &x, prefix, plen, st, why, whylen))) goto done;
  rc = index_table(&x, prefix, plen, ds, why, whylen);
  if (!rc) rc = STK__INDEX_USED;
done:
  if (rc != STK__INDEX_USED) stk__dataset_free(ds);
  free(prefix);
  free(b);
  return rc;
}

/* ---- writing ----------------------------------------------------------- */

/* mkdir -p of the folder that holds `file`. */
static int make_parent(const char *file) {
  char d[PATH_MAX];
  if (snprintf(d, sizeof d, "%s", file) >= (int)sizeof d) return -1;
  char *slash = strrchr(d, '/');
  if (!slash || slash == d) return 0;
  *slash = 0;
  for (char *p = d + 1; *p; p++) {
    if (*p != '/') continue;
    *p = 0;
    if (mkdir(d, 0777) != 0 && errno != EEXIST) return -1;
    *p = '/';
  }
  return mkdir(d, 0777) != 0 && errno != EEXIST ? -1 : 0;
}

void stk__index_seal(uint8_t *b, size_t n) {
  if (n < HEADER) return;
  put64(b + 88, stk__hash64(b + HEADER, n - HEADER, stk__hash64(b, 88, HASH_SEED)));
}

int stk__index_write(const char *path, const char *root, const char *real,
                     const stk__dataset *ds, const stk__dirsig *sig, int64_t *bytes, char *why,
                     size_t whylen) {
  size_t rl = strlen(root);
  size_t plen = rl + (rl && root[rl - 1] != '/');
  uint64_t root_len = strlen(real) + 1, classes_len = 0, paths_len = 0;
  for (int c = 0; c < ds->nclasses; c++) classes_len += strlen(ds->classes[c]) + 1;
  for (int64_t i = 0; i < ds->n; i++) {
    const char *p = stk__dataset_path(ds, i);
    /* every sample path is the root's prefix then a relative path */
    if (strncmp(p, root, rl) != 0 || (plen > rl && p[rl] != '/'))
      return stk__fail(why, whylen, STK_EINVAL, "sample %s is not below %s", p, root);
    paths_len += strlen(p + plen) + 1;
  }
  uint64_t body = root_len + sig->n * DIRREC + (uint64_t)ds->n * 4 + classes_len + sig->len +
                  paths_len;
  uint8_t *b = malloc((size_t)(HEADER + body));
  if (!b) return stk__fail(why, whylen, STK_ENOMEM, "out of memory for the index");
  memset(b, 0, HEADER);
  memcpy(b, MAGIC, 8);
  put32(b + 8, VERSION);
  put32(b + 12, BYTE_ORDER_MARK);
  put64(b + 16, (uint64_t)ds->nclasses);
  put64(b + 24, (uint64_t)ds->n);
  put64(b + 32, sig->n);
  put64(b + 40, root_len);
  put64(b + 48, classes_len);
  put64(b + 56, sig->len);
  put64(b + 64, paths_len);
  put64(b + 72, (uint64_t)sig->scan_sec);
  put64(b + 80, (uint64_t)sig->scan_nsec);
  uint8_t *o = b + HEADER;
  memcpy(o, real, root_len);
  o += root_len;
  for (size_t i = 0; i < sig->n; i++, o += DIRREC) {
    put64(o, (uint64_t)sig->v[i].sec);
    put64(o + 8, (uint64_t)sig->v[i].nsec);
    put64(o + 16, sig->v[i].ino);
  }
  memcpy(o, ds->labels, (size_t)ds->n * 4);
  o += (size_t)ds->n * 4;
  for (int c = 0; c < ds->nclasses; c++) {
    size_t l = strlen(ds->classes[c]) + 1;
    memcpy(o, ds->classes[c], l);
    o += l;
  }
  memcpy(o, sig->arena, sig->len);
  o += sig->len;
  for (int64_t i = 0; i < ds->n; i++) {
    const char *p = stk__dataset_path(ds, i) + plen;
    size_t l = strlen(p) + 1;
    memcpy(o, p, l);
    o += l;
  }
  stk__index_seal(b, (size_t)(HEADER + body));
  int rc = stk__write_file_atomic(path, b, (size_t)(HEADER + body), why, whylen);
  if (rc == STK_OK && bytes) *bytes = (int64_t)(HEADER + body);
  free(b);
  return rc;
}

int stk__write_file_atomic(const char *path, const void *data, size_t n, char *why,
                           size_t whylen) {
  const uint8_t *b = data;
  int rc = STK_OK;
  char tmp[PATH_MAX + 96];
  int fd = -1;
  if (make_parent(path) != 0)
    return stk__fail(why, whylen, STK_EIO, "cannot create the folder of %s: %s", path,
                     strerror(errno));
  /* a name of our own beside the target: writers of the same index (ranks
   * starting together) never share a temporary file, and the rename is
   * atomic within a folder */
  static atomic_uint seq;
  for (int tries = 0; fd < 0 && tries < 8; tries++) {
    snprintf(tmp, sizeof tmp, "%s.%ld.%u.tmp", path, (long)getpid(), atomic_fetch_add(&seq, 1));
    fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0 && errno != EEXIST) break;
  }
  if (fd < 0)
    return stk__fail(why, whylen, STK_EIO, "cannot create %s: %s", path, strerror(errno));
  size_t put = 0;
  while (put < n) {
    ssize_t w = write(fd, b + put, n - put);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) break;
    put += (size_t)w;
  }
  int werr = put == n ? 0 : (errno ? errno : ENOSPC);
  if (close(fd) != 0 && !werr) werr = errno;
  if (werr) {
    unlink(tmp);
    return stk__fail(why, whylen, STK_EIO, "cannot write %s: %s", path, strerror(werr));
  }
  if (rename(tmp, path) != 0) {
    int e = errno;
    unlink(tmp);
    rc = stk__fail(why, whylen, STK_EIO, "cannot rename into %s: %s", path, strerror(e));
  }
  return rc;
}
