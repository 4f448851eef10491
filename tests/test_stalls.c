/*
 * test_stalls.c: files that are not regular files, reads that stall, and a
 * loader that must not hang because of them.
 *
 * A FIFO (or any non-regular file) is refused at open, in every build. A
 * read that stalls as on a hung mount needs the fault-injection hooks
 * (STK_FAULT_INJECTION, on in the sanitizer build): there the reads of
 * chosen files block until the test releases them, and the test checks that
 * the sample fails with "read timed out" within its timeout while the other
 * samples go on, that set_epoch and destroy return at once meanwhile, and
 * that the stuck thread frees what it holds once its read returns.
 */
#include "util.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>

#include "check.h"
#include "core/common.h"
#include "core/fault.h"
#include "core/workers.h"
#include "sources/bounded_read.h"
#include "loader/pack.h"

static char *g_dir;
static int g_threads; /* this process's own: main, and a sanitizer's */

/* A list file of n tiny JPEGs named img<i>.jpg, with `special` (NULL =
 * none) at position `at`; shuffle off, so the order is the list's. */
static char *make_list(int n, const char *special, int at) {
  static char list[4096];
  snprintf(list, sizeof list, "%s/list-%d-%s-%d.txt", g_dir, n, special ? special : "none", at);
  FILE *f = fopen(list, "w");
  for (int i = 0; i < n; i++) {
    char p[4096];
    if (special && i == at) {
      fprintf(f, "%s %d\n", special, i % 3);
      continue;
    }
    snprintf(p, sizeof p, "%s/img%03d.jpg", g_dir, i);
    if (access(p, F_OK) != 0) tu_write_jpeg(p, 12 + i % 5, 10 + i % 7, (uint64_t)i, 85);
    fprintf(f, "img%03d.jpg %d\n", i, i % 3);
  }
  fclose(f);
  return list;
}

static void opts(stk_options *o, const char *list, int batch, int threads) {
  stk_options_init(o);
  o->list_file = list;
  o->size = 8;
  o->batch_size = batch;
  o->threads = threads;
  o->prefetch = 1;
  o->shuffle = 0;
  o->pipeline = STK_PIPELINE_EVAL;
}

/* Every batch of one epoch: images delivered, errors met (the last error's
 * message into msg). */
static void run_epoch(stk_loader *l, int64_t *images, int *errors, char *msg, size_t msglen) {
  *images = 0;
  *errors = 0;
  for (int guard = 0; guard < 1000; guard++) {
    stk_batch b;
    int rc = stk_loader_next(l, &b);
    if (rc == STK_EEND) return;
    if (rc) {
      (*errors)++;
      snprintf(msg, msglen, "%s", stk_loader_error(l));
      continue;
    }
    *images += b.n;
    stk_batch_release(l, &b);
  }
}

static void test_fifo(void) {
  char fifo[4096];
  snprintf(fifo, sizeof fifo, "%s/pipe.jpg", g_dir);
  CHECK(mkfifo(fifo, 0644) == 0);
  for (int skip = 0; skip <= 1; skip++) {
    stk_options o;
    opts(&o, make_list(12, "pipe.jpg", 5), 4, 2);
    o.on_error = skip ? STK_ON_ERROR_SKIP : STK_ON_ERROR_RAISE;
    stk_loader *l = NULL;
    char err[512] = "";
    CHECK(STK_LOADER_CREATE(&o, &l, err, sizeof err) == STK_OK);
    if (!l) continue;
    double t0 = stk__now();
    int64_t images;
    int errors;
    char msg[1024] = "";
    run_epoch(l, &images, &errors, msg, sizeof msg);
    double dt = stk__now() - t0;
    CHECK_MSG(dt < 5, "an epoch with a FIFO in it took %.1f s", dt);
    if (skip) {
      CHECK(images == 11 && errors == 0);
      const char *p = "", *r = "";
      CHECK(stk_loader_skipped_count(l) == 1);
      CHECK(stk_loader_skipped(l, 0, &p, &r) == STK_OK);
      CHECK_MSG(strstr(p, "pipe.jpg") && strstr(r, "not a regular file (a FIFO)"), "%s: %s", p, r);
    } else {
      CHECK(images == 8 && errors == 1);
      CHECK_MSG(strstr(msg, "pipe.jpg") && strstr(msg, "not a regular file (a FIFO)"), "%s", msg);
    }
    stk_loader_destroy(l);
  }
  /* stoker check refuses it the same way, without blocking */
  char m[512] = "";
  CHECK(stk_check_file(fifo, NULL, NULL, NULL, m, sizeof m) != STK_OK);
  CHECK_MSG(strstr(m, "not a regular file"), "%s", m);
  unlink(fifo);
}

