/*
 * stoker: the command-line face of libstoker.
 *
 *   stoker bench DIR    throughput of the loader on a folder
 *   stoker check DIR    decode every file, list the ones that fail
 *   stoker synth DIR    write a deterministic ImageNet-like JPEG dataset
 *   stoker info         version, SIMD level, what this build decodes
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/common.h"
#include "sources/dataset.h"
#include "stoker.h"
#include "synth/synth.h"

static int wants_help(int argc, char **argv) {
  for (int i = 0; i < argc; i++)
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) return 1;
  return 0;
}

static void usage_main(FILE *f) {
  fprintf(f,
          "usage: stoker <command> [options]\n\n"
          "commands:\n"
          "  bench DIR   measure the loader's throughput on an ImageFolder-style folder\n"
          "  check DIR   decode every image of a folder and list each one that fails\n"
          "  synth DIR   write a deterministic, ImageNet-like JPEG dataset\n"
          "  info        print the version, SIMD level and what this build can decode\n\n"
          "`stoker <command> --help` describes each command.\n");
}

/* Parses an integer option value; exits with a message when malformed. */
static long long parse_int(const char *opt, const char *v, long long lo, long long hi) {
  char *end = NULL;
  errno = 0;
  long long x = v ? strtoll(v, &end, 10) : 0;
  if (!v || errno || !end || *end || x < lo || x > hi) {
    fprintf(stderr, "stoker: %s expects an integer in [%lld, %lld], got '%s'\n", opt, lo, hi,
            v ? v : "");
    exit(2);
  }
  return x;
}

/* Parses a number option value in [lo, hi]; exits with a message when malformed. */
static double parse_real(const char *opt, const char *v, double lo, double hi) {
  char *end = NULL;
  errno = 0;
  double x = v ? strtod(v, &end) : 0;
  if (!v || errno || !end || *end || !(x >= lo && x <= hi)) {
    fprintf(stderr, "stoker: %s expects a number in [%g, %g], got '%s'\n", opt, lo, hi, v ? v : "");
    exit(2);
  }
  return x;
}

static void json_string(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\')
      fprintf(f, "\\%c", c);
    else if (c < 0x20)
      fprintf(f, "\\u%04x", c);
    else
      fputc(c, f);
  }
  fputc('"', f);
}

/* ---- bench ------------------------------------------------------------- */

static void usage_bench(FILE *f) {
  fprintf(f,
          "usage: stoker bench DIR [options]\n\n"
          "Runs the loader over DIR (DIR/<class>/<image>) and reports images/s.\n\n"
          "  --pipeline train|eval  train: RandomResizedCrop + flip; eval: Resize + CenterCrop (train)\n"
          "  --size N               output side in pixels (224)\n"
          "  --batch N              batch size (256)\n"
          "  --threads N            worker threads, 0 = all CPUs (0)\n"
          "  --epochs N             epochs to run (1)\n"
          "  --seed S               seed of shuffle and augmentation (0)\n"
          "  --dtype T              float32|float16|bfloat16|uint8 (float32)\n"
          "  --layout L             nchw|nhwc (nchw)\n"
          "  --prefetch N           batches prepared ahead (2)\n"
          "  --on-error P           raise|skip (raise)\n"
          "  --device N             decode and augment on CUDA device N (nvJPEG + kernels);\n"
          "                         -1 = CPU (-1)\n"
          "  --cpu-share X          with --device: share of each batch the worker threads\n"
          "                         decode on the CPU, 0..1; adaptive when not given\n"
          "  --json                 print one JSON object as the last line\n");
}

static void progress_bar(int64_t done, int64_t total, double secs) {
  int width = 30, fill = total > 0 ? (int)(width * done / total) : 0;
  if (fill > width) fill = width;
  char bar[64];
  for (int i = 0; i < width; i++) bar[i] = i < fill ? '#' : '.';
  bar[width] = '\0';
  fprintf(stderr, "\r[%s] %" PRId64 "/%" PRId64 " images  %.0f img/s ", bar, done, total,
          secs > 0 ? done / secs : 0.0);
  fflush(stderr);
}

