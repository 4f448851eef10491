/*
 * stoker: the command-line face of libstoker.
 *
 *   stoker bench SOURCE     throughput of the loader on a folder, cache or shards
 *   stoker check SOURCE     decode every sample, list the ones that fail
 *   stoker pack SRC OUT     write a pre-decoded cache or tar shards
 *   stoker synth DIR        write a deterministic ImageNet-like JPEG dataset
 *   stoker info             version, SIMD level, what this build decodes
 *
 * The flags of `bench`, `check` and `pack` (and their --help lines) come
 * from the library's options tables (stk_option_info()), so a new option
 * needs no code here. Only the public header is used.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <dirent.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* The public header only: this file is also an example of the API. */
#include "stoker.h"

/* Seconds from a monotonic clock. */
static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The code's words after a message, unless the message says why itself:
 * STK_EIO messages carry the system's reason ("Permission denied"), and
 * "(input/output error)" after it only misled. */
static const char *code_words(int rc, char *buf, size_t len) {
  if (rc == STK_EIO) return "";
  snprintf(buf, len, " (%s)", stk_strerror(rc));
  return buf;
}

/* "stoker CMD: MSG (CODE'S WORDS)" on stderr: the code's words once, alone
 * when the message is empty, and left out when the message says them
 * already ("out of memory for 4 batch slots" was followed by "(out of
 * memory)") or says why itself (code_words). */
static void print_failure(const char *cmd, const char *msg, int rc) {
  const char *words = stk_strerror(rc);
  char cw[64];
  if (!msg || !*msg)
    fprintf(stderr, "stoker %s: %s\n", cmd, words);
  else if (strstr(msg, words))
    fprintf(stderr, "stoker %s: %s\n", cmd, msg);
  else
    fprintf(stderr, "stoker %s: %s%s\n", cmd, msg, code_words(rc, cw, sizeof cw));
}

static int wants_help(int argc, char **argv) {
  for (int i = 0; i < argc; i++)
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) return 1;
  return 0;
}