/* Writes the lines of `list` to fd, with absolute paths (a pipe has no
 * folder of its own for relative ones), after `delay` seconds. */
static void write_list_to(int fd, const char *list, double delay) {
  struct timespec ts = {(time_t)delay, (long)((delay - (time_t)delay) * 1e9)};
  nanosleep(&ts, NULL);
  FILE *in = fopen(list, "r");
  char line[512];
  while (in && fgets(line, sizeof line, in)) {
    char path[1024];
    char *sp = strrchr(line, ' ');
    if (!sp) continue;
    *sp = '\0';
    int n = snprintf(path, sizeof path, "%s/%s %s", g_dir, line, sp + 1);
    if (write(fd, path, (size_t)n) != n) _exit(1);
  }
  if (in) fclose(in);
}

/* A list file that is a FIFO: its writer may come later (the open never
 * waits, then up to read_timeout for the first bytes); a FIFO nothing
 * writes fails after read_timeout, naming it, instead of hanging the
 * loader's creation. A pipe works as `--list <(command)` does. The alarm
 * turns a hang into a failure. */
static void test_fifo_list(void) {
  const char *list = make_list(12, NULL, 0);
  char fifo[4096];
  snprintf(fifo, sizeof fifo, "%s/list-fifo.txt", g_dir);
  CHECK(mkfifo(fifo, 0644) == 0);
  stk_options o;
  stk_loader *l = NULL;
  char err[512] = "";

  /* nothing ever writes it */
  opts(&o, fifo, 4, 1);
  o.read_timeout = 0.3f;
  alarm(20);
  double t0 = stk__now();
  CHECK_EQ_INT(STK_LOADER_CREATE(&o, &l, err, sizeof err), STK_ETIMEDOUT);
  alarm(0);
  double dt = stk__now() - t0;
  CHECK_MSG(dt >= 0.25 && dt < 5, "%.2f s", dt);
  CHECK_MSG(strstr(err, "list-fifo.txt") && strstr(err, "nothing was written"), "%s", err);
  stk_loader_destroy(l);
  l = NULL;

  /* its writer comes 0.2 s after the loader opened it */
  pid_t pid = fork();
  if (pid == 0) {
    struct timespec ts = {0, 200000000};
    nanosleep(&ts, NULL);
    int w = open(fifo, O_WRONLY);
    if (w < 0) _exit(1);
    write_list_to(w, list, 0);
    _exit(0);
  }
  opts(&o, fifo, 4, 1);
  o.read_timeout = 10;
  alarm(20);
  CHECK_MSG(STK_LOADER_CREATE(&o, &l, err, sizeof err) == STK_OK, "%s", err);
  alarm(0);
  CHECK(l && stk_loader_num_samples(l) == 12);
  stk_loader_destroy(l);
  l = NULL;
  waitpid(pid, NULL, 0);
  unlink(fifo);

  /* a pipe with a writer */
  int fds[2];
  CHECK(pipe(fds) == 0);
  pid = fork();
  if (pid == 0) {
    close(fds[0]);
    write_list_to(fds[1], list, 0.05);
    _exit(0);
  }
  close(fds[1]);
  char dev[64];
  snprintf(dev, sizeof dev, "/dev/fd/%d", fds[0]);
  opts(&o, dev, 4, 1);
  alarm(20);
  CHECK_MSG(STK_LOADER_CREATE(&o, &l, err, sizeof err) == STK_OK, "%s", err);
  alarm(0);
  CHECK(l && stk_loader_num_samples(l) == 12);
  stk_loader_destroy(l);
  close(fds[0]);
  waitpid(pid, NULL, 0);
}

/* A FIFO list whose writer sends some lines and then stalls (holding the
 * FIFO open) fails after read_timeout, naming the list and what came,
 * instead of hanging: the timeout covers the whole read, not only the first
 * bytes. stk_pack's list read is bounded the same way. */
