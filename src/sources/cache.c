/* cache.c: the pre-decoded cache source (.stkc, written by stk_pack). The
 * file is mapped read-only: raw samples are lent to the resampler in place
 * (the page cache is the only copy), JPEG samples are read with pread. See
 * cache_format.h for the layout and source.h for the interface.
 *
 * A file that changes while it is mapped. Truncating a mapped file makes
 * every later touch of a page past its new end raise SIGBUS, which kills the
 * process; and the pages are read far from here (the resampler, the GPU
 * path's copy), long after pixels() has returned, so no sigsetjmp here could
 * catch the fault without a copy of every image (0.09 ms per 512x384 image,
 * 7% of the raw path's throughput: docs/RELIABILITY.md). Instead one
 * process-wide SIGBUS handler knows the live cache mappings: a fault inside
 * one is answered by mapping zero pages over the rest of that mapping (so
 * the read goes on and sees zeros) and marking its source changed; every
 * later pixels(), read()
 * or verify() of that source then fails with STK_EIO naming the file. A
 * fault outside every cache mapping goes to the handler that was there
 * before (by default: the process dies, as it would have). Each call also
 * compares the file's size, mtime and inode (fstat) and its header (pread)
 * with those seen at open, so a file rewritten in place (cp over it) fails
 * the same way even when no read faulted; a change that leaves the bytes
 * alone (chmod, a link, rm, mv over the name, an xattr) is no change. What
 * is left: a sample whose pages were being read at the moment of the change
 * may be delivered with the zeros or the new bytes; the error comes with the
 * next sample the source is asked for. */
#define _GNU_SOURCE /* MAP_ANONYMOUS, SYS_mmap */
#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "core/workers.h"
#include "sources/cache_format.h"
#include "sources/source.h"
#include "sources/store.h"

/* Why a source stopped trusting its file (cache_impl.changed). */
enum { CH_NONE = 0, CH_FAULT = 1, CH_STAT = 2 };

typedef struct {
  const uint8_t *map;
  size_t size;
  int fd;                 /* kept open for fstat: has the file changed? */
  struct stat st;         /* at open */
  char *path;
  atomic_int changed;     /* CH_*, set by the SIGBUS handler or a stat */
  struct guard_slot *guard; /* slot in the mapping registry, or NULL */
  int verify;             /* stk_options.verify: each sample's checksum as it is read */
  stk__cache_header hd;
  const stk__cache_entry *ent; /* n entries, inside the map */
  const stk__cache_stat *fst;  /* n entries inside the map, or NULL (an older cache) */
} cache_impl;

/* ---- the SIGBUS guard ------------------------------------------------------ */

/* The live mappings, read by the handler without a lock: a slot is claimed
 * (busy), then filled, then published by storing its base; it is withdrawn
 * by clearing the base before the mapping is unmapped. Slots come in chunks
 * of 256, linked as more caches are open at once; a chunk is never freed
 * (the handler may be walking it), so the registry holds the most caches
 * ever open at once, 24 bytes each. */
#define GUARD_SLOTS 256
typedef struct guard_slot {
  atomic_int busy;
  _Atomic(uintptr_t) base;
  size_t len;           /* the mapping's length rounded up to pages */
  atomic_int *changed;
} guard_slot;
typedef struct guard_chunk {
  guard_slot slot[GUARD_SLOTS];
  _Atomic(struct guard_chunk *) next;
} guard_chunk;
static guard_chunk g_chunk0;
static atomic_int g_live;         /* slots published now */
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static int g_installed;
static uintptr_t g_page;
static struct sigaction g_ours;

/* The handler we came in front of, chained to for what is not ours. Two
 * copies: a new one is written into the one the handler does not read, then
 * published by the index. */
static struct sigaction g_prev[2];
static atomic_int g_prev_i;
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;

/* Loops between handlers. g_chain_tid: the thread inside a chained handler
 * (faulthandler's re-raises the signal after it dumped its traceback, to the
 * handler it displaced, which may be ours). g_rep_*: the same foreign fault
 * again and again on one thread (a chained handler that returns without
 * resolving it, as Python's does: without a bound the thread spins). */
static atomic_long g_chain_tid;
static _Atomic(uintptr_t) g_rep_addr;
static atomic_long g_rep_tid;
static atomic_int g_rep_n;

/* The default action, from inside the handler: a fault happens again on
 * return and kills the process with SIGBUS; a sent signal is raised again
 * (at once, as the handler runs with SA_NODEFER). */
static void die_default(const siginfo_t *si) {
  struct sigaction dfl;
  memset(&dfl, 0, sizeof dfl);
  dfl.sa_handler = SIG_DFL;
  sigaction(SIGBUS, &dfl, NULL);
  if (si->si_code <= 0) raise(SIGBUS);
}