static void usage_main(FILE *f) {
  fprintf(f,
          "usage: stoker <command> [options]\n\n"
          "commands:\n"
          "  bench SOURCE   measure the loader's throughput on an image folder, a cache or\n"
          "                 tar shards\n"
          "  check SOURCE   decode every sample of a source and list each one that fails\n"
          "  pack SRC OUT   pack an image folder into a pre-decoded cache or tar shards\n"
          "  synth DIR      write a deterministic, ImageNet-like JPEG dataset\n"
          "  info           print the version, SIMD level and what this build can decode\n\n"
          "`stoker -V` (--version) prints the version.\n"
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

/* Under --json, a source that cannot be opened still gives one JSON line
 * (a script reads the last line whatever happened). */
static void json_open_failure(const char *err, int rc) {
  printf("{\"ok\": false, \"error\": ");
  json_string(stdout, err);
  printf(", \"error_code\": ");
  json_string(stdout, stk_strerror(rc));
  printf("}\n");
}

/* The library names options by their field (allow_stale_cache); a CLI
 * user sets them by flag, so a message that tells what to pass names the
 * flag. */
static const char *cli_words(char *msg) {
  static const char *const fields[][2] = {{"pass allow_stale_cache", "pass --allow-stale-cache"},
                                          {"longer read_timeout", "longer --read-timeout"}};
  for (size_t k = 0; k < sizeof fields / sizeof fields[0]; k++) {
    char *p = strstr(msg, fields[k][0]);
    size_t fl = strlen(fields[k][0]), tl = strlen(fields[k][1]), ml = strlen(msg);
    if (!p || ml + tl - fl >= 1024) continue; /* every caller's buffer holds 1024 */
    memmove(p + tl, p + fl, ml - (size_t)(p - msg) - fl + 1);
    memcpy(p, fields[k][1], tl);
  }
  return msg;
}

static void progress_bar(int64_t done, int64_t total, double secs, const char *unit) {
  int width = 30, fill = total > 0 ? (int)(width * done / total) : 0;
  if (fill > width) fill = width;
  char bar[64];
  for (int i = 0; i < width; i++) bar[i] = i < fill ? '#' : '.';
  bar[width] = '\0';
  fprintf(stderr, "\r[%s] %" PRId64 "/%" PRId64 " %s  %.0f %s/s ", bar, done, total, unit,
          secs > 0 ? done / secs : 0.0, unit);
  fflush(stderr);
}

/* ---- the flags, from the library's options tables ---------------------- */

/* The value's shape in --help: "N", "LO,HI", "train|eval", ... */
static void flag_metavar(const stk_option_desc *d, char *buf, size_t len) {
  if (!strcmp(d->type, "enum")) snprintf(buf, len, "%s", d->choices);
  else if (!strcmp(d->type, "bool")) buf[0] = '\0';
  else if (!strcmp(d->type, "uint64")) snprintf(buf, len, "%s", strstr(d->name, "bytes") ? "BYTES" : "N");
  else if (!strcmp(d->type, "int")) snprintf(buf, len, "N");
  else if (!strcmp(d->type, "float"))
    snprintf(buf, len, d->count == 1 ? "X" : d->count == 2 ? "LO,HI" : d->count == 3 ? "A,B,C" : "A,B,C,D");
  else snprintf(buf, len, "PATH");
}

/* One --help line per flag of table t that `accept` lets through. */
static void print_option_flags(FILE *f, stk_option_table t, int (*accept)(const stk_option_desc *)) {
  for (int i = 0; i < stk_option_count(t); i++) {
    stk_option_desc d;
    if (stk_option_info(t, i, &d) || !d.flag || (accept && !accept(&d))) continue;
    char meta[64], left[128];
    flag_metavar(&d, meta, sizeof meta);
    snprintf(left, sizeof left, "%s%s%s", d.flag, meta[0] ? " " : "", meta);
    char text[512];
    snprintf(text, sizeof text, d.default_text[0] ? "%s (%s)" : "%s", d.doc, d.default_text);
    if (strlen(left) <= 26)
      fprintf(f, "  %-26s ", left);
    else
      fprintf(f, "  %s\n  %-26s ", left, "");
    /* wrap the text at word boundaries to stay within 80 columns */
    const char *p = text;
    while (strlen(p) > 51) {
      const char *cut = p + 51;
      while (cut > p && *cut != ' ') cut--;
      if (cut == p) break;
      fprintf(f, "%.*s\n  %-26s ", (int)(cut - p), p, "");
      p = cut + 1;
    }
    fprintf(f, "%s\n", p);
  }
}

/* If argv[*i] is a flag of table t that `accept` lets through, parses it
 * (and its value) into opts (a stk_options for the loader's table, a
 * stk_pack_options for pack's) and returns 1, with its row in *out when
 * out is not NULL; 0 when it is no such flag. A bad value ends the program
 * with status 2 and a message naming the flag. */
static int take_option_flag(const char *cmd, int argc, char **argv, int *i, stk_option_table t,
                            void *opts, int (*accept)(const stk_option_desc *),
                            stk_option_desc *out) {
  /* a switch also comes as --flag=0/1 (main keeps that form whole) or
   * --no-flag (off), so that one that defaults on can be turned off */
  char name[128];
  const char *arg = argv[*i], *eq = strchr(arg, '='), *given = NULL;
  snprintf(name, sizeof name, "%.*s", eq ? (int)(eq - arg) : (int)strlen(arg), arg);
  int k = stk_option_find_flag(t, name), neg = 0;
  if (k < 0 && !strncmp(name, "--no-", 5)) {
    char on[128];
    snprintf(on, sizeof on, "--%s", name + 5);
    k = stk_option_find_flag(t, on);
    neg = k >= 0;
  }
  stk_option_desc d;
  if (k < 0 || stk_option_info(t, k, &d) || (accept && !accept(&d))) return 0;
  int sw = !strcmp(d.type, "bool"); /* a switch: present = on */
  if (neg && (!sw || eq)) return 0; /* --no- of a valued flag, or --no-x=1: unknown */
  if (out) *out = d;
  if (sw && eq) given = eq + 1;
  if (neg) given = "0";
  const char *v = sw ? given : *i + 1 < argc ? argv[*i + 1] : NULL;
  if (!sw && !v) {
    fprintf(stderr, "stoker %s: %s needs a value (see --help)\n", cmd, d.flag);
    exit(2);
  }
  char err[512];
  int rc = t == STK_OPTIONS_PACK ? stk_pack_options_parse_flag(opts, d.flag, v, err, sizeof err)
                                 : stk_options_parse_flag(opts, d.flag, v, err, sizeof err);
  if (rc) {
    fprintf(stderr, "stoker %s: %s %s: %s\n", cmd, d.flag, v ? v : "", err);
    exit(2);
  }
  if (!sw) (*i)++;
  return 1;
}

/* Whether `arg` (--name=value) names a switch of either table: those keep
 * their =value (take_option_flag reads it); every other --name=value is
 * split into --name value before the commands see it. */
static int is_switch_eq(const char *arg) {
  const char *eq = strchr(arg, '=');
  char name[128];
  snprintf(name, sizeof name, "%.*s", (int)(eq - arg), arg);
  for (int t = 0; t < 2; t++) {
    stk_option_desc d;
    int k = stk_option_find_flag((stk_option_table)t, name);
    if (k >= 0 && !stk_option_info((stk_option_table)t, k, &d) && !strcmp(d.type, "bool"))
      return 1;
  }
  return 0;
}

/* timm's RandAugment string as `--auto-augment` takes it, the way train.py
 * does ("rand-m9-mstd0.5-inc1"): auto_augment 4 and the timm_ options,
 * the sections as timm reads them (m, n, mstd, mmax, inc, p; mstd above 100
 * is uniform). 0, or 2 with a message for a bad string. */
static int parse_timm_string(const char *s, stk_options *o) {
  if (strncmp(s, "rand", 4) || (s[4] && s[4] != '-')) return 1; /* not one: the enum's names */
  o->auto_augment = 4;
  o->timm_increasing = 0;
  for (const char *p = s + 4; *p == '-';) {
    const char *q = p + 1, *end = strchr(q, '-');
    size_t len = end ? (size_t)(end - q) : strlen(q);
    char part[64], *num;
    snprintf(part, sizeof part, "%.*s", (int)(len < 63 ? len : 63), q);
    for (num = part; *num >= 'a' && *num <= 'z'; num++) {}
    char *stop = NULL;
    double v = strtod(num, &stop);
    size_t klen = (size_t)(num - part);
    int ok = *num && stop && !*stop;
    if (ok && klen == 1 && part[0] == 'm' && v == (int)v && v >= 0 && v <= 1000) {
      o->timm_magnitude = (float)v;
    } else if (ok && klen == 1 && part[0] == 'n' && v == (int)v && v >= 0 && v <= 16) {
      o->ra_num_ops = (int)v;
    } else if (ok && klen == 4 && !strncmp(part, "mstd", 4) && v >= 0) {
      o->timm_mstd = (float)v; /* above 100: uniform, as the library reads it */
    } else if (ok && klen == 4 && !strncmp(part, "mmax", 4) && v == (int)v && v >= 0 &&
               v <= 1000) {
      o->timm_mmax = (int)v;
    } else if (ok && klen == 3 && !strncmp(part, "inc", 3) && v == 1) {
      o->timm_increasing = 1; /* (inc0 is refused: timm reads it as on) */
    } else if (ok && klen == 1 && part[0] == 'p' && v >= 0 && v <= 1) {
      o->timm_prob = (float)v;
    } else {
      fprintf(stderr, "stoker bench: --auto-augment %s: section '%s' is not one stoker takes "
                      "(m, n, mstd, mmax, inc1, p followed by a number)\n", s, part);
      return 2;
    }
    p = q + len;
  }
  if (s[4] && s[strlen(s) - 1] == '-') {
    fprintf(stderr, "stoker bench: --auto-augment %s: an empty section\n", s);
    return 2;
  }
  if (o->aug_fill[0] < 0) /* timm's create_transform fill: round(255 * ImageNet mean) */
    o->aug_fill[0] = 124, o->aug_fill[1] = 116, o->aug_fill[2] = 104;
  return 0;
}

/* The name of value v of an enum option of the loader ("" if none). */
static void choice_name(const char *option, int v, char *buf, size_t len) {
  buf[0] = '\0';
  for (int i = 0; i < stk_option_count(STK_OPTIONS_LOADER); i++) {
    stk_option_desc d;
    if (stk_option_info(STK_OPTIONS_LOADER, i, &d) || strcmp(d.name, option) || !d.choices) continue;
    const char *p = d.choices;
    for (int k = 0; k < v && p; k++) {
      p = strchr(p, '|');
      if (p) p++;
    }
    if (p && v >= 0) snprintf(buf, len, "%.*s", (int)strcspn(p, "|"), p);
  }
}

/* ---- bench ------------------------------------------------------------- */

static void usage_bench(FILE *f) {
  fprintf(f,
          "usage: stoker bench SOURCE [options]\n"
          "       stoker bench --list FILE [--list-base DIR] [options]\n\n"
          "Runs the loader over SOURCE and reports images/s. SOURCE is an image folder\n"
          "(SOURCE/<class>/<image>), a cache file or a folder of tar shards (stoker pack);\n"
          "the kind is detected from the content.\n\n"
          "  --epochs N                 epochs to run (1)\n"
          "  --json                     print one JSON object as the last line\n"
          "  --auto-augment rand-...    also a timm RandAugment string, as train.py takes it\n"
          "                             (rand-m9-mstd0.5-inc1: --auto-augment timm with its\n"
          "                             timm_ options, the fill timm's 124,116,104)\n"
          "A flag's value may follow '=' (--threads=2); a switch takes =0 or =1, or\n"
          "--no-FLAG to turn it off (--no-augmix-all-ops).\n");
  print_option_flags(f, STK_OPTIONS_LOADER, NULL);
}

/* What a bench run measured. */
typedef struct {
  int epochs, failed;
  int64_t images;
  double secs, build_s;
} bench_run;

/* Reads r->epochs epochs, counting the images; r->failed on an error. */
static void bench_epochs(stk_loader *l, int tty, bench_run *r) {
  int64_t per_epoch = stk_loader_shard_size(l);
  double t0 = now();
  for (int e = 0; e < r->epochs && !r->failed; e++) {
    stk_loader_set_epoch(l, (uint64_t)e);
    for (;;) {
      stk_batch b;
      int rc = stk_loader_next(l, &b);
      if (rc == STK_EEND) break;
      if (rc) {
        if (tty) fputc('\n', stderr);
        print_failure("bench", stk_loader_error(l), rc);
        r->failed = 1;
        break;
      }
      /* a device batch counts once its data is written */
      rc = stk_batch_wait(l, &b);
      if (rc) {
        fprintf(stderr, "stoker bench: waiting for batch %lld: %s\n", (long long)b.batch_index,
                stk_strerror(rc));
        r->failed = 1;
        stk_batch_release(l, &b);
        break;
      }
      r->images += b.n;
      stk_batch_release(l, &b);
      if (tty) progress_bar(r->images, per_epoch * r->epochs, now() - t0, "images");
    }
  }
  r->secs = now() - t0;
  if (tty) fputc('\n', stderr);
}

/* The report's text. Remote sources add their requests, retries, failures
 * and bytes: what an epoch costs the store, and whether it was healthy. */
static void bench_print(stk_loader *l, const stk_options *o, const char *dir, const bench_run *r) {
  stk_stats st;
  stk_loader_stats(l, &st);
  char dtype[32];
  choice_name("dtype", (int)o->dtype, dtype, sizeof dtype);
  int64_t images = r->images;
  double secs = r->secs;
  printf("source: %s %s, %" PRId64 " samples, %d classes\n", stk_loader_source_kind(l),
         dir ? dir : o->list_file, stk_loader_num_samples(l), stk_loader_num_classes(l));
  printf("%s pipeline, %d threads, batch %d, size %d, %s %s: %" PRId64
         " images in %.3f s = %.1f images/s (%" PRIu64 " skipped; loader built in %.3f s)\n",
         o->pipeline == STK_PIPELINE_TRAIN ? "train" : "eval", st.threads, o->batch_size, o->size,
         dtype, o->layout == STK_LAYOUT_NCHW ? "NCHW" : "NHWC", images, secs,
         secs > 0 ? images / secs : 0.0, st.skipped, r->build_s);
  printf("per image: read %.3f ms, decode %.3f ms, augment %.3f ms (thread time); consumer waited "
         "%.3f s\n",
         images ? 1e3 * st.read_seconds / images : 0, images ? 1e3 * st.decode_seconds / images : 0,
         images ? 1e3 * st.augment_seconds / images : 0, st.wait_seconds);
  if (st.remote_requests)
    printf("remote: %" PRIu64 " requests (%" PRIu64 " retried, %" PRIu64 " failed), %.1f MB in, "
           "%.3f s per request on average; parts in memory %.1f MB (peak %.1f MB); %.1f MB from "
           "local copies\n",
           st.remote_requests, st.remote_retries, st.remote_failures, st.remote_bytes / 1e6,
           st.remote_seconds / (double)st.remote_requests, st.remote_part_bytes / 1e6,
           st.remote_part_peak / 1e6, st.remote_cache_bytes / 1e6);
  if (o->device >= 0)
    printf("gpu %d: %" PRIu64 " images decoded by the hardware engines, %" PRIu64
           " by nvJPEG CUDA, %" PRIu64 " on the CPU (share now %.3f); %.1f MB of device memory; "
           "%.2f ms per batch queuing work on the GPU\n",
           o->device, st.decoded_hw, st.decoded_cuda, st.decoded_cpu, st.cpu_share,
           st.device_bytes / 1e6, st.batches ? 1e3 * st.submit_seconds / st.batches : 0.0);
  const char *p, *why;
  for (uint64_t i = 0; stk_loader_skipped(l, i, &p, &why) == STK_OK; i++)
    printf("skipped: %s: %s\n", p, why);
}

/* The report as one JSON object, the last line. */
static void bench_json(stk_loader *l, const stk_options *o, const bench_run *r) {
  stk_stats st;
  stk_loader_stats(l, &st);
  int64_t images = r->images;
  double secs = r->secs;
  printf("{\"images\": %" PRId64 ", \"seconds\": %.6f, \"images_per_s\": %.3f, \"skipped\": %" PRIu64
         ", \"threads\": %d, \"batch\": %d, \"size\": %d, \"pipeline\": \"%s\", \"epochs\": %d, "
         "\"read_s\": %.6f, \"decode_s\": %.6f, \"augment_s\": %.6f, \"wait_s\": %.6f, "
         "\"build_s\": %.6f, \"host_bytes\": %" PRIu64 ", \"device\": %d, \"device_bytes\": %" PRIu64
         ", \"decoded_hw\": %" PRIu64 ", \"decoded_cuda\": %" PRIu64 ", \"decoded_cpu\": %" PRIu64
         ", \"cpu_share\": %.4f, \"submit_s\": %.6f, \"late_allocs\": %" PRIu64,
         images, secs, secs > 0 ? images / secs : 0.0, st.skipped, st.threads, o->batch_size,
         o->size, o->pipeline == STK_PIPELINE_TRAIN ? "train" : "eval", r->epochs, st.read_seconds,
         st.decode_seconds, st.augment_seconds, st.wait_seconds, r->build_s, st.host_bytes,
         o->device, st.device_bytes, st.decoded_hw, st.decoded_cuda, st.decoded_cpu,
         st.cpu_share, st.submit_seconds, st.late_allocs);
  printf(", \"remote_bytes\": %" PRIu64 ", \"remote_requests\": %" PRIu64
         ", \"remote_retries\": %" PRIu64 ", \"remote_failures\": %" PRIu64
         ", \"remote_seconds\": %.6f, \"remote_part_bytes\": %" PRIu64
         ", \"remote_part_peak\": %" PRIu64 ", \"remote_cache_bytes\": %" PRIu64 ", \"source\": ",
         st.remote_bytes, st.remote_requests, st.remote_retries, st.remote_failures,
         st.remote_seconds, st.remote_part_bytes, st.remote_part_peak, st.remote_cache_bytes);
  json_string(stdout, stk_loader_source_kind(l));
  printf(", \"samples\": %" PRId64 ", \"note\": ", stk_loader_num_samples(l));
  json_string(stdout, stk_loader_note(l));
  printf(", \"ok\": %s}\n", r->failed ? "false" : "true");
}

static int cmd_bench(int argc, char **argv) {
  if (wants_help(argc, argv)) {
    usage_bench(stdout);
    return 0;
  }
  stk_options o;
  stk_options_init(&o);
  int epochs = 1, json = 0;
  const char *dir = NULL;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--json")) {
      json = 1;
    } else if (!strcmp(a, "--auto-augment") && v && !strncmp(v, "rand", 4)) {
      int rc = parse_timm_string(v, &o);
      if (rc == 2) return 2;
      if (rc == 0) i++;
      else if (!take_option_flag("bench", argc, argv, &i, STK_OPTIONS_LOADER, &o, NULL, NULL))
        return 2;
    } else if (!strcmp(a, "--epochs")) {
      epochs = (int)parse_int(a, v, 1, 1000000), i++;
    } else if (take_option_flag("bench", argc, argv, &i, STK_OPTIONS_LOADER, &o, NULL, NULL)) {
      continue;
    } else if (a[0] == '-') {
      fprintf(stderr, "stoker bench: unknown option %s (see --help)\n", a);
      return 2;
    } else if (!dir) {
      dir = a;
    } else {
      fprintf(stderr, "stoker bench: one source only\n");
      return 2;
    }
  }
  if (stk_source_check(dir, o.list_file, NULL, 0)) {
    if (dir) fprintf(stderr, "stoker bench: give a SOURCE or --list, not both\n\n");
    usage_bench(stderr);
    return 2;
  }
  o.root = dir;
  char err[1024] = "";
  stk_loader *l = NULL;
  double t_build = now();
  int rc = STK_LOADER_CREATE(&o, &l, err, sizeof err);
  if (rc) {
    print_failure("bench", cli_words(err), rc);
    if (json) json_open_failure(err, rc);
    return 1;
  }
  t_build = now() - t_build;
  const char *note = stk_loader_note(l);
  if (note[0]) fprintf(stderr, "stoker bench: note: %s\n", note);
  bench_run r = {.epochs = epochs, .build_s = t_build};
  bench_epochs(l, isatty(STDERR_FILENO) && !json, &r);
  bench_print(l, &o, dir, &r);
  if (json) bench_json(l, &o, &r);
  stk_loader_destroy(l);
  return r.failed ? 1 : 0;
}

