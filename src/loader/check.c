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
#include "sources/store.h"
#include "sources/bounded_read.h"
#include "sources/redact.h"
#include "loader/pipeline.h"
#include "sources/source.h"

/* Decodes `data` in full, as the loader's plan `p` allows: refused where the
 * loader would refuse it (its decode memory for the pipeline p is for), and
 * otherwise decoded whole within p's budget, which check's threads share as
 * the loader's do. Its size goes to *w, *h. */
static int check_bytes(const stk__plan *p, stk__worker *wk, const uint8_t *data, size_t len,
                       int *w, int *h, char *msg, size_t msglen) {
  stk__sample s;
  memset(&s, 0, sizeof s);
  s.data = data;
  s.len = len;
  int rc = stk__decoder_header(wk->dec, data, len, &s.info, msg, msglen);
  if (!rc) rc = stk__plan_refuses(p, wk, &s.info, msg, msglen);
  /* A JPEG decoded at 1/8 reads every coefficient, as at 1/1 (the scale
   * changes only the inverse DCT): what can fail in the file fails there,
   * in a 64th of the pixels */
  int denom = s.info.format == STK__FMT_JPEG ? 8 : 1;
  stk__region reg;
  if (!rc) rc = stk__whole_decode(p, wk, &s, denom, &reg, msg, msglen);
  stk__sample_release(p, wk); /* the budget's share, and an outsized image's buffers */
  if (!rc) {
    if (w) *w = s.info.width;
    if (h) *h = s.info.height;
  }
  return rc;
}

/* The plan the loader would make of opt, for one sample's check. */
static int check_plan(stk__plan *plan, stk__worker *wk, const stk_options *opt, char *msg,
                      size_t msglen) {
  if (msg && msglen) msg[0] = '\0';
  stk__plan_init(plan, opt);
  if (stk__worker_init(wk, plan) == STK_OK) return STK_OK;
  stk__worker_free(wk);
  stk__plan_free(plan);
  return stk__fail(msg, msglen, STK_ENOMEM, "out of memory for decoder state");
}

int stk_check_file(const char *path, const stk_options *opt, int *w, int *h, char *msg,
                   size_t msglen) {
  stk_options o;
  if (!opt) {
    stk_options_init(&o);
  } else {
    int rc = stk__options_adopt(opt, &o, msg, msglen);
    if (rc) return rc;
    /* the loader's rules on the fields (the source is the file itself) */
    if (!o.root && !o.list_file) o.root = path;
    rc = stk__options_validate(&o, msg, msglen);
    if (rc) return rc;
  }
  stk__plan plan;
  stk__worker wk;
  int rc = check_plan(&plan, &wk, &o, msg, msglen);
  if (rc) return rc;
  stk__bytes b;
  rc = stk__read_whole_file(path, &wk.file, o.max_file_bytes, &b, msg, msglen);
  if (!rc) rc = check_bytes(&plan, &wk, b.data, b.len, w, h, msg, msglen);
  stk__worker_free(&wk);
  stk__plan_free(&plan);
  return rc;
}

/* Sample i with the plan and worker of the calling thread. */
static int check_one(const stk__plan *p, stk__worker *wk, const stk__source *src, int64_t i,
                     stk__bounded_reader *br, int *w, int *h, char *msg, size_t msglen) {
  if (msg && msglen) msg[0] = '\0';
  int rc = src->ops->verify ? src->ops->verify(src, i, msg, msglen) : STK_OK;
  if (!rc && src->ops->pixels) {
    stk__pixels px;
    rc = src->ops->pixels(src, i, &px, msg, msglen);
    if (!rc && w) *w = px.w;
    if (!rc && h) *h = px.h;
  } else if (!rc) {
    stk__bytes b;
    rc = br ? stk__bounded_read_sample(br, src, i, p->max_file_bytes, &b, msg, msglen)
            : src->ops->read(src, i, &wk->file, p->max_file_bytes, &b, msg, msglen);
    if (!rc) rc = check_bytes(p, wk, b.data, b.len, w, h, msg, msglen);
  }
  return rc;
}

int stk__check_sample(const stk__source *src, int64_t i, const stk_options *opt, int *w, int *h,
                      char *msg, size_t msglen) {
  return stk__check_sample_bounded(src, i, opt, NULL, w, h, msg, msglen);
}

int stk__check_sample_bounded(const stk__source *src, int64_t i, const stk_options *opt,
                              stk__bounded_reader *br, int *w, int *h, char *msg, size_t msglen) {
  stk__plan plan;
  stk__worker wk;
  int rc = check_plan(&plan, &wk, opt, msg, msglen);
  if (rc) return rc;
  rc = check_one(&plan, &wk, src, i, br, w, h, msg, msglen);
  stk__worker_free(&wk);
  stk__plan_free(&plan);
  return rc;
}

/* ---- a whole source ------------------------------------------------------ */

typedef struct {
  const stk__source *src;
  const stk_options *opt;
  const stk__plan *plan; /* the loader's, its decode budget shared by the threads */
  int64_t next;
  pthread_mutex_t mu;
  int *codes;
  char (*msgs)[256];
} check_job;

static void check_main(void *arg) {
  check_job *j = arg;
  stk__bounded_reader br;
  stk__bounded_init(&br, j->opt->read_timeout);
  stk__worker wk;
  int ok = stk__worker_init(&wk, j->plan) == STK_OK;
  for (;;) {
    pthread_mutex_lock(&j->mu);
    int64_t i = j->next++;
    pthread_mutex_unlock(&j->mu);
    if (i >= j->src->ds.n) break;
    /* the read through a helper that is left behind past read_timeout */
    if (ok)
      j->codes[i] = check_one(j->plan, &wk, j->src, i, &br, NULL, NULL, j->msgs[i],
                              sizeof j->msgs[i]);
    else
      j->codes[i] = stk__fail(j->msgs[i], sizeof j->msgs[i], STK_ENOMEM,
                              "out of memory for decoder state");
  }
  stk__worker_free(&wk);
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
  o.stream_first_epoch = 0; /* every sample, by its name: the shards' index */
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
  /* the loader's plan for these options and this thread count: its limits
   * and its one decode budget */
  o.threads = threads;
  stk__plan plan;
  stk__plan_init(&plan, &o);
  check_job job = {.src = &src, .opt = &o, .plan = &plan};
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
    if (bad) {
      /* the report names URLs without user info or signatures */
      char shown[4400];
      stk__name_shown(stk__dataset_path(&src.ds, i), shown, sizeof shown);
      stk__url_scrub(job.msgs[i]);
      bad(user, i, shown, job.codes[i], job.msgs[i]);
    }
  }
done:
  stk__plan_free(&plan);
  free(job.codes);
  free(job.msgs);
  /* a read left behind may still use the source: then it is left to the
   * process's exit, as the loader leaves a stuck worker its memory */
  if (stk__bounded_stuck() == 0) stk__source_close(&src);
  return rc;
}

uint64_t stk_pixel_ceiling(const stk_options *opt) {
  stk_options o;
  if (!opt) stk_options_init(&o);
  else if (stk__options_adopt(opt, &o, NULL, 0)) return 0;
  stk__plan plan;
  stk__plan_init(&plan, &o);
  uint64_t px = stk__plan_pixel_ceiling(&plan);
  stk__plan_free(&plan);
  return px;
}