static void on_sigbus(int sig, siginfo_t *si, void *uc) {
  int saved = errno;
  uintptr_t a = (uintptr_t)si->si_addr;
  /* only faults the kernel raised (si_code > 0), not kill(2) or raise(3) */
  for (guard_chunk *ch = &g_chunk0; si->si_code > 0 && ch;
       ch = atomic_load_explicit(&ch->next, memory_order_acquire)) {
    for (int k = 0; k < GUARD_SLOTS; k++) {
      guard_slot *g = &ch->slot[k];
      uintptr_t b = atomic_load_explicit(&g->base, memory_order_acquire);
      if (!b || a < b || a - b >= g->len) continue;
      uintptr_t from = a & ~(g_page - 1);
      /* zero pages over the rest of the mapping: the faulting read and any
       * later one past the file's end see zeros instead of faulting again.
       * The raw system call: async-signal-safe and never intercepted. */
      long r = syscall(SYS_mmap, (void *)from, (size_t)(b + g->len - from), PROT_READ,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0L);
      if (r == -1) goto foreign; /* cannot patch it: die as we would have */
      atomic_store_explicit(g->changed, CH_FAULT, memory_order_release);
      errno = saved;
      return;
    }
  }
foreign:;
  /* Not ours: what was there before us. */
  long tid = (long)syscall(SYS_gettid);
  if (atomic_load(&g_chain_tid) == tid && si->si_code <= 0) {
    /* raised again by the handler we chained to: it is done */
    die_default(si);
    errno = saved;
    return;
  }
  if (si->si_code > 0) {
    if (atomic_load(&g_rep_tid) == tid && atomic_load(&g_rep_addr) == a) {
      if (atomic_fetch_add(&g_rep_n, 1) >= 8) {
        die_default(si);
        errno = saved;
        return;
      }
    } else {
      atomic_store(&g_rep_tid, tid);
      atomic_store(&g_rep_addr, a);
      atomic_store(&g_rep_n, 1);
    }
  }
  const struct sigaction *prev = &g_prev[atomic_load(&g_prev_i)];
  errno = saved;
  if (prev->sa_flags & SA_SIGINFO) {
    atomic_store(&g_chain_tid, tid);
    prev->sa_sigaction(sig, si, uc);
    atomic_store(&g_chain_tid, 0);
  } else if (prev->sa_handler != SIG_DFL && prev->sa_handler != SIG_IGN) {
    atomic_store(&g_chain_tid, tid);
    prev->sa_handler(sig);
    atomic_store(&g_chain_tid, 0);
  } else if (prev->sa_handler == SIG_DFL || si->si_code > 0) {
    die_default(si); /* a fault cannot be ignored: it would come back */
  }
  errno = saved;
}

/* Whether our handler is the one installed; if not (faulthandler.enable(),
 * Python's signal.signal(SIGBUS, ...) or any sigaction after the first cache
 * opened), installs it again in front, chaining to the one found. Called at
 * each open, each sample and by the watcher below. */
static void guard_front(void) {
  struct sigaction cur;
  if (sigaction(SIGBUS, NULL, &cur) != 0) return;
  if ((cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == on_sigbus) return;
  pthread_mutex_lock(&g_mu);
  if (sigaction(SIGBUS, NULL, &cur) == 0 &&
      !((cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == on_sigbus)) {
    int k = 1 - atomic_load(&g_prev_i);
    g_prev[k] = cur;
    atomic_store(&g_prev_i, k);
    sigaction(SIGBUS, &g_ours, NULL);
  }
  pthread_mutex_unlock(&g_mu);
}

/* The watcher: while any cache is mapped, puts the guard back in front
 * within 50 ms of another handler's coming, even when no sample is being
 * asked for (a worker reading pages lent before that handler came could
 * otherwise fault into it: faulthandler's would kill the process, Python's
 * would return into the fault for ever). It ends when the last cache
 * closes. */
static pthread_cond_t g_watch_cv = PTHREAD_COND_INITIALIZER;
static int g_watching;

static void *watch_main(void *arg) {
  (void)arg;
  pthread_mutex_lock(&g_mu);
  while (atomic_load(&g_live) > 0) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 50000000;
    if (ts.tv_nsec >= 1000000000) ts.tv_sec++, ts.tv_nsec -= 1000000000;
    pthread_cond_timedwait(&g_watch_cv, &g_mu, &ts);
    pthread_mutex_unlock(&g_mu);
    guard_front();
    pthread_mutex_lock(&g_mu);
  }
  g_watching = 0;
  pthread_mutex_unlock(&g_mu);
  return NULL;
}

static void watch_start(void) {
  pthread_mutex_lock(&g_mu);
  if (!g_watching) {
    pthread_attr_t ta;
    pthread_t id;
    sigset_t all, old;
    pthread_attr_init(&ta);
    pthread_attr_setdetachstate(&ta, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&ta, 64 * 1024);
    /* no signal of the process's is delivered to it */
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    g_watching = pthread_create(&id, &ta, watch_main, NULL) == 0;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&ta);
  }
  pthread_mutex_unlock(&g_mu);
}