/* ---- check ------------------------------------------------------------- */

/* The loader flags that mean something to check: where the samples are,
 * how a source is opened, the limits, the thread count, and the pipeline
 * whose decodes the limits are checked for (what the loader refuses
 * depends on it: eval decodes more of a large JPEG than train). */
static int check_flag(const stk_option_desc *d) {
  static const char *const names[] = {"list_file",      "list_base",        "index",
                                      "index_dir",      "allow_stale_cache", "max_pixels",
                                      "max_file_bytes", "max_decode_bytes", "threads",
                                      "read_timeout",   "pipeline",         "size",
                                      "resize_size",    "scale",            "ratio",
                                      "dct_scaling",    "interpolation"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (!strcmp(d->name, names[i])) return 1;
  return 0;
}

static void usage_check(FILE *f) {
  fprintf(f,
          "usage: stoker check SOURCE [--json] [options]\n"
          "       stoker check --list FILE [--list-base DIR] [--json] [options]\n\n"
          "Decodes every sample of SOURCE in full with the loader's limits, and lists\n"
          "each one that fails with the reason, and each one a loader of the same\n"
          "options (--pipeline, default train, --size, --max-decode-bytes...) would\n"
          "refuse; says the largest image, in pixels, that every format decodes within\n"
          "those limits. SOURCE is an image folder\n"
          "(SOURCE/<class>/<image>), a cache file (its checksums are verified too) or a\n"
          "folder of tar shards. Exits 1 if any sample fails, 2 if the source cannot be\n"
          "opened, 0 otherwise.\n\n"
          "  --json                     print one JSON object\n");
  print_option_flags(f, STK_OPTIONS_LOADER, check_flag);
}

/* The failures stk_check() reports, kept to be printed after the source's
 * kind (which the JSON names first). */
typedef struct {
  char **paths, **reasons;
  int *codes;
  int64_t n, cap;
  int oom;
} failures;

static void add_failure(void *user, int64_t index, const char *path, int code,
                        const char *reason) {
  (void)index;
  failures *fl = user;
  if (fl->n == fl->cap) {
    int64_t cap = fl->cap ? fl->cap * 2 : 16;
    char **p = realloc(fl->paths, (size_t)cap * sizeof *p);
    if (p) fl->paths = p;
    char **r = realloc(fl->reasons, (size_t)cap * sizeof *r);
    if (r) fl->reasons = r;
    int *c = realloc(fl->codes, (size_t)cap * sizeof *c);
    if (c) fl->codes = c;
    if (p && r && c) fl->cap = cap;
  }
  char *dp = fl->n < fl->cap ? strdup(path) : NULL;
  char *dr = dp ? strdup(reason) : NULL;
  if (!dp || !dr) {
    free(dp);
    fl->oom = 1;
    return;
  }
  fl->paths[fl->n] = dp;
  fl->reasons[fl->n] = dr;
  fl->codes[fl->n++] = code;
}

/* The count, then the pixel ceiling of these options: max_pixels alone
 * overstates what decodes (a 150 MP PNG is under it but over the decode
 * memory). */
static void print_check_summary(const stk_options *o, int64_t files, int64_t bad,
                                const char *kind) {
  printf("%" PRId64 " files checked, %" PRId64 " failed (%s)\n", files, bad, kind);
  uint64_t px = stk_pixel_ceiling(o);
  if (px)
    printf("images up to %" PRIu64 " pixels decode in every format (--max-pixels %" PRIu64
           ", --max-decode-bytes %" PRIu64 " MiB, %s pipeline)\n",
           px, o->max_pixels, o->max_decode_bytes >> 20,
           o->pipeline == STK_PIPELINE_EVAL ? "eval" : "train");
}

static int cmd_check(int argc, char **argv) {
  if (wants_help(argc, argv)) {
    usage_check(stdout);
    return 0;
  }
  stk_options o;
  stk_options_init(&o);
  int json = 0;
  const char *dir = NULL;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--json")) json = 1;
    else if (take_option_flag("check", argc, argv, &i, STK_OPTIONS_LOADER, &o, check_flag, NULL))
      continue;
    else if (argv[i][0] == '-') {
      fprintf(stderr, "stoker check: unknown option %s (see --help)\n", argv[i]);
      return 2;
    } else if (!dir) dir = argv[i];
    else {
      fprintf(stderr, "stoker check: one source only\n");
      return 2;
    }
  }
  if (stk_source_check(dir, o.list_file, NULL, 0)) {
    if (dir) fprintf(stderr, "stoker check: give a SOURCE or --list, not both\n\n");
    usage_check(stderr);
    return 2;
  }
  o.root = dir;
  char err[1024];
  failures fl;
  memset(&fl, 0, sizeof fl);
  stk_check_result res;
  int rc = stk_check(&o, &res, add_failure, &fl, err, sizeof err);
  if (rc) {
    print_failure("check", cli_words(err), rc);
    if (json) json_open_failure(err, rc);
    return 2;
  }
  if (res.note[0]) fprintf(stderr, "stoker check: note: %s\n", res.note);
  if (fl.oom) fprintf(stderr, "stoker check: out of memory: not every failure is listed\n");
  if (json) {
    printf("{\"source\": ");
    json_string(stdout, res.kind);
    printf(", \"files\": %" PRId64 ", \"pixel_ceiling\": %" PRIu64 ", \"failures\": [",
           res.files, stk_pixel_ceiling(&o));
  }
  for (int64_t i = 0; i < fl.n; i++) {
    if (json) {
      printf("%s{\"path\": ", i ? ", " : "");
      json_string(stdout, fl.paths[i]);
      printf(", \"reason\": ");
      json_string(stdout, fl.reasons[i]);
      printf(", \"error\": ");
      json_string(stdout, stk_strerror(fl.codes[i]));
      printf("}");
    } else {
      printf("%s: %s\n", fl.paths[i], fl.reasons[i]);
    }
    free(fl.paths[i]);
    free(fl.reasons[i]);
  }
  free(fl.paths);
  free(fl.reasons);
  free(fl.codes);
  int64_t bad = res.failed;
  if (json)
    printf("], \"failed\": %" PRId64 ", \"ok\": %" PRId64 "}\n", bad, res.files - bad);
  else
    print_check_summary(&o, res.files, bad, res.kind);
  return bad ? 1 : 0;
}

