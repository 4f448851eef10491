/* share.c: the adaptive CPU share's rate climb (share.h). */
#include "loader/share.h"

void stk__share_init(stk__share_ctl *c, double share, int lag) {
  c->share = share < 0 ? 0 : share > 1 ? 1 : share;
  c->lag = lag > 0 ? lag : 0;
  c->dir = 1;
  c->idle = 0;
  c->probe_every = STK__SHARE_PROBE;
  c->probing = 0;
  stk__share_restart(c);
}

void stk__share_restart(stk__share_ctl *c) {
  /* a probe cut short measured nothing: it counts as failed (back to 0 at
   * the next window's end), not as a success that would climb on blind */
  if (c->probing) {
    c->probing = 0;
    c->dir = -1;
  }
  c->n = 0;
  c->t0 = 0;
  c->prev_rate = 0;
}

double stk__share_batch(stk__share_ctl *c, double now) {
  /* c->n < 0: batches split under the previous share, still passing */
  if (c->n < 0) {
    c->n++;
    return c->share;
  }
  if (c->n++ == 0) {
    c->t0 = now; /* the window opens at its first batch */
    return c->share;
  }
  if (c->n <= STK__SHARE_WINDOW) return c->share;
  double dt = now - c->t0;
  double rate = dt > 0 ? STK__SHARE_WINDOW / dt : 0;
  if (c->prev_rate > 0 && rate > 0) {
    if (rate < c->prev_rate * (1 - STK__SHARE_EPS))
      c->dir = -c->dir; /* worse: back to where it was better */
    else if (rate <= c->prev_rate * (1 + STK__SHARE_EPS))
      c->dir = -1; /* no better: leave the CPU alone */
    /* better: on in the same direction */
  }
  if (c->probing) {
    c->probing = 0;
    if (c->dir > 0)
      c->probe_every = STK__SHARE_PROBE; /* the CPU helps now: probe often again */
    else if ((c->probe_every *= 2) > STK__SHARE_PROBE_MAX)
      c->probe_every = STK__SHARE_PROBE_MAX;
  }
  if (c->share <= 0 && c->dir < 0) {
    /* at 0, a probe every probe_every windows */
    if (++c->idle >= c->probe_every) {
      c->idle = 0;
      c->dir = 1;
      c->probing = 1;
    }
  }
  double p0 = c->share;
  double p = c->share + (c->share <= 0 && c->dir < 0 ? 0 : c->dir * STK__SHARE_STEP);
  c->share = p < 0 ? 0 : p > 1 ? 1 : p;
  c->prev_rate = rate;
  if (c->share != p0 && c->lag > 0) {
    c->n = -c->lag; /* the batches under way, then the next window */
  } else {
    c->t0 = now;
    c->n = 1; /* this batch opens the next window */
  }
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
