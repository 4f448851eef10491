/* The pre-decoded cache: pack, read back through the loader, the same
 * pixels as the folder, coverage per rank, determinism, staleness, and
 * truncated or corrupted cache files. */
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "check.h"
#include "epoch.h"
#include "core/common.h"
#include "loader/pipeline.h"
#include "sources/cache_format.h"
#include "sources/source.h"

#define CLASSES 3
#define PER_CLASS 9
#define N (CLASSES * PER_CLASS)

static char *g_dir, *g_root;

typedef struct {
  int bad;
  char last[512];
} bad_log;

static void on_bad(void *user, const char *path, const char *reason) {
  bad_log *b = user;
  b->bad++;
  snprintf(b->last, sizeof b->last, "%s: %s", path, reason);
}

static int pack(const char *root, const char *out, stk_cache_encoding enc, int max_side,
                int threads, stk_pack_result *res, bad_log *log, char *err, size_t errlen) {
  stk_pack_options p;
  stk_pack_options_init(&p);
  p.root = root;
  p.output = out;
  p.encoding = enc;
  p.max_side = max_side;
  p.threads = threads;
  p.bad_file = on_bad;
  p.user = log;
  return STK_PACK(&p, res, err, errlen);
}

static void opts(stk_options *o, const char *root) {
  stk_options_init(o);
  o->root = root;
  o->size = 20;
  o->batch_size = 4;
  o->threads = 2;
  o->seed = 5;
}

/* Epoch e's pixels, labels and indices, appended to the buffers. */
static int64_t epoch(stk_loader *l, uint64_t e, stk__buf *pix, size_t *npix, int64_t *idx,
                     int64_t *lab) {
  stk_loader_set_epoch(l, e);
  return tu_run_epoch(l, pix, npix, idx, lab);
}

static uint8_t *slurp(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long len = ftell(f);
  fseek(f, 0, SEEK_SET);
  uint8_t *p = malloc((size_t)len + 1);
  *n = fread(p, 1, (size_t)len, f);
  fclose(f);
  return p;
}

/* Without a bound, a raw cache holds exactly the decoded files: with DCT
 * scaling off, every pipeline, dtype and layout gives the folder's bytes. */
static void test_same_pixels_as_folder(const char *cache) {
  stk_pipeline pipes[2] = {STK_PIPELINE_TRAIN, STK_PIPELINE_EVAL};
  stk_dtype dts[3] = {STK_DTYPE_FLOAT32, STK_DTYPE_UINT8, STK_DTYPE_BFLOAT16};
  for (int p = 0; p < 2; p++)
    for (int d = 0; d < 3; d++) {
      stk__buf px[2] = {{0}, {0}};
      size_t n[2] = {0, 0};
      int64_t lab[2][N], idx[2][N];
      for (int k = 0; k < 2; k++) {
        stk_options o;
        opts(&o, k ? cache : g_root);
        o.pipeline = pipes[p];
        o.dtype = dts[d];
        o.layout = d == 1 ? STK_LAYOUT_NHWC : STK_LAYOUT_NCHW;
        o.dct_scaling = 0;
        stk_loader *l = CHECK_CREATE(&o, STK_OK);
        if (!l) return;
        CHECK(!strcmp(stk_loader_source_kind(l), k ? "cache" : "folder"));
        CHECK_EQ_INT(epoch(l, 1, &px[k], &n[k], idx[k], lab[k]), N);
        if (k) {
          CHECK_EQ_INT(stk_loader_num_classes(l), CLASSES);
          CHECK(!strcmp(stk_loader_class_name(l, 2), "class002"));
          const char *name = stk_loader_sample_path(l, 0);
          CHECK(name && strstr(name, "#") && strstr(name, "class000/img0000.jpg"));
        }
        stk_loader_destroy(l);
      }
      CHECK(n[0] == n[1] && n[0] > 0 && !memcmp(px[0].p, px[1].p, n[0]));
      CHECK(!memcmp(lab[0], lab[1], sizeof lab[0]) && !memcmp(idx[0], idx[1], sizeof idx[0]));
      stk__buf_free(&px[0]);
      stk__buf_free(&px[1]);
    }
}

static void test_bound_and_jpeg(void) {
  char out[1024], err[512];
  stk_pack_result r;
  bad_log log = {0};
  snprintf(out, sizeof out, "%s/b.stkc", g_dir);
  CHECK_EQ_INT(pack(g_root, out, STK_CACHE_RAW, 40, 2, &r, &log, err, sizeof err), STK_OK);
  stk_options o;
  opts(&o, out);
  stk__source src;
  CHECK_EQ_INT(stk__source_open(&src, &o, err, sizeof err), STK_OK);
  for (int64_t i = 0; i < src.ds.n; i++) {
    stk__pixels px;
    CHECK_EQ_INT(src.ops->pixels(&src, i, &px, err, sizeof err), STK_OK);
    CHECK(px.w <= 40 && px.h <= 40 && (px.w == 40 || px.h == 40)); /* originals are larger */
    CHECK_EQ_INT(stk__check_sample(&src, i, &o, NULL, NULL, err, sizeof err), STK_OK);
  }
  stk_cache_encoding enc;
  int ms, q;
  CHECK_EQ_INT(stk__cache_describe(&src, &enc, &ms, &q), STK_OK);
  CHECK(enc == STK_CACHE_RAW && ms == 40);
  stk__source_close(&src);
  int nw, nh;
  stk__bound_size(300, 200, 40, &nw, &nh);
  CHECK(nw == 40 && nh == 27);
  stk__bound_size(7, 500, 40, &nw, &nh);
  CHECK(nw == 1 && nh == 40);
  stk__bound_size(30, 20, 40, &nw, &nh);
  CHECK(nw == 30 && nh == 20);

  /* jpeg: smaller than raw, decodes, the loader delivers every sample */
  char outj[1024];
  snprintf(outj, sizeof outj, "%s/j.stkc", g_dir);
  stk_pack_result rj;
  CHECK_EQ_INT(pack(g_root, outj, STK_CACHE_JPEG, 40, 2, &rj, &log, err, sizeof err), STK_OK);
  CHECK(rj.packed == N && rj.bytes < r.bytes);
  opts(&o, outj);
  stk_loader *l = CHECK_CREATE(&o, STK_OK);
  if (l) {
    int64_t idx[N];
    CHECK_EQ_INT(epoch(l, 0, NULL, NULL, idx, NULL), N);
    stk_loader_destroy(l);
  }
  unlink(out);
  unlink(outj);
}