/* ---- pack -------------------------------------------------------------- */

static void usage_pack(FILE *f) {
  fprintf(f,
          "usage: stoker pack SRC OUT --cache [--encoding raw|jpeg] [--max-side N] [--quality Q]\n"
          "       stoker pack SRC OUTDIR --tar [--shard-size BYTES]\n"
          "       stoker pack --list FILE [--list-base DIR] OUT --cache|--tar ...\n\n"
          "Packs the images of SRC (an image folder SRC/<class>/<image>, or a list file)\n"
          "into one pre-decoded cache file OUT, or into WebDataset tar shards in OUTDIR\n"
          "(a folder, or an empty s3://bucket/prefix/ they are uploaded to, classes.txt\n"
          "last; see docs/remote.md).\n"
          "Either is read by `stoker bench`, `stoker check` and the loader wherever an\n"
          "image folder is. Files that cannot be read or decoded are left out and listed\n"
          "with their reason (tar: decoded with --check only). A raw cache's size is\n"
          "estimated first and the pack refused when the disk has less room. Ctrl-C\n"
          "removes the temporary output. Exits 0 when the output was written (also with\n"
          "files left out), 1 when the pack failed, 2 on a usage error.\n\n"
          "  --cache                    write a cache file (an existing OUT only with --force)\n"
          "  --tar                      write tar shards\n"
          "  --force                    --cache: replace an existing OUT\n"
          "  --json                     print one JSON object as the last line\n");
  print_option_flags(f, STK_OPTIONS_PACK, NULL);
}

