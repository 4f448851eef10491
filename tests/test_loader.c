/* The executor: determinism, coverage per epoch and rank, bad input, resets,
 * slot ownership and teardown. */
#include "util.h"

#include <math.h>
#include <errno.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <stdio.h>

#include "check.h"
#include "epoch.h"
#include "core/common.h"
#include "gpu/gpu.h"
#include "util.h"

#define CLASSES 3
#define PER_CLASS 11 /* 33 samples */
#define N (CLASSES * PER_CLASS)

static char *g_root;

static void base_opts(stk_options *o) {
  stk_options_init(o);
  o->root = g_root;
  o->size = 24;
  o->batch_size = 5;
  o->threads = 2;
  o->seed = 11;
  o->max_skipped_fraction = 1; /* the bad folders here are a quarter bad on purpose */
}

static int64_t run_epoch(stk_loader *l, stk__buf *pix, size_t *npix, int64_t *idx, int64_t *lab) {
  return tu_run_epoch(l, pix, npix, idx, lab);
}

static void test_determinism_across_threads(stk_pipeline pipe, stk_dtype dt, stk_layout lay) {
  stk__buf out[2] = {{0}, {0}};
  size_t n[2] = {0, 0};
  int threads[2] = {1, 4};
  for (int k = 0; k < 2; k++) {
    stk_options o;
    base_opts(&o);
    o.pipeline = pipe;
    o.dtype = dt;
    o.layout = lay;
    o.threads = threads[k];
    stk_loader *l = CHECK_CREATE(&o, STK_OK);
    if (!l) return;
    for (int e = 0; e < 2; e++) {
      stk_loader_set_epoch(l, (uint64_t)e);
      CHECK_EQ_INT(run_epoch(l, &out[k], &n[k], NULL, NULL), N);
    }
    stk_loader_destroy(l);
  }
  CHECK(n[0] == n[1] && n[0] > 0);
  CHECK_MSG(n[0] == n[1] && memcmp(out[0].p, out[1].p, n[0]) == 0,
            "1 and 4 threads give different bytes (pipeline %d dtype %d layout %d)", pipe, dt, lay);
  stk__buf_free(&out[0]);
  stk__buf_free(&out[1]);
}

static void test_epoch_coverage(int world, int shard_drop_last) {
  int count[N] = {0};
  int64_t per_rank = -1;
  for (int r = 0; r < world; r++) {
    stk_options o;
    base_opts(&o);
    o.rank = r;
    o.world_size = world;
    o.shard_drop_last = shard_drop_last;
    stk_loader *l = CHECK_CREATE(&o, STK_OK);
    if (!l) return;
    int64_t idx[N + 8];
    stk_loader_set_epoch(l, 3);
    int64_t got = run_epoch(l, NULL, NULL, idx, NULL);
    CHECK_EQ_INT(got, stk_loader_shard_size(l));
    if (per_rank < 0) per_rank = got;
    CHECK_EQ_INT(got, per_rank);
    for (int64_t i = 0; i < got; i++) count[idx[i]]++;
    stk_loader_destroy(l);
  }
  int64_t total = per_rank * world, zero = 0, once = 0, more = 0;
  for (int i = 0; i < N; i++) zero += count[i] == 0, once += count[i] == 1, more += count[i] > 1;
  if (shard_drop_last) {
    CHECK_EQ_INT(once, total);
    CHECK_EQ_INT(zero, N - total);
  } else {
    CHECK_MSG(zero == 0, "world %d: %lld samples never seen", world, (long long)zero);
    CHECK_EQ_INT(once + 2 * more, total); /* padding repeats a sample at most once here */
  }
}

