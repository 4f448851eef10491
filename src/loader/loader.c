/*
 * loader.c: the executor. A fixed ring of batch slots, a pool of worker
 * threads, and the consumer API of stoker.h. What a position becomes and
 * where a batch lives (host memory, or the GPU's) is a sink's business
 * (sink.h): the executor only calls it.
 *
 * How it fits together
 * --------------------
 * An epoch is a list of positions (this rank's shard of the sampler's
 * order). Batch b covers positions [b*B, b*B + B). When a slot is free, a
 * worker starts the next batch in it; workers then claim single positions of
 * the oldest unfinished batch, one at a time under the loader mutex, and
 * process them without the lock (the sink's produce: read, decode, augment
 * straight into the slot, or read and plan for the GPU). So all threads
 * help finish the batch the consumer will want next.
 *
 * The worker that completes a batch "finalises" batches in order: it looks
 * at the failures, and under on_error=skip refills each hole with a sample
 * taken from the end of the epoch. Finalising strictly in batch order, and
 * taking refills only from batches that cannot have started yet (at least
 * `nslots` batches ahead: every batch in between holds a slot), makes the
 * result independent of thread timing: the same seed gives the same batches
 * with 1 or N threads, failures included. A sink that submits batches (the
 * GPU's) gets each one once it is finalised, and only then is it ready;
 * MixUp/CutMix of host batches runs in the same step, by the same thread.
 *
 * Every slot is allocated when the loader is built; a slot returns to the
 * ring only through stk_batch_release(), so the library never writes memory
 * the consumer still reads.
 *
 * Locking: one mutex guards all shared state; workers hold it only to claim
 * and to report. Resets (set_epoch, seek, destroy) bump a generation number
 * and wait until no worker is writing into a slot, so late results of an old
 * epoch are dropped without touching a slot that was handed out again.
 *
 * Stalled reads
 * -------------
 * A read() that blocks (a hung network mount) cannot be interrupted
 * portably, so the loader never waits for one. Each worker has a phase,
 * an atomic that both sides change by compare-and-swap:
 *
 *   IDLE -> READING     the worker claimed a position (mutex held)
 *   READING -> WORKING  the worker: its read returned (the on_read hook of
 *                       pipeline.h, before anything is written outside the
 *                       worker's own buffers)
 *   READING -> DROPPED  a reset: the result will be dropped; the worker
 *                       stays in the pool
 *   READING/DROPPED -> ABANDONED  the consumer, when the read has run past
 *                       read_timeout, or shutdown
 *
 * Only one side wins each swap. A worker that wins WORKING writes its slot
 * as before, and resets wait for it (the write is bounded: the file is in
 * memory). A worker that loses never touches a slot again: everything it
 * wrote so far is its own (file buffer, reason text; a sink that keeps the
 * file's bytes, the GPU's, reads into the worker's buffer and swaps it into
 * the slot after winning: sink.h, produce), so a slot can be handed out
 * again at once. So a reset waits only for WORKING workers, never for a
 * read.
 *
 * When the consumer abandons a position (in stk_loader_next, whose wait is
 * cut into slices for this), the position fails with "read timed out after
 * N s": its batch fails under raise, the sample is skipped under skip. The
 * stuck thread is detached and a replacement is started, so the pool keeps
 * its size. A refill made while finalising can stall too: the consumer
 * then notes its failure and hands finalisation to another worker, which
 * resumes the slot at the hole it was at (slot.fin_noted / fin_j).
 *
 * Ownership: an abandoned worker keeps its own context (decoder, buffers),
 * which it frees when its read returns. The loader's memory is shared with
 * it: stk_loader_destroy() frees the loader only when no abandoned worker
 * is left, else the last one to leave frees it. Shutdown joins the workers
 * that leave within SHUTDOWN_WAIT and abandons the rest, so it returns in
 * bounded time whatever they are doing.
 */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/common.h"
#include "core/fault.h"
#include "core/workers.h"
#include "loader/mix.h"
#include "loader/pipeline.h"
#include "loader/sink.h"
#include "sources/redact.h"
#include "sources/source.h"
#include "sources/sampler.h"
#include "stoker.h"

#define MSG_LEN STK__SINK_MSG_LEN
/* How long shutdown waits for workers to leave before it abandons them. */
#define SHUTDOWN_WAIT 0.5
/* A read in progress for longer than this is not waited for at shutdown. */
#define SHUTDOWN_SLOW_READ 0.1
/* Abandoned threads still stuck beyond which none is replaced any more. */
#define MAX_STUCK 64

/* FILLING: workers produce its positions; SUBMIT: finalised, waiting for
 * (or in) its submission to the sink; READY: the consumer may take it;
 * HELD: lent. */
typedef enum { SLOT_FREE, SLOT_FILLING, SLOT_SUBMIT, SLOT_READY, SLOT_HELD } slot_state;

typedef struct {
  slot_state state;
  uint8_t *data;          /* the sink's memory for its images (host or device) */
  uint8_t *lent;          /* HELD: the data pointer handed out (a GPU sink's
                             mixed copy under mix, else data) */
  float *soft;            /* mix: the soft labels, B x mix_classes */
  stk__buf mix_spare;     /* mix, host sinks: one image of scratch */
  int mix_kind;           /* mix: the batch's draw (stk__mix.mode, lam) */
  double mix_lam;
  int64_t *labels, *indices;
  int32_t *codes;         /* per position: 0 or the failure code */
  char *msgs;             /* per position: MSG_LEN bytes of failure reason */
  uint64_t gen, epoch;
  int64_t batch, start;
  int n, claimed, done;
  int complete;
  int fin_noted, fin_j;   /* finalisation: failures noted; next hole to refill */
  int err;                /* raise: the batch failed with this code */
  char errmsg[MSG_LEN * 2];
  /* Files that failed while this batch was made (refills included). They
   * reach the statistics when the batch is delivered, so that work thrown
   * away by a seek, or prepared for an epoch not yet started, is not
   * counted. Allocated only when a file fails. */
  int64_t *fidx;
  char **fmsg;
  int fn, fcap;
} slot;

/* A worker's phase (see "Stalled reads" above). */
enum { PH_IDLE, PH_READING, PH_WORKING, PH_DROPPED, PH_ABANDONED };

typedef struct {
  stk_loader *l;
  int id;
  stk__worker w;
  /* Published under the mutex after each sample, for stk_loader_stats():
   * the worker's buffers change size while it works without the lock. */
  uint64_t scratch_bytes;
  int64_t sink_growth; /* growth of the sink's memory for positions (produce's
                          `held`), not yet published */
  stk__work item;      /* its run on the pool: worker_main(this) */
  int pooled;          /* started, and still the pool's: not detached (mutex) */
  int exited;          /* left worker_main (mutex) */
  atomic_int phase;
  /* The position in progress, for the timeout (mutex): */
  slot *s;
  int j, refill;
  int64_t idx;
  uint64_t gen;
  double since;
  char reason[MSG_LEN]; /* the worker's own: a stuck read may still write it */
} worker_ctx;

struct stk_loader {
  stk_options opt;
  char *root, *list_file, *list_base, *index_dir;
  stk__source src; /* where samples come from; src.ds: names, labels, classes */
  stk__sampler sampler;
  stk__plan plan;
  int64_t *order; /* positions of this epoch -> sample index */
  /* The next epoch's order, once its first batches are started ahead (see
   * start_batch): the pipeline does not drain at the end of an epoch. */
  int64_t *order_next;
  int next_ready;            /* order_next holds epoch + 1's order */
  int64_t next_started;      /* batches of epoch + 1 started ahead */
  int64_t next_finalized;    /* of which finalised ahead, in order */
  int need_finalize;         /* a worker should run finalize_locked */
  stk__sink sink;  /* where positions go (sink.h); slot i is its slot i */
  double submit_s; /* time inside the sink's submit, summed over threads */
  int B, nslots;
  slot *slots;
  stk__workers *pool;   /* the workers' threads (core/workers.h) */
  worker_ctx **workers; /* live workers, and abandoned ones still running */
  int nworkers, cap_workers;
  int nthreads;         /* the pool's size */
  int live;             /* workers neither abandoned nor gone */
  int ndetached;        /* abandoned workers still inside their read */
  int destroyed;        /* destroy ran: the last abandoned worker frees */
  uint64_t timeouts;    /* reads that timed out */

  pthread_mutex_t mu;
  pthread_cond_t work_cv;  /* workers: a slot was freed or a batch started */
  pthread_cond_t ready_cv; /* consumer: a batch was finalised */
  pthread_cond_t idle_cv;  /* reset: a worker left a sample */
  int stop;