typedef struct {
  pthread_mutex_t mu; /* bad_file may be called from any thread */
  char **paths, **reasons;
  int64_t n, cap;
  int tty, oom;
  double t0;
  uint64_t estimate;
} pack_ui;

static void pack_estimate(void *user, uint64_t bytes, uint64_t avail, int64_t sampled,
                          int64_t files) {
  pack_ui *u = user;
  u->estimate = bytes;
  char size_s[32], free_s[64] = "";
  snprintf(size_s, sizeof size_s, bytes >= 1000000000ULL ? "%.1f GB" : "%.1f MB",
           bytes >= 1000000000ULL ? bytes / 1e9 : bytes / 1e6);
  if (avail != UINT64_MAX)
    snprintf(free_s, sizeof free_s, avail >= 1000000000ULL ? "; %.1f GB free there" : "; %.1f MB free there",
             avail >= 1000000000ULL ? avail / 1e9 : avail / 1e6);
  fprintf(stderr, "stoker pack: the raw cache of %" PRId64 " files will take about %s "
                  "(estimated from the headers of %" PRId64 ")%s\n",
          files, size_s, sampled, free_s);
}

/* Ctrl-C (SIGINT) and SIGTERM during a pack: a thread that waits for them
 * (blocked in every other thread) cancels the pack (its cancel callback),
 * which removes its temporary output and returns; then ends the process
 * with the signal, as the shell expects of an interrupted command. Should
 * the pack not return within PACK_CANCEL_WAIT_S, the thread removes the
 * temporary output itself first (done outside a signal handler, so it may
 * list the shard folder). Removing it under a running pack could race the
 * writer creating it (a signal at the very start, on a loaded machine). */