static void test_order_eval_and_seek(void) {
  stk_options o;
  base_opts(&o);
  o.pipeline = STK_PIPELINE_EVAL;
  stk_loader *l = CHECK_CREATE(&o, STK_OK);
  if (!l) return;
  int64_t idx[N];
  CHECK_EQ_INT(run_epoch(l, NULL, NULL, idx, NULL), N);
  int inorder = 1;
  for (int i = 0; i < N; i++) inorder &= idx[i] == i;
  CHECK_MSG(inorder, "eval does not shuffle");
  CHECK_EQ_INT(stk_loader_len(l), (N + 4) / 5);
  stk_loader_destroy(l);

  /* seek(e, b) yields exactly the batches an uninterrupted epoch yields */
  base_opts(&o);
  l = CHECK_CREATE(&o, STK_OK);
  if (!l) return;
  stk__buf full = {0}, part = {0};
  size_t nf = 0, np = 0;
  stk_loader_set_epoch(l, 2);
  run_epoch(l, &full, &nf, NULL, NULL);
  stk_loader_seek(l, 2, 3);
  uint64_t e;
  int64_t b;
  stk_loader_position(l, &e, &b);
  CHECK(e == 2 && b == 3);
  run_epoch(l, &part, &np, NULL, NULL);
  size_t per = (size_t)24 * 24 * 3 * 4;
  CHECK_EQ_INT(np, nf - 15 * per);
  CHECK(np == nf - 15 * per && memcmp(part.p, (char *)full.p + 15 * per, np) == 0);
  /* set_epoch mid-epoch abandons it cleanly, with a batch still held */
  stk_batch hold;
  CHECK_EQ_INT(stk_loader_next(l, &hold), STK_OK);
  stk_loader_set_epoch(l, 2);
  np = 0;
  run_epoch(l, &part, &np, NULL, NULL);
  CHECK(np == nf && memcmp(part.p, full.p, nf) == 0);
  CHECK_EQ_INT(stk_batch_release(l, &hold), STK_OK);
  CHECK_EQ_INT(stk_batch_release(l, &hold), STK_EINVAL); /* released twice */
  stk__buf_free(&full);
  stk__buf_free(&part);
  stk_loader_destroy(l);
}

static void test_slots_and_teardown(void) {
  stk_options o;
  base_opts(&o);
  o.batch_size = 2;
  o.prefetch = 1;
  stk_loader *l = CHECK_CREATE(&o, STK_OK);
  if (!l) return;
  int slots = stk_loader_num_slots(l);
  CHECK_EQ_INT(slots, 3);
  stk_batch held[3];
  for (int i = 0; i < slots; i++) CHECK_EQ_INT(stk_loader_next(l, &held[i]), STK_OK);
  /* distinct memory for every held batch: nothing is overwritten */
  CHECK(held[0].data != held[1].data && held[1].data != held[2].data);
  stk_batch extra;
  CHECK_EQ_INT(stk_loader_next(l, &extra), STK_EBUSY);
  CHECK(strstr(stk_loader_error(l), "held") != NULL);
  CHECK_EQ_INT(stk_batch_release(l, &held[0]), STK_OK);
  CHECK_EQ_INT(stk_loader_next(l, &extra), STK_OK);
  /* shutdown joins the threads but keeps held batches readable */
  {
    stk_options o2;
    base_opts(&o2);
    o2.batch_size = 3;
    stk_loader *m = CHECK_CREATE(&o2, STK_OK);
    if (m) {
      stk_batch hb;
      CHECK_EQ_INT(stk_loader_next(m, &hb), STK_OK);
      size_t nb = hb.nbytes;
      uint8_t *copy = malloc(nb);
      memcpy(copy, hb.data, nb);
      stk_loader_shutdown(m);
      stk_batch more;
      CHECK_EQ_INT(stk_loader_next(m, &more), STK_ESTATE);
      CHECK(memcmp(copy, hb.data, nb) == 0);
      CHECK_EQ_INT(stk_batch_release(m, &hb), STK_OK);
      stk_loader_shutdown(m); /* twice is harmless */
      stk_loader_destroy(m);
      free(copy);
    }
  }
  /* destroy mid-epoch with batches held: every thread joins promptly */
  double t = stk__now();
  stk_loader_destroy(l);
  CHECK_MSG(stk__now() - t < 5.0, "destroy took %.2f s", stk__now() - t);
}

static void test_bad_options(void) {
  stk_options o;
  base_opts(&o);
  stk_loader *l = NULL;
  char err[512];
  o.batch_size = 0;
  CHECK_EQ_INT(STK_LOADER_CREATE(&o, &l, err, sizeof err), STK_EINVAL);
  CHECK(strstr(err, "batch_size") != NULL && l == NULL);
  base_opts(&o);
  o.rank = 2;
  o.world_size = 2;
  CHECK_EQ_INT(STK_LOADER_CREATE(&o, &l, err, sizeof err), STK_EINVAL);
  base_opts(&o);
  CHECK_EQ_INT(stk_loader_create(&o, 99 * 10000, &l, err, sizeof err), STK_EVERSION);
  /* 0.x: a header of another minor version has other structs */
  CHECK_EQ_INT(stk_loader_create(&o, STK_VERSION - 100, &l, err, sizeof err),
               STK_VERSION_MAJOR == 0 ? STK_EVERSION : STK_OK);
  stk_loader_destroy(l);
  l = NULL;
  float shares[] = {-0.5f, 1.5f, NAN};
  for (int i = 0; i < 3; i++) {
    o.gpu_cpu_share = shares[i];
    CHECK_EQ_INT(STK_LOADER_CREATE(&o, &l, err, sizeof err), STK_EINVAL);
    CHECK(strstr(err, "gpu_cpu_share") != NULL);
  }
  base_opts(&o);
  o.root = "/nonexistent/stoker-data";
  CHECK_EQ_INT(STK_LOADER_CREATE(&o, &l, err, sizeof err), STK_EIO);
  CHECK(strstr(err, "/nonexistent/stoker-data") != NULL);
  base_opts(&o);
  o.device = 0;
  char probe[2048];
  if (stk__gpu_probe(probe, sizeof probe) != STK_OK) {
    /* no GPU here: a clear error that names the device */
    CHECK_EQ_INT(STK_LOADER_CREATE(&o, &l, err, sizeof err), STK_ENODEV);
    CHECK(strstr(err, "CUDA device 0") != NULL);
  } else {
    CHECK_EQ_INT(STK_LOADER_CREATE(&o, &l, err, sizeof err), STK_OK);
    stk_loader_destroy(l);
    l = NULL;
  }
}