static int cmd_bench(int argc, char **argv) {
  if (wants_help(argc, argv)) {
    usage_bench(stdout);
    return 0;
  }
  stk_options o;
  stk_options_init(&o);
  o.threads = 0;
  int epochs = 1, json = 0;
  const char *dir = NULL;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--json")) {
      json = 1;
    } else if (!strcmp(a, "--pipeline")) {
      i++;
      if (v && !strcmp(v, "train")) o.pipeline = STK_PIPELINE_TRAIN;
      else if (v && !strcmp(v, "eval")) o.pipeline = STK_PIPELINE_EVAL;
      else { fprintf(stderr, "stoker bench: --pipeline is train or eval\n"); return 2; }
    } else if (!strcmp(a, "--size")) {
      o.size = (int)parse_int(a, v, 1, 8192), i++;
    } else if (!strcmp(a, "--batch")) {
      o.batch_size = (int)parse_int(a, v, 1, 1 << 20), i++;
    } else if (!strcmp(a, "--threads")) {
      o.threads = (int)parse_int(a, v, 0, 1024), i++;
    } else if (!strcmp(a, "--epochs")) {
      epochs = (int)parse_int(a, v, 1, 1000000), i++;
    } else if (!strcmp(a, "--seed")) {
      o.seed = (uint64_t)parse_int(a, v, 0, INT64_MAX), i++;
    } else if (!strcmp(a, "--device")) {
      o.device = (int)parse_int(a, v, -1, 1023), i++;
    } else if (!strcmp(a, "--cpu-share")) {
      o.gpu_cpu_share = (float)parse_real(a, v, 0.0, 1.0), i++;
    } else if (!strcmp(a, "--prefetch")) {
      o.prefetch = (int)parse_int(a, v, 1, 64), i++;
    } else if (!strcmp(a, "--dtype")) {
      i++;
      if (v && !strcmp(v, "float32")) o.dtype = STK_DTYPE_FLOAT32;
      else if (v && !strcmp(v, "float16")) o.dtype = STK_DTYPE_FLOAT16;
      else if (v && !strcmp(v, "bfloat16")) o.dtype = STK_DTYPE_BFLOAT16;
      else if (v && !strcmp(v, "uint8")) o.dtype = STK_DTYPE_UINT8;
      else { fprintf(stderr, "stoker bench: --dtype is float32, float16, bfloat16 or uint8\n"); return 2; }
    } else if (!strcmp(a, "--layout")) {
      i++;
      if (v && !strcmp(v, "nchw")) o.layout = STK_LAYOUT_NCHW;
      else if (v && !strcmp(v, "nhwc")) o.layout = STK_LAYOUT_NHWC;
      else { fprintf(stderr, "stoker bench: --layout is nchw or nhwc\n"); return 2; }
    } else if (!strcmp(a, "--on-error")) {
      i++;
      if (v && !strcmp(v, "raise")) o.on_error = STK_ON_ERROR_RAISE;
      else if (v && !strcmp(v, "skip")) o.on_error = STK_ON_ERROR_SKIP;
      else { fprintf(stderr, "stoker bench: --on-error is raise or skip\n"); return 2; }
    } else if (a[0] == '-') {
      fprintf(stderr, "stoker bench: unknown option %s (see --help)\n", a);
      return 2;
    } else if (!dir) {
      dir = a;
    } else {
      fprintf(stderr, "stoker bench: one folder only\n");
      return 2;
    }
  }
  if (!dir) {
    usage_bench(stderr);
    return 2;
  }
  o.root = dir;
  char err[1024] = "";
  stk_loader *l = NULL;
  double t_build = stk__now();
  int rc = STK_LOADER_CREATE(&o, &l, err, sizeof err);
  if (rc) {
    fprintf(stderr, "stoker bench: %s (%s)\n", err, stk_strerror(rc));
    return 1;
  }
  t_build = stk__now() - t_build;
  int tty = isatty(STDERR_FILENO) && !json;
  int64_t per_epoch = stk_loader_shard_size(l), images = 0;
  double t0 = stk__now();
  int failed = 0;
  for (int e = 0; e < epochs && !failed; e++) {
    stk_loader_set_epoch(l, (uint64_t)e);
    for (;;) {
      stk_batch b;
      rc = stk_loader_next(l, &b);
      if (rc == STK_EEND) break;
      if (rc) {
        if (tty) fputc('\n', stderr);
        fprintf(stderr, "stoker bench: %s (%s)\n", stk_loader_error(l), stk_strerror(rc));
        failed = 1;
        break;
      }
      /* a device batch counts once its data is written */
      rc = stk_batch_wait(l, &b);
      if (rc) {
        fprintf(stderr, "stoker bench: waiting for batch %lld: %s\n", (long long)b.batch_index,
                stk_strerror(rc));
        failed = 1;
        stk_batch_release(l, &b);
        break;
      }
      images += b.n;
      stk_batch_release(l, &b);
      if (tty) progress_bar(images, per_epoch * epochs, stk__now() - t0);
    }
  }
  double secs = stk__now() - t0;
  if (tty) fputc('\n', stderr);
  stk_stats st;
  stk_loader_stats(l, &st);
  const char *dtypes[] = {"float32", "float16", "bfloat16", "uint8"};
  printf("%s pipeline, %d threads, batch %d, size %d, %s %s: %" PRId64
         " images in %.3f s = %.1f images/s (%" PRIu64 " skipped; loader built in %.3f s)\n",
         o.pipeline == STK_PIPELINE_TRAIN ? "train" : "eval", st.threads, o.batch_size, o.size,
         dtypes[o.dtype], o.layout == STK_LAYOUT_NCHW ? "NCHW" : "NHWC", images, secs,
         secs > 0 ? images / secs : 0.0, st.skipped, t_build);
  printf("per image: read %.3f ms, decode %.3f ms, augment %.3f ms (thread time); consumer waited "
         "%.3f s\n",
         images ? 1e3 * st.read_seconds / images : 0, images ? 1e3 * st.decode_seconds / images : 0,
         images ? 1e3 * st.augment_seconds / images : 0, st.wait_seconds);
  if (o.device >= 0)
    printf("gpu %d: %" PRIu64 " images decoded by the hardware engines, %" PRIu64
           " by nvJPEG CUDA, %" PRIu64 " on the CPU (share now %.3f); %.1f MB of device memory; "
           "%.2f ms per batch queuing work on the GPU\n",
           o.device, st.decoded_hw, st.decoded_cuda, st.decoded_cpu, st.cpu_share,
           st.device_bytes / 1e6, st.batches ? 1e3 * st.submit_seconds / st.batches : 0.0);
  for (uint64_t i = 0; i < st.skipped; i++) {
    const char *p, *r;
    if (stk_loader_skipped(l, i, &p, &r) == STK_OK) printf("skipped: %s: %s\n", p, r);
  }
  if (json) {
    printf("{\"images\": %" PRId64 ", \"seconds\": %.6f, \"images_per_s\": %.3f, \"skipped\": %" PRIu64
           ", \"threads\": %d, \"batch\": %d, \"size\": %d, \"pipeline\": \"%s\", \"epochs\": %d, "
           "\"read_s\": %.6f, \"decode_s\": %.6f, \"augment_s\": %.6f, \"wait_s\": %.6f, "
           "\"build_s\": %.6f, \"host_bytes\": %" PRIu64 ", \"device\": %d, \"device_bytes\": %" PRIu64
           ", \"decoded_hw\": %" PRIu64 ", \"decoded_cuda\": %" PRIu64 ", \"decoded_cpu\": %" PRIu64
           ", \"cpu_share\": %.4f, \"submit_s\": %.6f, \"late_allocs\": %" PRIu64 ", \"ok\": %s}\n",
           images, secs, secs > 0 ? images / secs : 0.0, st.skipped, st.threads, o.batch_size,
           o.size, o.pipeline == STK_PIPELINE_TRAIN ? "train" : "eval", epochs, st.read_seconds,
           st.decode_seconds, st.augment_seconds, st.wait_seconds, t_build, st.host_bytes,
           o.device, st.device_bytes, st.decoded_hw, st.decoded_cuda, st.decoded_cpu,
           st.cpu_share, st.submit_seconds, st.late_allocs, failed ? "false" : "true");
  }
  stk_loader_destroy(l);
  return failed ? 1 : 0;
}