static void test_coverage_per_rank(const char *cache) {
  int worlds[4] = {1, 2, 3, 8};
  for (int w = 0; w < 4; w++) {
    int seen[N] = {0};
    int64_t lens[8];
    for (int r = 0; r < worlds[w]; r++) {
      stk_options o;
      opts(&o, cache);
      o.world_size = worlds[w];
      o.rank = r;
      stk_loader *l = CHECK_CREATE(&o, STK_OK);
      if (!l) return;
      int64_t idx[N];
      int64_t n = epoch(l, 3, NULL, NULL, idx, NULL);
      lens[r] = stk_loader_len(l);
      for (int64_t i = 0; i < n; i++) seen[idx[i]]++;
      stk_loader_destroy(l);
    }
    int padded = (N + worlds[w] - 1) / worlds[w] * worlds[w] - N, once = 0, twice = 0;
    for (int i = 0; i < N; i++) once += seen[i] == 1, twice += seen[i] == 2;
    CHECK_MSG(once + twice == N && twice == padded, "world %d: %d once, %d twice", worlds[w], once,
              twice);
    for (int r = 1; r < worlds[w]; r++) CHECK_EQ_INT(lens[r], lens[0]);
  }
}

static void test_threads_same_bytes(const char *cache) {
  char out[1024], err[512];
  stk_pack_result r;
  bad_log log = {0};
  snprintf(out, sizeof out, "%s/t1.stkc", g_dir);
  CHECK_EQ_INT(pack(g_root, out, STK_CACHE_RAW, 0, 1, &r, &log, err, sizeof err), STK_OK);
  size_t n1, n2;
  uint8_t *a = slurp(out, &n1), *b = slurp(cache, &n2);
  CHECK(a && b && n1 == n2 && !memcmp(a, b, n1));
  free(a);
  free(b);
  unlink(out);
  stk__buf px[2] = {{0}, {0}};
  size_t n[2] = {0, 0};
  for (int k = 0; k < 2; k++) {
    stk_options o;
    opts(&o, cache);
    o.threads = k ? 3 : 1;
    stk_loader *l = CHECK_CREATE(&o, STK_OK);
    if (!l) return;
    epoch(l, 2, &px[k], &n[k], NULL, NULL);
    stk_loader_destroy(l);
  }
  CHECK(n[0] == n[1] && n[0] > 0 && !memcmp(px[0].p, px[1].p, n[0]));
  stk__buf_free(&px[0]);
  stk__buf_free(&px[1]);
}