/* A folder of good and broken files. */
static char *make_bad_folder(int good, int bad) {
  char *root = tu_tempdir();
  char p[4096];
  snprintf(p, sizeof p, "%s/c0", root);
  tu_mkdir(p);
  int total = good + bad;
  for (int i = 0; i < total; i++) {
    /* interleave: every third file is broken while broken ones remain */
    int is_bad = bad > 0 && (i % 3 == 1 || good == 0);
    snprintf(p, sizeof p, "%s/c0/f%03d.jpg", root, i);
    if (is_bad) {
      bad--;
      if (i % 2)
        tu_write_bytes(p, "this is not an image\n", 21);
      else
        tu_write_bytes(p, "", 0);
    } else {
      good--;
      tu_write_jpeg(p, 40, 30, (uint64_t)i, 80);
    }
  }
  return root;
}

static void test_skip_and_raise(void) {
  char *root = make_bad_folder(20, 6);
  stk_options o;
  base_opts(&o);
  o.root = root;
  o.on_error = STK_ON_ERROR_SKIP;
  o.batch_size = 4;
  stk_loader *l = CHECK_CREATE(&o, STK_OK);
  if (l) {
    int64_t idx[32];
    CHECK_EQ_INT(run_epoch(l, NULL, NULL, idx, NULL), 20);
    stk_stats st;
    stk_loader_stats(l, &st);
    CHECK_EQ_INT(st.skipped, 6);
    const char *path, *reason;
    CHECK_EQ_INT(stk_loader_skipped(l, 0, &path, &reason), STK_OK);
    CHECK(strstr(path, root) == path && strlen(reason) > 0);
    CHECK_EQ_INT(stk_loader_skipped(l, 6, &path, &reason), STK_EINVAL);
    /* the good samples, each exactly once */
    int seen[26] = {0};
    for (int i = 0; i < 20; i++) seen[idx[i]]++;
    int dup = 0;
    for (int i = 0; i < 26; i++) dup += seen[i] > 1;
    CHECK_EQ_INT(dup, 0);
    stk_loader_destroy(l);
  }
  /* the same under 1 and 3 threads: identical bytes, failures included */
  stk__buf out[2] = {{0}, {0}};
  size_t n[2] = {0, 0};
  for (int k = 0; k < 2; k++) {
    base_opts(&o);
    o.root = root;
    o.on_error = STK_ON_ERROR_SKIP;
    o.batch_size = 4;
    o.threads = k ? 3 : 1;
    l = CHECK_CREATE(&o, STK_OK);
    if (!l) break;
    run_epoch(l, &out[k], &n[k], NULL, NULL);
    stk_loader_destroy(l);
  }
  CHECK(n[0] == n[1] && n[0] > 0 && memcmp(out[0].p, out[1].p, n[0]) == 0);
  stk__buf_free(&out[0]);
  stk__buf_free(&out[1]);

  /* raise: the batch fails with the file's name; the next call goes on */
  base_opts(&o);
  o.root = root;
  o.shuffle = 0;
  o.batch_size = 4;
  l = CHECK_CREATE(&o, STK_OK);
  if (l) {
    stk_batch b;
    int rc = stk_loader_next(l, &b);
    CHECK_EQ_INT(rc, STK_EFORMAT); /* f001 holds text */
    CHECK_MSG(strstr(stk_loader_error(l), "f001.jpg") != NULL, "error: %s", stk_loader_error(l));
    int errors = 1, oks = 0;
    for (;;) {
      rc = stk_loader_next(l, &b);
      if (rc == STK_EEND) break;
      if (rc == STK_OK) {
        oks++;
        stk_batch_release(l, &b);
      } else {
        errors++;
      }
    }
    CHECK_EQ_INT(oks + errors, 7);
    CHECK(errors >= 2);
    stk_loader_destroy(l);
  }
  tu_rmtree(root);
  free(root);

  /* a fully corrupt dataset fails fast under skip instead of an empty epoch */
  root = make_bad_folder(0, 12);
  base_opts(&o);
  o.root = root;
  o.on_error = STK_ON_ERROR_SKIP;
  l = CHECK_CREATE(&o, STK_OK);
  if (l) {
    stk_batch b;
    CHECK_EQ_INT(stk_loader_next(l, &b), STK_ETOOMANY);
    CHECK(strstr(stk_loader_error(l), "failed") != NULL);
    stk_loader_destroy(l);
  }
  o.max_consecutive_failures = 5;
  l = CHECK_CREATE(&o, STK_OK);
  if (l) {
    stk_batch b;
    CHECK_EQ_INT(stk_loader_next(l, &b), STK_ETOOMANY);
    CHECK_MSG(strstr(stk_loader_error(l), "5 files in a row") != NULL, "%s", stk_loader_error(l));
    stk_loader_destroy(l);
  }
  tu_rmtree(root);
  free(root);
}