#define PACK_CANCEL_WAIT_S 10
static char g_pack_tmp[4300];
static int g_pack_tar;
static sigset_t g_pack_sigs;
/* Set once the signal thread has a signal: the pack may then fail on the
 * output it removes, and the process must end by the signal, not by that
 * failure's exit status. */
static atomic_int g_pack_signalled;
static atomic_int g_pack_returned; /* the pack returned after the signal */

static int pack_cancel(void *user) {
  (void)user;
  return atomic_load(&g_pack_signalled);
}

static void remove_pack_tmp(void) {
  if (!g_pack_tar) {
    unlink(g_pack_tmp);
    return;
  }
  /* the writer may add a shard meanwhile: try a few times */
  for (int tries = 0; tries < 20; tries++) {
    DIR *d = opendir(g_pack_tmp);
    if (!d) return;
    struct dirent *e;
    char p[8600];
    while ((e = readdir(d))) {
      if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
      snprintf(p, sizeof p, "%s/%s", g_pack_tmp, e->d_name);
      unlink(p);
    }
    closedir(d);
    if (rmdir(g_pack_tmp) == 0 || errno == ENOENT) return;
  }
}

static void *pack_signal_thread(void *arg) {
  (void)arg;
  int sig = 0;
  if (sigwait(&g_pack_sigs, &sig) != 0) return NULL;
  atomic_store(&g_pack_signalled, 1);
  for (int i = 0; i < PACK_CANCEL_WAIT_S * 100 && !atomic_load(&g_pack_returned); i++)
    nanosleep(&(struct timespec){0, 10000000L}, NULL);
  remove_pack_tmp(); /* (nothing left when the pack returned) */
  signal(sig, SIG_DFL);
  pthread_sigmask(SIG_UNBLOCK, &g_pack_sigs, NULL);
  raise(sig); /* blocked elsewhere, so delivered here: the default action */
  _exit(128 + sig);
}

static void pack_progress(void *user, int64_t done, int64_t total) {
  pack_ui *u = user;
  if (u->tty) progress_bar(done, total, now() - u->t0, "files");
}

static void pack_bad_file(void *user, const char *path, const char *reason) {
  pack_ui *u = user;
  pthread_mutex_lock(&u->mu);
  if (u->n == u->cap) {
    int64_t cap = u->cap ? u->cap * 2 : 16;
    char **p = realloc(u->paths, (size_t)cap * sizeof *p);
    if (p) u->paths = p;
    char **r = realloc(u->reasons, (size_t)cap * sizeof *r);
    if (r) u->reasons = r;
    if (p && r) u->cap = cap;
  }
  if (u->n < u->cap) {
    u->paths[u->n] = strdup(path ? path : "");
    u->reasons[u->n] = strdup(reason ? reason : "");
    if (u->paths[u->n] && u->reasons[u->n]) u->n++;
    else u->oom = 1;
  } else {
    u->oom = 1;
  }
  pthread_mutex_unlock(&u->mu);
}