static void test_bad_files_left_out(void) {
  char src[1024], p[1400], out[1200], err[512];
  snprintf(src, sizeof src, "%s/withbad", g_dir);
  tu_mkdir(src);
  CHECK_EQ_INT(tu_make_folder(src, 2, 3, 50, 40), STK_OK);
  snprintf(p, sizeof p, "%s/class001/broken.jpg", src);
  tu_write_bytes(p, "\xff\xd8\xff\xe0 not a jpeg", 16);
  snprintf(out, sizeof out, "%s/withbad.stkc", g_dir);
  stk_pack_result r;
  bad_log log = {0};
  CHECK_EQ_INT(pack(src, out, STK_CACHE_RAW, 0, 2, &r, &log, err, sizeof err), STK_OK);
  CHECK(r.packed == 6 && r.failed == 1 && log.bad == 1 && strstr(log.last, "broken.jpg"));
  stk_options o;
  opts(&o, out);
  stk_loader *l = CHECK_CREATE(&o, STK_OK);
  if (l) {
    CHECK_EQ_INT(stk_loader_num_samples(l), 6);
    stk_loader_destroy(l);
  }

  /* The folder changed: refused, or used with a note under allow_stale_cache. */
  snprintf(p, sizeof p, "%s/class000/new.jpg", src);
  CHECK_EQ_INT(tu_write_jpeg(p, 30, 30, 99, 90), STK_OK);
  l = CHECK_CREATE(&o, STK_ESTALE);
  stk_loader_destroy(l);
  char e2[1024];
  CHECK_EQ_INT(STK_LOADER_CREATE(&o, &l, e2, sizeof e2), STK_ESTALE);
  CHECK(strstr(e2, "stale") && strstr(e2, src));
  o.allow_stale_cache = 1;
  l = CHECK_CREATE(&o, STK_OK);
  if (l) {
    CHECK(strstr(stk_loader_note(l), "stale") != NULL);
    stk_loader_destroy(l);
  }
  /* The folder is gone (the cache moved to another machine): self-contained,
   * used, and the note says that it was not checked. */
  o.allow_stale_cache = 0;
  tu_rmtree(src);
  l = CHECK_CREATE(&o, STK_OK);
  if (l) {
    const char *note = stk_loader_note(l);
    CHECK_MSG(strstr(note, "no longer exists") && strstr(note, src) && strstr(note, "not checked"),
              "%s", note);
    CHECK_EQ_INT(stk_loader_num_samples(l), 6);
    stk_loader_destroy(l);
  }
  unlink(out);

  /* Nothing packable: an error, and no output or temporary file left. */
  char empty[1200];
  snprintf(empty, sizeof empty, "%s/allbad", g_dir);
  tu_mkdir(empty);
  snprintf(p, sizeof p, "%s/c", empty);
  tu_mkdir(p);
  snprintf(p, sizeof p, "%s/c/x.jpg", empty);
  tu_write_bytes(p, "garbage", 7);
  snprintf(out, sizeof out, "%s/allbad.stkc", g_dir);
  CHECK_EQ_INT(pack(empty, out, STK_CACHE_RAW, 0, 1, &r, &log, err, sizeof err), STK_EEMPTY);
  CHECK(access(out, F_OK) != 0);
  char tmp[1300];
  snprintf(tmp, sizeof tmp, "%s.tmp-%ld", out, (long)getpid());
  CHECK(access(tmp, F_OK) != 0);
  /* a header of another version is refused */
  stk_pack_options pv;
  stk_pack_options_init(&pv);
  pv.root = empty;
  pv.output = out;
  CHECK_EQ_INT(stk_pack(&pv, 99 * 10000, &r, err, sizeof err), STK_EVERSION);
  CHECK(strstr(err, "rebuild") != NULL);
  /* bad options */
  CHECK_EQ_INT(pack(empty, out, STK_CACHE_RAW, -1, 1, &r, &log, err, sizeof err), STK_EINVAL);
  CHECK_EQ_INT(pack(out, out, STK_CACHE_RAW, 0, 1, &r, &log, err, sizeof err), STK_EIO);
  tu_rmtree(empty);
}

/* Truncated and corrupted caches: a clear error at open, or (pixel bytes) a
 * checksum failure that stoker check reports; never a crash. */
static void test_damaged(const char *cache) {
  size_t n;
  uint8_t *good = slurp(cache, &n);
  if (!good) return;
  char path[1024], err[1024];
  snprintf(path, sizeof path, "%s/damaged.stkc", g_dir);
  stk__rng rng;
  stk__rng_init(&rng, 7, 0, 0);
  int open_fail = 0, check_fail = 0;
  for (int t = 0; t < 60; t++) {
    size_t len = n;
    uint8_t *b = malloc(n);
    memcpy(b, good, n);
    int truncate = t % 3 == 0;
    size_t at = (size_t)stk__rng_range(&rng, 0, (int64_t)n);
    if (truncate)
      len = at;
    else
      for (int k = 0; k < 4; k++) b[(at + (size_t)k * 977) % n] ^= (uint8_t)(1 + t % 255);
    tu_write_bytes(path, b, len);
    free(b);
    stk_options o;
    opts(&o, path);
    stk__source src;
    int rc = stk__source_open(&src, &o, err, sizeof err);
    if (rc) {
      open_fail++;
      CHECK_MSG(strstr(err, path) != NULL, "error does not name the cache: %s", err);
      if (truncate) CHECK(rc == STK_EDECODE || rc == STK_EIO);
      stk__source_close(&src);
      continue;
    }
    CHECK_MSG(!truncate || len == n, "a cache truncated at %zu of %zu opened", len, n);
    int bad = 0;
    for (int64_t i = 0; i < src.ds.n; i++)
      bad += stk__check_sample(&src, i, &o, NULL, NULL, err, sizeof err) != STK_OK;
    /* flipped bits in the header's padding change nothing that is read */
    check_fail += bad > 0;
    stk__source_close(&src);
  }
  CHECK(open_fail >= 20);
  CHECK(check_fail > 0);
  /* not a cache at all */
  tu_write_bytes(path, "STKCACHE", 8);
  stk_options o;
  opts(&o, path);
  stk_loader *l = CHECK_CREATE(&o, STK_EDECODE);
  stk_loader_destroy(l);
  unlink(path);
  free(good);
}

/* ---- source files replaced under the same name ------------------------- */

/* Opens cache (allow_stale_cache as given): the return code, the error or
 * the note, and with STK_OK the samples of one epoch. */
static int open_cache(const char *cache, int allow, char *text, size_t textlen, int64_t *got) {
  stk_options o;
  opts(&o, cache);
  o.allow_stale_cache = allow;
  stk_loader *l = NULL;
  text[0] = '\0';
  int rc = STK_LOADER_CREATE(&o, &l, text, textlen);
  *got = -1;
  if (rc == STK_OK) {
    snprintf(text, textlen, "%s", stk_loader_note(l));
    *got = tu_run_epoch(l, NULL, NULL, NULL, NULL);
  }
  stk_loader_destroy(l);
  return rc;
}

/* Moves path's mtime by delta_ns, keeping its bytes and size. */
static void shift_mtime(const char *path, long delta_ns) {
  struct stat st;
  CHECK(stat(path, &st) == 0);
  struct timespec ts[2] = {st.st_atim, st.st_mtim};
  long long ns = (long long)ts[1].tv_sec * 1000000000 + ts[1].tv_nsec + delta_ns;
  ts[1].tv_sec = (time_t)(ns / 1000000000);
  ts[1].tv_nsec = (long)(ns % 1000000000);
  CHECK(utimensat(AT_FDCWD, path, ts, 0) == 0);
}