/* One epoch under on_error=raise: the delivered indices into idx; returns
 * 1000 per failed batch (each an error, after which the epoch goes on) plus
 * the images delivered. */
static int64_t raise_epoch(stk_loader *l, int64_t *idx) {
  int64_t c = 0;
  for (;;) {
    stk_batch b;
    int rc = stk_loader_next(l, &b);
    if (rc == STK_EEND) break;
    if (rc) {
      c += 1000;
      continue;
    }
    for (int64_t i = 0; i < b.n; i++) idx[c % 1000 + i] = b.indices[i];
    c += b.n;
    stk_batch_release(l, &b);
  }
  return c;
}

/* Epochs in a row, with the next epoch's batches started ahead, give what
 * a fresh loader positioned at each epoch gives: bytes, order, failures. */
static void test_epoch_lookahead(stk_on_error policy) {
  char *root = make_bad_folder(20, 6);
  enum { EPOCHS = 4 };
  stk__buf run[EPOCHS], fresh[EPOCHS];
  size_t nrun[EPOCHS] = {0}, nfresh[EPOCHS] = {0};
  int64_t irun[EPOCHS][32], ifresh[EPOCHS][32], crun[EPOCHS], cfresh[EPOCHS];
  memset(run, 0, sizeof run);
  memset(fresh, 0, sizeof fresh);
  stk_options o;
  base_opts(&o);
  o.root = root;
  o.on_error = policy;
  o.batch_size = 3;
  o.prefetch = 6; /* more slots than one epoch's batches take: several start ahead */
  o.threads = 3;
  stk_loader *l = CHECK_CREATE(&o, STK_OK);
  if (!l) return;
  for (int e = 0; e < EPOCHS; e++) {
    if (e % 2) CHECK_EQ_INT(stk_loader_set_epoch(l, (uint64_t)e), STK_OK); /* a no-op here */
    uint64_t pe;
    int64_t pb;
    stk_loader_position(l, &pe, &pb);
    CHECK(pe == (uint64_t)e && pb == 0);
    crun[e] = policy == STK_ON_ERROR_SKIP ? run_epoch(l, &run[e], &nrun[e], irun[e], NULL)
                                          : raise_epoch(l, irun[e]);
  }
  stk_stats st;
  stk_loader_stats(l, &st);
  if (policy == STK_ON_ERROR_SKIP) CHECK_EQ_INT(st.skipped, 6 * EPOCHS);
  stk_loader_destroy(l);
  for (int e = 0; e < EPOCHS; e++) {
    l = CHECK_CREATE(&o, STK_OK);
    if (!l) break;
    stk_loader_set_epoch(l, (uint64_t)e);
    if (policy == STK_ON_ERROR_SKIP) {
      cfresh[e] = run_epoch(l, &fresh[e], &nfresh[e], ifresh[e], NULL);
      CHECK_EQ_INT(cfresh[e], 20);
      CHECK(nrun[e] == nfresh[e] && nrun[e] > 0 && !memcmp(run[e].p, fresh[e].p, nrun[e]));
    } else {
      cfresh[e] = raise_epoch(l, ifresh[e]);
      CHECK(cfresh[e] >= 2000); /* the bad files fail their batches */
    }
    CHECK_EQ_INT(crun[e], cfresh[e]);
    CHECK(!memcmp(irun[e], ifresh[e], (size_t)(cfresh[e] % 1000) * sizeof(int64_t)));
    stk_loader_destroy(l);
  }
  for (int e = 0; e < EPOCHS; e++) {
    stk__buf_free(&run[e]);
    stk__buf_free(&fresh[e]);
  }
  tu_rmtree(root);
  free(root);
}

