/* share.c: the adaptive CPU share's balance (share.h). */
#include "loader/share.h"

void stk__share_init(stk__share_ctl *c, double share, int lag, int threads, int lanes, int batch) {
  c->share = share < 0 ? 0 : share > 1 ? 1 : share;
  c->lag = lag > 0 ? lag : 0;
  c->threads = threads > 0 ? threads : 1;
  c->lanes = lanes > 0 ? lanes : 1;
  c->batch = batch > 0 ? batch : 1;
  c->a = c->b = c->e = c->rate = 0;
  stk__share_restart(c);
}

void stk__share_restart(stk__share_ctl *c) {
  c->n = 0;
  c->t0 = 0;
}

/* A running mean that follows change within a few windows. */
static double ewma(double old, double x) { return old > 0 ? 0.5 * old + 0.5 * x : x; }

double stk__share_target(const stk__share_ctl *c, double r) {
  if (c->e <= 0 || r <= 0) return c->share; /* the engines not measured yet */
  double a = c->a > 0 ? c->a : STK__SHARE_CPU_PRIOR;
  double b = c->b > 0 ? c->b : STK__SHARE_ENGINE_PRIOR;
  double ut = STK__SHARE_UTIL * c->threads;
  double den = ut + c->e * (a - b);
  double balanced = den > 0 ? (ut - c->e * b) / den : 0;
  double needed = 1 - c->e / (STK__SHARE_MARGIN * r);
  double t = balanced < needed ? balanced : needed;
  return t < 0 ? 0 : t > 1 ? 1 : t;
}

/* Folds one window's differences into the measurements. */
static void measure(stk__share_ctl *c, const stk__share_work *w) {
  const stk__share_work *o = &c->w0;
  /* a few positions are too noisy a mean to move the share on */
  if (w->cpu_n >= o->cpu_n + 4) c->a = ewma(c->a, (w->cpu_s - o->cpu_s) / (double)(w->cpu_n - o->cpu_n));
  if (w->eng_n >= o->eng_n + 4) c->b = ewma(c->b, (w->eng_s - o->eng_s) / (double)(w->eng_n - o->eng_n));
  if (w->hw_n >= o->hw_n + 16 && w->hw_s > o->hw_s)
    c->e = ewma(c->e, c->lanes * (double)(w->hw_n - o->hw_n) / (w->hw_s - o->hw_s));
}

double stk__share_batch(stk__share_ctl *c, double now, const stk__share_work *w) {
  /* c->n < 0: batches split under the previous share, still passing */
  if (c->n < 0) {
    c->n++;
    return c->share;
  }
  if (c->n++ == 0) { /* the window opens at its first batch */
    c->t0 = now;
    c->w0 = *w;
    return c->share;
  }
  if (c->n <= STK__SHARE_WINDOW) return c->share;
  double dt = now - c->t0;
  c->rate = dt > 0 ? STK__SHARE_WINDOW * (double)c->batch / dt : 0;
  measure(c, w);
  double t = stk__share_target(c, c->rate);
  double p = c->share + 0.5 * (t - c->share);
  if (t == 0 && p < STK__SHARE_MIN_MOVE) p = 0; /* settle at 0, not just above it */
  if (p - c->share >= STK__SHARE_MIN_MOVE || c->share - p >= STK__SHARE_MIN_MOVE ||
      (p == 0 && c->share > 0)) {
    c->share = p;
    c->n = c->lag > 0 ? -c->lag : 0; /* the batches under way, then the next window */
    return c->share;
  }
  c->t0 = now; /* no move: this batch opens the next window */
  c->w0 = *w;
  c->n = 1;
  return c->share;
}

/* ---- the engines' way (share.h) ---- */

void stk__mode_init(stk__mode_ctl *c, int batched, int lag) {
  c->batched = batched ? 1 : 0;
  c->phase = 0;
  c->n = 0;
  c->t0 = 0;
  c->rate = 0;
  c->lag = lag > 0 ? lag : 0;
  c->every = STK__MODE_FIRST;
  c->switches = 0;
}

int stk__mode_restart(stk__mode_ctl *c) {
  /* in phases 2-3 the other way is in use: back to the first */
  if (c->phase == 2 || c->phase == 3) c->batched ^= 1;
  c->phase = 0;
  c->n = 0;
  return c->batched;
}

/* The end of a measurement of STK__MODE_WINDOW batches begun at c->t0. */
static double window_rate(const stk__mode_ctl *c, double now) {
  double dt = now - c->t0;
  return dt > 0 ? STK__MODE_WINDOW / dt : 0;
}

int stk__mode_batch(stk__mode_ctl *c, double now, int *trial) {
  c->n++;
  switch (c->phase) {
  case 0: /* steady */
    if (c->n >= c->every) {
      c->phase = 1;
      c->n = 0;
      c->t0 = now;
    }
    break;
  case 1: /* measuring the way in use */
    if (c->n < STK__MODE_WINDOW) break;
    c->rate = window_rate(c, now);
    c->batched ^= 1;
    c->phase = 2;
    c->n = 0;
    break;
  case 2: /* the batches of the old way pass */
    if (c->n < c->lag) break;
    c->phase = 3;
    c->n = 0;
    c->t0 = now;
    break;
  case 3: { /* measuring the other way */
    if (c->n < STK__MODE_WINDOW) break;
    double r = window_rate(c, now);
    c->n = 0;
    if (r > c->rate * (1 + STK__SHARE_EPS)) { /* better: keep it */
      c->switches++;
      c->every = STK__MODE_EVERY;
      c->phase = 0;
    } else { /* back, and wait longer before the next trial */
      c->batched ^= 1;
      c->every = c->every < STK__MODE_EVERY ? STK__MODE_EVERY : c->every * 2;
      if (c->every > STK__MODE_EVERY_MAX) c->every = STK__MODE_EVERY_MAX;
      c->phase = 4;
    }
    break;
  }
  case 4: /* the other way's batches pass; then steady */
    if (c->n >= c->lag) {
      c->phase = 0;
      c->n = 0;
    }
    break;
  }
  *trial = c->phase != 0;
  return c->batched;
}

/* ---- the engines' way from the consumer's time (share.h) ---- */

void stk__consumer_init(stk__consumer_ctl *c, int batched) {
  c->batched = batched ? 1 : 0;
  c->n = 0;
  c->t0 = c->w0 = 0;
  c->switches = 0;
}

int stk__consumer_batch(stk__consumer_ctl *c, double now, double wait_s) {
  if (c->n++ == 0) {
    c->t0 = now;
    c->w0 = wait_s;
    return c->batched;
  }
  if (c->n <= STK__CONSUMER_WINDOW) return c->batched;
  double dt = now - c->t0;
  double busy = dt > 0 ? 1 - (wait_s - c->w0) / dt : 0;
  int way = busy > STK__CONSUMER_BUSY_HI ? 0 : busy < STK__CONSUMER_BUSY_LO ? 1 : c->batched;
  if (way != c->batched) c->switches++;
  c->batched = way;
  c->t0 = now; /* this batch opens the next window */
  c->w0 = wait_s;
  c->n = 1;
  return c->batched;
}