static void test_fifo_list_stalled_writer(void) {
  const char *list = make_list(12, NULL, 0);
  char fifo[4096];
  snprintf(fifo, sizeof fifo, "%s/list-stall.txt", g_dir);
  CHECK(mkfifo(fifo, 0644) == 0);
  for (int pass = 0; pass < 2; pass++) {
    pid_t pid = fork();
    if (pid == 0) {
      int w = open(fifo, O_WRONLY);
      if (w < 0) _exit(1);
      const char *l1 = "img000.jpg 0\nimg001.jpg 1\n";
      if (write(w, l1, strlen(l1)) < 0) _exit(1);
      sleep(4); /* stalls with the FIFO open */
      _exit(0);
    }
    char err[1024] = "";
    alarm(20);
    double t0 = stk__now();
    int rc;
    if (pass == 0) {
      stk_options o;
      opts(&o, fifo, 4, 1);
      o.read_timeout = 0.5f;
      stk_loader *l = NULL;
      rc = STK_LOADER_CREATE(&o, &l, err, sizeof err);
      stk_loader_destroy(l);
    } else {
      stk_pack_options p;
      stk_pack_options_init(&p);
      p.list_file = fifo;
      char out[4200];
      snprintf(out, sizeof out, "%s/stall.stkc", g_dir);
      p.output = out;
      p.read_timeout = 0.5f;
      stk_pack_result res;
      rc = STK_PACK(&p, &res, err, sizeof err);
      CHECK(access(out, F_OK) != 0);
    }
    alarm(0);
    double dt = stk__now() - t0;
    CHECK_EQ_INT(rc, STK_ETIMEDOUT);
    CHECK_MSG(dt >= 0.45 && dt < 2.5, "pass %d: failed after %.2f s", pass, dt);
    CHECK_MSG(strstr(err, "list-stall.txt") && strstr(err, "not read to its end within 0.5 s") &&
                  strstr(err, "2 lines"),
              "%s", err);
    printf("FIFO list, writer stalled after 2 lines (%s): error after %.2f s\n",
           pass ? "pack" : "loader", dt);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
  }
  unlink(fifo);
  (void)list;
}

/* The bounded reader without a timeout reads in the caller's thread, and
 * with one it gives the same bytes and reasons. */
static void test_bounded_reader(void) {
  char p[4096];
  snprintf(p, sizeof p, "%s/img000.jpg", g_dir);
  for (int k = 0; k < 2; k++) {
    stk__bounded_reader br;
    stk__bounded_init(&br, k ? 5 : 0);
    stk__bytes b;
    char msg[256] = "";
    CHECK(stk__bounded_read_file(&br, p, 0, &b, msg, sizeof msg) == STK_OK);
    CHECK(b.len > 100 && b.data[0] == 0xFF && b.data[1] == 0xD8);
    CHECK(stk__bounded_read_file(&br, "/nonexistent/x.jpg", 0, &b, msg, sizeof msg) == STK_EIO);
    CHECK_MSG(strstr(msg, "cannot open"), "%s", msg);
    CHECK(stk__bounded_read_file(&br, p, 10, &b, msg, sizeof msg) == STK_ELIMIT);
    CHECK(br.ctx == NULL || k == 1);
    stk__bounded_free(&br);
  }
  /* the helper ends on its own once freed */
  CHECK_EQ_INT(tu_wait_threads(g_threads, 5), g_threads);
}

#ifdef STK_FAULT_INJECTION
/* stk_pack (cache and tar shards) and stoker check's sample check with a
 * file whose read stalls: the file fails with "read timed out after T s"
 * within the timeout while the others are packed or checked; the helper
 * left behind exits once its read returns. */