  uint64_t epoch, gen;
  int64_t next_batch, next_finalize, next_deliver;
  int64_t tail_end;
  int64_t pad_pos;      /* ranks > 1, skip: the next position repeated into a hole */
  int finalizing, active;
  int resetting; /* a reset waits for workers: start and claim nothing */
  int consec_fail;
  int epoch_err;
  char epoch_errmsg[MSG_LEN * 2];
  uint64_t epoch_images, epoch_failed;
  uint64_t epoch_noted; /* skip: this epoch's failures as finalised, refills included */
  uint64_t epoch_lost_extra; /* of those, samples beyond the table's (weight - 1) */

  /* statistics */
  double t0, wait_s, read_s, decode_s, augment_s;
  uint64_t images, batches, skipped, failed, bytes_read;
  uint64_t sink_bytes; /* the sink's memory for positions (produce's `held`) */
  char **skip_paths, **skip_reasons; /* skip_len entries: the listed skipped files */
  uint64_t skip_len, skip_cap;
  uint64_t skip_epoch;                /* the epoch they belong to */

  /* MixUp/CutMix (the options' mix_ fields), on with mix_classes > 0: of
   * each complete batch, by the thread that submits it (host sinks) or
   * when it is lent (the GPU sink) */
  stk__mix_labels mix;
  /* The bytes of stk_batch the caller's header has: a program built
   * against a header without the mix_ fields (its stk_options ends before
   * them) has the shorter stk_batch of then, and nothing may be written
   * past it. */
  size_t batch_bytes;

  char errmsg[MSG_LEN * 2];
};

static int loader_err(stk_loader *l, int code, const char *fmt, ...) STK__PRINTF(3, 4);
static int loader_err(stk_loader *l, int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(l->errmsg, sizeof l->errmsg, fmt, ap);
  va_end(ap);
  /* a sample's URL (a list of pre-signed URLs) without its secrets */
  stk__url_scrub(l->errmsg);
  return code;
}

/* stk_options_init() and the option checks are generated from the table of
 * core/options.h (core/options.c). */
#include "core/options.h"

/* ---- epoch control (mutex held) ---------------------------------------- */

static slot *slot_of(stk_loader *l, uint64_t epoch, int64_t batch) {
  for (int i = 0; i < l->nslots; i++) {
    slot *s = &l->slots[i];
    if (s->state != SLOT_FREE && s->state != SLOT_HELD && s->gen == l->gen && s->epoch == epoch &&
        s->batch == batch)
      return s;
  }
  return NULL;
}

/* Batch b exists when its first position is still in the epoch (and, with
 * drop_last, when it is full). */
static int batch_exists(const stk_loader *l, int64_t b) {
  if (b > l->tail_end / l->B) return 0; /* past the end; b * B might overflow */
  int64_t start = b * l->B;
  if (l->opt.drop_last) return start + l->B <= l->tail_end;
  return start < l->tail_end;
}

/* Workers that may be writing into a slot: those past their read, and the
 * finalisers inside a submission to the sink (active). */
static int writers(const stk_loader *l) {
  int n = l->active;
  for (int i = 0; i < l->nworkers; i++)
    n += atomic_load(&l->workers[i]->phase) == PH_WORKING;
  return n;
}

/* Drops every unfinished batch and positions the loader at (epoch, batch).
 * Waits for the workers writing into a slot; those still reading are told
 * to drop their result, and not waited for (see "Stalled reads"). */
static void reset_locked(stk_loader *l, uint64_t epoch, int64_t batch) {
  l->gen++;
  if (l->sink.ops->reset) l->sink.ops->reset(&l->sink);
  if (l->src.ops && l->src.ops->plan_reset) l->src.ops->plan_reset(&l->src);
  l->resetting++;
  for (int i = 0; i < l->nworkers; i++) {
    int ph = PH_READING;
    atomic_compare_exchange_strong(&l->workers[i]->phase, &ph, PH_DROPPED);
  }
  while (writers(l) > 0) pthread_cond_wait(&l->idle_cv, &l->mu);
  l->resetting--;
  for (int i = 0; i < l->nslots; i++)
    if (l->slots[i].state != SLOT_HELD) l->slots[i].state = SLOT_FREE;
  l->epoch = epoch;
  stk__source_order(&l->src, &l->sampler, epoch, l->order);
  l->next_ready = 0;
  l->next_started = l->next_finalized = 0;
  l->need_finalize = 0;
  l->next_batch = l->next_finalize = l->next_deliver = batch;
  l->tail_end = l->sampler.num_samples;
  l->pad_pos = 0;
  l->finalizing = 0;
  l->consec_fail = 0;
  l->epoch_err = 0;
  l->epoch_images = l->epoch_failed = 0;
  l->epoch_noted = 0;
  l->epoch_lost_extra = 0;
  pthread_cond_broadcast(&l->work_cv);
}

static void slot_clear_failures(slot *s) {
  for (int i = 0; i < s->fn; i++) free(s->fmsg[i]);
  s->fn = 0;
}

/* Out of memory here loses the file's entry in the list, never its count
 * (the count is the delivered batch's own). So the failures of a slot are
 * a list of at most B + refills entries: fidx[i] with fmsg[i] (NULL when
 * the reason could not be copied). */
static void slot_add_failure(slot *s, int64_t index, const char *reason) {
  if (s->fn == s->fcap) {
    int cap = s->fcap ? s->fcap * 2 : 8;
    int64_t *i = STK__REALLOC(s->fidx, (size_t)cap * sizeof *i);
    if (!i) return;
    s->fidx = i;
    char **m = STK__REALLOC(s->fmsg, (size_t)cap * sizeof *m);
    if (!m) return;
    s->fmsg = m;
    s->fcap = cap;
  }
  s->fidx[s->fn] = index;
  s->fmsg[s->fn] = STK__STRDUP(reason);
  s->fn++;
}

static void clear_skips(stk_loader *l) {
  for (uint64_t i = 0; i < l->skip_len; i++) {
    free(l->skip_paths[i]);
    free(l->skip_reasons[i]);
  }
  l->skip_len = 0;
}

/* Lists a skipped file. The list holds the current epoch's files only (it
 * would grow without bound over a long run); l->skipped keeps the total. */
static void record_skip(stk_loader *l, uint64_t epoch, int64_t index, const char *reason) {
  /* a damaged shard's stand-in counts the samples the shard lost */
  int64_t w = l->src.ops->weight ? l->src.ops->weight(&l->src, index) : 1;
  l->skipped += (uint64_t)(w > 0 ? w : 1);
  if (epoch != l->skip_epoch) {
    clear_skips(l);
    l->skip_epoch = epoch;
  }
  if (l->skip_len == l->skip_cap) {
    uint64_t cap = l->skip_cap ? l->skip_cap * 2 : 64;
    char **p = STK__REALLOC(l->skip_paths, cap * sizeof *p);
    if (!p) return; /* counted, not listed: the count stays right */
    l->skip_paths = p;
    char **r = STK__REALLOC(l->skip_reasons, cap * sizeof *r);
    if (!r) return;
    l->skip_reasons = r;
    l->skip_cap = cap;
  }
  /* the statistics name URLs without user info or signatures */
  char *p = STK__STRDUP(stk__dataset_path(&l->src.ds, index));
  char *r = STK__STRDUP(reason ? reason : "out of memory for the reason");
  if (p) stk__url_scrub(p);
  if (r) stk__url_scrub(r);
  l->skip_paths[l->skip_len] = p;
  l->skip_reasons[l->skip_len] = r;
  l->skip_len++;
}

/* Accounts for one failed sample in finalisation order. */
static void note_failure(stk_loader *l, slot *s, int64_t index, int code, const char *reason) {
  const char *path = stk__dataset_path(&l->src.ds, index);
  slot_add_failure(s, index, reason);
  if (l->opt.on_error == STK_ON_ERROR_RAISE) {
    if (!s->err) {
      s->err = code;
      snprintf(s->errmsg, sizeof s->errmsg, "%s: %s", path, reason);
    }
    return;
  }
  l->consec_fail++;
  /* a damaged shard's stand-in counts the samples the shard lost, and the
   * epoch is that much larger than its table says */
  int64_t w = l->src.ops->weight ? l->src.ops->weight(&l->src, index) : 1;
  l->epoch_noted += (uint64_t)w;
  l->epoch_lost_extra += (uint64_t)(w - 1);
  if (l->opt.max_consecutive_failures && l->consec_fail >= l->opt.max_consecutive_failures &&
      !l->epoch_err) {
    l->epoch_err = STK_ETOOMANY;
    snprintf(l->epoch_errmsg, sizeof l->epoch_errmsg,
             "%d files in a row failed to load (is the dataset corrupt?); the last: %s: %s",
             l->consec_fail, path, reason);
  }
  /* A block of lost files that refills keep interrupting (a deleted
   * folder), or failures spread thinly, must not shrink an epoch without a
   * word: past the fraction, the epoch ends with an error as soon as the
   * count is over it (it can only grow). */
  int64_t n = l->sampler.num_samples + (int64_t)l->epoch_lost_extra;
  double frac = (double)l->opt.max_skipped_fraction;
  if (frac < 1.0 && (double)l->epoch_noted > frac * (double)n && !l->epoch_err) {
    l->epoch_err = STK_ETOOMANY;
    snprintf(l->epoch_errmsg, sizeof l->epoch_errmsg,
             "%llu of the %lld files of epoch %llu failed to load, more than "
             "max_skipped_fraction=%g allows (is the dataset damaged?); the last: %s: %s",
             (unsigned long long)l->epoch_noted, (long long)n, (unsigned long long)l->epoch, frac,
             path, reason);
  }
}