/* A child of fork has no watcher thread, and may hold g_mu's state of the
 * moment of the fork. */
static void guard_atfork_child(void) {
  pthread_mutex_init(&g_mu, NULL);
  pthread_cond_init(&g_watch_cv, NULL);
  g_watching = 0;
}

static void guard_install(void) {
  g_page = (uintptr_t)sysconf(_SC_PAGESIZE);
  memset(&g_ours, 0, sizeof g_ours);
  g_ours.sa_sigaction = on_sigbus;
  /* SA_NODEFER: a chained handler that raises SIGBUS again (faulthandler)
   * re-enters this one at once, on the same thread, where g_chain_tid sees
   * it, instead of a pending signal coming back after we return */
  g_ours.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESTART | SA_NODEFER;
  sigemptyset(&g_ours.sa_mask);
  g_installed = sigaction(SIGBUS, &g_ours, &g_prev[0]) == 0;
  pthread_atfork(NULL, NULL, guard_atfork_child);
}

static guard_slot *guard_add(const void *base, size_t size, atomic_int *changed) {
  pthread_once(&g_once, guard_install);
  if (!g_installed) return NULL;
  guard_front();
  for (guard_chunk *ch = &g_chunk0; ch;) {
    for (int k = 0; k < GUARD_SLOTS; k++) {
      guard_slot *g = &ch->slot[k];
      int z = 0;
      if (!atomic_compare_exchange_strong(&g->busy, &z, 1)) continue;
      g->len = (size + g_page - 1) & ~(g_page - 1);
      g->changed = changed;
      atomic_store_explicit(&g->base, (uintptr_t)base, memory_order_release);
      atomic_fetch_add(&g_live, 1);
      watch_start();
      return g;
    }
    guard_chunk *next = atomic_load_explicit(&ch->next, memory_order_acquire);
    if (!next) {
      /* every slot busy: another chunk (a racing thread may link its own
       * first; then this one is dropped and that one used) */
      guard_chunk *fresh = calloc(1, sizeof *fresh);
      if (!fresh) return NULL;
      guard_chunk *none = NULL;
      if (atomic_compare_exchange_strong(&ch->next, &none, fresh))
        next = fresh;
      else {
        free(fresh);
        next = none;
      }
    }
    ch = next;
  }
  return NULL;
}

static void guard_remove(guard_slot *g) {
  if (!g) return;
  atomic_store_explicit(&g->base, 0, memory_order_release);
  atomic_store(&g->busy, 0);
  if (atomic_fetch_sub(&g_live, 1) == 1) {
    pthread_mutex_lock(&g_mu);
    pthread_cond_signal(&g_watch_cv); /* the watcher ends now, not in 50 ms */
    pthread_mutex_unlock(&g_mu);
  }
}

/* Whether what fstat says of the open file still matches the open: what
 * can change its bytes (size, mtime; the inode and device, which for one
 * descriptor never change but say so). Not the ctime: chmod, a hard link,
 * rm, mv over the name or setxattr change it and no byte of the file. */
static int stat_matches(const cache_impl *c, const struct stat *st) {
  return st->st_size == c->st.st_size && st->st_ino == c->st.st_ino &&
         st->st_dev == c->st.st_dev && st->st_mtim.tv_sec == c->st.st_mtim.tv_sec &&
         st->st_mtim.tv_nsec == c->st.st_mtim.tv_nsec;
}

/* Whether the header on disk is still the one read at open, by pread (a
 * read past a new end is a short read, never a fault). It carries the index's
 * checksum, so a file overwritten by another cache of the same size within
 * one tick of the mtime's clock (or with its mtime set back) is seen too. */
static int header_matches(const cache_impl *c) {
  stk__cache_header h;
  ssize_t r;
  do r = pread(c->fd, &h, sizeof h, 0);
  while (r < 0 && errno == EINTR);
  return r == (ssize_t)sizeof h && memcmp(&h, &c->hd, sizeof h) == 0;
}

/* STK_OK while the file is as it was at open; otherwise STK_EIO with what
 * changed. The fstat and the header's pread per sample cost about a
 * microsecond together. */