/* While the consumer still holds the last batch of an epoch, the next
 * epoch's files are already being read. */
static void test_next_epoch_starts_early(void) {
  stk_options o;
  base_opts(&o);
  o.batch_size = 5;
  stk_loader *l = CHECK_CREATE(&o, STK_OK);
  if (!l) return;
  uint64_t total = 0;
  for (int64_t i = 0; i < stk_loader_num_samples(l); i++) {
    struct stat st;
    if (stat(stk_loader_sample_path(l, i), &st) == 0) total += (uint64_t)st.st_size;
  }
  int64_t len = stk_loader_len(l);
  stk_batch b;
  for (int64_t k = 0; k < len; k++) {
    CHECK_EQ_INT(stk_loader_next(l, &b), STK_OK);
    if (k + 1 < len) stk_batch_release(l, &b);
  }
  stk_stats st;
  int ahead = 0;
  for (int t = 0; t < 1000 && !ahead; t++) { /* up to 10 s on a loaded machine */
    stk_loader_stats(l, &st);
    ahead = st.bytes_read > total;
    if (!ahead) nanosleep(&(struct timespec){0, 10000000}, NULL);
  }
  CHECK_MSG(ahead, "read %llu bytes, one epoch is %llu", (unsigned long long)st.bytes_read,
            (unsigned long long)total);
  stk_batch_release(l, &b);
  CHECK_EQ_INT(stk_loader_next(l, &b), STK_EEND);
  CHECK_EQ_INT(stk_loader_next(l, &b), STK_OK);
  CHECK(b.epoch == 1 && b.batch_index == 0);
  stk_batch_release(l, &b);
  stk_loader_destroy(l);
}

/* A stale copy of a released batch names the same slot and memory as the
 * batch lent from that slot later: releasing it must fail, not free the
 * slot under its holder. */
static void test_stale_copy_release(void) {
  stk_options o;
  base_opts(&o);
  o.pipeline = STK_PIPELINE_EVAL;
  o.batch_size = 2;
  o.prefetch = 1;
  stk_loader *l = CHECK_CREATE(&o, STK_OK);
  if (!l) return;
  stk_batch a, copy, b[3];
  CHECK_EQ_INT(stk_loader_next(l, &a), STK_OK);
  copy = a;
  CHECK_EQ_INT(stk_batch_release(l, &a), STK_OK);
  int reused = -1;
  for (int i = 0; i < 3; i++) {
    CHECK_EQ_INT(stk_loader_next(l, &b[i]), STK_OK);
    if (b[i].slot == copy.slot) reused = i;
  }
  CHECK(reused >= 0); /* 3 slots: every one is lent again */
  CHECK_EQ_INT(stk_batch_release(l, &copy), STK_EINVAL);
  for (int i = 0; i < 3; i++) CHECK_EQ_INT(stk_batch_release(l, &b[i]), STK_OK);
  stk_loader_destroy(l);
}

/* seek far past the end: the epoch is over (no overflow computing it). */
static void test_seek_past_end(void) {
  stk_options o;
  base_opts(&o);
  stk_loader *l = CHECK_CREATE(&o, STK_OK);
  if (!l) return;
  CHECK_EQ_INT(stk_loader_seek(l, 1, INT64_MAX / 2), STK_OK);
  stk_batch b;
  CHECK_EQ_INT(stk_loader_next(l, &b), STK_EEND);
  uint64_t e;
  int64_t pos;
  stk_loader_position(l, &e, &pos);
  CHECK(e == 2 && pos == 0);
  CHECK_EQ_INT(stk_loader_next(l, &b), STK_OK);
  CHECK_EQ_INT(stk_batch_release(l, &b), STK_OK);
  stk_loader_destroy(l);
}

/* Statistics: files that cannot be opened add no bytes read, and stats may
 * be asked while the workers run. */
