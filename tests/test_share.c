/* test_share.c: the adaptive CPU share's controller (src/loader/share.c)
 * against a model of the GPU path: the engines decode their part of each
 * batch at E images/s, the CPU cores theirs at C, both at once, and the
 * consumer takes at most K: batches come at min(E / (1 - p), C / p, K), with
 * 2% noise, and a batch delivered now was split LAG batches ago (the
 * loader's slots). The share must settle near the best one (it moves one step
 * either side of it, so the rate stays within a few percent of the best), follow the best one
 * when the GPU slows down (a model starts training), and stay near 0 when
 * the consumer is the bottleneck. test_mode does the same for the choice of
 * the engines' way. */
#include <math.h>
#include <stdio.h>

#include "check.h"
#include "core/common.h"
#include "loader/share.h"

typedef struct {
  double E, C, K;
} model;

static double rate(const model *m, double p) {
  double r = m->K;
  if (p < 1 && m->E / (1 - p) < r) r = m->E / (1 - p);
  if (p > 0 && m->C / p < r) r = m->C / p;
  return r;
}

/* Runs n batches of 256 images; returns the mean share and the mean rate
 * (as a fraction of the best rate) over the last half. */
/* The loader's default slots (prefetch 2 + 2): a batch delivered now was
 * split when it started, LAG batches ago. */
#define LAG 4

static void run(stk__share_ctl *c, const model *m, int n, stk__rng *rng, double *t, double *mean_p,
                double *eff) {
  double split[LAG]; /* the shares of the batches under way, oldest first */
  for (int k = 0; k < LAG; k++) split[k] = c->share;
  double best = 0;
  for (int i = 0; i <= 1000; i++) {
    double r = rate(m, i / 1000.0);
    if (r > best) best = r;
  }
  double sp = 0, imgs = 0, secs = 0;
  for (int i = 0; i < n; i++) {
    double used = split[0];
    for (int k = 0; k + 1 < LAG; k++) split[k] = split[k + 1];
    split[LAG - 1] = c->share;
    double r = rate(m, used) * (1 + 0.02 * (2 * stk__rng_uniform(rng) - 1));
    double dt = 256 / r;
    *t += dt;
    if (i >= n / 2) {
      sp += c->share;
      imgs += 256;
      secs += dt;
    }
    stk__share_batch(c, *t);
  }
  *mean_p = sp / (n - n / 2);
  *eff = imgs / secs / best;
}

/* The engines' way (share.h's mode controller) against a model where each
 * way has its own delivery rate (images/s) and a batch delivered now was
 * submitted LAG batches ago. Runs n batches from time *t; returns the share
 * of the last half's batches that were submitted the batched way. */
static double run_mode(stk__mode_ctl *c, double r_batched, double r_decoupled, int n,
                       stk__rng *rng, double *t) {
  int way[LAG];
  for (int k = 0; k < LAG; k++) way[k] = c->batched;
  int batched = 0;
  for (int i = 0; i < n; i++) {
    int used = way[0];
    for (int k = 0; k + 1 < LAG; k++) way[k] = way[k + 1];
    way[LAG - 1] = c->batched;
    double r = (used ? r_batched : r_decoupled) * (1 + 0.02 * (2 * stk__rng_uniform(rng) - 1));
    *t += 256 / r;
    if (i >= n / 2) batched += c->batched;
    int trial;
    stk__mode_batch(c, *t, &trial);
  }
  return (double)batched / (n - n / 2);
}

static void test_mode(stk__rng *rng) {
  stk__mode_ctl c;
  double t = 0;
  /* the loader alone: the batched call is 25% faster; it is found and kept
   * (but for the trials' windows, which shrink as they keep failing) */
  stk__mode_init(&c, 0, LAG);
  double f = run_mode(&c, 18000, 14400, 3000, rng, &t);
  printf("alone: batched %.1f%% of the time, %d switches\n", 100 * f, c.switches);
  CHECK_MSG(f > 0.95 && c.switches >= 1, "batched %.3f", f);
  /* a model starts: the decoupled way delivers 12% more; it is followed */
  f = run_mode(&c, 10000, 11200, 6000, rng, &t);
  printf("beside a model: batched %.1f%% of the time\n", 100 * f);
  CHECK_MSG(f < 0.05, "batched %.3f", f);
  /* equal rates (the consumer is the bottleneck): the way in use stays,
   * and the trials back off to one per STK__MODE_EVERY_MAX batches */
  stk__mode_init(&c, 0, LAG);
  f = run_mode(&c, 8000, 8000, 20000, rng, &t);
  CHECK_MSG(c.switches == 0 && f < 0.01, "switches %d, batched %.3f", c.switches, f);
  CHECK_EQ_INT(c.every, STK__MODE_EVERY_MAX);
  /* a restart in the middle of a trial goes back to the first way */
  stk__mode_init(&c, 0, LAG);
  int trial = 0, guard = 0;
  while (c.phase != 3 && guard++ < 1000) stk__mode_batch(&c, t += 0.01, &trial);
  CHECK(trial && c.batched == 1);
  CHECK_EQ_INT(stk__mode_restart(&c), 0);
  CHECK(c.phase == 0 && c.batched == 0);
}