static uint64_t worker_scratch_bytes(const stk__worker *w) {
  return w->file.cap + w->rs.tmp.cap + w->rs.kx.cap + w->rs.ky.cap + w->rs.bx.cap + w->rs.by.cap +
         stk__decoder_scratch_bytes(w->dec);
}

/* Adds a worker's last sample to the statistics (mutex held). */
static void add_stage_times(stk_loader *l, worker_ctx *wc) {
  const stk__worker *w = &wc->w;
  l->read_s += w->t_read;
  l->decode_s += w->t_decode;
  l->augment_s += w->t_augment;
  l->bytes_read += w->bytes;
  wc->scratch_bytes = worker_scratch_bytes(w);
  l->sink_bytes += (uint64_t)wc->sink_growth; /* wraps back when it shrank */
  wc->sink_growth = 0;
}

/* Produces position j of slot s from sample idx, which sits at `pos` of its
 * epoch's order, through the sink. Runs without the mutex. */
static int produce(stk_loader *l, worker_ctx *wc, slot *s, int j, int64_t idx, int64_t pos,
                   uint64_t epoch, int share, char *reason) {
  /* repeated augmentation: each copy of an index gets its own draws */
  wc->w.key_offset = (uint64_t)stk__sampler_copy(&l->sampler, pos) * (uint64_t)l->src.ds.n;
  return l->sink.ops->produce(&l->sink, &wc->w, (int)(s - l->slots), j, epoch, idx, share, reason,
                              MSG_LEN, &wc->sink_growth);
}

/* Whether position j of a batch is in the sink's CPU share. Mutex held. */
static int in_share(stk_loader *l, int j) {
  return l->sink.ops->share ? l->sink.ops->share(&l->sink, j) : 0;
}

/* Whether the loader mixes its batches in host memory: then the thread
 * that finalised a batch mixes it in place before it is ready (a sink
 * with a mix operation, the GPU's, mixes when the batch is lent). */
static int host_mix(const stk_loader *l) { return l->mix.classes && !l->sink.ops->mix; }

/* The draw of slot s's batch, keyed by (seed, epoch, batch index), and
 * its soft labels from the slot's labels. */
static void mix_draw_slot(stk_loader *l, slot *s, stk__mix *m) {
  stk__mix_labels_draw(&l->mix, &l->opt, s->epoch, s->batch, s->labels, s->n, m, s->soft);
  s->mix_kind = m->mode;
  s->mix_lam = m->lam;
}

/* Host sinks: slot s's complete batch mixed in place, by the thread that
 * submits it, without the mutex (a reset waits for submissions, and the
 * slot is no one else's until it is ready). */
static int mix_host(stk_loader *l, slot *s, char *msg, size_t msglen) {
  stk__mix m;
  mix_draw_slot(l, s, &m);
  int rc = stk__mix_apply(&m, s->data, s->n, l->opt.dtype, l->opt.layout, l->opt.size, l->opt.size,
                          &s->mix_spare);
  if (rc) snprintf(msg, msglen, "out of memory for the batch mixing (one image)");
  return rc;
}

/* A sink with a mix operation (the GPU's): the batch just lent from slot
 * s into *out mixed by the sink, which points out->data at the mixed copy;
 * by the consumer, without the mutex (the slot is the caller's now). */
static int mix_lent(stk_loader *l, slot *s, stk_batch *out) {
  stk__mix m;
  mix_draw_slot(l, s, &m);
  char msg[MSG_LEN];
  int rc = l->sink.ops->mix(&l->sink, out->slot, &m, l->mix.on, l->mix.off, out, msg, sizeof msg);
  if (rc) return loader_err(l, rc, "the batch mixing: %s", msg);
  return STK_OK;
}

/* Whether finalised batches go through submit_batch before they are ready:
 * a sink that submits (the GPU's), or mixing in host memory. */
static int submits(const stk_loader *l) { return l->sink.ops->submit != NULL || host_mix(l); }

/* A worker starts position j of slot s (a refill or not). Mutex held. */
static void begin_position(stk_loader *l, worker_ctx *wc, slot *s, int j, int64_t idx, int refill) {
  wc->s = s;
  wc->j = j;
  wc->idx = idx;
  wc->refill = refill;
  wc->gen = l->gen;
  wc->since = stk__now();
  atomic_store(&wc->phase, PH_READING);
}

/* The worker is back from a position: returns the phase it ended in and
 * leaves it IDLE, unless it was abandoned meanwhile. Mutex held. */
static int end_position(stk_loader *l, worker_ctx *wc) {
  int ph = atomic_load(&wc->phase);
  if (ph == PH_ABANDONED) return ph;
  atomic_store(&wc->phase, PH_IDLE);
  /* a reset or shutdown may wait for this worker */
  if (l->resetting || l->stop) pthread_cond_broadcast(&l->idle_cv);
  return ph;
}

/* Whether holes are filled with repeats rather than from the end of the
 * epoch: with several ranks, every rank must yield len() batches whatever
 * it skips (a rank that yields fewer leaves the others waiting in the
 * collective for ever), so a hole takes a repeat of a sample of this rank's
 * epoch, from its start, as DistributedSampler pads. One rank has no one
 * to wait for: its epoch is shorter by what was skipped instead. */
static int pads(const stk_loader *l) { return l->sampler.world > 1; }

/* The position of the epoch that fills the next hole, or -1 when none is
 * left. Mutex held. */
static int64_t refill_position(stk_loader *l, const slot *s) {
  if (l->epoch_err) return -1;
  if (pads(l)) {
    /* every position twice at most: a run of failing repeats ends */
    int64_t n = l->sampler.num_samples;
    return l->pad_pos < 2 * n ? l->pad_pos++ % n : -1;
  }
  int64_t pool_lo = (s->batch + l->nslots) * (int64_t)l->B;
  return l->tail_end > pool_lo ? --l->tail_end : -1;
}

/* Fills hole j of slot s (see refill_position). Returns 1 when filled,
 * 0 when no sample is left to take, -1 when a reset intervened. The mutex
 * is released while a sample is processed. */
static int refill_hole(stk_loader *l, worker_ctx *wc, slot *s, int j) {
  for (;;) {
    int64_t pos = refill_position(l, s);
    if (pos < 0) return 0;
    int64_t idx = l->order[pos];
    uint64_t gen = l->gen, epoch = l->epoch; /* read under the mutex: a reset writes them */
    begin_position(l, wc, s, j, idx, 1);
    pthread_mutex_unlock(&l->mu);
    /* refills are made while the batch is being finalised: never in the
     * share, so they take the sink's fastest path */
    int rc = produce(l, wc, s, j, idx, pos, epoch, 0, wc->reason);
    pthread_mutex_lock(&l->mu);
    /* abandoned: the consumer noted the failure and handed finalisation on */
    if (end_position(l, wc) == PH_ABANDONED) return -1;
    add_stage_times(l, wc);
    if (gen != l->gen || l->stop) return -1;
    if (rc == STK_OK) {
      s->labels[j] = l->src.ds.labels[idx];
      s->indices[j] = idx;
      s->codes[j] = 0;
      /* consec_fail stays: a refill comes from the end of the epoch, and
       * resetting here let a block of deleted files run on for ever */
      return 1;
    }
    /* a repeat that fails is counted where its own position fails */
    if (!pads(l)) note_failure(l, s, idx, rc, wc->reason);
  }
}

/* Hands a finalised batch to the sink (the GPU's: decode + fused kernel,
 * queued on the GPU's streams). Positions that fail there fail their batch
 * under raise; under skip they are counted and the batch is closed up by
 * the sink. Returns -1 when a reset intervened. Mutex held on entry and
 * exit, released while the sink submits. */