/* The cache as a build before the per-file stats wrote it: no flag, no
 * extension in the header's padding, no table after the strings. */
static void write_old_format(const char *cache, const char *out) {
  size_t n;
  uint8_t *b = slurp(cache, &n);
  if (!b) return;
  stk__cache_header hd;
  memcpy(&hd, b, sizeof hd);
  CHECK(hd.reserved == STK__CACHE_F_STATS);
  CHECK(n > hd.meta_off + hd.meta_len);
  hd.reserved = 0;
  hd.header_hash = stk__hash64(&hd, offsetof(stk__cache_header, header_hash), 0);
  memset(b, 0, STK__CACHE_DATA_OFF);
  memcpy(b, &hd, sizeof hd);
  tu_write_bytes(out, b, (size_t)(hd.meta_off + hd.meta_len));
  free(b);
}

static void test_replaced_files(void) {
  char src[1024], cache[1100], old[1100], p[1200], q[1200], text[2048], err[512];
  snprintf(src, sizeof src, "%s/replaced", g_dir);
  snprintf(cache, sizeof cache, "%s/replaced.stkc", g_dir);
  snprintf(old, sizeof old, "%s/replaced-old.stkc", g_dir);
  tu_mkdir(src);
  CHECK_EQ_INT(tu_make_folder(src, 2, 4, 40, 30), STK_OK);
  stk_pack_result r;
  bad_log log = {0};
  CHECK_EQ_INT(pack(src, cache, STK_CACHE_RAW, 0, 2, &r, &log, err, sizeof err), STK_OK);
  write_old_format(cache, old);
  int64_t got;
  /* untouched: both open without a note */
  CHECK_EQ_INT(open_cache(cache, 0, text, sizeof text, &got), STK_OK);
  CHECK_MSG(!strcmp(text, "") && got == 8, "%s (%lld samples)", text, (long long)got);
  CHECK_EQ_INT(open_cache(old, 0, text, sizeof text, &got), STK_OK);
  CHECK_MSG(!strcmp(text, "") && got == 8, "%s (%lld samples)", text, (long long)got);

  /* same name, another size */
  snprintf(p, sizeof p, "%s/class001/img0002.jpg", src);
  size_t n0;
  uint8_t *orig = slurp(p, &n0);
  CHECK_EQ_INT(tu_write_jpeg(p, 44, 30, 77, 90), STK_OK);
  CHECK_EQ_INT(open_cache(cache, 0, text, sizeof text, &got), STK_ESTALE);
  CHECK_MSG(strstr(text, "is stale: 1 of its 8 files changed") && strstr(text, p) &&
                strstr(text, "bytes, packed at") && strstr(text, "allow_stale_cache"),
            "%s", text);
  /* used as it is under allow_stale_cache, and the note says so */
  CHECK_EQ_INT(open_cache(cache, 1, text, sizeof text, &got), STK_OK);
  CHECK_MSG(strstr(text, "is stale: 1 of its 8 files changed") && got == 8, "%s", text);
  /* an old cache keeps its old check: the list is the same, so it opens */
  CHECK_EQ_INT(open_cache(old, 0, text, sizeof text, &got), STK_OK);
  CHECK_MSG(!strcmp(text, "") && got == 8, "%s", text);

  /* the same bytes and size back, a different mtime (1.5 ms later): stale */
  struct stat st0;
  tu_write_bytes(p, orig, n0);
  CHECK(stat(p, &st0) == 0 && (size_t)st0.st_size == n0);
  shift_mtime(p, 1500000);
  CHECK_EQ_INT(open_cache(cache, 0, text, sizeof text, &got), STK_ESTALE);
  CHECK_MSG(strstr(text, "1 of its 8 files changed") && strstr(text, p) &&
                strstr(text, "same size, modified"),
            "%s", text);

  /* a second one changed: counted, the first in sample order named */
  snprintf(q, sizeof q, "%s/class000/img0001.jpg", src);
  shift_mtime(q, -2000000000L);
  CHECK_EQ_INT(open_cache(cache, 0, text, sizeof text, &got), STK_ESTALE);
  CHECK_MSG(strstr(text, "2 of its 8 files changed") && strstr(text, q) && !strstr(text, p),
            "%s", text);
  free(orig);

  /* an added file: the list check, in the new and the old format alike */
  snprintf(p, sizeof p, "%s/class000/zz-new.jpg", src);
  CHECK_EQ_INT(tu_write_jpeg(p, 30, 30, 5, 90), STK_OK);
  CHECK_EQ_INT(open_cache(old, 0, text, sizeof text, &got), STK_ESTALE);
  CHECK_MSG(strstr(text, "it now lists 9 samples"), "%s", text);
  CHECK_EQ_INT(open_cache(cache, 0, text, sizeof text, &got), STK_ESTALE);
  CHECK_MSG(strstr(text, "it now lists 9 samples"), "%s", text);
  unlink(old);
  unlink(cache);

  /* A list file's cache: a listed file deleted leaves the list as it was,
   * and only the stats see it. */
  char list[1100];
  snprintf(list, sizeof list, "%s/replaced.txt", g_dir);
  FILE *f = fopen(list, "w");
  for (int i = 0; f && i < 4; i++) fprintf(f, "%s/class001/img%04d.jpg %d\n", src, i, i % 2);
  if (f) fclose(f);
  stk_pack_options po;
  stk_pack_options_init(&po);
  po.list_file = list;
  po.output = cache;
  po.max_side = 0;
  CHECK_EQ_INT(STK_PACK(&po, &r, err, sizeof err), STK_OK);
  CHECK_EQ_INT(open_cache(cache, 0, text, sizeof text, &got), STK_OK);
  CHECK_MSG(!strcmp(text, "") && got == 4, "%s", text);
  snprintf(p, sizeof p, "%s/class001/img0003.jpg", src);
  unlink(p);
  CHECK_EQ_INT(open_cache(cache, 0, text, sizeof text, &got), STK_ESTALE);
  CHECK_MSG(strstr(text, "1 of its 4 files changed") && strstr(text, p) &&
                strstr(text, "No such file"),
            "%s", text);
  /* the list gone too: used as packed, with the note */
  unlink(list);
  CHECK_EQ_INT(open_cache(cache, 0, text, sizeof text, &got), STK_OK);
  CHECK_MSG(strstr(text, "its source list") && strstr(text, "no longer exists") && got == 4, "%s",
            text);
  unlink(cache);
  tu_rmtree(src);
}