static int file_unchanged(cache_impl *c, char *msg, size_t msglen) {
  /* before pages are lent: the guard is the handler a fault reaches */
  if (c->guard) guard_front();
  int ch = atomic_load_explicit(&c->changed, memory_order_acquire);
  struct stat st;
  int stat_ok = fstat(c->fd, &st) == 0;
  if (ch == CH_NONE) {
    if (stat_ok && stat_matches(c, &st) && header_matches(c)) return STK_OK;
    /* sticky: once changed, the index read at open means nothing */
    int none = CH_NONE;
    atomic_compare_exchange_strong(&c->changed, &none, CH_STAT);
  }
  char what[96];
  if (stat_ok && st.st_size < c->st.st_size)
    snprintf(what, sizeof what, "truncated to %lld bytes from %lld", (long long)st.st_size,
             (long long)c->st.st_size);
  else if (ch == CH_FAULT && stat_ok && stat_matches(c, &st))
    snprintf(what, sizeof what, "a page of it could not be read");
  else
    snprintf(what, sizeof what, "rewritten");
  return stk__fail(msg, msglen, STK_EIO,
                   "the cache file %s changed while it was read (%s): open it again", c->path,
                   what);
}

/* Entry i, copied out of the map, or STK_EIO when the file has changed
 * (a fault reading the entry sets `changed` before the copy returns). */
static int entry(const stk__source *s, int64_t i, stk__cache_entry *e, char *msg, size_t msglen) {
  cache_impl *c = s->impl;
  int rc = file_unchanged(c, msg, msglen);
  if (rc) return rc;
  *e = c->ent[i];
  if (atomic_load_explicit(&c->changed, memory_order_acquire)) return file_unchanged(c, msg, msglen);
  return STK_OK;
}

static int cache_pixels(const stk__source *s, int64_t i, stk__pixels *out, char *msg,
                        size_t msglen) {
  const cache_impl *c = s->impl;
  stk__cache_entry e;
  int rc = entry(s, i, &e, msg, msglen);
  if (rc) return rc;
  /* verify: the hash reads the pixels once more, from the page cache */
  if (c->verify && stk__hash64(c->map + e.off, (size_t)e.len, 0) != e.hash) {
    if ((rc = file_unchanged((cache_impl *)c, msg, msglen))) return rc;
    return stk__fail(msg, msglen, STK_EDECODE,
                     "the cached pixels do not match their checksum (the cache file is corrupt)");
  }
  out->px = c->map + e.off;
  out->stride = (size_t)e.w * 3;
  out->w = (int)e.w;
  out->h = (int)e.h;
  return STK_OK;
}

/* JPEG samples are read with pread into the worker's buffer rather than
 * lent from the map: the copy is a few microseconds against a millisecond
 * of decoding, and a file cut short gives a short read, not a fault inside
 * libjpeg. */
static int cache_read(const stk__source *s, int64_t i, stk__buf *buf, uint64_t max_bytes,
                      stk__bytes *out, char *msg, size_t msglen) {
  cache_impl *c = s->impl;
  (void)max_bytes; /* bounded at pack time; the index was checked at open */
  out->data = NULL;
  out->len = 0;
  out->bytes_read = 0;
  stk__cache_entry e;
  int rc = entry(s, i, &e, msg, msglen);
  if (rc) return rc;
  if (stk__buf_reserve(buf, (size_t)e.len + 1))
    return stk__fail(msg, msglen, STK_ENOMEM, "out of memory for %llu bytes",
                     (unsigned long long)e.len);
  size_t got = 0;
  while (got < e.len) {
    ssize_t r = pread(c->fd, (uint8_t *)buf->p + got, (size_t)e.len - got, (off_t)(e.off + got));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return stk__fail(msg, msglen, STK_EIO, "cannot read the cache file %s: %s", c->path,
                                strerror(errno));
    if (r == 0) break;
    got += (size_t)r;
  }
  out->bytes_read = got;
  /* a short read, or a rewrite during the read */
  if ((rc = file_unchanged(c, msg, msglen))) return rc;
  if (got < e.len) {
    atomic_store(&c->changed, CH_STAT);
    return file_unchanged(c, msg, msglen);
  }
  if (c->verify && stk__hash64(buf->p, (size_t)e.len, 0) != e.hash)
    return stk__fail(msg, msglen, STK_EDECODE,
                     "the cached bytes do not match their checksum (the cache file is corrupt)");
  out->data = buf->p;
  out->len = (size_t)e.len;
  return STK_OK;
}

static int cache_verify(const stk__source *s, int64_t i, char *msg, size_t msglen) {
  cache_impl *c = s->impl;
  stk__cache_entry e;
  int rc = entry(s, i, &e, msg, msglen);
  if (rc) return rc;
  uint64_t h = stk__hash64(c->map + e.off, (size_t)e.len, 0);
  /* zeros from a fault are not a corrupt cache: say what happened */
  if ((rc = file_unchanged(c, msg, msglen))) return rc;
  if (h != e.hash)
    return stk__fail(msg, msglen, STK_EDECODE,
                     "the cached bytes do not match their checksum (the cache file is corrupt)");
  return STK_OK;
}