static void test_pack_and_check_stall(void) {
  /* (the helpers of earlier tests leave asynchronously: only main stays) */
  int base = tu_wait_threads(g_threads, 5);
  char stall[4096];
  snprintf(stall, sizeof stall, "%s/stall.jpg", g_dir);
  tu_write_jpeg(stall, 16, 16, 99, 85);
  const char *list = make_list(10, "stall.jpg", 4);
  for (int tar = 0; tar < 2; tar++) {
    stk__fault_stall("stall.jpg", 60);
    stk_pack_options p;
    stk_pack_options_init(&p);
    p.list_file = list;
    p.format = tar ? STK_PACK_TAR : STK_PACK_CACHE;
    p.threads = 2;
    char out[4200], err[1024] = "";
    snprintf(out, sizeof out, "%s/stalled-%s", g_dir, tar ? "shards" : "c.stkc");
    p.output = out;
    p.read_timeout = 0.4f;
    stk_pack_result res;
    alarm(30);
    double t0 = stk__now();
    int rc = STK_PACK(&p, &res, err, sizeof err);
    double dt = stk__now() - t0;
    alarm(0);
    CHECK_MSG(rc == STK_OK, "%s", err);
    CHECK_MSG(res.packed == 9 && res.failed == 1, "%lld packed, %lld failed",
              (long long)res.packed, (long long)res.failed);
    /* the estimate reads headers too: at most two timeouts in all */
    CHECK_MSG(dt < 2.0, "pack with a stalled file took %.2f s", dt);
    printf("pack (%s) with a stalled file: %.2f s\n", tar ? "tar" : "cache", dt);
    stk__fault_unstall();
    CHECK(tu_wait_threads(base, 5) == base);
    CHECK(stk__bounded_stuck() == 0);
  }
  /* stoker check's path */
  stk_options o;
  opts(&o, list, 4, 1);
  o.read_timeout = 0.3f;
  stk__source src;
  char err[1024] = "";
  CHECK(stk__source_open(&src, &o, err, sizeof err) == STK_OK);
  stk__bounded_reader br;
  stk__bounded_init(&br, o.read_timeout);
  stk__fault_stall("stall.jpg", 60);
  char msg[256] = "";
  double t0 = stk__now();
  CHECK_EQ_INT(stk__check_sample_bounded(&src, 4, &o, &br, NULL, NULL, msg, sizeof msg), STK_EIO);
  double dt = stk__now() - t0;
  CHECK_MSG(strstr(msg, "read timed out after 0.3 s"), "%s", msg);
  CHECK_MSG(dt >= 0.25 && dt < 1.0, "check's read timed out after %.2f s", dt);
  CHECK(stk__bounded_stuck() == 1 && br.abandoned == 1);
  /* the next sample gets a new helper */
  CHECK(stk__check_sample_bounded(&src, 5, &o, &br, NULL, NULL, msg, sizeof msg) == STK_OK);
  stk__fault_unstall();
  stk__bounded_free(&br);
  CHECK(tu_wait_threads(base, 5) == base);
  CHECK(stk__bounded_stuck() == 0);
  stk__source_close(&src);
}

/* A stalled read under raise: the batch fails naming the file, within the
 * timeout; the epoch goes on; destroy returns at once; the stuck thread
 * leaves once released. */
static void test_stall_raise(int threads) {
  int base = tu_nthreads();
  char stall[4096];
  snprintf(stall, sizeof stall, "%s/stall.jpg", g_dir);
  tu_write_jpeg(stall, 16, 16, 99, 85);
  stk_options o;
  opts(&o, make_list(16, "stall.jpg", 6), 4, threads);
  o.read_timeout = 0.5f;
  stk__fault_stall("stall.jpg", 60);
  stk_loader *l = NULL;
  char err[512] = "";
  CHECK(STK_LOADER_CREATE(&o, &l, err, sizeof err) == STK_OK);
  if (!l) return;
  int64_t images = 0;
  int errors = 0;
  char msg[1024] = "";
  double t0 = stk__now();
  double t_err = 0;
  for (int guard = 0; guard < 100; guard++) {
    stk_batch b;
    int rc = stk_loader_next(l, &b);
    if (rc == STK_EEND) break;
    if (rc) {
      errors++;
      t_err = stk__now() - t0;
      snprintf(msg, sizeof msg, "%s", stk_loader_error(l));
      continue;
    }
    images += b.n;
    stk_batch_release(l, &b);
  }
  CHECK_MSG(errors == 1 && images == 12, "threads %d: %d errors, %lld images", threads, errors,
            (long long)images);
  CHECK_MSG(strstr(msg, "stall.jpg: read timed out after 0.5 s"), "%s", msg);
  CHECK_MSG(t_err >= 0.45 && t_err < 1.5, "the timeout came after %.2f s", t_err);
  printf("stall (raise, %d threads): error after %.2f s: %s\n", threads, t_err, msg);
  CHECK(stk__fault_stalls() >= 1);
  /* the next epoch meets the stalled file again (a second stuck thread) */
  run_epoch(l, &images, &errors, msg, sizeof msg);
  CHECK(errors == 1 && images == 12);
  t0 = stk__now();
  CHECK(stk_loader_set_epoch(l, 7) == STK_OK); /* a reset does not wait for a read */
  stk_loader_destroy(l);
  double dt = stk__now() - t0;
  CHECK_MSG(dt < 1.0, "destroy with stuck reads took %.2f s", dt);
  CHECK(tu_nthreads() > base); /* the stuck ones are still there */
  stk__fault_unstall();
  int left = tu_wait_threads(base, 5);
  CHECK_MSG(left == base, "%d threads left after the stalled reads returned, %d before", left, base);
}

/* Under skip: the stalled sample is skipped, every other sample comes
 * once; a stall in a refill (the last file refills the first batch's hole)
 * is taken over. */