/* ---- a cache file that changes while it is read ------------------------- */

/* Runs fn in a child process and checks that the child exits with `want`
 * (a signal death, a SIGBUS before the guard existed, fails the check). */
static void in_child(void (*fn)(void *), void *arg, int want, const char *what) {
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    fn(arg);
    fflush(NULL);
    _exit(check_failed_ ? 1 : 0);
  }
  int st = 0;
  CHECK(pid > 0 && waitpid(pid, &st, 0) == pid);
  if (WIFSIGNALED(st))
    CHECK_MSG(0, "%s: the child died of signal %d (%s)", what, WTERMSIG(st), strsignal(WTERMSIG(st)));
  else
    CHECK_MSG(WIFEXITED(st) && WEXITSTATUS(st) == want, "%s: the child exited with %d, expected %d",
              what, WEXITSTATUS(st), want);
}

/* The file's bytes rewritten in place, as `cp` over it does: truncated to
 * nothing, then written again in chunks. */
static void rewrite(const char *path, const uint8_t *p, size_t n) {
  int fd = open(path, O_WRONLY | O_TRUNC);
  for (size_t at = 0; fd >= 0 && at < n;) {
    size_t k = n - at < 65536 ? n - at : 65536;
    ssize_t w = write(fd, p + at, k);
    if (w <= 0) break;
    at += (size_t)w;
  }
  if (fd >= 0) close(fd);
}

static void sleep_us(long us) {
  struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
  nanosleep(&ts, NULL);
}

static int g_caught;
static void catch_bus(int sig, siginfo_t *si, void *uc) {
  (void)sig, (void)si, (void)uc;
  _exit(g_caught);
}

/* A page past the end of some other mapped file. */
static void touch_truncated_mapping(void) {
  char p[1100];
  snprintf(p, sizeof p, "%s/other-%d.bin", g_dir, (int)getpid());
  uint8_t z[8192] = {1};
  tu_write_bytes(p, z, sizeof z);
  int fd = open(p, O_RDWR);
  volatile uint8_t *m = mmap(NULL, sizeof z, PROT_READ, MAP_SHARED, fd, 0);
  CHECK(m != MAP_FAILED && ftruncate(fd, 0) == 0);
  unlink(p);
  (void)m[100]; /* SIGBUS */
}

/* Faults that are not in a cache's mapping, and SIGBUS sent by kill, go to
 * the handler that was there before the guard; by default they still kill
 * the process. Run before the parent opens any cache (the guard is
 * installed once per process, at the first open). */
static void foreign_to_own_handler(void *cache) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = catch_bus;
  sa.sa_flags = SA_SIGINFO;
  g_caught = 42;
  sigaction(SIGBUS, &sa, NULL);
  stk_options o;
  opts(&o, cache);
  stk__source src;
  char err[512];
  CHECK_EQ_INT(stk__source_open(&src, &o, err, sizeof err), STK_OK); /* installs the guard */
  touch_truncated_mapping(); /* exits 42 from catch_bus */
  _exit(3);
}
static void foreign_default(void *cache) {
  stk_options o;
  opts(&o, cache);
  stk__source src;
  char err[512];
  CHECK_EQ_INT(stk__source_open(&src, &o, err, sizeof err), STK_OK);
  touch_truncated_mapping();
  _exit(0); /* survived a fault that is not the guard's: wrong */
}
static void foreign_kill(void *cache) {
  stk_options o;
  opts(&o, cache);
  stk__source src;
  char err[512];
  CHECK_EQ_INT(stk__source_open(&src, &o, err, sizeof err), STK_OK);
  kill(getpid(), SIGBUS);
  _exit(0);
}
static void test_foreign_sigbus(const char *cache) {
  in_child(foreign_to_own_handler, (void *)cache, 42, "a fault outside the cache, own handler");
  /* the default action: killed by SIGBUS natively; a sanitizer's handler
   * reports the fault and exits non-zero. Either way, not exit 0. */
  const char *what[] = {"a fault outside the cache", "SIGBUS sent by kill"};
  void (*fn[])(void *) = {foreign_default, foreign_kill};
  printf("two children die of SIGBUS now: a sanitizer's report of it is expected\n");
  for (int k = 0; k < 2; k++) {
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
      fn[k]((void *)cache);
      _exit(0);
    }
    int st = 0;
    CHECK(waitpid(pid, &st, 0) == pid);
    CHECK_MSG(!(WIFEXITED(st) && WEXITSTATUS(st) == 0), "%s was swallowed", what[k]);
    CHECK_MSG(!WIFSIGNALED(st) || WTERMSIG(st) == SIGBUS, "%s: signal %d", what[k], WTERMSIG(st));
  }
}

