/*
 * share.h: the adaptive CPU share of the GPU path (gpu_cpu_share < 0): the
 * fraction of each batch the workers decode on the CPU while the rest goes
 * to the GPU's decoders.
 *
 * The share that feeds a model fastest depends on what the GPU is doing: on
 * an idle GPU the engines outrun the CPU and the best share is near 0; under
 * training, nvJPEG's per-image steps wait behind the model's kernels and the
 * CPU's cores are worth more. No queue length tells these apart (workers
 * busy inside nvJPEG look like idle workers), so the controller measures the
 * one thing that matters, the rate at which batches are delivered, and
 * climbs towards a higher rate: every window of batches it moves the share
 * by one step, keeps the direction while the rate improves, turns back when
 * it falls, and steps down when nothing changes (the consumer is then the
 * bottleneck, and the CPU is better left alone). The batches already under
 * way when the share moves are not counted in the next window. At 0 it probes one step up
 * now and then, so that a later slowdown of the GPU is seen. A probe costs
 * the most where the CPU is weakest (two threads: even one step of share
 * makes them the bottleneck for the window it is measured), so each probe
 * that fails doubles the wait before the next one, up to
 * STK__SHARE_PROBE_MAX windows, and one that succeeds resets it.
 */
#ifndef STK_SHARE_H
#define STK_SHARE_H

#define STK__SHARE_STEP (1.0 / 32)
#define STK__SHARE_WINDOW 8   /* batches per measurement */
#define STK__SHARE_EPS 0.02   /* a rate change smaller than this is no change */
#define STK__SHARE_PROBE 4    /* windows at 0 between probes, at first */
#define STK__SHARE_PROBE_MAX 64 /* ... doubled after each probe that failed */

typedef struct {
  double share;     /* the current share, in [0, 1] */
  int lag;          /* batches delivered after a step that began before it */
  double t0;        /* start of the current window */
  int n;            /* batches in it */
  double prev_rate; /* batches/s of the previous window (0: none yet) */
  int dir;          /* +1 or -1: the direction of the last step */
  int idle;         /* windows spent at 0 since the last probe */
  int probe_every;  /* windows at 0 before the next probe */
  int probing;      /* the last step was a probe up from 0 */
} stk__share_ctl;

/* lag: how many batches can be under way when the share changes (the
 * loader's slots): they were split under the old share, so after each step
 * that many batches pass before the next window opens. */
void stk__share_init(stk__share_ctl *c, double share, int lag);
/* A batch was delivered at time now (seconds); returns the share to use. */
double stk__share_batch(stk__share_ctl *c, double now);
/* Forget the measurements (a reset: the next window starts afresh). */
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

#endif
