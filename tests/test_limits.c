/*
 * test_limits.c: one set of limits for everything that decodes.
 *
 * - stk_check and stk_check_file refuse exactly the files a loader of the
 *   same options refuses for its decode memory, per pipeline (eval decodes
 *   more of a large JPEG than train's DCT-shrunk crops), and
 *   stk_pixel_ceiling says the largest image every format decodes;
 * - stk_check's and stk_pack's threads share one decode budget, as a
 *   loader's do: their peak memory stays near max_decode_bytes however
 *   many threads; a cache pack leaves out a decode over all of it;
 * - a closed loader's memory goes back to the system;
 * - a resampler that cannot get its tables says out of memory, not that
 *   the image cannot be resampled;
 * - a list read from a pipe resolves its relative paths from the current
 *   folder.
 */
#include "util.h"

#include <sys/resource.h>
#include <sys/wait.h>

#include "check.h"
#include "loader/pipeline.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define STK_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || \
    __has_feature(memory_sanitizer)
#define STK_SANITIZED 1
#endif
#endif
#ifndef STK_SANITIZED
#define STK_SANITIZED 0
#endif

#define BUDGET ((uint64_t)12 << 20)

static char *g_tmp;

/* A w x h image, flat (it compresses to almost nothing: the files stay
 * small, the decodes do not) or photo-like, as PNG or JPEG. */
static void write_image(const char *path, int w, int h, int png, int flat) {
  uint8_t *rgb = malloc((size_t)w * h * 3);
  CHECK(rgb != NULL);
  if (!rgb) return;
  if (flat)
    memset(rgb, 120, (size_t)w * h * 3);
  else
    stk__synth_render(rgb, w, h, (uint64_t)w * 31 + h);
  uint8_t *buf = NULL;
  size_t n = 0;
  int rc;
  if (png) {
    rc = stk__png_encode(rgb, w, h, STK__PNG_RGB, 8, NULL, 0, &buf, &n);
  } else {
    stk__jpeg_enc_opts o;
    stk__jpeg_enc_defaults(&o);
    o.quality = 80;
    rc = stk__jpeg_encode(rgb, w, h, &o, &buf, &n);
  }
  if (!rc) rc = stk__write_file(path, buf, n);
  CHECK_MSG(rc == STK_OK, "writing %s", path);
  free(buf);
  free(rgb);
}

static void opts_for(stk_options *o, const char *root, int pipeline) {
  stk_options_init(o);
  o->root = root;
  o->pipeline = pipeline;
  o->size = 224;
  o->threads = 2;
  o->max_decode_bytes = BUDGET;
  o->on_error = STK_ON_ERROR_SKIP;
  o->max_skipped_fraction = 1;
  o->max_consecutive_failures = 0;
  o->batch_size = 1;
}

/* The files of the agreement folder, sorted as the folder scan sorts them. */
static const char *const g_names[] = {"big.jpg", "big.png", "small.jpg"};
#define NFILES 3

static int name_bit(const char *path) {
  for (int k = 0; k < NFILES; k++) {
    size_t pl = strlen(path), nl = strlen(g_names[k]);
    if (pl >= nl && !strcmp(path + pl - nl, g_names[k])) return 1 << k;
  }
  return 1 << 8; /* unknown: never expected */
}

static void on_check_bad(void *user, int64_t index, const char *path, int code,
                         const char *reason) {
  (void)index;
  *(int *)user |= name_bit(path);
  CHECK_MSG(code == STK_ELIMIT && strstr(reason, "max_decode_bytes"), "%s: %d %s", path, code,
            reason);
}

/* What a loader of these options skips over a few epochs (train's crops
 * differ by epoch). */
static int loader_refuses(const stk_options *o) {
  stk_loader *l = NULL;
  char err[512];
  CHECK_MSG(STK_LOADER_CREATE(o, &l, err, sizeof err) == STK_OK, "%s", err);
  if (!l) return -1;
  int refused = 0;
  for (int epoch = 0; epoch < 4; epoch++) {
    stk_loader_set_epoch(l, (uint64_t)epoch);
    stk_batch b;
    int rc;
    while ((rc = stk_loader_next(l, &b)) == STK_OK) stk_batch_release(l, &b);
    CHECK_MSG(rc == STK_EEND, "epoch %d ended with %d", epoch, rc);
  }
  for (uint64_t i = 0; i < stk_loader_skipped_count(l); i++) {
    const char *path, *why;
    if (stk_loader_skipped(l, i, &path, &why) == STK_OK) refused |= name_bit(path);
  }
  stk_loader_destroy(l);
  return refused;
}

