/* test_share.c: the adaptive CPU share's controller (src/loader/share.c)
 * against a model of the GPU path: the engines decode their part of each
 * batch at E images/s, T worker threads spend A seconds on a position they
 * decode and Bp on one they only read and plan for the engines, and the
 * consumer takes at most K: batches come at min(E / (1 - p), T / (p A + (1 -
 * p) Bp), K), with 2% noise, and a batch delivered now was split LAG batches
 * ago (the loader's slots). The model also keeps the totals the sink
 * measures (the workers' seconds per kind of position, the lanes' seconds
 * inside the engines), with 5% noise. The share must settle near the best
 * one (the rate within a few percent of the best), follow it when the GPU
 * slows down (a model starts training), stay near 0 when the consumer is
 * the bottleneck or the CPU is weak, and come down when the workers are
 * the bottleneck. test_mode does the same for the choice of the engines'
 * way by trials, test_consumer for its choice from the consumer's time,
 * and test_pack_device_choice for the device pack's stop rule. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "core/common.h"
#include "loader/pack.h"
#include "loader/share.h"

typedef struct {
  double E, T, A, Bp, K;
} model;

#define LANES 2

static double rate(const model *m, double p) {
  double r = m->K;
  if (p < 1 && m->E / (1 - p) < r) r = m->E / (1 - p);
  double work = p * m->A + (1 - p) * m->Bp;
  if (work > 0 && m->T / work < r) r = m->T / work;
  return r;
}

static double best_rate(const model *m) {
  double best = 0;
  for (int i = 0; i <= 1000; i++) {
    double r = rate(m, i / 1000.0);
    if (r > best) best = r;
  }
  return best;
}

/* The loader's default slots (prefetch 2 + 2): a batch delivered now was
 * split when it started, LAG batches ago. */
#define LAG 4

static double noisy(stk__rng *rng, double x, double f) {
  return x * (1 + f * (2 * stk__rng_uniform(rng) - 1));
}

/* Runs n batches of 256 images; returns the mean share and the mean rate
 * (as a fraction of the best rate) over the last half. */