/* ---- check ------------------------------------------------------------- */

static void usage_check(FILE *f) {
  fprintf(f,
          "usage: stoker check DIR [--json] [--threads N]\n\n"
          "Decodes every image of DIR (ImageFolder layout: DIR/<class>/<image>) in full\n"
          "with the loader's default limits, and lists each file that fails with the\n"
          "reason. Exits 1 if any file fails, 0 otherwise.\n");
}

typedef struct {
  const stk__dataset *ds;
  int64_t next;
  pthread_mutex_t mu;
  int *codes;
  char (*msgs)[256];
} check_job;

static void *check_worker(void *arg) {
  check_job *j = arg;
  for (;;) {
    pthread_mutex_lock(&j->mu);
    int64_t i = j->next++;
    pthread_mutex_unlock(&j->mu);
    if (i >= j->ds->n) break;
    j->codes[i] = stk_check_file(stk__dataset_path(j->ds, i), NULL, NULL, NULL, j->msgs[i],
                                 sizeof j->msgs[i]);
  }
  return NULL;
}

static int cmd_check(int argc, char **argv) {
  if (wants_help(argc, argv)) {
    usage_check(stdout);
    return 0;
  }
  int json = 0, threads = 0;
  const char *dir = NULL;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--json")) json = 1;
    else if (!strcmp(argv[i], "--threads"))
      threads = (int)parse_int("--threads", i + 1 < argc ? argv[i + 1] : NULL, 0, 1024), i++;
    else if (argv[i][0] == '-') {
      fprintf(stderr, "stoker check: unknown option %s (see --help)\n", argv[i]);
      return 2;
    } else dir = argv[i];
  }
  if (!dir) {
    usage_check(stderr);
    return 2;
  }
  stk__dataset ds;
  char err[1024];
  int rc = stk__dataset_from_folder(&ds, dir, err, sizeof err);
  if (rc) {
    fprintf(stderr, "stoker check: %s\n", err);
    return 2;
  }
  if (threads == 0) threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
  if (threads < 1) threads = 1;
  check_job job = {.ds = &ds};
  pthread_mutex_init(&job.mu, NULL);
  job.codes = calloc((size_t)ds.n, sizeof *job.codes);
  job.msgs = calloc((size_t)ds.n, sizeof *job.msgs);
  pthread_t *th = calloc((size_t)threads, sizeof *th);
  if (!job.codes || !job.msgs || !th) {
    fprintf(stderr, "stoker check: out of memory\n");
    return 2;
  }
  int started = 0;
  for (int i = 0; i < threads; i++) started += pthread_create(&th[i], NULL, check_worker, &job) == 0;
  if (!started) check_worker(&job);
  for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
  int64_t bad = 0;
  if (json) printf("{\"files\": %" PRId64 ", \"failures\": [", ds.n);
  for (int64_t i = 0; i < ds.n; i++) {
    if (!job.codes[i]) continue;
    if (json) {
      printf("%s{\"path\": ", bad ? ", " : "");
      json_string(stdout, stk__dataset_path(&ds, i));
      printf(", \"reason\": ");
      json_string(stdout, job.msgs[i]);
      printf(", \"error\": ");
      json_string(stdout, stk_strerror(job.codes[i]));
      printf("}");
    } else {
      printf("%s: %s\n", stk__dataset_path(&ds, i), job.msgs[i]);
    }
    bad++;
  }
  if (json)
    printf("], \"failed\": %" PRId64 ", \"ok\": %" PRId64 "}\n", bad, ds.n - bad);
  else
    printf("%" PRId64 " files checked, %" PRId64 " failed\n", ds.n, bad);
  free(job.codes);
  free(job.msgs);
  free(th);
  pthread_mutex_destroy(&job.mu);
  stk__dataset_free(&ds);
  return bad ? 1 : 0;
}