/* A 2400x2400 JPEG: eval decodes 2400 x ~2100 rows at 1/1 (about 15 MiB,
 * over the 12 MiB budget); train's crops decode a few MiB (DCT scaling).
 * A 2200x2200 PNG is decoded whole by both (14 MiB). Before, stk_check
 * passed both in every pipeline. */
static void test_check_agrees_with_loader(void) {
  char root[4200], cls[4300], p[4400];
  snprintf(root, sizeof root, "%s/agree", g_tmp);
  snprintf(cls, sizeof cls, "%s/a", root);
  tu_mkdir(root);
  tu_mkdir(cls);
  snprintf(p, sizeof p, "%s/big.jpg", cls);
  write_image(p, 2400, 2400, 0, 0);
  snprintf(p, sizeof p, "%s/big.png", cls);
  write_image(p, 2200, 2200, 1, 1);
  snprintf(p, sizeof p, "%s/small.jpg", cls);
  write_image(p, 300, 200, 0, 0);
  const int pipelines[2] = {STK_PIPELINE_EVAL, STK_PIPELINE_TRAIN};
  const int expect[2] = {1 | 2, 2}; /* big.jpg, big.png; big.png */
  for (int k = 0; k < 2; k++) {
    stk_options o;
    opts_for(&o, root, pipelines[k]);
    int checked = 0;
    stk_check_result res;
    char err[512];
    CHECK_EQ_INT(stk_check(&o, &res, on_check_bad, &checked, err, sizeof err), STK_OK);
    int loader = loader_refuses(&o);
    CHECK_MSG(checked == loader, "pipeline %d: check refuses %#x, the loader %#x", k, checked,
              loader);
    CHECK_MSG(checked == expect[k], "pipeline %d: check refuses %#x, want %#x", k, checked,
              expect[k]);
    for (int f = 0; f < NFILES; f++) { /* stk_check_file: the same answer */
      snprintf(p, sizeof p, "%s/%s", cls, g_names[f]);
      char msg[512];
      int w = 0, h = 0, rc = stk_check_file(p, &o, &w, &h, msg, sizeof msg);
      int want = expect[k] & (1 << f) ? STK_ELIMIT : STK_OK;
      CHECK_MSG(rc == want, "check_file %s, pipeline %d: %d (%s), want %d", g_names[f], k, rc,
                msg, want);
      if (!rc) CHECK(w > 0 && h > 0);
    }
  }
}

static void test_pixel_ceiling(void) {
  /* (384 MiB - 1 MiB) / 3 bytes: under max_pixels' 178,956,970 */
  CHECK_EQ_INT((long long)stk_pixel_ceiling(NULL), 133868202LL);
  stk_options o;
  stk_options_init(&o);
  o.max_pixels = 1000;
  CHECK_EQ_INT((long long)stk_pixel_ceiling(&o), 1000);
  o.max_pixels = 0;
  o.max_decode_bytes = 0;
  CHECK_EQ_INT((long long)stk_pixel_ceiling(&o), 0);
  o.max_decode_bytes = (uint64_t)7 << 20;
  CHECK_EQ_INT((long long)stk_pixel_ceiling(&o), (6LL << 20) / 3);
}

static long status_kb(const char *key) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  long kb = -1;
  size_t kl = strlen(key);
  while (f && fgets(line, sizeof line, f))
    if (!strncmp(line, key, kl)) kb = atol(line + kl);
  if (f) fclose(f);
  return kb;
}

/* stk_check over 8 flat 2000x2000 PNGs (11.4 MiB each decoded, files of a
 * few KB) on 8 threads, in a child: with one 12 MiB budget for them all,
 * its peak stays near one decode. Before, each thread decoded on its own:
 * 8 decodes at once, over 90 MiB. */