static void test_stats_while_loading(void) {
  char *root = tu_tempdir();
  char p[4096];
  snprintf(p, sizeof p, "%s/a.jpg", root);
  CHECK_EQ_INT(tu_write_jpeg(p, 40, 30, 1, 80), STK_OK);
  struct stat st;
  CHECK(stat(p, &st) == 0);
  snprintf(p, sizeof p, "%s/list.txt", root);
  FILE *f = fopen(p, "w");
  if (f) {
    fprintf(f, "a.jpg 0\nmissing1.jpg 0\nmissing2.jpg 0\nmissing3.jpg 0\n");
    fclose(f);
  }
  stk_options o;
  base_opts(&o);
  o.root = NULL;
  o.list_file = p;
  o.batch_size = 4;
  o.threads = 1;
  o.pipeline = STK_PIPELINE_EVAL;
  o.on_error = STK_ON_ERROR_SKIP;
  stk_loader *l = CHECK_CREATE(&o, STK_OK);
  if (l) {
    stk_batch b;
    CHECK_EQ_INT(stk_loader_next(l, &b), STK_OK);
    CHECK_EQ_INT(b.n, 1);
    stk_batch_release(l, &b);
    CHECK_EQ_INT(stk_loader_next(l, &b), STK_EEND);
    stk_loader_shutdown(l);
    stk_stats s;
    stk_loader_stats(l, &s);
    CHECK_EQ_INT(s.skipped, 3);
    /* a.jpg alone adds bytes: read for this epoch, and for each epoch the
     * workers started ahead before the shutdown: the next one, and (once
     * the end of this one was handed out and the loader moved on) the one
     * after it. How many of those started is timing; that the missing
     * files add nothing is not: a whole multiple of a.jpg's size. */
    uint64_t one = (uint64_t)st.st_size;
    CHECK_MSG(s.bytes_read % one == 0 && s.bytes_read >= one && s.bytes_read <= 3 * one,
              "bytes_read %llu for one file of %lld bytes", (unsigned long long)s.bytes_read,
              (long long)st.st_size);
    stk_loader_destroy(l);
  }
  tu_rmtree(root);
  free(root);

  base_opts(&o);
  o.threads = 4;
  o.prefetch = 4;
  l = CHECK_CREATE(&o, STK_OK);
  if (!l) return;
  for (int e = 0; e < 2; e++) {
    stk_batch b;
    stk_stats s;
    while (stk_loader_next(l, &b) == STK_OK) {
      CHECK_EQ_INT(stk_loader_stats(l, &s), STK_OK);
      stk_batch_release(l, &b);
    }
    CHECK_EQ_INT(stk_loader_stats(l, &s), STK_OK);
    CHECK(s.host_bytes > 0);
  }
  stk_loader_destroy(l);
}

/* After a batch fails under raise, what follows must say what happened: an
 * epoch whose only batch failed ends with STK_EEND, not with "every file of
 * the epoch failed" (one file of four did). */
static void test_raise_then_end(void) {
  char *root = make_bad_folder(3, 1);
  stk_options o;
  base_opts(&o);
  o.root = root;
  o.batch_size = 4;
  for (int threads = 1; threads <= 3; threads += 2) {
    o.threads = threads;
    stk_loader *l = CHECK_CREATE(&o, STK_OK);
    if (!l) continue;
    for (int epoch = 0; epoch < 3; epoch++) {
      stk_batch b;
      int rc = stk_loader_next(l, &b);
      CHECK_MSG(rc == STK_EDECODE || rc == STK_EFORMAT, "epoch %d: %s", epoch, stk_strerror(rc));
      CHECK(strstr(stk_loader_error(l), "f001.jpg") != NULL);
      rc = stk_loader_next(l, &b);
      CHECK_MSG(rc == STK_EEND, "after the failed batch: %s: %s", stk_strerror(rc),
                stk_loader_error(l));
    }
    stk_stats st;
    stk_loader_stats(l, &st);
    CHECK_EQ_INT(st.failed, 3);
    CHECK_EQ_INT(st.skipped, 0);
    stk_loader_destroy(l);
  }
  tu_rmtree(root);
  free(root);
}

/* The skipped list holds the current epoch's files; the count is the total. */
static void test_skip_list_per_epoch(void) {
  char *root = make_bad_folder(10, 2);
  stk_options o;
  base_opts(&o);
  o.root = root;
  o.on_error = STK_ON_ERROR_SKIP;
  o.batch_size = 4;
  stk_loader *l = CHECK_CREATE(&o, STK_OK);
  if (l) {
    for (int epoch = 0; epoch < 4; epoch++) {
      CHECK_EQ_INT(run_epoch(l, NULL, NULL, NULL, NULL), 10);
      CHECK_EQ_INT(stk_loader_skipped_count(l), 2);
      const char *p, *r;
      CHECK_EQ_INT(stk_loader_skipped(l, 1, &p, &r), STK_OK);
      CHECK_EQ_INT(stk_loader_skipped(l, 2, &p, &r), STK_EINVAL);
    }
    stk_stats st;
    stk_loader_stats(l, &st);
    CHECK_EQ_INT(st.skipped, 8);
    stk_loader_destroy(l);
  }
  tu_rmtree(root);
  free(root);
}