/* Handlers that come after the guard (faulthandler.enable(), Python's
 * signal.signal(SIGBUS, ...) after a loader opened): the guard goes back in
 * front at the next sample and chains to them. */
static struct sigaction g_their_prev;
static void reraise_bus(int sig) {
  /* what faulthandler does once it has dumped its traceback */
  sigaction(sig, &g_their_prev, NULL);
  raise(sig);
}
static void return_bus(int sig) { (void)sig; } /* what Python's C-level handler does */
static void set_handler(void (*fn)(int)) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = fn;
  sa.sa_flags = SA_NODEFER;
  sigaction(SIGBUS, &sa, &g_their_prev);
}
/* mode 0: the later handler exits 42 from a foreign fault; 1: it re-raises
 * (the process dies of SIGBUS, no loop); 2: it returns into the fault (the
 * guard stops the loop: death by SIGBUS); 3: a cache's fault with the later
 * handler installed reads zeros and fails the next sample. */
typedef struct {
  const char *cache, *live;
  int mode;
} later_args;
static void later_handler(void *arg) {
  const later_args *a = arg;
  alarm(20); /* a fault loop fails the check (SIGALRM), never hangs it */
  size_t n;
  uint8_t *good = slurp(a->cache, &n);
  tu_write_bytes(a->live, good, n);
  free(good);
  stk_options o;
  opts(&o, a->live);
  stk__source src;
  char err[1024];
  CHECK_EQ_INT(stk__source_open(&src, &o, err, sizeof err), STK_OK);
  if (a->mode == 0) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = catch_bus;
    sa.sa_flags = SA_SIGINFO;
    g_caught = 42;
    sigaction(SIGBUS, &sa, NULL);
  } else {
    set_handler(a->mode == 2 ? return_bus : reraise_bus);
  }
  stk__pixels px;
  int64_t last = src.ds.n - 1;
  CHECK_EQ_INT(src.ops->pixels(&src, last, &px, err, sizeof err), STK_OK); /* back in front */
  if (a->mode < 3) {
    touch_truncated_mapping();
    _exit(a->mode == 0 ? 3 : 0); /* survived a foreign fault: wrong */
  }
  CHECK(truncate(a->live, 8192) == 0);
  volatile const uint8_t *end = px.px + px.stride * (size_t)px.h - 1;
  CHECK_EQ_INT(*end, 0);
  CHECK_EQ_INT(src.ops->pixels(&src, 0, &px, err, sizeof err), STK_EIO);
  CHECK_MSG(strstr(err, "changed while it was read (truncated to 8192"), "%s", err);
  stk__source_close(&src);
}

/* More caches open at once than one chunk of the registry: the last one
 * opened is guarded too. */
static void many_caches(void *arg) {
  const later_args *a = arg;
  size_t n;
  uint8_t *good = slurp(a->cache, &n);
  tu_write_bytes(a->live, good, n);
  free(good);
  enum { K = 600 };
  static stk__source src[K];
  stk_options o;
  opts(&o, a->live);
  char err[1024];
  for (int k = 0; k < K; k++) CHECK_EQ_INT(stk__source_open(&src[k], &o, err, sizeof err), STK_OK);
  stk__pixels px;
  int64_t last = src[K - 1].ds.n - 1;
  CHECK_EQ_INT(src[K - 1].ops->pixels(&src[K - 1], last, &px, err, sizeof err), STK_OK);
  CHECK(truncate(a->live, 8192) == 0);
  volatile const uint8_t *end = px.px + px.stride * (size_t)px.h - 1;
  CHECK_EQ_INT(*end, 0); /* SIGBUS past the 256th, before */
  CHECK_EQ_INT(src[K - 1].ops->pixels(&src[K - 1], 0, &px, err, sizeof err), STK_EIO);
  for (int k = 0; k < K; k++) stk__source_close(&src[k]);
}

static void test_later_handlers(const char *cache) {
  char live[1100];
  snprintf(live, sizeof live, "%s/later.stkc", g_dir);
  later_args a = {cache, live, 0};
  in_child(later_handler, &a, 42, "a foreign fault, a handler set after the open");
  a.mode = 3;
  in_child(later_handler, &a, 0, "a cache's fault, a handler set after the open");
  in_child(many_caches, &a, 0, "600 caches open at once");
  /* dies of SIGBUS, once: no loop between the handlers */
  const char *what[] = {"a handler that raises again", "a handler that returns"};
  printf("two children die of SIGBUS now: a sanitizer's report of it is expected\n");
  for (int m = 1; m <= 2; m++) {
    a.mode = m;
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
      later_handler(&a);
      _exit(0);
    }
    int st = 0;
    CHECK(waitpid(pid, &st, 0) == pid);
    CHECK_MSG(WIFSIGNALED(st) && WTERMSIG(st) == SIGBUS, "%s: status %d (signal %d)", what[m - 1],
              st, WIFSIGNALED(st) ? WTERMSIG(st) : 0);
  }
  unlink(live);
}

typedef struct {
  const char *cache;
  const char *live;
} change_args;

/* Deterministic: pixels lent before the file is cut short read as zeros
 * past its new end (no SIGBUS), and every later call of the source fails
 * with STK_EIO naming the file. */