int main(void) {
  stk__rng rng;
  stk__rng_init(&rng, 3, 0, 0);
  test_mode(&rng);
  stk__share_ctl c;
  double t = 0, p, eff;

  /* an idle GPU: engines 16,000 img/s, CPU 3,000: best share 3/19 */
  model idle = {16000, 3000, 1e9};
  stk__share_init(&c, 0, LAG);
  run(&c, &idle, 2000, &rng, &t, &p, &eff);
  printf("idle GPU: mean share %.3f (best %.3f), %.1f%% of the best rate\n", p, 3.0 / 19, 100 * eff);
  CHECK_MSG(fabs(p - 3.0 / 19) < 0.06, "mean share %.3f", p);
  CHECK_MSG(eff > 0.93, "%.3f of the best rate", eff);

  /* training starts: the engines fall to 9,000 img/s, the model takes
   * 13,000: best share 1/4 */
  model busy = {9000, 3000, 13000};
  run(&c, &busy, 2000, &rng, &t, &p, &eff);
  printf("under training: mean share %.3f (best 0.250), %.1f%% of the best rate\n", p, 100 * eff);
  CHECK_MSG(fabs(p - 0.25) < 0.06, "mean share %.3f", p);
  CHECK_MSG(eff > 0.93, "%.3f of the best rate", eff);

  /* the consumer is the bottleneck (8,000 img/s, the engines alone make
   * 16,000): the CPU is left alone, but for rare probes */
  model slow = {16000, 3000, 8000};
  stk__share_init(&c, 0.5, LAG);
  run(&c, &slow, 2000, &rng, &t, &p, &eff);
  printf("consumer-bound: mean share %.3f\n", p);
  CHECK_MSG(p < 0.03, "mean share %.3f", p);
  CHECK(eff > 0.99);

  /* two CPU threads (250 img/s): one step of share makes them the
   * bottleneck (half the rate at 1/32; the best share, 1/65, is below one
   * step), so probes cost; the failed ones back off and the rate stays near
   * that of share 0 */
  model weak = {16000, 250, 1e9};
  stk__share_init(&c, 0, LAG);
  run(&c, &weak, 4000, &rng, &t, &p, &eff);
  printf("weak CPU: mean share %.4f, %.1f%% of the best rate\n", p, 100 * eff);
  CHECK_MSG(p < 0.005, "mean share %.4f", p);
  CHECK_MSG(eff > 0.95, "%.3f of the best rate", eff);

  /* a restart during a probe (a reset) cancels it: the share goes back to
   * 0 at the end of the next window instead of climbing unmeasured */
  stk__share_init(&c, 0, 0);
  double tt = 0;
  int guard = 0;
  while (!c.probing && guard++ < 10000) stk__share_batch(&c, tt += 0.01);
  CHECK(c.share == STK__SHARE_STEP && c.probing);
  stk__share_restart(&c);
  for (int k = 0; k <= STK__SHARE_WINDOW; k++) stk__share_batch(&c, tt += 0.01);
  CHECK_MSG(c.share == 0, "share %.4f after a cancelled probe", c.share);

  /* restart forgets the last rate: the next window only measures; after a
   * step, the LAG batches under way pass before the next window opens */
  stk__share_init(&c, 0.25, LAG);
  stk__share_restart(&c);
  double s0 = c.share;
  int i = 0;
  for (; i <= STK__SHARE_WINDOW; i++) stk__share_batch(&c, i * 0.01);
  CHECK(c.share == s0 + STK__SHARE_STEP); /* one step in the start direction, no comparison */
  for (int k = 0; k < LAG + STK__SHARE_WINDOW; k++, i++) stk__share_batch(&c, i * 0.01);
  CHECK(c.share == s0 + STK__SHARE_STEP); /* the lag, then a window not yet closed */
  stk__share_batch(&c, i * 0.01);
  CHECK(c.share != s0 + STK__SHARE_STEP); /* that window's end moves it */
  return CHECK_DONE();
}