static int cmd_pack(int argc, char **argv) {
  if (wants_help(argc, argv)) {
    usage_pack(stdout);
    return 0;
  }
  stk_pack_options po;
  stk_pack_options_init(&po);
  int json = 0, cache = 0, tar = 0, force = 0;
  const char *pos[2] = {NULL, NULL}, *cache_flag = NULL, *tar_flag = NULL;
  int npos = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    stk_option_desc d;
    if (!strcmp(a, "--json")) json = 1;
    else if (!strcmp(a, "--cache")) cache = 1;
    else if (!strcmp(a, "--tar")) tar = 1;
    else if (!strcmp(a, "--force")) force = 1;
    else if (take_option_flag("pack", argc, argv, &i, STK_OPTIONS_PACK, &po, NULL, &d)) {
      /* the table says which flags belong to one format only */
      if (d.only && !strcmp(d.only, "cache")) cache_flag = d.flag;
      if (d.only && !strcmp(d.only, "tar")) tar_flag = d.flag;
    } else if (a[0] == '-') {
      fprintf(stderr, "stoker pack: unknown option %s (see --help)\n", a);
      return 2;
    } else if (npos < 2) {
      pos[npos++] = a;
    } else {
      fprintf(stderr, "stoker pack: too many arguments: %s (see --help)\n", a);
      return 2;
    }
  }
  if (cache == tar) {
    fprintf(stderr, "stoker pack: choose one of --cache and --tar\n");
    return 2;
  }
  if (tar && cache_flag) {
    fprintf(stderr, "stoker pack: %s applies to --cache only\n", cache_flag);
    return 2;
  }
  if (cache && tar_flag) {
    fprintf(stderr, "stoker pack: %s applies to --tar only (a cache pack decodes every file)\n",
            tar_flag);
    return 2;
  }
  /* SRC OUT, or OUT alone with --list: the source rule decides */
  const char *root = npos == 2 ? pos[0] : NULL;
  if (npos == 0 || stk_source_check(root, po.list_file, NULL, 0)) {
    fprintf(stderr, po.list_file ? "stoker pack: with --list, give only the output\n\n"
                                 : "stoker pack: give the source and the output\n\n");
    usage_pack(stderr);
    return 2;
  }
  po.root = root;
  if (po.list_base && !po.list_file) {
    fprintf(stderr, "stoker pack: --list-base needs --list\n");
    return 2;
  }
  po.output = pos[npos - 1];
  po.format = tar ? STK_PACK_TAR : STK_PACK_CACHE;
  struct stat st_out;
  if (cache && !force && stat(po.output, &st_out) == 0) {
    /* as --tar refuses a folder that holds shards: a cache is not replaced silently */
    fprintf(stderr, "stoker pack: %s exists: give --force to replace it, or another output\n",
            po.output);
    return 1;
  }
  pack_ui ui = {.tty = isatty(STDERR_FILENO) && !json, .t0 = now()};
  pthread_mutex_init(&ui.mu, NULL);
  po.progress = pack_progress;
  po.bad_file = pack_bad_file;
  po.user = &ui;
  po.estimate = pack_estimate;
  po.cancel = pack_cancel;
  if (stk_pack_temp_path(po.output, g_pack_tmp, sizeof g_pack_tmp) == STK_OK) {
    g_pack_tar = tar;
    sigemptyset(&g_pack_sigs);
    sigaddset(&g_pack_sigs, SIGINT);
    sigaddset(&g_pack_sigs, SIGTERM);
    /* blocked before any pack thread starts, so each inherits the mask.
     * Not the library's pool (core/workers.h): this thread only waits in
     * sigwait, for the life of the process, and the command uses the
     * public API alone. */
    pthread_t st;
    if (pthread_sigmask(SIG_BLOCK, &g_pack_sigs, NULL) == 0 &&
        pthread_create(&st, NULL, pack_signal_thread, NULL) == 0)
      pthread_detach(st);
  }
  stk_pack_result res;
  memset(&res, 0, sizeof res);
  char err[1024] = "";
  int rc = STK_PACK(&po, &res, err, sizeof err);
  /* interrupted: the signal thread ends the process (its signals are
   * blocked here, so pause() only waits for that) */
  if (atomic_load(&g_pack_signalled)) atomic_store(&g_pack_returned, 1);
  while (atomic_load(&g_pack_signalled)) pause();
  double secs = now() - ui.t0;
  if (ui.tty) fputc('\n', stderr);
  for (int64_t i = 0; i < ui.n; i++) printf("left out: %s: %s\n", ui.paths[i], ui.reasons[i]);
  if (ui.oom) fprintf(stderr, "stoker pack: out of memory: not every file left out is listed\n");
  if (rc) {
    if (err[0])
      print_failure("pack", cli_words(err), rc);
    else
      fprintf(stderr, "stoker pack: packing failed (%s)\n", stk_strerror(rc));
  }
  else if (tar)
    printf("packed %" PRId64 " samples into %s (tar shards), %" PRId64 " left out, %" PRIu64
           " bytes in %d shard%s, in %.1f s\n",
           res.packed, po.output, res.failed, res.bytes, res.shards, res.shards == 1 ? "" : "s",
           secs);
  else if (po.device >= 0)
    printf("packed %" PRId64 " samples into %s (cache), %" PRId64 " left out, %" PRIu64
           " bytes, in %.1f s; device %d decoded %" PRId64 " of them, the CPU the rest%s\n",
           res.packed, po.output, res.failed, res.bytes, secs, po.device, res.device_packed,
           res.device_stopped ? " (the CPU packed faster, and took over)" : "");
  else
    printf("packed %" PRId64 " samples into %s (cache), %" PRId64 " left out, %" PRIu64
           " bytes, in %.1f s\n",
           res.packed, po.output, res.failed, res.bytes, secs);
  if (json) {
    printf("{\"ok\": %s, \"format\": \"%s\", \"output\": ", rc ? "false" : "true",
           tar ? "tar" : "cache");
    json_string(stdout, po.output);
    printf(", \"packed\": %" PRId64 ", \"failed\": %" PRId64 ", \"bytes\": %" PRIu64
           ", \"shards\": %d, \"device_packed\": %" PRId64 ", \"device_rate\": %.1f"
           ", \"cpu_rate\": %.1f, \"device_stopped\": %s, \"seconds\": %.6f"
           ", \"estimated_bytes\": %" PRIu64 ", \"left_out\": [",
           res.packed, res.failed, res.bytes, res.shards, res.device_packed, res.device_rate,
           res.cpu_rate, res.device_stopped ? "true" : "false", secs, ui.estimate);
    for (int64_t i = 0; i < ui.n; i++) {
      printf("%s{\"path\": ", i ? ", " : "");
      json_string(stdout, ui.paths[i]);
      printf(", \"reason\": ");
      json_string(stdout, ui.reasons[i]);
      printf("}");
    }
    printf("]");
    if (rc) {
      printf(", \"error\": ");
      json_string(stdout, err);
    }
    printf("}\n");
  }
  for (int64_t i = 0; i < ui.n; i++) {
    free(ui.paths[i]);
    free(ui.reasons[i]);
  }
  free(ui.paths);
  free(ui.reasons);
  pthread_mutex_destroy(&ui.mu);
  return rc ? 1 : 0;
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
  if (*(int *)ctx && (done % 16 == 0 || done == total)) progress_bar(done, total, 0, "images");
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
  double t0 = now();
  int rc = stk_synth(dir, images, (int)classes, (uint64_t)seed, synth_progress, &tty, err,
                     sizeof err);
  if (tty) fputc('\n', stderr);
  if (rc) {
    print_failure("synth", err, rc);
    return 1;
  }
  printf("wrote %lld images in %lld classes to %s in %.1f s\n", images, classes, dir,
         now() - t0);
  return 0;
}