/* The repro: 1,000 files, 240 contiguous ones deleted after the
 * first batch. Refills from the end of the epoch used to reset the
 * consecutive-failure count, so the epoch gave 760 images and no error. */
static int64_t deleted_block_epoch(const char *root, int max_consec, float frac, int *rc_out,
                                   char *msg, size_t msglen) {
  char p[4096];
  for (int i = 0; i < 1000; i++) { /* (re)write what an earlier run deleted */
    snprintf(p, sizeof p, "%s/c0/f%04d.jpg", root, i);
    if (access(p, F_OK) != 0) tu_write_jpeg(p, 16, 16, (uint64_t)i, 80);
  }
  stk_options o;
  stk_options_init(&o);
  o.root = root;
  o.size = 8;
  o.batch_size = 10;
  o.threads = 2;
  o.pipeline = STK_PIPELINE_EVAL;
  o.on_error = STK_ON_ERROR_SKIP;
  o.max_consecutive_failures = max_consec;
  o.max_skipped_fraction = frac;
  stk_loader *l = CHECK_CREATE(&o, STK_OK);
  if (!l) return -1;
  int64_t images = 0;
  stk_batch b;
  int rc;
  while ((rc = stk_loader_next(l, &b)) == STK_OK) {
    if (images == 0)
      for (int i = 100; i < 340; i++) {
        snprintf(p, sizeof p, "%s/c0/f%04d.jpg", root, i);
        unlink(p);
      }
    images += b.n;
    stk_batch_release(l, &b);
  }
  *rc_out = rc;
  snprintf(msg, msglen, "%s", stk_loader_error(l));
  stk_loader_destroy(l);
  return images;
}

static void test_skip_bounds(void) {
  char *root = tu_tempdir();
  char p[4096];
  snprintf(p, sizeof p, "%s/c0", root);
  tu_mkdir(p);
  int rc;
  char msg[1024];
  /* the defaults: 100 in a row, 10% of the epoch */
  int64_t n = deleted_block_epoch(root, 100, 0.1f, &rc, msg, sizeof msg);
  printf("skip bounds: defaults: %lld images, rc %d: %s\n", (long long)n, rc, msg);
  CHECK_EQ_INT(rc, STK_ETOOMANY);
  CHECK(n < 760);
  /* the consecutive count alone: it survives the refills */
  n = deleted_block_epoch(root, 100, 1.0f, &rc, msg, sizeof msg);
  CHECK_EQ_INT(rc, STK_ETOOMANY);
  CHECK_MSG(strstr(msg, "100 files in a row") != NULL, "%s", msg);
  /* the fraction alone, naming the count */
  n = deleted_block_epoch(root, 0, 0.1f, &rc, msg, sizeof msg);
  CHECK_EQ_INT(rc, STK_ETOOMANY);
  CHECK_MSG(strstr(msg, "101 of the 1000 files") != NULL && strstr(msg, "max_skipped_fraction"),
            "%s", msg);
  /* both off: what used to happen, now only when asked for */
  n = deleted_block_epoch(root, 0, 1.0f, &rc, msg, sizeof msg);
  CHECK_EQ_INT(rc, STK_EEND);
  CHECK_EQ_INT(n, 760);
  tu_rmtree(root);
  free(root);
}