static int submit_batch(stk_loader *l, slot *s) {
  uint64_t gen = l->gen;
  int i = (int)(s - l->slots);
  char msg[sizeof s->errmsg];
  l->active++;
  pthread_mutex_unlock(&l->mu);
  double t0 = stk__now();
  int rc = l->sink.ops->submit
               ? l->sink.ops->submit(&l->sink, i, s->n, s->codes, s->msgs, MSG_LEN, msg, sizeof msg)
               : STK_OK;
  double dt = stk__now() - t0;
  /* a host sink's batch is complete here (its holes were closed up when
   * it was finalised, and no position fails later) */
  if (rc == STK_OK && host_mix(l)) rc = mix_host(l, s, msg, sizeof msg);
  pthread_mutex_lock(&l->mu);
  l->submit_s += dt;
  l->active--;
  if (l->active == 0) pthread_cond_broadcast(&l->idle_cv);
  if (gen != l->gen || l->stop) return -1;
  if (rc) {
    s->err = rc;
    snprintf(s->errmsg, sizeof s->errmsg, "%s", msg);
    return 0;
  }
  int k = 0, failed = 0;
  for (int j = 0; j < s->n; j++) {
    if (s->codes[j]) {
      failed++;
      note_failure(l, s, s->indices[j], s->codes[j], s->msgs + (size_t)j * MSG_LEN);
      continue;
    }
    l->consec_fail = 0;
    s->labels[k] = s->labels[j];
    s->indices[k] = s->indices[j];
    k++;
  }
  if (failed && l->opt.on_error == STK_ON_ERROR_SKIP && k > 0) {
    /* (the sink reads the codes of all s->n positions; the executor's copy
     * is closed up after it) */
    rc = l->sink.ops->compact(&l->sink, i, s->n, s->codes, msg, sizeof msg);
    if (rc) {
      s->err = rc;
      snprintf(s->errmsg, sizeof s->errmsg, "%s", msg);
    }
  }
  if (failed && l->opt.on_error == STK_ON_ERROR_SKIP) {
    for (int j = 0; j < k; j++) s->codes[j] = 0; /* the kept positions, closed up */
    s->n = k;
  }
  return 0;
}

/* Slot s's failures noted once, as finalisation first reaches it (mutex
 * held). */
static void note_failures(stk_loader *l, slot *s) {
  for (int j = 0; j < s->n; j++) {
    if (s->codes[j])
      note_failure(l, s, s->indices[j], s->codes[j], s->msgs + (size_t)j * MSG_LEN);
    else
      l->consec_fail = 0;
  }
  s->fin_noted = 1;
  s->fin_j = 0;
}

/* Under skip: slot s's holes refilled in order, from the hole it was at
 * (when finalisation was handed over after a refill's read timed out), and
 * those left (the epoch ran out) closed up, keeping order (in the sink, and
 * here the labels, indices and codes). -1: a reset came, or this thread was
 * abandoned, during a refill (mutex held). */
static int refill_holes(stk_loader *l, worker_ctx *wc, slot *s) {
  for (int j = s->fin_j; j < s->n; j++) {
    if (!s->codes[j]) continue;
    s->fin_j = j;
    int r = refill_hole(l, wc, s, j);
    if (r < 0) return -1;
    if (r == 0) break;
  }
  int k = 0;
  for (int j = 0; j < s->n; j++) {
    if (s->codes[j]) continue;
    if (k != j) {
      l->sink.ops->move(&l->sink, (int)(s - l->slots), j, k);
      s->labels[k] = s->labels[j];
      s->indices[k] = s->indices[j];
      s->codes[k] = 0;
    }
    k++;
  }
  s->n = k;
  return 0;
}

/* Finalises complete batches in batch order (see the file comment). With a
 * sink that submits, the batches are then submitted by the same thread
 * after `finalizing` is cleared, so that another thread can finalise and
 * submit the next batch meanwhile: the GPU back end runs two submissions at
 * once. */
static void finalize_locked(stk_loader *l, worker_ctx *wc) {
  if (l->finalizing) return;
  l->finalizing = 1;
  slot *s, *submit[STK__PREFETCH_MAX + 2]; /* nslots = prefetch + 2: room for every slot */
  int nsubmit = 0;
  uint64_t gen = l->gen;
  while ((s = slot_of(l, l->epoch, l->next_finalize)) && s->state == SLOT_FILLING && s->complete) {
    int holes = 0;
    for (int j = 0; j < s->n; j++) holes += s->codes[j] != 0;
    int refills = holes && l->opt.on_error == STK_ON_ERROR_SKIP;
    if (refills && nsubmit > 0) {
      /* Submit the batches finalised so far before reading refills: a
       * refill whose read stalls must not hold them back (the consumer
       * takes a stalled refill over, but not this thread's list). */
      l->need_finalize = 1;
      break;
    }
    if (!s->fin_noted) note_failures(l, s);
    /* -1: a reset (it cleared `finalizing`), or this thread was abandoned */
    if (refills && refill_holes(l, wc, s) < 0) return;
    l->next_finalize++;
    if (submits(l) && !s->err && s->n > 0 && nsubmit < (int)(sizeof submit / sizeof submit[0])) {
      if (l->sink.ops->finalised) l->sink.ops->finalised(&l->sink);
      s->state = SLOT_SUBMIT;
      submit[nsubmit++] = s;
      continue;
    }
    s->state = SLOT_READY;
    pthread_cond_broadcast(&l->ready_cv);
  }
  /* This epoch is finalised to its end: the next epoch's batches started
   * ahead may be finalised too, in order, while none of their files failed
   * (refilling a hole takes samples from the end of its own epoch, which
   * only becomes possible once that epoch is the current one). */
  while (!l->epoch_err && !batch_exists(l, l->next_finalize) && l->next_finalize >= l->next_batch &&
         (s = slot_of(l, l->epoch + 1, l->next_finalized)) && s->state == SLOT_FILLING &&
         s->complete) {
    int holes = 0;
    for (int j = 0; j < s->n; j++) holes += s->codes[j] != 0;
    if (holes) break;
    l->next_finalized++;
    if (submits(l) && s->n > 0 && nsubmit < (int)(sizeof submit / sizeof submit[0])) {
      s->state = SLOT_SUBMIT;
      submit[nsubmit++] = s;
      continue;
    }
    s->state = SLOT_READY;
  }
  l->finalizing = 0;
  for (int i = 0; i < nsubmit; i++) {
    /* a reset since finalising freed these slots: leave them alone */
    if (gen != l->gen || l->stop) return;
    if (submit_batch(l, submit[i]) < 0) return;
    submit[i]->state = SLOT_READY;
    pthread_cond_broadcast(&l->ready_cv);
  }
}

/* ---- workers ------------------------------------------------------------ */

/* The FILLING slot of the lowest batch with an unclaimed position. */
static slot *claimable(stk_loader *l) {
  slot *best = NULL;
  for (int i = 0; i < l->nslots; i++) {
    slot *s = &l->slots[i];
    /* this epoch's batches before the next epoch's (started ahead) */
    if (s->state == SLOT_FILLING && s->gen == l->gen && s->claimed < s->n &&
        (!best || s->epoch < best->epoch || (s->epoch == best->epoch && s->batch < best->batch)))
      best = s;
  }
  return best;
}

/* Batch b of the next epoch exists (its whole shard is there: nothing of
 * it has been skipped yet). */
static int next_batch_exists(const stk_loader *l, int64_t b) {
  int64_t n = l->sampler.num_samples;
  if (b > n / l->B) return 0;
  return l->opt.drop_last ? b * l->B + l->B <= n : b * l->B < n;
}

/* Starts the next batch in a free slot. Once every batch of this epoch has
 * started, the first batches of the next epoch start ahead, so that the
 * consumer finds them ready when it begins that epoch instead of waiting for
 * a whole batch (what a training loop would see at every epoch boundary).
 * They are made exactly as they would be after set_epoch(epoch + 1); a
 * reset or a seek elsewhere drops them. */
static int start_batch(stk_loader *l) {
  if (l->epoch_err) return 0;
  int ahead = !batch_exists(l, l->next_batch);
  if (ahead && !next_batch_exists(l, l->next_started)) return 0;
  for (int i = 0; i < l->nslots; i++) {
    slot *s = &l->slots[i];
    if (s->state != SLOT_FREE) continue;
    if (ahead && !l->next_ready) {
      stk__source_order(&l->src, &l->sampler, l->epoch + 1, l->order_next);
      l->next_ready = 1;
    }
    s->state = SLOT_FILLING;
    s->gen = l->gen;
    s->epoch = l->epoch + (uint64_t)ahead;
    s->batch = ahead ? l->next_started++ : l->next_batch++;
    s->start = s->batch * l->B;
    int64_t left = (ahead ? l->sampler.num_samples : l->tail_end) - s->start;
    s->n = (int)(left < l->B ? left : l->B);
    /* a remote source requests the batch's bytes now, in reading order */
    if (l->src.ops->plan)
      l->src.ops->plan(&l->src, (ahead ? l->order_next : l->order) + s->start, s->n, s->epoch);
    s->claimed = s->done = 0;
    s->complete = 0;
    s->fin_noted = s->fin_j = 0;
    s->err = 0;
    s->errmsg[0] = '\0';
    slot_clear_failures(s);
    return 1;
  }
  return 0;
}