/* ---- info -------------------------------------------------------------- */

static int cmd_info(int argc, char **argv) {
  if (wants_help(argc, argv)) {
    printf("usage: stoker info [SOURCE]\n\nPrints the version, the SIMD level and what this "
           "build decodes;\nwith SOURCE (an image folder, a cache file or a folder of tar "
           "shards), also\nwhat it is: its kind, samples and classes.\n");
    return 0;
  }
  if (argc > 2 || (argc == 2 && argv[1][0] == '-')) {
    fprintf(stderr, "stoker info: %s: give at most one SOURCE (see --help)\n",
            argc > 2 ? argv[2] : argv[1]);
    return 2;
  }
  fputs(stk_build_info(), stdout);
  if (argc < 2) return 0;
  /* the source as the loader opens it */
  stk_options o;
  stk_options_init(&o);
  o.root = argv[1];
  o.threads = 1;
  o.batch_size = 1;
  o.prefetch = 1;
  char err[1024] = "";
  stk_loader *l = NULL;
  int rc = STK_LOADER_CREATE(&o, &l, err, sizeof err);
  if (rc) {
    print_failure("info", cli_words(err), rc);
    return 1;
  }
  printf("source: %s %s, %" PRId64 " samples, %d classes\n", stk_loader_source_kind(l),
         argv[1], stk_loader_num_samples(l), stk_loader_num_classes(l));
  char cred[600];
  /* which provider of the AWS chain signed the requests (never a secret) */
  if (!strncmp(argv[1], "s3://", 5) && stk_remote_credentials(cred, sizeof cred))
    printf("credentials: %s\n", cred);
  /* and for the Hub, where its token came from (never the token) */
  if (!strncmp(argv[1], "hf://", 5)) {
    stk_remote_hub_token(cred, sizeof cred);
    printf("token: %s\n", cred);
  }
  stk_loader_destroy(l);
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
    usage_main(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "-V") || !strcmp(argv[1], "version")) {
    printf("stoker %s\n", stk_version_string());
    return 0;
  }
  /* --flag=value is --flag value (a switch keeps its =0/1: take_option_flag) */
  char **args = calloc((size_t)argc * 2 + 1, sizeof *args);
  if (!args) return 1;
  int n = 0;
  for (int i = 0; i < argc; i++) {
    char *eq = strncmp(argv[i], "--", 2) ? NULL : strchr(argv[i], '=');
    if (eq && eq > argv[i] + 2 && !is_switch_eq(argv[i])) {
      *eq = '\0'; /* argv's strings are the program's to change */
      args[n++] = argv[i];
      args[n++] = eq + 1;
    } else {
      args[n++] = argv[i];
    }
  }
  argc = n, argv = args;
  const char *cmd = argv[1];
  int rc;
  if (!strcmp(cmd, "bench")) {
    rc = cmd_bench(argc - 1, argv + 1);
  } else if (!strcmp(cmd, "check")) {
    rc = cmd_check(argc - 1, argv + 1);
  } else if (!strcmp(cmd, "pack")) {
    rc = cmd_pack(argc - 1, argv + 1);
  } else if (!strcmp(cmd, "synth")) {
    rc = cmd_synth(argc - 1, argv + 1);
  } else if (!strcmp(cmd, "info")) {
    rc = cmd_info(argc - 1, argv + 1);
  } else {
    fprintf(stderr, "stoker: unknown command '%s'\n\n", cmd);
    usage_main(stderr);
    rc = 2;
  }
  free(args); /* (the commands keep no pointer into it) */
  return rc;
}