static void cache_close(stk__source *s) {
  cache_impl *c = s->impl;
  if (!c) return;
  guard_remove(c->guard); /* before the unmap: the range may be mapped again */
  if (c->map) munmap((void *)c->map, c->size);
  if (c->fd >= 0) close(c->fd);
  free(c->path);
  free(c);
  s->impl = NULL;
}

static const stk__source_ops raw_ops = {
    .kind = "cache", .pixels = cache_pixels, .verify = cache_verify, .close = cache_close};
static const stk__source_ops jpeg_ops = {
    .kind = "cache", .read = cache_read, .verify = cache_verify, .close = cache_close};

/* The next NUL-terminated string of a run [*p, end), or NULL. */
static const char *next_str(const char **p, const char *end) {
  const char *s = *p;
  const char *z = s < end ? memchr(s, '\0', (size_t)(end - s)) : NULL;
  if (!z) return NULL;
  *p = z + 1;
  return s;
}

/* ---- the source files' stats -------------------------------------------- */

/* Stats every sample's source file and compares size and mtime with what
 * pack recorded. The work is system calls (round trips on network storage),
 * so threads help beyond the core count, as in the folder scan: up to 16,
 * or STOKER_SCAN_THREADS, and one per 2,048 files. */
typedef struct {
  const stk__dataset *ds;
  size_t skip;                 /* the "CACHE#" before each name */
  const stk__cache_stat *want;
  int64_t n;
  atomic_llong next, changed, first;
} stat_job;

#define STAT_CHUNK 256

static int stat_differs(const char *path, const stk__cache_stat *want, struct stat *st) {
  if (stat(path, st) != 0) return 1;
  int64_t ns = (int64_t)st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec;
  return (uint64_t)st->st_size != want->size || ns != want->mtime_ns;
}

static void stat_main(void *arg) {
  stat_job *j = arg;
  for (;;) {
    int64_t from = atomic_fetch_add(&j->next, STAT_CHUNK);
    if (from >= j->n) break;
    int64_t to = from + STAT_CHUNK < j->n ? from + STAT_CHUNK : j->n;
    for (int64_t i = from; i < to; i++) {
      struct stat st;
      if (!stat_differs(stk__dataset_path(j->ds, i) + j->skip, &j->want[i], &st)) continue;
      atomic_fetch_add(&j->changed, 1);
      long long f = atomic_load(&j->first);
      while (i < f && !atomic_compare_exchange_weak(&j->first, &f, i)) {
      }
    }
  }
}

static int stat_threads(int64_t n) {
  long t = 16;
  const char *e = getenv("STOKER_SCAN_THREADS");
  if (e && *e) {
    char *end;
    long v = strtol(e, &end, 10);
    if (!*end && v >= 1 && v <= 256) t = v;
  }
  int64_t by_n = (n + 2047) / 2048;
  return (int)(t < by_n ? t : by_n);
}

/* The number of samples whose file changed since the pack (size, mtime, or
 * gone), and in `first` the lowest such index. Threads that cannot be
 * started leave their share to the others. */
static int64_t changed_files(const stk__source *s, size_t skip, int64_t *first) {
  const cache_impl *c = s->impl;
  stat_job j;
  memset(&j, 0, sizeof j);
  j.ds = &s->ds;
  j.skip = skip;
  j.want = c->fst;
  j.n = s->ds.n;
  atomic_init(&j.next, 0);
  atomic_init(&j.changed, 0);
  atomic_init(&j.first, (long long)j.n);
  stk__workers_fanout("stk-cache", stat_threads(j.n), stat_main, &j); /* this thread is one */
  *first = (int64_t)atomic_load(&j.first);
  return (int64_t)atomic_load(&j.changed);
}

/* What changed about the file of sample i, for the message. */
static void describe_change(const stk__source *s, size_t skip, int64_t i, char *out,
                            size_t outlen) {
  const cache_impl *c = s->impl;
  const char *path = stk__dataset_path(&s->ds, i) + skip;
  stk__cache_stat want = c->fst[i];
  struct stat st;
  if (stat(path, &st) != 0) {
    snprintf(out, outlen, "%s: %s", path, strerror(errno));
    return;
  }
  int64_t ns = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
  if ((uint64_t)st.st_size != want.size)
    snprintf(out, outlen, "%s: now %lld bytes, packed at %llu", path, (long long)st.st_size,
             (unsigned long long)want.size);
  else
    snprintf(out, outlen, "%s: same size, modified %+.3f s after it was packed", path,
             (double)(ns - want.mtime_ns) / 1e9);
}

/* Compares the cache with the folder or list it was packed from, when that
 * still exists: the same names and labels, or the cache is stale. */