static void lent_pixels_then_truncate(void *arg) {
  const change_args *a = arg;
  size_t n;
  uint8_t *good = slurp(a->cache, &n);
  tu_write_bytes(a->live, good, n);
  stk_options o;
  opts(&o, a->live);
  stk__source src;
  char err[1024];
  CHECK_EQ_INT(stk__source_open(&src, &o, err, sizeof err), STK_OK);
  int64_t last = src.ds.n - 1;
  stk__pixels px;
  CHECK_EQ_INT(src.ops->pixels(&src, last, &px, err, sizeof err), STK_OK);
  CHECK(truncate(a->live, 8192) == 0);
  volatile const uint8_t *end = px.px + px.stride * (size_t)px.h - 1;
  CHECK_EQ_INT(*end, 0); /* SIGBUS without the guard */
  for (int64_t i = 0; i <= last; i += last) {
    CHECK_EQ_INT(src.ops->pixels(&src, i, &px, err, sizeof err), STK_EIO);
    CHECK_MSG(strstr(err, a->live) && strstr(err, "changed while it was read (truncated to 8192"),
              "%s", err);
  }
  CHECK_EQ_INT(src.ops->verify(&src, 0, err, sizeof err), STK_EIO);
  stk__source_close(&src);
  /* rewritten in place with the same bytes, a clock tick later: seen by its
   * times, no read faults */
  tu_write_bytes(a->live, good, n);
  CHECK_EQ_INT(stk__source_open(&src, &o, err, sizeof err), STK_OK);
  sleep_us(20000);
  rewrite(a->live, good, n);
  CHECK_EQ_INT(src.ops->pixels(&src, 0, &px, err, sizeof err), STK_EIO);
  CHECK_MSG(strstr(err, "changed while it was read (rewritten)"), "%s", err);
  stk__source_close(&src);
  free(good);
}

typedef struct {
  const char *live;
  const uint8_t *good;
  size_t n;
  int delay_us, mode;
} cutter;

static void *cut_later(void *arg) {
  cutter *c = arg;
  sleep_us(c->delay_us);
  if (c->mode == 0)
    CHECK(truncate(c->live, 8192) == 0);
  else
    rewrite(c->live, c->good, c->n);
  return NULL;
}

/* The loader reading a file that is truncated (or rewritten, as cp over it
 * does) at a random moment: each run ends with STK_EIO and a message naming
 * the file, never a signal. */
static void loader_while_file_changes(void *arg) {
  const change_args *a = arg;
  size_t n;
  uint8_t *good = slurp(a->cache, &n);
  stk__rng rng;
  stk__rng_init(&rng, 11, 0, 0);
  int iters = getenv("STK_CHANGE_ITERS") ? atoi(getenv("STK_CHANGE_ITERS")) : 20;
  for (int it = 0; it < iters; it++) {
    tu_write_bytes(a->live, good, n);
    sleep_us(20000); /* a rewrite must fall in a later tick of the file clock */
    stk_options o;
    opts(&o, a->live);
    o.batch_size = 1 + it % 3;
    o.threads = 1 + it % 2;
    o.size = 64;
    stk_loader *l = CHECK_CREATE(&o, STK_OK);
    if (!l) continue;
    cutter c = {a->live, good, n, (int)stk__rng_range(&rng, 0, 20000), it % 4 == 3};
    pthread_t th;
    pthread_create(&th, NULL, cut_later, &c);
    int rc = STK_OK;
    double t0 = stk__now();
    for (uint64_t e = 0; rc != STK_EIO && stk__now() - t0 < 10; e++) {
      stk_loader_set_epoch(l, e);
      stk_batch b;
      while ((rc = stk_loader_next(l, &b)) == STK_OK) stk_batch_release(l, &b);
      if (rc != STK_EEND && rc != STK_EIO) break;
    }
    pthread_join(th, NULL);
    const char *m = stk_loader_error(l);
    CHECK_MSG(rc == STK_EIO && strstr(m, a->live) && strstr(m, "changed while it was read ("),
              "run %d (%s): %s: %s", it, c.mode ? "rewritten" : "truncated", stk_strerror(rc), m);
    stk_loader_destroy(l);
  }
  free(good);
}

static void test_changing_file(void) {
  /* larger images than the others use, so that reads are in flight */
  char root[1100], cache[1100], live[1100], err[512];
  snprintf(root, sizeof root, "%s/big", g_dir);
  snprintf(cache, sizeof cache, "%s/big.stkc", g_dir);
  snprintf(live, sizeof live, "%s/live.stkc", g_dir);
  tu_mkdir(root);
  CHECK_EQ_INT(tu_make_folder(root, 2, 6, 400, 300), STK_OK);
  stk_pack_result r;
  bad_log log = {0};
  for (int enc = 0; enc < 2; enc++) {
    stk_cache_encoding e = enc ? STK_CACHE_JPEG : STK_CACHE_RAW;
    unlink(cache);
    CHECK_EQ_INT(pack(root, cache, e, 0, 2, &r, &log, err, sizeof err), STK_OK);
    change_args a = {cache, live};
    if (!enc) in_child(lent_pixels_then_truncate, &a, 0, "lent pixels, then truncated");
    double t0 = stk__now();
    in_child(loader_while_file_changes, &a, 0, enc ? "jpeg cache changed" : "raw cache changed");
    printf("changing %s cache: %.2f s\n", enc ? "jpeg" : "raw", stk__now() - t0);
  }
  unlink(live);
}

/* verify: one flipped byte in a sample's pixels (raw) or bytes (JPEG) fails
 * that sample, naming it, when verify is on; without it the loader hands
 * the damaged pixels on without a word (what `stoker check` alone caught). */