static void free_loader(stk_loader *l);

/* The on_read hook (pipeline.h): the read is back; the position stays this
 * worker's unless the consumer, a reset or shutdown took it meanwhile. */
static int worker_on_read(void *ctx) {
  worker_ctx *wc = ctx;
  int ph = PH_READING;
  return !atomic_compare_exchange_strong(&wc->phase, &ph, PH_WORKING);
}

/* A worker leaves the pool for good (mutex held on entry, released). An
 * abandoned one frees its own context, and the loader too when destroy has
 * run and it is the last one out. */
static void worker_exit(stk_loader *l, worker_ctx *wc) {
  wc->exited = 1;
  if (atomic_load(&wc->phase) != PH_ABANDONED) {
    l->live--;
    pthread_cond_broadcast(&l->idle_cv);
    pthread_mutex_unlock(&l->mu);
    return; /* joined by shutdown, freed with the loader */
  }
  for (int i = 0; i < l->nworkers; i++)
    if (l->workers[i] == wc) {
      l->workers[i] = l->workers[--l->nworkers];
      break;
    }
  l->ndetached--;
  int last = l->destroyed && l->ndetached == 0;
  pthread_mutex_unlock(&l->mu);
  stk__worker_free(&wc->w);
  free(wc);
  if (last) free_loader(l);
}

static void worker_main(void *arg) {
  worker_ctx *wc = arg;
  stk_loader *l = wc->l;
  pthread_mutex_lock(&l->mu);
  while (!l->stop) {
    if (l->resetting) {
      pthread_cond_wait(&l->work_cv, &l->mu);
      continue;
    }
    if (l->need_finalize && !l->finalizing) {
      l->need_finalize = 0;
      finalize_locked(l, wc);
      if (atomic_load(&wc->phase) == PH_ABANDONED) break; /* a refill stalled */
      continue;
    }
    slot *s = claimable(l);
    if (!s) {
      if (!start_batch(l)) pthread_cond_wait(&l->work_cv, &l->mu);
      continue;
    }
    int j = s->claimed++;
    int64_t pos = s->start + j; /* read under the mutex: a reset may restart s */
    int64_t idx = (s->epoch == l->epoch ? l->order : l->order_next)[pos];
    uint64_t gen = l->gen, epoch = s->epoch;
    int share = in_share(l, j);
    begin_position(l, wc, s, j, idx, 0);
    pthread_mutex_unlock(&l->mu);

    int rc = produce(l, wc, s, j, idx, pos, epoch, share, wc->reason);

    pthread_mutex_lock(&l->mu);
    int ph = end_position(l, wc);
    if (ph == PH_ABANDONED) break; /* the position is the consumer's now */
    add_stage_times(l, wc);
    if (gen == l->gen && ph != PH_DROPPED) {
      s->labels[j] = l->src.ds.labels[idx];
      s->indices[j] = idx;
      s->codes[j] = rc;
      if (rc) snprintf(s->msgs + (size_t)j * MSG_LEN, MSG_LEN, "%s", wc->reason);
      if (++s->done == s->n) {
        s->complete = 1;
        finalize_locked(l, wc);
        if (atomic_load(&wc->phase) == PH_ABANDONED) break;
      }
    }
  }
  worker_exit(l, wc);
}

/* Starts one more worker, on a thread of its own (mutex held, or before any
 * thread runs). STK_OK or STK_ENOMEM. */
static int spawn_worker(stk_loader *l) {
  if (l->nworkers == l->cap_workers) {
    int cap = l->cap_workers ? l->cap_workers * 2 : 8;
    worker_ctx **w = STK__REALLOC(l->workers, (size_t)cap * sizeof *w);
    if (!w) return STK_ENOMEM;
    l->workers = w;
    l->cap_workers = cap;
  }
  worker_ctx *wc = STK__CALLOC(1, sizeof *wc);
  if (!wc) return STK_ENOMEM;
  wc->l = l;
  wc->id = l->nworkers;
  atomic_init(&wc->phase, PH_IDLE);
  if (stk__worker_init(&wc->w, &l->plan)) {
    stk__worker_free(&wc->w);
    free(wc);
    return STK_ENOMEM;
  }
  wc->w.on_read = worker_on_read;
  wc->w.on_read_ctx = wc;
  if (!l->pool || stk__workers_spawn(l->pool, &wc->item, worker_main, NULL, wc)) {
    stk__worker_free(&wc->w);
    free(wc);
    return STK_ENOMEM;
  }
  wc->pooled = 1;
  l->workers[l->nworkers++] = wc;
  l->live++;
  return STK_OK;
}

/* wc's phase was just set to ABANDONED: it is detached, owns itself from
 * now on, and a replacement keeps the pool at its size (mutex held). */
static void abandon_worker(stk_loader *l, worker_ctx *wc) {
  if (wc->pooled) stk__workers_detach(l->pool, &wc->item);
  wc->pooled = 0;
  l->live--;
  l->ndetached++;
  if (!l->stop && l->ndetached <= MAX_STUCK) spawn_worker(l); /* best effort */
}

/* Waits on cv until the monotonic time t (stk__now()), or a signal. */
static void wait_until(pthread_cond_t *cv, pthread_mutex_t *mu, double t) {
  struct timespec ts;
  if (t > 1e12) t = 1e12;
  ts.tv_sec = (time_t)t;
  ts.tv_nsec = (long)((t - (double)ts.tv_sec) * 1e9);
  if (ts.tv_nsec >= 1000000000L) ts.tv_nsec = 999999999L;
  pthread_cond_timedwait(cv, mu, &ts);
}

/* Positions whose read has taken longer than read_timeout fail, and their
 * workers are abandoned (see "Stalled reads"). Returns 1 when one did, as
 * that may have completed a batch. Mutex held. */
static int expire_reads(stk_loader *l) {
  double to = l->opt.read_timeout, now = stk__now();
  if (to <= 0) return 0;
  int any = 0;
  for (int i = 0; i < l->nworkers; i++) {
    worker_ctx *wc = l->workers[i];
    int ph = atomic_load(&wc->phase);
    if ((ph != PH_READING && ph != PH_DROPPED) || now - wc->since < to) continue;
    if (!atomic_compare_exchange_strong(&wc->phase, &ph, PH_ABANDONED)) continue;
    abandon_worker(l, wc); /* may grow l->workers: wc stays valid */
    if (ph == PH_DROPPED || wc->gen != l->gen) continue; /* its result was dropped anyway */
    l->timeouts++;
    any = 1;
    char reason[MSG_LEN];
    snprintf(reason, sizeof reason, "read timed out after %g s", (double)to);
    slot *s = wc->s;
    if (wc->refill) {
      /* The finaliser is stuck in a refill: note its sample as failed, as
       * refill_hole would have, and let another worker go on from the
       * same hole. */
      note_failure(l, s, wc->idx, STK_EIO, reason);
      l->finalizing = 0;
      l->need_finalize = 1;
    } else {
      int j = wc->j;
      s->labels[j] = l->src.ds.labels[wc->idx];
      s->indices[j] = wc->idx;
      s->codes[j] = STK_EIO;
      snprintf(s->msgs + (size_t)j * MSG_LEN, MSG_LEN, "%s", reason);
      if (++s->done == s->n) {
        s->complete = 1;
        l->need_finalize = 1;
      }
    }
    pthread_cond_broadcast(&l->work_cv);
  }
  return any;
}

/* ---- lifecycle ------------------------------------------------------------ */

static char *dup_or_null(const char *s, int *oom) {
  if (!s) return NULL;
  char *d = strdup(s);
  if (!d) *oom = 1;
  return d;
}

/* The loader's options, its own copies of their strings and their "0 =
 * default" values resolved, and its mutex and condition variables. */
static int init_state(stk_loader *l, const stk_options *opt, stk_options o, char *err,
                      size_t errlen) {
  int oom = 0;
  l->root = dup_or_null(o.root, &oom);
  l->list_file = dup_or_null(o.list_file, &oom);
  l->list_base = dup_or_null(o.list_base, &oom);
  l->index_dir = dup_or_null(o.index_dir, &oom);
  o.index_dir = l->index_dir;
  o.root = l->root;
  o.list_file = l->list_file;
  o.list_base = l->list_base;
  if (o.shuffle < 0) o.shuffle = o.pipeline == STK_PIPELINE_TRAIN;
  if (o.threads == 0) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    o.threads = n > 0 ? (int)n : 1;
  }
  l->opt = o;
  l->batch_bytes = opt->struct_size > offsetof(stk_options, mix_mixup_alpha)
                       ? sizeof(stk_batch)
                       : offsetof(stk_batch, mix_labels);
  pthread_mutex_init(&l->mu, NULL);
  /* timed waits (wait_until) count in stk__now()'s monotonic clock */
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&l->work_cv, &ca);
  pthread_cond_init(&l->ready_cv, &ca);
  pthread_cond_init(&l->idle_cv, &ca);
  pthread_condattr_destroy(&ca);
  l->t0 = stk__now();
  if (oom) return stk__fail(err, errlen, STK_ENOMEM, "out of memory");
  return STK_OK;
}

