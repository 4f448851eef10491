/* check.c: whole-image decodes used to vet files: one file
 * (stk_check_file) or every sample of a source (stk_check, behind `stoker
 * check`). */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/options.h"
#include "core/workers.h"
#include "sources/object.h"
#include "sources/bounded_read.h"
#include "loader/pipeline.h"
#include "sources/source.h"

/* Decodes `data` in full; its size goes to *w, *h. */
static int check_bytes(stk__worker *wk, const uint8_t *data, size_t len, int *w, int *h, char *msg,
                       size_t msglen) {
  stk__image_info info;
  int rc = stk__decoder_header(wk->dec, data, len, &info, msg, msglen);
  stk__region reg;
  if (!rc) rc = stk__decoder_decode(wk->dec, data, len, NULL, 1, &reg, msg, msglen);
  if (!rc) {
    if (w) *w = reg.image_w;
    if (h) *h = reg.image_h;
  }
  return rc;
}

static int check_worker(stk__worker *wk, const stk_options *opt, char *msg, size_t msglen) {
  stk__plan plan;
  memset(&plan, 0, sizeof plan);
  plan.max_pixels = opt->max_pixels;
  plan.max_decode_bytes = opt->max_decode_bytes;
  plan.max_decode_bytes_set = 1;
  if (msg && msglen) msg[0] = '\0';
  if (stk__worker_init(wk, &plan)) return stk__fail(msg, msglen, STK_ENOMEM, "out of memory");
  return STK_OK;
}

int stk_check_file(const char *path, const stk_options *opt, int *w, int *h, char *msg,
                   size_t msglen) {
  stk_options def;
  if (!opt) {
    stk_options_init(&def);
    opt = &def;
  }
  stk__worker wk;
  int rc = check_worker(&wk, opt, msg, msglen);
  if (rc) return rc;
  stk__bytes b;
  rc = stk__read_whole_file(path, &wk.file, opt->max_file_bytes, &b, msg, msglen);
  if (!rc) rc = check_bytes(&wk, b.data, b.len, w, h, msg, msglen);
  stk__worker_free(&wk);
  return rc;
}

int stk__check_sample(const stk__source *src, int64_t i, const stk_options *opt, int *w, int *h,
                      char *msg, size_t msglen) {
  return stk__check_sample_bounded(src, i, opt, NULL, w, h, msg, msglen);
}

int stk__check_sample_bounded(const stk__source *src, int64_t i, const stk_options *opt,
                              stk__bounded_reader *br, int *w, int *h, char *msg, size_t msglen) {
  stk__worker wk;
  int rc = check_worker(&wk, opt, msg, msglen);
  if (rc) return rc;
  if (src->ops->verify) rc = src->ops->verify(src, i, msg, msglen);
  if (!rc && src->ops->pixels) {
    stk__pixels px;
    rc = src->ops->pixels(src, i, &px, msg, msglen);
    if (!rc && w) *w = px.w;
    if (!rc && h) *h = px.h;
  } else if (!rc) {
    stk__bytes b;
    rc = br ? stk__bounded_read_sample(br, src, i, opt->max_file_bytes, &b, msg, msglen)
            : src->ops->read(src, i, &wk.file, opt->max_file_bytes, &b, msg, msglen);
    if (!rc) rc = check_bytes(&wk, b.data, b.len, w, h, msg, msglen);
  }
  stk__worker_free(&wk);
  return rc;
}

/* ---- a whole source ------------------------------------------------------ */

typedef struct {
  const stk__source *src;
  const stk_options *opt;
  int64_t next;
  pthread_mutex_t mu;
  int *codes;
  char (*msgs)[256];
} check_job;

static void check_main(void *arg) {
  check_job *j = arg;
  stk__bounded_reader br;
  stk__bounded_init(&br, j->opt->read_timeout);
  for (;;) {
    pthread_mutex_lock(&j->mu);
    int64_t i = j->next++;
    pthread_mutex_unlock(&j->mu);
    if (i >= j->src->ds.n) break;
    /* the read through a helper that is left behind past read_timeout */
    j->codes[i] = stk__check_sample_bounded(j->src, i, j->opt, &br, NULL, NULL, j->msgs[i],
                                            sizeof j->msgs[i]);
  }
  stk__bounded_free(&br);
}

int stk_check(const stk_options *opt, stk_check_result *res,
              void (*bad)(void *user, int64_t index, const char *path, int code,
                          const char *reason),
              void *user, char *err, size_t errlen) {
  stk_check_result dummy;
  if (!res) res = &dummy;
  memset(res, 0, sizeof *res);
  res->kind = "";
  if (!opt) return stk__fail(err, errlen, STK_EINVAL, "options must not be NULL");
  stk_options o;
  int arc = stk__options_adopt(opt, &o, err, errlen);
  if (arc) return arc;
  stk__source src;
  memset(&src, 0, sizeof src);
  int rc = stk__options_validate(&o, err, errlen);
  if (!rc) rc = stk__source_open(&src, &o, err, errlen);
  if (rc) {
    stk__source_close(&src); /* a failed open may hold part of its table */
    return rc;
  }
  res->kind = src.ops->kind;
  snprintf(res->note, sizeof res->note, "%s", src.note);
  int64_t n = src.ds.n;
  int threads = o.threads;
  if (threads == 0) threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
  if (threads < 1) threads = 1;
  check_job job = {.src = &src, .opt = &o};
  job.codes = calloc((size_t)n + 1, sizeof *job.codes);
  job.msgs = calloc((size_t)n + 1, sizeof *job.msgs);
  if (!job.codes || !job.msgs) {
    rc = stk__fail(err, errlen, STK_ENOMEM, "out of memory for the results of %lld samples",
                   (long long)n);
    goto done;
  }
  pthread_mutex_init(&job.mu, NULL);
  stk__workers_fanout("stk-check", threads, check_main, &job);
  pthread_mutex_destroy(&job.mu);
  res->files = n;
  for (int64_t i = 0; i < n; i++) {
    if (!job.codes[i]) continue;
    res->failed++;
    if (bad) bad(user, i, stk__dataset_path(&src.ds, i), job.codes[i], job.msgs[i]);
  }
done:
  free(job.codes);
  free(job.msgs);
  /* a read left behind may still use the source: then it is left to the
   * process's exit, as the loader leaves a stuck worker its memory */
  if (stk__bounded_stuck() == 0) stk__source_close(&src);
  return rc;
}