static void test_check_shares_budget(void) {
  if (STK_SANITIZED || getenv("STK_TEST_VALGRIND")) return; /* RSS is the tools' there */
  char root[4200], cls[4300], p[4400];
  snprintf(root, sizeof root, "%s/budget", g_tmp);
  snprintf(cls, sizeof cls, "%s/a", root);
  tu_mkdir(root);
  tu_mkdir(cls);
  for (int i = 0; i < 8; i++) {
    snprintf(p, sizeof p, "%s/%d.png", cls, i);
    write_image(p, 2000, 2000, 1, 1);
  }
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    FILE *f = fopen("/proc/self/clear_refs", "w"); /* the peak from here on */
    if (f) fputs("5", f), fclose(f);
    long base = status_kb("VmRSS:");
    stk_options o;
    opts_for(&o, root, STK_PIPELINE_EVAL);
    o.threads = 8;
    o.max_decode_bytes = (uint64_t)16 << 20;
    stk_check_result res;
    char err[512];
    int rc = stk_check(&o, &res, NULL, NULL, err, sizeof err);
    long peak = status_kb("VmHWM:");
    printf("check, 8 threads, 8 decodes of 11.4 MiB, a budget of 16 MiB: %ld KiB over %ld\n",
           peak - base, base);
    fflush(stdout);
    _exit(rc == STK_OK && res.failed == 0 && peak - base < (40L << 10) ? 0 : 1);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "check's peak went past its budget");
}

/* Five loaders in a row over 3000x2000 JPEGs (eval decodes 18 MB of rows
 * each, under glibc's mmap threshold once it has risen: the heaps keep
 * them), in a child: what each close frees goes back to the system, and
 * the peaks do not rise from loader to loader. Before, 4 threads left
 * their decodes' memory in glibc's heaps after close. */
static void test_close_returns_memory(void) {
  if (STK_SANITIZED || getenv("STK_TEST_VALGRIND")) return;
  char root[4200], cls[4300], p[4400];
  snprintf(root, sizeof root, "%s/close", g_tmp);
  snprintf(cls, sizeof cls, "%s/a", root);
  tu_mkdir(root);
  tu_mkdir(cls);
  for (int i = 0; i < 8; i++) {
    snprintf(p, sizeof p, "%s/%d.jpg", cls, i);
    write_image(p, 3000 + i, 2000 + i, 0, 0);
  }
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    long base = status_kb("VmRSS:"), after[5], peak[5];
    for (int k = 0; k < 5; k++) {
      FILE *f = fopen("/proc/self/clear_refs", "w");
      if (f) fputs("5", f), fclose(f);
      stk_options o;
      opts_for(&o, root, STK_PIPELINE_EVAL);
      o.threads = 4;
      o.batch_size = 2;
      o.max_decode_bytes = (uint64_t)384 << 20;
      if (loader_refuses(&o) != 0) _exit(2);
      after[k] = status_kb("VmRSS:") - base;
      peak[k] = status_kb("VmHWM:") - base;
      printf("loader %d: peak %ld KiB, %ld KiB after close (over %ld)\n", k, peak[k], after[k],
             base);
    }
    fflush(stdout);
    int ok = 1;
    for (int k = 0; k < 5; k++) ok &= after[k] < (16L << 10) && peak[k] < peak[0] + (16L << 10);
    _exit(ok ? 0 : 1);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "a closed loader kept its memory");
}

static void on_pipe_bad(void *user, int64_t index, const char *path, int code,
                        const char *reason) {
  (void)index, (void)code;
  ++*(int *)user;
  fprintf(stderr, "pipe list: %s: %s\n", path, reason);
}

/* A list read from a pipe (a shell's `--list <(cmd)` is /dev/fd/N) holds
 * paths relative to the current folder: they used to resolve under
 * /dev/fd, and every file failed. */
static void test_pipe_list_paths(void) {
  char root[4200], cwd[4096];
  snprintf(root, sizeof root, "%s/pipe", g_tmp);
  tu_mkdir(root);
  CHECK(getcwd(cwd, sizeof cwd) != NULL);
  CHECK(chdir(root) == 0);
  tu_mkdir("a");
  write_image("a/1.jpg", 64, 48, 0, 0);
  int fds[2];
  CHECK(pipe(fds) == 0);
  const char text[] = "a/1.jpg 0\n";
  CHECK(write(fds[1], text, sizeof text - 1) == (ssize_t)(sizeof text - 1));
  close(fds[1]);
  char list[64];
  snprintf(list, sizeof list, "/dev/fd/%d", fds[0]);
  stk_options o;
  stk_options_init(&o);
  o.list_file = list;
  o.threads = 1;
  int failed = 0;
  stk_check_result res;
  char err[512];
  CHECK_EQ_INT(stk_check(&o, &res, on_pipe_bad, &failed, err, sizeof err), STK_OK);
  CHECK_EQ_INT(res.files, 1);
  CHECK_EQ_INT(res.failed, 0);
  close(fds[0]);
  CHECK(chdir(cwd) == 0);
}