/* The source, and the sampler of this rank's share of it (repeated or
 * weighted as the options ask). */
static int open_source(stk_loader *l, char *err, size_t errlen) {
  const stk_options *o = &l->opt;
  int rc = stk__source_open(&l->src, o, err, errlen);
  if (rc) return rc;
  rc = stk__sampler_init(&l->sampler, l->src.ds.n, o->rank, o->world_size, o->shuffle,
                         o->shard_drop_last, o->seed);
  if (rc) return stk__fail(err, errlen, rc, "cannot set up the sampler");
  if (o->ra_reps > 0) {
    if (l->src.ops->order) /* tar shards stream shard by shard: no global order to repeat */
      return stk__fail(err, errlen, STK_EINVAL,
                       "ra_reps: repeated augmentation needs a folder, list or cache, not tar "
                       "shards");
    stk__sampler_repeat(&l->sampler, o->ra_reps);
    if (l->sampler.num_samples == 0)
      return stk__fail(err, errlen, STK_EINVAL,
                       "ra_reps: RASampler keeps n // 256 * 256 / world_size samples per rank, "
                       "none of %lld samples over %d ranks",
                       (long long)l->src.ds.n, o->world_size);
  }
  if (o->weights_file) {
    if (l->src.ops->order) /* tar shards stream shard by shard: no index to draw */
      return stk__fail(err, errlen, STK_EINVAL,
                       "weights: weighted sampling needs a folder, list or cache, not tar shards");
    rc = stk__sampler_weights(&l->sampler, o->weights_file, err, errlen);
    if (rc) return rc;
  }
  if (l->sampler.num_samples == 0)
    return stk__fail(err, errlen, STK_EEMPTY, "%lld samples leave rank %d of %d with none",
                     (long long)l->src.ds.n, o->rank, o->world_size);
  return STK_OK;
}

/* The epoch orders, the plan, the sink and every batch slot, and the
 * loader positioned at epoch 0. */
static int open_slots(stk_loader *l, char *err, size_t errlen) {
  l->order = malloc((size_t)l->sampler.num_samples * sizeof *l->order);
  l->order_next = malloc((size_t)l->sampler.num_samples * sizeof *l->order_next);
  stk__plan_init(&l->plan, &l->opt);
  l->B = l->opt.batch_size;
  /* prefetch batches in flight, plus two the consumer may hold: the batch it
   * trains on and the one it just asked for. */
  l->nslots = l->opt.prefetch + 2;
  l->slots = calloc((size_t)l->nslots, sizeof *l->slots);
  if (!l->order || !l->order_next || !l->slots)
    return stk__fail(err, errlen, STK_ENOMEM, "out of memory");
  /* the sink reads the loader's options, plan and source for its lifetime */
  stk__sink_config sc = {&l->opt, &l->plan, &l->src, l->nslots, l->mix.classes};
  int rc = stk__sink_open(&l->sink, &sc, err, errlen);
  if (rc) return rc;
  for (int i = 0; i < l->nslots; i++) {
    slot *s = &l->slots[i];
    int brc = l->sink.ops->slot_open(&l->sink, i, &s->data);
    s->labels = malloc((size_t)l->B * sizeof(int64_t));
    s->indices = malloc((size_t)l->B * sizeof(int64_t));
    s->codes = malloc((size_t)l->B * sizeof(int32_t));
    s->msgs = malloc((size_t)l->B * MSG_LEN);
    if (l->mix.classes)
      s->soft = malloc((size_t)l->B * (size_t)l->mix.classes * sizeof(float));
    if (brc || !s->data || !s->labels || !s->indices || !s->codes || !s->msgs ||
        (l->mix.classes && !s->soft))
      return stk__fail(err, errlen, STK_ENOMEM, "out of memory for %d batch slots of %zu bytes",
                       l->nslots, (size_t)l->B * l->plan.image_bytes);
  }
  pthread_mutex_lock(&l->mu);
  reset_locked(l, 0, 0);
  pthread_mutex_unlock(&l->mu);
  return STK_OK;
}

/* The worker pool and its threads. */
static int start_workers(stk_loader *l, char *err, size_t errlen) {
  l->nthreads = l->opt.threads;
  if (!(l->pool = stk__workers_create(0, "stk-worker", NULL, 0)))
    return stk__fail(err, errlen, STK_ENOMEM, "out of memory");
  int rc = STK_OK;
  pthread_mutex_lock(&l->mu);
  for (int i = 0; i < l->nthreads && rc == STK_OK; i++)
    if (spawn_worker(l))
      rc = stk__fail(err, errlen, STK_ENOMEM, "cannot start worker thread %d (out of memory)", i);
  pthread_mutex_unlock(&l->mu);
  return rc;
}

int stk_loader_create(const stk_options *opt, int header_version, stk_loader **out, char *err,
                      size_t errlen) {
  if (out) *out = NULL;
  if (!opt || !out) return stk__fail(err, errlen, STK_EINVAL, "options and out must not be NULL");
  int rc = stk__check_version(header_version, err, errlen);
  if (rc) return rc;
  stk_options o;
  rc = stk__options_adopt(opt, &o, err, errlen);
  if (rc) return rc;
  rc = stk__options_validate(&o, err, errlen);
  if (rc) return rc;

  stk_loader *l = calloc(1, sizeof *l);
  if (!l) return stk__fail(err, errlen, STK_ENOMEM, "out of memory");
  rc = init_state(l, opt, o, err, errlen);
  if (!rc) rc = open_source(l, err, errlen);
  if (!rc) rc = stk__mix_labels_init(&l->mix, &l->opt, l->src.ds.nclasses, err, errlen);
  if (!rc) rc = open_slots(l, err, errlen);
  if (!rc) rc = start_workers(l, err, errlen);
  if (rc) {
    stk_loader_destroy(l);
    return rc;
  }
  *out = l;
  return STK_OK;
}

void stk_loader_shutdown(stk_loader *l) {
  if (!l) return;
  pthread_mutex_lock(&l->mu);
  l->stop = 1;
  l->gen++;
  pthread_cond_broadcast(&l->work_cv);
  pthread_cond_broadcast(&l->ready_cv);
  /* reads waiting on the network come back at once */
  if (l->src.ops && l->src.ops->cancel) l->src.ops->cancel(&l->src);
  /* Join who leaves in time; abandon who has been in a read for a while (it
   * may never come back) at once, and whoever is still busy at the
   * deadline. A worker abandoned here writes at most into a slot that is
   * never handed out again, and the loader's memory outlives it (see
   * "Stalled reads"). */
  double deadline = stk__now() + SHUTDOWN_WAIT;
  for (;;) {
    double now = stk__now();
    int waiting = 0, late = now >= deadline;
    for (int i = 0; i < l->nworkers; i++) {
      worker_ctx *wc = l->workers[i];
      if (!wc->pooled || wc->exited) continue;
      int ph = atomic_load(&wc->phase);
      if ((ph == PH_READING || ph == PH_DROPPED) && now - wc->since > SHUTDOWN_SLOW_READ) {
        if (atomic_compare_exchange_strong(&wc->phase, &ph, PH_ABANDONED)) {
          abandon_worker(l, wc);
          continue;
        }
      }
      if (late) {
        atomic_store(&wc->phase, PH_ABANDONED);
        abandon_worker(l, wc);
        continue;
      }
      waiting++;
    }
    if (!waiting) break;
    /* in slices: a read that turns slow is not signalled */
    wait_until(&l->idle_cv, &l->mu, now + 0.02 < deadline ? now + 0.02 : deadline);
  }
  /* the pool joins the rest, once, by whoever gets here first */
  stk__workers *pool = l->pool;
  l->pool = NULL;
  for (int i = 0; i < l->nworkers; i++) l->workers[i]->pooled = 0;
  pthread_mutex_unlock(&l->mu);
  stk__workers_destroy(pool);
}

void stk_loader_destroy(stk_loader *l) {
  if (!l) return;
  stk_loader_shutdown(l);
  if (l->sink.ops && l->sink.ops->finish) l->sink.ops->finish(&l->sink);
  pthread_mutex_lock(&l->mu);
  l->destroyed = 1;
  int later = l->ndetached > 0; /* the last abandoned worker frees it */
  pthread_mutex_unlock(&l->mu);
  if (!later) free_loader(l);
}

