/*
 * share.h: the adaptive CPU share of the GPU path (gpu_cpu_share < 0): the
 * fraction of each batch the workers decode on the CPU while the rest goes
 * to the GPU's decoders.
 *
 * The two decoders work at once, so the fastest share is the one that gives
 * them equal time: the engines' part of a batch takes (1 - s) B / E, the
 * workers' part (s a + (1 - s) b) B / T, where E is the engines' rate, a and
 * b the worker seconds a position costs when it is decoded on the CPU or
 * only read and planned for the engines, and T the worker threads. All
 * three are measured, window by window of batches: a and b as the workers'
 * time in the positions they produced, E as the engine items per second of
 * the lanes' time inside the engines' calls, times the lanes. The share
 * then moves half-way to
 *
 *     min(balanced, needed):
 *     balanced = (U T - E b) / (U T + E (a - b))   the equal-time share,
 *                 with the workers held to U of their time
 *     needed   = 1 - E / (M r)                     the least share at which
 *                 the engines keep up with the rate r batches are taken at
 *                 (times the margin M)
 *
 * `needed` leaves the CPU alone when the consumer is the bottleneck (the
 * engines alone keep up), and rises when a model trains on the same GPU:
 * nvJPEG's per-image steps then wait behind its kernels, which shows as a
 * lower E. Both terms fall when the workers are the bottleneck (r falls).
 * An earlier controller climbed the delivery rate one step of 1/32 at a
 * time; over noisy windows it stayed near 0 (docs/gpu.md).
 */
#ifndef STK_SHARE_H
#define STK_SHARE_H

#include <stdint.h>

#define STK__SHARE_WINDOW 8     /* batches per measurement */
#define STK__SHARE_EPS 0.02     /* a rate change smaller than this is no change */
#define STK__SHARE_UTIL 0.9     /* U: the workers' time the balance may fill */
#define STK__SHARE_MARGIN 1.25  /* M: the engines' headroom before the CPU helps */
#define STK__SHARE_MIN_MOVE (1.0 / 128) /* smaller moves are not made (each costs a lag) */
#define STK__SHARE_CPU_PRIOR 3e-3  /* a, seconds, until CPU positions are measured */
#define STK__SHARE_ENGINE_PRIOR 1e-4 /* b, seconds, until engine positions are */

/* What the workers and the lanes did since the loader opened (running
 * totals; the controller takes differences). */
typedef struct {
  double cpu_s, eng_s;   /* workers' seconds producing CPU-decoded / engine positions */
  uint64_t cpu_n, eng_n; /* those positions */
  double hw_s;           /* the lanes' seconds inside the engines' calls */
  uint64_t hw_n;         /* the items those calls decoded */
} stk__share_work;

typedef struct {
  double share;      /* the current share, in [0, 1] */
  int threads, lanes, batch;
  int lag;           /* batches delivered after a move that began before it */
  int n;             /* batches in the window (< 0: the lag still passing) */
  double t0;         /* start of the current window */
  stk__share_work w0; /* the totals at its start */
  double a, b, e;    /* measured: worker s per CPU / engine position; engine img/s */
  double rate;       /* the last window's images/s */
} stk__share_ctl;

/* lag: how many batches can be under way when the share changes (the
 * loader's slots): they were split under the old share, so after each move
 * that many batches pass before the next window opens. */
void stk__share_init(stk__share_ctl *c, double share, int lag, int threads, int lanes, int batch);
/* A batch was delivered at time now (seconds) with the running totals w;
 * returns the share to use. */
double stk__share_batch(stk__share_ctl *c, double now, const stk__share_work *w);
/* The share the measurements so far ask for at a delivery rate of r
 * images/s (the target the controller moves half-way to). */
double stk__share_target(const stk__share_ctl *c, double r);
/* Forget the current window (a reset: the next window starts afresh). */
void stk__share_restart(stk__share_ctl *c);

/*
 * The way the engines are driven, chosen by the same measure. nvJPEG's
 * batched call decodes fastest for a loader alone (its per-image work runs
 * on nvJPEG's many streams); beside a training model the decoupled decoder,
 * one image at a time on a few streams of ours, feeds the model better,
 * since those many streams' small steps wait among the model's kernels
 * (docs/gpu.md). Nothing but the delivery rate tells the two cases apart,
 * so the controller runs trials: after `every` batches it measures a window
 * in the current way, switches, lets the batches under way pass, measures
 * a window in the other way, and keeps whichever delivered faster (by more
 * than STK__SHARE_EPS; a tie keeps the current way). A trial that changes
 * nothing doubles the wait before the next, up to STK__MODE_EVERY_MAX
 * batches; one that changes the way resets it, so that a model starting or
 * stopping is followed. While a trial runs, the share controller is paused.
 */
#define STK__MODE_WINDOW 16      /* batches per trial measurement */
#define STK__MODE_FIRST 24       /* batches before the first trial (warm-up) */
#define STK__MODE_EVERY 256      /* batches between trials, at first */
#define STK__MODE_EVERY_MAX 4096 /* ... doubled after each trial that kept the way */

typedef struct {
  int batched;      /* the way in use: 1 = the batched call, 0 = decoupled */
  int phase;        /* 0 steady, 1 measuring, 2 passing the lag, 3 measuring
                       the other way, 4 passing the lag back */
  int n;            /* batches in the current phase */
  double t0;        /* start of the current measurement */
  double rate;      /* the first measurement's batches/s */
  int lag;          /* batches under way when the way changes */
  int every;        /* steady batches before the next trial */
  int switches;     /* trials that changed the way */
} stk__mode_ctl;

void stk__mode_init(stk__mode_ctl *c, int batched, int lag);
/* A batch was delivered at time now; returns the way to use (1: batched).
 * *trial is set while a trial runs. */
int stk__mode_batch(stk__mode_ctl *c, double now, int *trial);
/* A refill or reset: a trial under way is dropped (its first way kept). */
int stk__mode_restart(stk__mode_ctl *c);

/*
 * The way the engines are driven, by default: from how the consumer spends
 * its time. A consumer that is back in next() as soon as it has a batch
 * (a benchmark, a loader feeding another process) leaves the GPU to the
 * loader, where the batched call is fastest (18,100 against 13,900 img/s on
 * an H100); one that spends most of its time elsewhere between batches is
 * training a model, beside which the decoupled decoder feeds it better
 * (ResNet-18 at 94% of its synthetic rate against 80%). Over windows of
 * STK__CONSUMER_WINDOW batches, the fraction of the time the consumer spent
 * outside next() picks the way, with hysteresis so that a consumer near the
 * line does not flip every window.
 */
#define STK__CONSUMER_WINDOW 16
#define STK__CONSUMER_BUSY_HI 0.6 /* busier than this: decoupled */
#define STK__CONSUMER_BUSY_LO 0.4 /* idler than this: batched */

typedef struct {
  int batched;     /* the way in use: 1 = the batched call */
  int n;           /* batches in the window */
  double t0, w0;   /* the window's start, and the consumer's waiting then */
  int switches;
} stk__consumer_ctl;

void stk__consumer_init(stk__consumer_ctl *c, int batched);
/* A batch was delivered at time now; wait_s: the consumer's total seconds
 * inside next() so far. Returns the way to use (1: batched). */
int stk__consumer_batch(stk__consumer_ctl *c, double now, double wait_s);

#endif