static void test_stall_skip(void) {
  int base = tu_nthreads();
  char bad[4096];
  snprintf(bad, sizeof bad, "%s/bad.jpg", g_dir);
  tu_write_bytes(bad, "not a jpeg", 10);
  /* 16 samples: bad.jpg first, stall.jpg last, which refills bad's hole */
  char list[4096];
  snprintf(list, sizeof list, "%s/skip-list.txt", g_dir);
  FILE *f = fopen(list, "w");
  fprintf(f, "bad.jpg 0\n");
  for (int i = 1; i < 15; i++) fprintf(f, "img%03d.jpg %d\n", i, i % 3);
  fprintf(f, "stall.jpg 0\n");
  fclose(f);
  make_list(16, NULL, 0); /* the images */
  for (int threads = 1; threads <= 3; threads += 2) {
    stk_options o;
    opts(&o, list, 4, threads);
    o.on_error = STK_ON_ERROR_SKIP;
    o.max_skipped_fraction = 1; /* 2 of 16 fail on purpose */
    o.read_timeout = 0.4f;
    stk__fault_stall("stall.jpg", 60);
    stk_loader *l = NULL;
    char err[512] = "";
    CHECK(STK_LOADER_CREATE(&o, &l, err, sizeof err) == STK_OK);
    if (!l) return;
    int64_t images;
    int errors;
    char msg[1024] = "";
    double t0 = stk__now();
    run_epoch(l, &images, &errors, msg, sizeof msg);
    double dt = stk__now() - t0;
    CHECK_MSG(images == 14 && errors == 0, "threads %d: %lld images, %d errors (%s)", threads,
              (long long)images, errors, msg);
    CHECK_MSG(dt < 2.0, "the epoch took %.2f s", dt);
    int found = 0;
    for (uint64_t i = 0; i < stk_loader_skipped_count(l); i++) {
      const char *p, *r;
      stk_loader_skipped(l, i, &p, &r);
      if (strstr(p, "stall.jpg") && strstr(r, "read timed out after 0.4 s")) found++;
      if (strstr(p, "bad.jpg")) found += 10;
    }
    CHECK_MSG(found == 11, "skipped list: %d", found);
    printf("stall (skip, refill, %d threads): epoch of 14 in %.2f s\n", threads, dt);
    stk_loader_destroy(l);
    stk__fault_unstall();
    CHECK(tu_wait_threads(base, 5) == base);
  }
}

/* With no timeout a stalled read is waited for: next_timed says so, and
 * destroy still returns at once. */
static void test_no_timeout(void) {
  int base = tu_nthreads();
  stk_options o;
  opts(&o, make_list(8, "stall.jpg", 0), 4, 2);
  o.read_timeout = 0;
  stk__fault_stall("stall.jpg", 60);
  stk_loader *l = NULL;
  char err[512] = "";
  CHECK(STK_LOADER_CREATE(&o, &l, err, sizeof err) == STK_OK);
  if (!l) return;
  stk_batch b;
  double t0 = stk__now();
  CHECK(stk_loader_next_timed(l, &b, 0.3) == STK_ETIMEDOUT);
  double dt = stk__now() - t0;
  CHECK_MSG(dt >= 0.29 && dt < 0.8, "next_timed(0.3) took %.2f s", dt);
  t0 = stk__now();
  stk_loader_destroy(l);
  dt = stk__now() - t0;
  CHECK_MSG(dt < 1.0, "destroy took %.2f s", dt);
  printf("destroy with a read stalled forever: %.3f s\n", dt);
  stk__fault_unstall();
  CHECK(tu_wait_threads(base, 5) == base);
}
#endif

int main(void) {
  g_dir = tu_tempdir();
  if (!g_dir) return 1;
  /* TSan starts a thread of its own with the first: counted in g_threads */
  stk__workers_destroy(stk__workers_create(1, NULL, NULL, 0));
  g_threads = tu_nthreads();
  test_fifo();
  test_fifo_list();
  test_fifo_list_stalled_writer();
  test_bounded_reader();
#ifdef STK_FAULT_INJECTION
  test_pack_and_check_stall();
  test_stall_raise(1);
  test_stall_raise(3);
  test_stall_skip();
  test_no_timeout();
#else
  printf("stalled reads: skipped (built without STK_FAULT_INJECTION; the sanitizer build runs them)\n");
#endif
  tu_rmtree(g_dir);
  free(g_dir);
  printf("test_stalls: %d passed, %d failed\n", check_passed_, check_failed_);
  return check_failed_ ? 1 : 0;
}
