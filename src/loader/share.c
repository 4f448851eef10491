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