static int check_source(stk__source *s, const char *path, const char *kind, const char *where,
                        const char *base, const stk_options *opt, char *msg, size_t msglen) {
  struct stat st;
  if (!where || !*where) return STK_OK; /* no source recorded */
  /* Gone (the cache was copied to another machine, or the originals were
   * removed once packed, as with FFCV's .beton files): the cache holds all
   * it needs, so it is used, but not silently, since nothing was checked. */
  int gone = stat(where, &st) != 0, why_gone = errno;
  if (gone || (strcmp(kind, "list") && !S_ISDIR(st.st_mode))) {
    snprintf(s->note, sizeof s->note,
             "cache %s: its source %s %s %s, so it was not checked for changes; it is used as "
             "packed",
             path, kind, where,
             !gone                                       ? "is no longer a folder"
             : why_gone == ENOENT || why_gone == ENOTDIR ? "no longer exists"
                                                         : "cannot be read");
    return STK_OK;
  }
  stk_options o = *opt;
  o.root = o.list_file = o.list_base = NULL;
  stk__source src;
  memset(&src, 0, sizeof src);
  int rc;
  char why[256];
  if (!strcmp(kind, "list")) {
    o.list_file = where;
    o.list_base = base && *base ? base : NULL;
    rc = stk__list_open(&src, &o, why, sizeof why);
  } else {
    o.root = where;
    rc = stk__folder_open(&src, &o, why, sizeof why);
  }
  int stale = rc != STK_OK;
  const cache_impl *c = s->impl;
  if (!stale) stale = stk__dataset_list_fp(&src.ds) != c->hd.list_fp;
  int64_t now = rc == STK_OK ? src.ds.n : -1;
  stk__source_close(&src);
  if (!stale && c->fst) {
    /* The same list: now the files themselves, replaced under the same
     * name (size or mtime differ), or gone from under a list file. */
    size_t skip = strlen(path) + 1;
    int64_t first = 0, n = changed_files(s, skip, &first);
    if (n <= 0) return STK_OK;
    char which[3072], text[3584];
    describe_change(s, skip, first, which, sizeof which);
    snprintf(text, sizeof text,
             "cache %s is stale: %lld of its %lld files changed since it was packed (first: %s)",
             path, (long long)n, (long long)s->ds.n, which);
    if (!opt->allow_stale_cache)
      return stk__fail(msg, msglen, STK_ESTALE,
                       "%s; pack it again, or pass allow_stale_cache to use it as it is", text);
    /* the note may be cut short at its 256 bytes: the count comes first */
    size_t l = strlen(text) < sizeof s->note ? strlen(text) : sizeof s->note - 1;
    memcpy(s->note, text, l);
    s->note[l] = '\0';
    return STK_OK;
  }
  if (!stale) return STK_OK;
  char what[160];
  if (now >= 0)
    snprintf(what, sizeof what, "it now lists %lld samples, the cache holds %llu, or their names "
                                "or labels changed", (long long)now, (unsigned long long)c->hd.n);
  else
    snprintf(what, sizeof what, "it can no longer be read");
  if (!opt->allow_stale_cache)
    return stk__fail(msg, msglen, STK_ESTALE,
                     "cache %s is stale: %s %s changed since it was packed (%s); pack it again, "
                     "or pass allow_stale_cache to use it as it is",
                     path, kind, where, what);
  snprintf(s->note, sizeof s->note, "cache %s is stale: %s %s changed since it was packed (%s)",
           path, kind, where, what);
  return STK_OK;
}

/* A refusal of the cache's content: a file changing under the open reads
 * as zeros and fails some check, so say that it changed rather than that
 * it is corrupt. */
#if defined(__GNUC__)
__attribute__((format(printf, 4, 5)))
#endif
static int bad(cache_impl *c, char *msg, size_t msglen, const char *fmt, ...) {
  if (atomic_load(&c->changed)) return file_unchanged(c, msg, msglen);
  va_list ap;
  va_start(ap, fmt);
  stk__vfail(msg, msglen, STK_EDECODE, fmt, ap);
  va_end(ap);
  return STK_EDECODE;
}

/* The file opened, mapped and guarded: from here on a file cut short while
 * the index is read reads as zeros, fails its checksums, and is reported
 * as changed. */
static int map_cache(cache_impl *c, const char *path, char *msg, size_t msglen) {
  struct stat st;
  char why[256];
  int fd = stk__open_input(path, 0, &st, why, sizeof why);
  if (fd < 0) return stk__fail(msg, msglen, STK_EIO, "cache %s: %s", path, why);
  if (st.st_size < (off_t)STK__CACHE_DATA_OFF) {
    close(fd);
    return bad(c, msg, msglen, "cache %s is truncated: %lld bytes, shorter than its header", path,
               (long long)st.st_size);
  }
  c->fd = fd;
  c->st = st;
  void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
  if (m == MAP_FAILED) return stk__fail(msg, msglen, STK_EIO, "cannot map %s: %s", path, strerror(errno));
  c->map = m;
  c->size = (size_t)st.st_size;
  c->guard = guard_add(c->map, c->size, &c->changed);
  return STK_OK;
}