/* Everything the loader holds. No thread is left that could touch it. */
static void free_loader(stk_loader *l) {
  for (int i = 0; i < l->nworkers; i++) {
    stk__worker_free(&l->workers[i]->w);
    free(l->workers[i]);
  }
  free(l->workers);
  if (l->slots)
    for (int i = 0; i < l->nslots; i++) {
      free(l->slots[i].labels);
      free(l->slots[i].indices);
      free(l->slots[i].codes);
      free(l->slots[i].msgs);
      free(l->slots[i].soft);
      stk__buf_free(&l->slots[i].mix_spare);
      slot_clear_failures(&l->slots[i]);
      free(l->slots[i].fidx);
      free(l->slots[i].fmsg);
    }
  free(l->slots);
  stk__sink_close(&l->sink); /* after the workers: none is inside the sink */
  free(l->order);
  free(l->order_next);
  clear_skips(l);
  free(l->skip_paths);
  free(l->skip_reasons);
  stk__plan_free(&l->plan);
  stk__sampler_free(&l->sampler);
  stk__source_close(&l->src);
  free(l->root);
  free(l->list_file);
  free(l->list_base);
  free(l->index_dir);
  pthread_cond_destroy(&l->work_cv);
  pthread_cond_destroy(&l->ready_cv);
  pthread_cond_destroy(&l->idle_cv);
  pthread_mutex_destroy(&l->mu);
  free(l);
  stk__trim_heap(); /* what the workers, slots and source held goes back */
}

/* ---- consumer ----------------------------------------------------------- */

static int held_count(const stk_loader *l) {
  int n = 0;
  for (int i = 0; i < l->nslots; i++) n += l->slots[i].state == SLOT_HELD;
  return n;
}

/* Ends the epoch: the caller sees `code` once, and the loader moves on to
 * the next epoch at once, so that its first batches are prepared while the
 * caller finishes up (set_epoch to that epoch then costs nothing). */
static int end_epoch_locked(stk_loader *l, int code) {
  reset_locked(l, l->epoch + 1, 0);
  return code;
}

/* The epoch ended normally: moves on to the next one, keeping the batches
 * of it that were started ahead (see start_batch). */
static int advance_epoch_locked(stk_loader *l) {
  if (!l->next_ready) return end_epoch_locked(l, STK_EEND);
  int64_t *o = l->order;
  l->order = l->order_next;
  l->order_next = o;
  l->next_ready = 0;
  l->epoch++;
  l->next_batch = l->next_started;
  l->next_finalize = l->next_finalized;
  l->next_started = l->next_finalized = 0;
  l->next_deliver = 0;
  l->tail_end = l->sampler.num_samples;
  l->pad_pos = 0;
  l->consec_fail = 0;
  l->epoch_err = 0;
  l->epoch_images = l->epoch_failed = 0;
  l->epoch_noted = 0;
  l->epoch_lost_extra = 0;
  /* batches of the new epoch that completed with failed files wait for
   * finalisation, and no worker may be about to run it */
  l->need_finalize = 1;
  pthread_cond_broadcast(&l->work_cv);
  pthread_cond_broadcast(&l->ready_cv);
  return STK_EEND;
}

/* Slot s's batch described in *out, for the caller (mutex held). */
static void lend_batch(stk_loader *l, slot *s, stk_batch *out) {
  s->state = SLOT_HELD;
  s->lent = s->data;
  int64_t n = s->n, sz = l->opt.size;
  out->data = s->data;
  out->dtype = l->opt.dtype;
  out->layout = l->opt.layout;
  l->sink.ops->lend(&l->sink, (int)(s - l->slots), out); /* device, device labels, event */
  out->n = n;
  if (l->opt.layout == STK_LAYOUT_NCHW) {
    int64_t sh[4] = {n, 3, sz, sz}, st[4] = {3 * sz * sz, sz * sz, sz, 1};
    memcpy(out->shape, sh, sizeof sh);
    memcpy(out->strides, st, sizeof st);
  } else {
    int64_t sh[4] = {n, sz, sz, 3}, st[4] = {3 * sz * sz, 3 * sz, 3, 1};
    memcpy(out->shape, sh, sizeof sh);
    memcpy(out->strides, st, sizeof st);
  }
  out->nbytes = (size_t)n * l->plan.image_bytes;
  out->labels = s->labels;
  out->indices = s->indices;
  out->epoch = s->epoch;
  out->batch_index = s->batch;
  out->slot = (int)(s - l->slots);
  l->images += (uint64_t)n;
  l->epoch_images += (uint64_t)n;
  l->batches++;
}

/* The ready slot s, the next to deliver: its failed files counted, now
 * that the caller sees the batch, and the batch lent into *out. Returns
 * STK_OK, the batch's error (raise), or 1 when the batch came out empty
 * (or short, with drop_last) and its slot went back (mutex held). */
static int deliver_locked(stk_loader *l, slot *s, stk_batch *out) {
  l->next_deliver++;
  for (int i = 0; i < s->fn; i++) {
    l->failed++;
    l->epoch_failed++;
    if (l->opt.on_error == STK_ON_ERROR_SKIP) record_skip(l, s->epoch, s->fidx[i], s->fmsg[i]);
  }
  /* a new epoch's first batch starts a new list, skips or not */
  if (s->epoch != l->skip_epoch) {
    clear_skips(l);
    l->skip_epoch = s->epoch;
  }
  slot_clear_failures(s);
  if (s->err) {
    int rc = loader_err(l, s->err, "%s", s->errmsg);
    s->state = SLOT_FREE;
    pthread_cond_broadcast(&l->work_cv);
    return rc;
  }
  if (s->n == 0 || (l->opt.drop_last && s->n < l->B)) {
    s->state = SLOT_FREE; /* emptied or shortened by skipped files */
    pthread_cond_broadcast(&l->work_cv);
    return 1;
  }
  lend_batch(l, s, out);
  return STK_OK;
}

/* Why next returns without a batch when the one it waits for (s, or none
 * started) is not ready: shutdown, the epoch's error or end, or a wait that
 * could never end. 1 = none of these: wait on (mutex held). */
static int not_ready_locked(stk_loader *l, const slot *s) {
  if (l->stop) return loader_err(l, STK_ESTATE, "the loader was shut down");
  if (l->epoch_err && !s) {
    int rc = loader_err(l, l->epoch_err, "%s", l->epoch_errmsg);
    return end_epoch_locked(l, rc);
  }
  if (!s && !batch_exists(l, l->next_deliver) && l->next_deliver >= l->next_batch) {
    /* Under raise each failed batch was an error of its own already;
     * counting its good files as failed would misstate what happened. */
    if (l->opt.on_error == STK_ON_ERROR_SKIP && l->epoch_images == 0 && l->epoch_failed > 0) {
      /* Never hand out a silently empty epoch. */
      int rc = loader_err(l, STK_ETOOMANY, "every file of epoch %llu failed to load (%llu files)",
                          (unsigned long long)l->epoch, (unsigned long long)l->epoch_failed);
      return end_epoch_locked(l, rc);
    }
    return advance_epoch_locked(l);
  }
  if (held_count(l) == l->nslots) /* waiting could never end: nothing is left to fill */
    return loader_err(l, STK_EBUSY,
                      "all %d batch slots are held by the caller: release a batch first",
                      l->nslots);
  if (l->live == 0) /* every thread is stuck and no more can be started */
    return loader_err(l, STK_EIO,
                      "every worker thread is stuck in a file read that does not return (%llu "
                      "reads timed out): the storage does not respond",
                      (unsigned long long)l->timeouts);
  return 1;
}

/* Under mix: the batch just lent into *out mixed (host batches were mixed
 * when submitted), and its soft labels and draw given; a batch that could
 * not be mixed is not handed out, and its slot goes back. */
static int mix_out(stk_loader *l, stk_batch *out) {
  slot *s = &l->slots[out->slot];
  int rc = host_mix(l) ? STK_OK : mix_lent(l, s, out);
  out->mix_labels = s->soft;
  out->mix_classes = l->mix.classes;
  out->mix_kind = s->mix_kind;
  out->mix_lambda = s->mix_lam;
  if (rc == STK_OK && out->data != s->lent) {
    /* a GPU sink's mixed copy: what release is given (under the mutex:
     * a release on another thread reads it) */
    pthread_mutex_lock(&l->mu);
    s->lent = out->data;
    pthread_mutex_unlock(&l->mu);
  } else if (rc != STK_OK) {
    stk_batch b = *out;
    b.data = s->lent;
    stk_batch_release(l, &b);
    memset(out, 0, l->batch_bytes);
  }
  return rc;
}