/* The unclear errors, each refused or read as it should be. */
static void test_clear_errors(void) {
  stk_options o;
  stk_loader *l = NULL;
  char err[512];
  /* ratio (inf, inf) passed, then every file was blamed */
  base_opts(&o);
  o.ratio[0] = o.ratio[1] = INFINITY;
  CHECK_EQ_INT(STK_LOADER_CREATE(&o, &l, err, sizeof err), STK_EINVAL);
  CHECK_MSG(strstr(err, "ratio") != NULL, "%s", err);
  /* std 1e-45: infinite outputs; float16 overflows at 65504 */
  base_opts(&o);
  o.std[0] = 1e-45f;
  CHECK_EQ_INT(STK_LOADER_CREATE(&o, &l, err, sizeof err), STK_EINVAL);
  CHECK_MSG(strstr(err, "std[0]") != NULL, "%s", err);
  base_opts(&o);
  o.std[1] = 1e-6f;
  o.dtype = STK_DTYPE_FLOAT16;
  CHECK_EQ_INT(STK_LOADER_CREATE(&o, &l, err, sizeof err), STK_EINVAL);
  CHECK_MSG(strstr(err, "std[1]") != NULL && strstr(err, "float16"), "%s", err);
  o.dtype = STK_DTYPE_FLOAT32; /* 1e6 is a float32's */
  l = CHECK_CREATE(&o, STK_OK);
  stk_loader_destroy(l);
  /* threads: 0 = every CPU, as the message's range says */
  base_opts(&o);
  o.threads = 0;
  l = CHECK_CREATE(&o, STK_OK);
  stk_loader_destroy(l);
  o.threads = 1025;
  CHECK_EQ_INT(STK_LOADER_CREATE(&o, &l, err, sizeof err), STK_EINVAL);
  CHECK_MSG(strstr(err, "0..1024") != NULL, "%s", err);
  /* list files: "+1" is not a label; a lone CR ends a line */
  char *dir = tu_tempdir(), p[4096];
  for (int i = 0; i < 3; i++) {
    snprintf(p, sizeof p, "%s/i%d.jpg", dir, i);
    tu_write_jpeg(p, 16, 16, (uint64_t)i, 80);
  }
  snprintf(p, sizeof p, "%s/plus.txt", dir);
  tu_write_bytes(p, "i0.jpg 0\ni1.jpg +1\n", 19);
  base_opts(&o);
  o.root = NULL;
  o.list_file = p;
  CHECK_EQ_INT(STK_LOADER_CREATE(&o, &l, err, sizeof err), STK_EINVAL);
  CHECK_MSG(strstr(err, ":2:") != NULL, "%s", err);
  static const char *ends[] = {"\r", "\r\n", "\n"};
  for (int k = 0; k < 3; k++) {
    char text[128];
    snprintf(text, sizeof text, "i0.jpg 0%si1.jpg 1%s%si2.jpg 2%s", ends[k], ends[k], ends[k], ends[k]);
    snprintf(p, sizeof p, "%s/list%d.txt", dir, k);
    tu_write_bytes(p, text, strlen(text));
    o.list_file = p;
    l = CHECK_CREATE(&o, STK_OK);
    if (l) CHECK_MSG(run_epoch(l, NULL, NULL, NULL, NULL) == 3, "line end %d", k);
    stk_loader_destroy(l);
  }
  /* a folder that cannot be opened: STK_EIO naming it and the reason (as
   * a user other than root, whom permissions do not stop) */
  snprintf(p, sizeof p, "%s/tree/c0", dir);
  tu_mkdir(strrchr(p, '/') ? (*strrchr(p, '/') = 0, p) : p);
  snprintf(p, sizeof p, "%s/tree/c0", dir);
  tu_mkdir(p);
  snprintf(p, sizeof p, "%s/tree/c0/a.jpg", dir);
  tu_write_jpeg(p, 16, 16, 1, 80);
  snprintf(p, sizeof p, "%s/tree/c0", dir);
  chmod(dir, 0755);
  chmod(p, 0);
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    if (geteuid() == 0 && setuid(65534) != 0) _exit(9);
    base_opts(&o);
    snprintf(p, sizeof p, "%s/tree", dir);
    o.root = p;
    int rc = STK_LOADER_CREATE(&o, &l, err, sizeof err);
    printf("folder without permission: rc %d: %s\n", rc, err);
    _exit(rc == STK_EIO && strstr(err, strerror(EACCES)) && strstr(err, "tree/c0") ? 0 : 1);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "permission child: %d", status);
  chmod(p, 0755);
  tu_rmtree(dir);
  free(dir);
}

int main(void) {
  g_root = tu_tempdir();
  CHECK_EQ_INT(tu_make_folder(g_root, CLASSES, PER_CLASS, 60, 45), STK_OK);
  test_determinism_across_threads(STK_PIPELINE_TRAIN, STK_DTYPE_FLOAT32, STK_LAYOUT_NCHW);
  test_determinism_across_threads(STK_PIPELINE_TRAIN, STK_DTYPE_BFLOAT16, STK_LAYOUT_NHWC);
  test_determinism_across_threads(STK_PIPELINE_EVAL, STK_DTYPE_UINT8, STK_LAYOUT_NCHW);
  int worlds[] = {1, 2, 3, 8};
  for (int i = 0; i < 4; i++) {
    test_epoch_coverage(worlds[i], 0);
    test_epoch_coverage(worlds[i], 1);
  }
  test_order_eval_and_seek();
  test_slots_and_teardown();
  test_bad_options();
  test_skip_and_raise();
  test_epoch_lookahead(STK_ON_ERROR_SKIP);
  test_epoch_lookahead(STK_ON_ERROR_RAISE);
  test_next_epoch_starts_early();
  test_stale_copy_release();
  test_seek_past_end();
  test_stats_while_loading();
  test_raise_then_end();
  test_skip_list_per_epoch();
  test_skip_bounds();
  test_clear_errors();
  tu_rmtree(g_root);
  free(g_root);
  return CHECK_DONE();
}