/* The header and the index's bounds and checksum. Every bound is checked
 * before anything is trusted or allocated. */
static int check_header(cache_impl *c, const char *path, char *msg, size_t msglen) {
  stk__cache_header *hd = &c->hd;
  memcpy(hd, c->map, sizeof *hd);
  if (memcmp(hd->magic, STK__CACHE_MAGIC, 8) != 0)
    return bad(c, msg, msglen, "%s is not a stoker cache", path);
  if (hd->version != STK__CACHE_VERSION)
    return stk__fail(msg, msglen, STK_EFORMAT,
                     "cache %s has format version %u; this build reads version %u: pack it again",
                     path, hd->version, STK__CACHE_VERSION);
  if (stk__hash64(hd, offsetof(stk__cache_header, header_hash), 0) != hd->header_hash)
    return bad(c, msg, msglen, "cache %s: the header is corrupt (checksum mismatch)", path);
  if (hd->encoding > STK_CACHE_JPEG)
    return bad(c, msg, msglen, "cache %s: unknown encoding %u", path, hd->encoding);
  if (hd->meta_off < hd->data_end || hd->data_end < STK__CACHE_DATA_OFF ||
      hd->meta_off > c->size || hd->meta_len > c->size - hd->meta_off)
    return bad(c, msg, msglen, "cache %s is truncated or corrupt: %zu bytes, its header expects %llu",
               path, c->size, (unsigned long long)(hd->meta_off + hd->meta_len));
  if (hd->n == 0 || hd->n > hd->meta_len / sizeof(stk__cache_entry) || hd->nclasses == 0 ||
      hd->nclasses > hd->n)
    return bad(c, msg, msglen, "cache %s: corrupt counts (%llu samples, %u classes)", path,
               (unsigned long long)hd->n, hd->nclasses);
  uint64_t strs = hd->meta_len - hd->n * sizeof(stk__cache_entry);
  if (hd->names_len + hd->classes_len + hd->source_len != strs)
    return bad(c, msg, msglen, "cache %s: corrupt index lengths", path);
  const uint8_t *meta = c->map + hd->meta_off;
  if (stk__hash64(meta, (size_t)hd->meta_len, 0) != hd->meta_hash)
    return bad(c, msg, msglen, "cache %s: the index is corrupt (checksum mismatch)", path);
  c->ent = (const stk__cache_entry *)meta; /* meta_off is a multiple of 64 */
  if ((uintptr_t)c->ent % _Alignof(stk__cache_entry))
    return bad(c, msg, msglen, "cache %s: misaligned index", path);
  return STK_OK;
}

/* Every index entry, and the table of file stats when the cache has one. */
static int check_entries(cache_impl *c, const char *path, char *msg, size_t msglen) {
  const stk__cache_header *hd = &c->hd;
  for (uint64_t i = 0; i < hd->n; i++) {
    const stk__cache_entry *e = &c->ent[i];
    /* Sizes are ints downstream, and w * h * 3 must not wrap round to the
     * length of a small sample. */
    if (e->off < STK__CACHE_DATA_OFF || e->off > hd->data_end || e->len > hd->data_end - e->off ||
        e->label < 0 || (uint32_t)e->label >= hd->nclasses || e->w == 0 || e->h == 0 ||
        e->w > INT32_MAX || e->h > INT32_MAX ||
        (hd->encoding == STK_CACHE_RAW && e->len != (uint64_t)e->w * e->h * 3))
      return bad(c, msg, msglen, "cache %s: index entry %llu is corrupt", path,
                 (unsigned long long)i);
  }
  if (!(hd->reserved & STK__CACHE_F_STATS)) return STK_OK;
  stk__cache_ext x;
  memcpy(&x, c->map + STK__CACHE_EXT_OFF, sizeof x);
  if (memcmp(x.magic, STK__CACHE_EXT_MAGIC, 8) ||
      stk__hash64(&x, offsetof(stk__cache_ext, ext_hash), 0) != x.ext_hash)
    return bad(c, msg, msglen, "cache %s: the header is corrupt (file stats)", path);
  if (x.stats_off % 8 || x.stats_off < hd->meta_off + hd->meta_len || x.stats_off > c->size ||
      x.stats_len != hd->n * sizeof(stk__cache_stat) || x.stats_len > c->size - x.stats_off)
    return bad(c, msg, msglen, "cache %s is truncated or corrupt: %zu bytes, its header expects %llu",
               path, c->size, (unsigned long long)(x.stats_off + x.stats_len));
  if (stk__hash64(c->map + x.stats_off, (size_t)x.stats_len, 0) != x.stats_hash)
    return bad(c, msg, msglen, "cache %s: the file stats are corrupt (checksum mismatch)", path);
  c->fst = (const stk__cache_stat *)(c->map + x.stats_off);
  return STK_OK;
}