int stk_loader_next(stk_loader *l, stk_batch *out) { return stk_loader_next_timed(l, out, -1); }

int stk_loader_next_timed(stk_loader *l, stk_batch *out, double timeout_s) {
  if (!l || !out) return STK_EINVAL;
  memset(out, 0, l->batch_bytes);
  double t_end = timeout_s >= 0 ? stk__now() + timeout_s : 1e300;
  /* The wait is cut into slices so that reads past read_timeout are found
   * while the consumer waits for them. */
  double to = l->opt.read_timeout;
  double slice = to > 0 ? (to / 4 < 0.25 ? to / 4 : 0.25) : 1e300;
  pthread_mutex_lock(&l->mu);
  int rc;
  for (;;) {
    expire_reads(l);
    slot *s = slot_of(l, l->epoch, l->next_deliver);
    if (s && s->state == SLOT_READY) {
      rc = deliver_locked(l, s, out);
      if (rc == 1) continue;
      break;
    }
    rc = not_ready_locked(l, s);
    if (rc != 1) break;
    double t = stk__now();
    if (t >= t_end) {
      rc = STK_ETIMEDOUT; /* the message is left alone: nothing failed */
      break;
    }
    wait_until(&l->ready_cv, &l->mu, t + slice < t_end ? t + slice : t_end);
    l->wait_s += stk__now() - t;
    l->sink.consumer_wait_s = l->wait_s;
  }
  pthread_mutex_unlock(&l->mu);
  if (rc == STK_OK && l->mix.classes) rc = mix_out(l, out);
  return rc;
}

int stk_batch_release(stk_loader *l, stk_batch *b) { return stk_batch_release_on(l, b, NULL); }

int stk_batch_wait(stk_loader *l, const stk_batch *b) {
  if (!l || !b || b->slot < 0 || b->slot >= l->nslots) return STK_EINVAL;
  if (!l->sink.ops->wait) return STK_OK;
  char msg[MSG_LEN];
  return l->sink.ops->wait(&l->sink, b->slot, msg, sizeof msg);
}

int stk_batch_wait_on(stk_loader *l, const stk_batch *b, void *stream) {
  if (!l || !b || b->slot < 0 || b->slot >= l->nslots) return STK_EINVAL;
  if (!l->sink.ops->wait_on) return STK_OK;
  char msg[MSG_LEN];
  int rc = l->sink.ops->wait_on(&l->sink, b->slot, stream, msg, sizeof msg);
  if (rc) loader_err(l, rc, "%s", msg);
  return rc;
}

int stk_batch_release_on(stk_loader *l, stk_batch *b, void *stream) {
  if (!l || !b) return STK_EINVAL;
  if (b->slot < 0 || b->slot >= l->nslots || !b->data) return STK_EINVAL;
  pthread_mutex_lock(&l->mu);
  slot *s = &l->slots[b->slot];
  /* No error message here: release may run on any thread, and the message
   * buffer belongs to the consumer thread. */
  int rc = STK_OK;
  /* epoch and batch_index too: a stale copy of a batch released earlier
   * names the same slot and memory as the batch now lent from it */
  if (s->state != SLOT_HELD || s->lent != b->data || s->epoch != b->epoch ||
      s->batch != b->batch_index) {
    rc = STK_EINVAL;
  } else {
    if (l->sink.ops->release) {
      /* The sink may still need to know when the consumer is done (the GPU
       * sink: the next write into the slot waits, on the device, for the
       * work queued on `stream` so far). */
      char msg[MSG_LEN];
      rc = l->sink.ops->release(&l->sink, b->slot, stream, msg, sizeof msg);
    }
    s->state = SLOT_FREE;
  }
  pthread_cond_broadcast(&l->work_cv);
  pthread_mutex_unlock(&l->mu);
  if (rc == STK_OK) b->data = NULL;
  return rc;
}

int stk_loader_seek(stk_loader *l, uint64_t epoch, int64_t batch) {
  if (!l) return STK_EINVAL;
  if (batch < 0) return loader_err(l, STK_EINVAL, "seek: negative batch %lld", (long long)batch);
  pthread_mutex_lock(&l->mu);
  /* Already there (e.g. set_epoch right after an epoch ended): keep the
   * batches that are being prepared. */
  if (!(epoch == l->epoch && batch == l->next_deliver)) reset_locked(l, epoch, batch);
  pthread_mutex_unlock(&l->mu);
  return STK_OK;
}

int stk_loader_set_epoch(stk_loader *l, uint64_t epoch) { return stk_loader_seek(l, epoch, 0); }

void stk_loader_position(const stk_loader *l, uint64_t *epoch, int64_t *batch) {
  stk_loader *m = (stk_loader *)l; /* the mutex is not part of the logical state */
  pthread_mutex_lock(&m->mu);
  if (epoch) *epoch = l->epoch;
  if (batch) *batch = l->next_deliver;
  pthread_mutex_unlock(&m->mu);
}

int64_t stk_loader_num_samples(const stk_loader *l) { return l->src.ds.n; }
int64_t stk_loader_shard_size(const stk_loader *l) { return l->sampler.num_samples; }
int64_t stk_loader_len(const stk_loader *l) {
  int64_t s = l->sampler.num_samples;
  return l->opt.drop_last ? s / l->B : (s + l->B - 1) / l->B;
}
int stk_loader_num_slots(const stk_loader *l) { return l->nslots; }
int stk_loader_num_classes(const stk_loader *l) { return l->src.ds.nclasses; }
const char *stk_loader_class_name(const stk_loader *l, int label) {
  return label >= 0 && label < l->src.ds.nclasses ? l->src.ds.classes[label] : NULL;
}
const char *stk_loader_sample_path(const stk_loader *l, int64_t i) {
  return i >= 0 && i < l->src.ds.n ? stk__dataset_path(&l->src.ds, i) : NULL;
}
int64_t stk_loader_sample_label(const stk_loader *l, int64_t i) {
  return i >= 0 && i < l->src.ds.n ? l->src.ds.labels[i] : -1;
}
const char *stk_loader_error(const stk_loader *l) { return l ? l->errmsg : ""; }
const char *stk_loader_source_kind(const stk_loader *l) {
  return l && l->src.ops ? l->src.ops->kind : "";
}
const char *stk_loader_note(const stk_loader *l) { return l ? l->src.note : ""; }

int stk_loader_stats(const stk_loader *l, stk_stats *o) {
  if (!l || !o) return STK_EINVAL;
  stk_loader *m = (stk_loader *)l;
  memset(o, 0, sizeof *o);
  pthread_mutex_lock(&m->mu);
  o->images = l->images;
  o->batches = l->batches;
  o->skipped = l->skipped;
  o->failed = l->failed;
  o->bytes_read = l->bytes_read;
  o->seconds = stk__now() - l->t0;
  o->images_per_s = o->seconds > 0 ? (double)o->images / o->seconds : 0;
  o->wait_seconds = l->wait_s;
  o->read_seconds = l->read_s;
  o->decode_seconds = l->decode_s;
  o->augment_seconds = l->augment_s;
  uint64_t host = (uint64_t)l->nslots * (uint64_t)l->B *
                  (l->plan.image_bytes + 2 * 8 + 4 + MSG_LEN + (uint64_t)l->mix.classes * 4);
  /* as published after each sample: the workers' buffers are theirs */
  for (int i = 0; i < l->nworkers; i++) host += l->workers[i]->scratch_bytes;
  o->host_bytes = host + l->sink_bytes;
  o->submit_seconds = l->submit_s; /* 0 for a sink without submit */
  if (l->sink.ops->stats) l->sink.ops->stats(&m->sink, o);
  if (l->src.ops->net_stats) l->src.ops->net_stats(&l->src, o);
  o->threads = l->nthreads;
  o->slots = l->nslots;
  pthread_mutex_unlock(&m->mu);
  return STK_OK;
}

uint64_t stk_loader_skipped_count(const stk_loader *l) {
  if (!l) return 0;
  stk_loader *m = (stk_loader *)l;
  pthread_mutex_lock(&m->mu);
  uint64_t n = l->skip_len;
  pthread_mutex_unlock(&m->mu);
  return n;
}

int stk_loader_skipped(const stk_loader *l, uint64_t i, const char **path, const char **reason) {
  if (!l) return STK_EINVAL;
  stk_loader *m = (stk_loader *)l;
  pthread_mutex_lock(&m->mu);
  int ok = i < l->skip_len;
  if (ok) {
    if (path) *path = l->skip_paths[i] ? l->skip_paths[i] : "";
    if (reason) *reason = l->skip_reasons[i] ? l->skip_reasons[i] : "";
  }
  pthread_mutex_unlock(&m->mu);
  return ok ? STK_OK : STK_EINVAL;
}