static void run(stk__share_ctl *c, const model *m, int n, stk__rng *rng, double *t,
                stk__share_work *wk, double *mean_p, double *eff) {
  double split[LAG]; /* the shares of the batches under way, oldest first */
  for (int k = 0; k < LAG; k++) split[k] = c->share;
  double best = best_rate(m);
  double sp = 0, imgs = 0, secs = 0;
  for (int i = 0; i < n; i++) {
    double used = split[0];
    for (int k = 0; k + 1 < LAG; k++) split[k] = split[k + 1];
    split[LAG - 1] = c->share;
    double r = noisy(rng, rate(m, used), 0.02);
    double dt = 256 / r;
    *t += dt;
    uint64_t ncpu = (uint64_t)(256 * used + 0.5), neng = 256 - ncpu;
    wk->cpu_n += ncpu;
    wk->cpu_s += noisy(rng, (double)ncpu * m->A, 0.05);
    wk->eng_n += neng;
    wk->eng_s += noisy(rng, (double)neng * m->Bp, 0.05);
    wk->hw_n += neng;
    wk->hw_s += noisy(rng, (double)neng * LANES / m->E, 0.05);
    if (i >= n / 2) {
      sp += c->share;
      imgs += 256;
      secs += dt;
    }
    stk__share_batch(c, *t, wk);
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

/* The way from the consumer's time: a consumer always back in next()
 * (a benchmark) gets the batched call, one busy 90% of the time (a model)
 * the decoupled decoder; in between, the way in use stays. */
static void test_consumer(void) {
  stk__consumer_ctl c;
  stk__consumer_init(&c, 0);
  double t = 0, wait = 0;
  for (int i = 0; i < 3 * STK__CONSUMER_WINDOW; i++) { /* waits 95% of each batch */
    t += 0.01;
    wait += 0.0095;
    stk__consumer_batch(&c, t, wait);
  }
  CHECK(c.batched == 1 && c.switches == 1);
  for (int i = 0; i < 3 * STK__CONSUMER_WINDOW; i++) { /* busy 90% */
    t += 0.02;
    wait += 0.002;
    stk__consumer_batch(&c, t, wait);
  }
  CHECK(c.batched == 0 && c.switches == 2);
  for (int i = 0; i < 3 * STK__CONSUMER_WINDOW; i++) { /* busy half the time: no change */
    t += 0.02;
    wait += 0.01;
    stk__consumer_batch(&c, t, wait);
  }
  CHECK(c.batched == 0 && c.switches == 2);
  /* nothing changes before a whole window is measured */
  stk__consumer_init(&c, 0);
  for (int i = 0; i <= STK__CONSUMER_WINDOW - 1; i++) stk__consumer_batch(&c, i * 0.01, i * 0.01);
  CHECK_EQ_INT(c.batched, 0);
  stk__consumer_batch(&c, STK__CONSUMER_WINDOW * 0.01, STK__CONSUMER_WINDOW * 0.01);
  CHECK_EQ_INT(c.batched, 1);
}

/* The device pack's choice (pack_device.c): the device threads stop once
 * the CPU producers alone pack faster, and not before both have done enough
 * to tell. */
static void test_pack_device_choice(void) {
  stk__packer pk;
  memset(&pk, 0, sizeof pk);
  pk.device_threads = 8;
  pk.cpu_threads = 16;
  double dev, cpu;
  CHECK(!stk__pack_device_slower(&pk, &dev, &cpu)); /* nothing done yet */
  /* the device: 512 files over the 0.25 s since its first block (2,048/s);
   * the CPU: 64 files in 0.29 busy seconds on 16 threads (3,531/s) */
  pk.dev_t0 = 100.0;
  pk.dev_t1 = 100.25;
  pk.dev_done = 512;
  pk.cpu_done = 63;
  pk.cpu_busy_s = 0.29;
  CHECK(!stk__pack_device_slower(&pk, &dev, &cpu)); /* 63 CPU files: too few to tell */
  pk.cpu_done = 64;
  CHECK(stk__pack_device_slower(&pk, &dev, &cpu));
  CHECK_MSG(fabs(dev - 2048) < 1e-6 && fabs(cpu - 16 * 64 / 0.29) < 1e-6, "%.1f %.1f", dev, cpu);
  pk.dev_done = 511; /* a block from each device thread not yet done */
  CHECK(!stk__pack_device_slower(&pk, &dev, &cpu));
  /* a faster device keeps going */
  pk.dev_done = 2048;
  CHECK(!stk__pack_device_slower(&pk, &dev, &cpu));
  /* no CPU producers: the device packs alone, whatever its rate */
  pk.cpu_threads = 0;
  pk.dev_done = 512;
  CHECK(!stk__pack_device_slower(&pk, &dev, &cpu));
}

int main(void) {
  stk__rng rng;
  stk__rng_init(&rng, 3, 0, 0);
  test_mode(&rng);
  test_consumer();
  test_pack_device_choice();
  stk__share_ctl c;
  stk__share_work wk = {0};
  double t = 0, p, eff;

  /* an idle GPU, 16 threads: engines 18,000 img/s, 1.8 ms per CPU decode:
   * the best share is about a third, and the two decoders add up */
  model idle = {18000, 16, 1.8e-3, 6e-5, 1e9};
  stk__share_init(&c, 0, LAG, 16, LANES, 256);
  run(&c, &idle, 600, &rng, &t, &wk, &p, &eff);
  printf("idle GPU: mean share %.3f, %.1f%% of the best rate (%.0f img/s)\n", p, 100 * eff,
         best_rate(&idle));
  CHECK_MSG(p > 0.25 && p < 0.36, "mean share %.3f", p);
  CHECK_MSG(eff > 0.93, "%.3f of the best rate", eff);

  /* training starts: the engines fall to 9,000 img/s, the model takes
   * 13,000: the share rises until the engines keep up */
  model busy = {9000, 16, 1.8e-3, 6e-5, 13000};
  run(&c, &busy, 600, &rng, &t, &wk, &p, &eff);
  printf("under training: mean share %.3f, %.1f%% of the best rate\n", p, 100 * eff);
  CHECK_MSG(p > 0.3 && p < 0.5, "mean share %.3f", p);
  CHECK_MSG(eff > 0.97, "%.3f of the best rate", eff);

  /* the consumer is the bottleneck (8,000 img/s, the engines alone make
   * 18,000): the CPU is left alone */
  model slow = {18000, 16, 1.8e-3, 6e-5, 8000};
  stk__share_init(&c, 0.5, LAG, 16, LANES, 256);
  run(&c, &slow, 600, &rng, &t, &wk, &p, &eff);
  printf("consumer-bound: mean share %.3f\n", p);
  CHECK_MSG(p < 0.01, "mean share %.3f", p);
  CHECK(eff > 0.99);

  /* two worker threads: reading and planning for the engines already
   * fill them; the share stays at 0 */
  model weak = {18000, 2, 1.8e-3, 1e-4, 1e9};
  stk__share_init(&c, 0, LAG, 2, LANES, 256);
  run(&c, &weak, 600, &rng, &t, &wk, &p, &eff);
  printf("weak CPU: mean share %.4f, %.1f%% of the best rate\n", p, 100 * eff);
  CHECK_MSG(p < 0.005, "mean share %.4f", p);
  CHECK_MSG(eff > 0.95, "%.3f of the best rate", eff);

  /* a share far too high for the workers (they are the bottleneck) comes
   * down to the balance */
  stk__share_init(&c, 0.9, LAG, 16, LANES, 256);
  run(&c, &idle, 600, &rng, &t, &wk, &p, &eff);
  printf("from 0.9: mean share %.3f, %.1f%% of the best rate\n", p, 100 * eff);
  CHECK_MSG(p > 0.25 && p < 0.36, "mean share %.3f", p);

  /* the target itself: nothing measured keeps the share; with the engines
   * measured, the balance of share.h */
  stk__share_init(&c, 0.2, LAG, 16, LANES, 256);
  CHECK(stk__share_target(&c, 20000) == 0.2);
  c.e = 18000;
  c.a = 1.8e-3;
  c.b = 6e-5;
  double bal = (0.9 * 16 - 18000 * 6e-5) / (0.9 * 16 + 18000 * (1.8e-3 - 6e-5));
  CHECK_MSG(fabs(stk__share_target(&c, 1e9) - bal) < 1e-12, "%.4f", stk__share_target(&c, 1e9));
  CHECK(stk__share_target(&c, 10000) == 0); /* the engines keep up alone */

  /* after a move, the LAG batches under way pass before the next window
   * opens; a restart forgets the open window */
  stk__share_init(&c, 0, LAG, 16, LANES, 256);
  stk__share_work w0 = {0};
  double tt = 0;
  int i = 0;
  for (; i <= STK__SHARE_WINDOW; i++) {
    w0.hw_n += 256;
    w0.hw_s += 256 * LANES / 18000.0;
    w0.eng_n += 256;
    w0.eng_s += 256 * 6e-5;
    stk__share_batch(&c, tt += 256 / 18000.0, &w0);
  }
  CHECK_MSG(c.share > 0.05, "share %.3f after the first window", c.share);
  CHECK_EQ_INT(c.n, -LAG);
  double s1 = c.share;
  for (int k = 0; k < LAG + STK__SHARE_WINDOW; k++) stk__share_batch(&c, tt += 0.01, &w0);
  CHECK(c.share == s1); /* the lag, then a window not yet closed */
  stk__share_restart(&c);
  CHECK_EQ_INT(c.n, 0);
  return CHECK_DONE();
}