/* The samples' names (CACHE#FILE: errors name the cache and the file the
 * sample was packed from) and labels, from *p on; *p then past them. */
static int read_names(stk__source *s, cache_impl *c, const char *path, const char **p,
                      const char *names_end, char *msg, size_t msglen) {
  size_t plen = strlen(path);
  stk__buf name = {0};
  int rc = STK_OK;
  for (uint64_t i = 0; rc == STK_OK && i < c->hd.n; i++) {
    const char *nm = next_str(p, names_end);
    if (!nm) {
      stk__buf_free(&name);
      return bad(c, msg, msglen, "cache %s: corrupt sample names", path);
    }
    size_t l = strlen(nm);
    if (stk__buf_reserve(&name, plen + l + 2)) {
      rc = STK_ENOMEM;
      break;
    }
    memcpy(name.p, path, plen);
    ((char *)name.p)[plen] = '#';
    memcpy((char *)name.p + plen + 1, nm, l + 1);
    rc = stk__dataset_add(&s->ds, name.p, c->ent[i].label);
  }
  stk__buf_free(&name);
  return rc ? stk__fail(msg, msglen, rc, "out of memory") : STK_OK;
}

/* The names, the class names and the source's description from the index;
 * then the source compared with the cache. */
static int read_index(stk__source *s, cache_impl *c, const char *path, const stk_options *opt,
                      char *msg, size_t msglen) {
  const stk__cache_header *hd = &c->hd;
  const char *p = (const char *)(c->map + hd->meta_off + hd->n * sizeof(stk__cache_entry));
  const char *names_end = p + hd->names_len, *classes_end = names_end + hd->classes_len;
  const char *src_end = classes_end + hd->source_len;
  int rc = read_names(s, c, path, &p, names_end, msg, msglen);
  if (rc) return rc;
  p = names_end;
  s->ds.classes = calloc(hd->nclasses, sizeof(char *));
  if (!s->ds.classes) return stk__fail(msg, msglen, STK_ENOMEM, "out of memory");
  for (uint32_t k = 0; k < hd->nclasses; k++) {
    const char *cn = next_str(&p, classes_end);
    if (!cn) return bad(c, msg, msglen, "cache %s: corrupt class names", path);
    if (!(s->ds.classes[k] = strdup(cn))) return stk__fail(msg, msglen, STK_ENOMEM, "out of memory");
    s->ds.nclasses = (int)k + 1;
  }
  p = classes_end;
  const char *kind = next_str(&p, src_end), *where = next_str(&p, src_end);
  const char *base = next_str(&p, src_end);
  if (!kind || !where || !base) return bad(c, msg, msglen, "cache %s: corrupt source description", path);
  s->ops = hd->encoding == STK_CACHE_RAW ? &raw_ops : &jpeg_ops;
  return check_source(s, path, kind, where, base, opt, msg, msglen);
}

int stk__cache_open(stk__source *s, const char *path, const stk_options *opt, char *msg,
                    size_t msglen) {
  cache_impl *c = calloc(1, sizeof *c);
  if (!c) return stk__fail(msg, msglen, STK_ENOMEM, "out of memory");
  c->fd = -1;
  c->verify = opt && opt->verify;
  s->impl = c;
  if (!(c->path = strdup(path))) return stk__fail(msg, msglen, STK_ENOMEM, "out of memory");
  s->ops = &raw_ops; /* close() until the encoding is known */
  int rc = map_cache(c, path, msg, msglen);
  if (rc == STK_OK) rc = check_header(c, path, msg, msglen);
  if (rc == STK_OK) rc = check_entries(c, path, msg, msglen);
  if (rc) return rc;
  rc = read_index(s, c, path, opt, msg, msglen);
  /* The names and the stats table were read from the map: a cache cut short
   * meanwhile gave zeros there (sizes "packed at 0"), so its own change is
   * the error, never a stale source that its zeros made up. */
  int changed = file_unchanged(c, msg, msglen);
  return changed ? changed : rc;
}

int stk__cache_describe(const stk__source *s, stk_cache_encoding *enc, int *max_side,
                        int *quality) {
  if (!s->ops || strcmp(s->ops->kind, "cache") || !s->impl) return STK_EINVAL;
  const cache_impl *c = s->impl;
  *enc = (stk_cache_encoding)c->hd.encoding;
  *max_side = (int)c->hd.max_side;
  *quality = (int)c->hd.quality;
  return STK_OK;
}