static void on_pack_bad(void *user, const char *path, const char *reason) {
  *(int *)user |= name_bit(path);
  fprintf(stderr, "pack left out %s: %s\n", path, reason);
}

/* stk_pack's threads share a decode budget (before, it had none): 8
 * threads over the 8 flat 2000x2000 PNGs stay near one decode of 11.4 MiB.
 * A decode over the whole budget waits and runs alone: it is not left out
 * (the cache keeps it at max_side, which every loader takes). */
static void test_pack_shares_budget(void) {
  char root[4200], out[4300];
  snprintf(root, sizeof root, "%s/agree", g_tmp);
  snprintf(out, sizeof out, "%s/agree.stkc", g_tmp);
  stk_pack_options po;
  stk_pack_options_init(&po);
  po.root = root;
  po.output = out;
  po.threads = 2;
  po.max_decode_bytes = BUDGET;
  int left = 0;
  po.bad_file = on_pack_bad;
  po.user = &left;
  stk_pack_result res;
  char err[512];
  CHECK_MSG(STK_PACK(&po, &res, err, sizeof err) == STK_OK, "%s", err);
  CHECK_MSG(left == 0, "pack left out %#x", left);
  CHECK_EQ_INT(res.packed, 3);
  if (STK_SANITIZED || getenv("STK_TEST_VALGRIND")) return;
  snprintf(root, sizeof root, "%s/budget", g_tmp);
  snprintf(out, sizeof out, "%s/budget.stkc", g_tmp);
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    FILE *f = fopen("/proc/self/clear_refs", "w");
    if (f) fputs("5", f), fclose(f);
    long base = status_kb("VmRSS:");
    stk_pack_options_init(&po);
    po.root = root;
    po.output = out;
    po.threads = 8;
    po.max_decode_bytes = (uint64_t)16 << 20;
    int rc = STK_PACK(&po, &res, err, sizeof err);
    long peak = status_kb("VmHWM:");
    printf("pack, 8 threads, 8 decodes of 11.4 MiB, a budget of 16 MiB: %ld KiB over %ld\n",
           peak - base, base);
    fflush(stdout);
    _exit(rc == STK_OK && res.packed == 8 && peak - base < (40L << 10) ? 0 : 1);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "pack's peak went past its budget");
}

static void test_resampler_oom_message(void) {
  stk_options o;
  stk_options_init(&o);
  o.root = ".";
  stk__plan plan;
  stk__plan_init(&plan, &o);
  stk__worker w;
  CHECK_EQ_INT(stk__worker_init(&w, &plan), STK_OK);
  stk__sample s;
  memset(&s, 0, sizeof s);
  s.info.width = s.info.height = 9000;
  s.info.format = STK__FMT_PNG;
  s.denom = 1;
  stk__geom_crop(&(stk__rect){0, 0, 9000, 9000}, 224, 224, &s.geom);
  /* windows of 10^9 taps: 224 of them are tables no allocation can hold */
  s.geom.x.scale = 5e8;
  stk__geom g;
  stk__region reg;
  char msg[512] = "";
  int rc = stk__sample_decode(&plan, &w, &s, &g, &reg, NULL, msg, sizeof msg);
  CHECK_EQ_INT(rc, STK_ENOMEM);
  CHECK_MSG(strstr(msg, "out of memory") != NULL, "the message: %s", msg);
  stk__worker_free(&w);
  stk__plan_free(&plan);
}

/* test_resampler_oom_message asks for more than any allocator gives: under
 * AddressSanitizer the allocation must fail as it does without it (NULL),
 * not abort the test. */
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "allocator_may_return_null=1"; }

int main(void) {
  g_tmp = tu_tempdir();
  CHECK(g_tmp != NULL);
  if (!g_tmp) return CHECK_DONE();
  test_pixel_ceiling();
  test_resampler_oom_message();
  test_check_agrees_with_loader();
  test_check_shares_budget();
  test_pack_shares_budget();
  test_close_returns_memory();
  test_pipe_list_paths();
  tu_rmtree(g_tmp);
  free(g_tmp);
  return CHECK_DONE();
}