static int verify_epoch(const char *path, int verify, char *err, size_t errlen) {
  stk_options o;
  opts(&o, path);
  o.pipeline = STK_PIPELINE_EVAL;
  o.batch_size = 1;
  o.verify = verify;
  stk_loader *l = CHECK_CREATE(&o, STK_OK);
  if (!l) return -1;
  int failed = 0;
  err[0] = '\0';
  for (;;) {
    stk_batch b;
    int rc = stk_loader_next(l, &b);
    if (rc == STK_EEND) break;
    if (rc == STK_OK) {
      stk_batch_release(l, &b);
      continue;
    }
    failed++;
    CHECK_EQ_INT(rc, STK_EDECODE);
    snprintf(err, errlen, "%s", stk_loader_error(l));
  }
  stk_loader_destroy(l);
  return failed;
}

static void test_verify(const char *raw) {
  char jpg[1024], err[1024];
  stk_pack_result r;
  bad_log log = {0};
  snprintf(jpg, sizeof jpg, "%s/verify-src.stkc", g_dir);
  CHECK_EQ_INT(pack(g_root, jpg, STK_CACHE_JPEG, 0, 2, &r, &log, err, sizeof err), STK_OK);
  const char *srcs[] = {raw, jpg};
  for (int k = 0; k < 2; k++) {
    size_t n;
    uint8_t *b = slurp(srcs[k], &n);
    if (!b) continue;
    stk__cache_header hd;
    memcpy(&hd, b, sizeof hd);
    const stk__cache_entry *e = (const stk__cache_entry *)(b + hd.meta_off);
    b[e[5].off + e[5].len / 2] ^= 0x5A; /* sample 5, in its middle */
    char path[1024];
    snprintf(path, sizeof path, "%s/flipped%d.stkc", g_dir, k);
    tu_write_bytes(path, b, n);
    free(b);
    CHECK_EQ_INT(verify_epoch(path, 0, err, sizeof err), k ? verify_epoch(path, 0, err, sizeof err) : 0);
    int failed = verify_epoch(path, 1, err, sizeof err);
    CHECK_MSG(failed == 1 && strstr(err, "checksum") && strstr(err, path), "%s: %d failed: %s",
              k ? "jpeg" : "raw", failed, err);
    unlink(path);
  }
  unlink(jpg);
}

/* A cancel callback that stops the pack at its k-th call. */
static int cancel_at(void *user) {
  int *calls = user;
  return ++calls[0] >= calls[1];
}

/* stk_pack with a cancel callback: stopped between files, STK_ECANCELED,
 * and nothing left behind (neither the output nor its temporary file), for
 * a cache and for tar shards; a callback that never stops changes nothing. */
static void test_cancel(const char *root) {
  char out[1200], tmp[1400], err[512];
  for (int tar = 0; tar < 2; tar++) {
    snprintf(out, sizeof out, "%s/cancelled%s", g_dir, tar ? "" : ".stkc");
    stk_pack_options p;
    stk_pack_options_init(&p);
    p.root = root;
    p.output = out;
    p.format = tar ? STK_PACK_TAR : STK_PACK_CACHE;
    p.threads = 2;
    p.cancel = cancel_at;
    int calls[2] = {0, 2}; /* the second call: after 16 files */
    p.user = calls;
    stk_pack_result r;
    CHECK_EQ_INT(STK_PACK(&p, &r, err, sizeof err), STK_ECANCELED);
    CHECK(strstr(err, "cancelled after 16 of") != NULL);
    CHECK_EQ_INT(calls[0], 2);
    struct stat st;
    CHECK(stat(out, &st) != 0 && errno == ENOENT);
    CHECK_EQ_INT(stk_pack_temp_path(out, tmp, sizeof tmp), STK_OK);
    CHECK(stat(tmp, &st) != 0 && errno == ENOENT);
    CHECK(r.packed == 0);
    /* never stopping: the whole pack */
    calls[0] = 0;
    calls[1] = 1 << 30;
    CHECK_EQ_INT(STK_PACK(&p, &r, err, sizeof err), STK_OK);
    CHECK(r.packed == N && calls[0] == (N + 15) / 16);
  }
}

int main(void) {
  g_dir = tu_tempdir();
  if (!g_dir) return 1;
  char root[1024], cache[1024], err[512];
  snprintf(root, sizeof root, "%s/data", g_dir);
  tu_mkdir(root);
  g_root = root;
  CHECK_EQ_INT(tu_make_folder(root, CLASSES, PER_CLASS, 60, 45), STK_OK);
  snprintf(cache, sizeof cache, "%s/raw.stkc", g_dir);
  stk_pack_result r;
  bad_log log = {0};
  CHECK_EQ_INT(pack(root, cache, STK_CACHE_RAW, 0, 3, &r, &log, err, sizeof err), STK_OK);
  CHECK(r.packed == N && r.failed == 0 && log.bad == 0 && r.bytes > 0);
  CHECK(!strcmp(stk__source_detect(cache), "cache"));
  test_foreign_sigbus(cache); /* first: no cache opened in this process yet */
  test_same_pixels_as_folder(cache);
  test_bound_and_jpeg();
  test_coverage_per_rank(cache);
  test_threads_same_bytes(cache);
  test_damaged(cache);
  test_bad_files_left_out();
  test_replaced_files();
  test_changing_file();
  test_later_handlers(cache);
  test_verify(cache);
  test_cancel(root);
  tu_rmtree(g_dir);
  free(g_dir);
  return CHECK_DONE();
}