/* ---- synth ------------------------------------------------------------- */

static void usage_synth(FILE *f) {
  fprintf(f,
          "usage: stoker synth DIR --images N --classes C [--seed S]\n\n"
          "Writes N photo-like JPEG images (about 500x375, about 110 KB each) spread\n"
          "over C class folders: DIR/<class>/<image>.JPEG. The same arguments give\n"
          "byte-identical files.\n");
}

static void synth_progress(void *ctx, int64_t done, int64_t total) {
  if (*(int *)ctx && (done % 16 == 0 || done == total)) progress_bar(done, total, 0);
}

static int cmd_synth(int argc, char **argv) {
  if (wants_help(argc, argv)) {
    usage_synth(stdout);
    return 0;
  }
  const char *dir = NULL;
  long long images = -1, classes = -1, seed = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--images")) images = parse_int(a, v, 1, INT64_MAX), i++;
    else if (!strcmp(a, "--classes")) classes = parse_int(a, v, 1, 1000000), i++;
    else if (!strcmp(a, "--seed")) seed = parse_int(a, v, 0, INT64_MAX), i++;
    else if (a[0] == '-') {
      fprintf(stderr, "stoker synth: unknown option %s (see --help)\n", a);
      return 2;
    } else dir = a;
  }
  if (!dir || images < 0 || classes < 0) {
    usage_synth(stderr);
    return 2;
  }
  if (classes > images) {
    fprintf(stderr, "stoker synth: --classes (%lld) must not exceed --images (%lld)\n", classes,
            images);
    return 2;
  }
  int tty = isatty(STDERR_FILENO);
  char err[1024] = "";
  double t0 = stk__now();
  int rc = stk__synth_dataset(dir, images, (int)classes, (uint64_t)seed, synth_progress, &tty, err,
                              sizeof err);
  if (tty) fputc('\n', stderr);
  if (rc) {
    fprintf(stderr, "stoker synth: %s (%s)\n", err, stk_strerror(rc));
    return 1;
  }
  printf("wrote %lld images in %lld classes to %s in %.1f s\n", images, classes, dir,
         stk__now() - t0);
  return 0;
}

/* ---- info -------------------------------------------------------------- */

static int cmd_info(int argc, char **argv) {
  if (wants_help(argc, argv)) {
    printf("usage: stoker info\n\nPrints the version, the SIMD level and what this build decodes.\n");
    return 0;
  }
  fputs(stk_build_info(), stdout);
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
    usage_main(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  if (!strcmp(argv[1], "--version")) {
    printf("stoker %s\n", stk_version_string());
    return 0;
  }
  const char *cmd = argv[1];
  if (!strcmp(cmd, "bench")) return cmd_bench(argc - 1, argv + 1);
  if (!strcmp(cmd, "check")) return cmd_check(argc - 1, argv + 1);
  if (!strcmp(cmd, "synth")) return cmd_synth(argc - 1, argv + 1);
  if (!strcmp(cmd, "info")) return cmd_info(argc - 1, argv + 1);
  fprintf(stderr, "stoker: unknown command '%s'\n\n", cmd);
  usage_main(stderr);
  return 2;
}
