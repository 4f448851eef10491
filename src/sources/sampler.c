/* sampler.c: see sampler.h. */
#include "sources/sampler.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/common.h"
#include "stoker.h"

/* The 32-bit Mersenne Twister (MT19937) that torch's CPU generator uses:
 * manual_seed(s) seeds it with the low 32 bits of s, and randperm takes one
 * 32-bit draw per swap. */
typedef struct {
  uint32_t mt[624];
  int idx;
} mt19937;

static void mt_seed(mt19937 *m, uint32_t s) {
  m->mt[0] = s;
  for (int i = 1; i < 624; i++)
    m->mt[i] = 1812433253u * (m->mt[i - 1] ^ (m->mt[i - 1] >> 30)) + (uint32_t)i;
  m->idx = 624;
}

static uint32_t mt_next(mt19937 *m) {
  if (m->idx >= 624) {
    for (int i = 0; i < 624; i++) {
      uint32_t y = (m->mt[i] & 0x80000000u) | (m->mt[(i + 1) % 624] & 0x7fffffffu);
      m->mt[i] = m->mt[(i + 397) % 624] ^ (y >> 1) ^ ((y & 1u) ? 0x9908b0dfu : 0u);
    }
    m->idx = 0;
  }
  uint32_t y = m->mt[m->idx++];
  y ^= y >> 11;
  y ^= (y << 7) & 0x9d2c5680u;
  y ^= (y << 15) & 0xefc60000u;
  y ^= y >> 18;
  return y;
}

void stk__torch_randperm(uint64_t seed, int64_t n, int64_t *out) {
  mt19937 m;
  mt_seed(&m, (uint32_t)seed);
  for (int64_t i = 0; i < n; i++) out[i] = i;
  /* torch's randperm_cpu: for i in [0, n-1), swap i with i + random() % (n-i).
   * (torch switches to 64-bit draws only for n >= 2^32 / 20.) */
  for (int64_t i = 0; i + 1 < n; i++) {
    int64_t z = (int64_t)(mt_next(&m) % (uint64_t)(n - i));
    int64_t t = out[i];
    out[i] = out[z + i];
    out[z + i] = t;
  }
}

/* torch's uniform_real_distribution<double>(0, 1) on the CPU generator:
 * random64() (two 32-bit draws, the first the high half), its low 53 bits
 * times 2^-53. */
static double mt_uniform53(mt19937 *m) {
  uint64_t hi = mt_next(m), lo = mt_next(m);
  uint64_t v = (hi << 32) | lo;
  return (double)(v & ((UINT64_C(1) << 53) - 1)) * (1.0 / 9007199254740992.0);
}

int stk__sampler_weights(stk__sampler *s, const char *path, char *err, size_t errlen) {
  FILE *f = fopen(path, "r");
  if (!f) return stk__fail(err, errlen, STK_EIO, "weights: cannot open %s: %s", path, strerror(errno));
  double *cum = malloc((size_t)s->n * sizeof *cum);
  if (!cum) {
    fclose(f);
    return stk__fail(err, errlen, STK_ENOMEM, "weights: out of memory");
  }
  int rc = STK_OK;
  int64_t count = 0;
  double sum = 0;
  char tok[128];
  /* numbers separated by white space; the sum as torch takes it (in
   * order, in double), each cumulative value then divided by it */
  while (fscanf(f, "%127s", tok) == 1) {
    char *end;
    errno = 0;
    double w = strtod(tok, &end);
    if (*end != '\0' || end == tok) {
      rc = stk__fail(err, errlen, STK_EINVAL, "weights: %s: weight %lld is not a number: '%s'",
                     path, (long long)count, tok);
      break;
    }
    if (!isfinite(w) || w < 0) {
      rc = stk__fail(err, errlen, STK_EINVAL,
                     "weights: %s: weight %lld is %g: weights must be finite and >= 0", path,
                     (long long)count, w);
      break;
    }
    if (count == s->n) {
      count++;
      break;
    }
    sum += w;
    cum[count++] = sum;
  }
  if (rc == STK_OK && ferror(f))
    rc = stk__fail(err, errlen, STK_EIO, "weights: cannot read %s", path);
  fclose(f);
  if (rc == STK_OK && count != s->n)
    rc = stk__fail(err, errlen, STK_EINVAL, "weights: %s holds %s%lld weights for %lld samples",
                   path, count > s->n ? "more than " : "", (long long)(count > s->n ? s->n : count),
                   (long long)s->n);
  if (rc == STK_OK && !(sum > 0))
    rc = stk__fail(err, errlen, STK_EINVAL, "weights: %s: the weights sum to 0", path);
  if (rc != STK_OK) {
    free(cum);
    return rc;
  }
  for (int64_t i = 0; i < s->n; i++) cum[i] /= sum;
  cum[s->n - 1] = 1; /* as torch makes sure of */
  free(s->cum);
  s->cum = cum;
  return STK_OK;
}

/* DistributedSampler's num_samples and total_size. */
static void distributed_sizes(stk__sampler *s) {
  int64_t n = s->n, world = s->world;
  if (s->drop_last && n % world != 0)
    s->num_samples = (n - world + world - 1) / world; /* ceil((n - world) / world) */
  else
    s->num_samples = (n + world - 1) / world;
  s->total_size = s->num_samples * world;
}

int stk__sampler_init(stk__sampler *s, int64_t n, int rank, int world, int shuffle, int drop_last,
                      uint64_t seed) {
  if (n <= 0 || world < 1 || rank < 0 || rank >= world) return STK_EINVAL;
  s->n = n;
  s->rank = rank;
  s->world = world;
  s->shuffle = shuffle;
  s->drop_last = drop_last;
  s->seed = seed;
  s->reps = 0;
  s->cum = NULL;
  distributed_sizes(s);
  s->perm = malloc((size_t)n * sizeof(int64_t));
  return s->perm ? STK_OK : STK_ENOMEM;
}

void stk__sampler_free(stk__sampler *s) {
  free(s->perm);
  s->perm = NULL;
  free(s->cum);
  s->cum = NULL;
}

int stk__sampler_repeat(stk__sampler *s, int reps) {
  if (reps < 0 || reps > 64) return STK_EINVAL;
  s->reps = reps;
  if (reps == 0) {
    distributed_sizes(s);
    return STK_OK;
  }
  /* RASampler: total_size = ceil(n * reps / world) * world, and each rank
   * keeps the first floor(n // 256 * 256 / world) of its share. (Python
   * divides as floats; for these magnitudes that floors as integers do.) */
  int64_t per = (s->n * reps + s->world - 1) / s->world;
  s->total_size = per * s->world;
  s->num_samples = s->n / 256 * 256 / s->world;
  return STK_OK;
}

/* Position p of RASampler's padded list: the padding repeats the repeated
 * list from its start. */
static int64_t ra_slot(const stk__sampler *s, int64_t j) {
  int64_t p = s->rank + j * s->world;
  return p % (s->n * s->reps);
}

int64_t stk__sampler_copy(const stk__sampler *s, int64_t j) {
  if (s->reps <= 0) return 0;
  int64_t p = s->rank + j * s->world, len = s->n * s->reps;
  /* the padding's copies come after the list's own (never reached once
   * the list is cut to num_selected_samples, but kept distinct anyway) */
  return p / len * s->reps + p % len % s->reps;
}

/* Weighted sampling: the draws of the whole epoch (total_size) in order,
 * this rank keeping every world-th from its rank on. */
static void weighted_epoch(const stk__sampler *s, uint64_t epoch, int64_t *out) {
  mt19937 m;
  mt_seed(&m, (uint32_t)(s->seed + epoch));
  int64_t last = s->rank + (s->num_samples - 1) * s->world; /* the last position kept */
  for (int64_t p = 0, j = 0; p <= last; p++) {
    double u = mt_uniform53(&m);
    if (p % s->world != s->rank) continue;
    int64_t left = 0, right = s->n;
    while (right - left > 0) {
      int64_t mid = left + (right - left) / 2;
      if (s->cum[mid] < u)
        left = mid + 1;
      else
        right = mid;
    }
    out[j++] = left;
  }
}

void stk__sampler_epoch(stk__sampler *s, uint64_t epoch, int64_t *out) {
  if (s->cum) {
    weighted_epoch(s, epoch, out);
    return;
  }
  if (s->shuffle)
    stk__torch_randperm(s->seed + epoch, s->n, s->perm);
  else
    for (int64_t i = 0; i < s->n; i++) s->perm[i] = i;
  if (s->reps > 0) {
    /* [i, i, i, j, j, j, ...]: slot q of the repeated list is perm[q / reps] */
    for (int64_t j = 0; j < s->num_samples; j++) out[j] = s->perm[ra_slot(s, j) / s->reps];
    return;
  }
  /* Position p of the padded (or truncated) list is perm[p % n]: padding
   * repeats the list from its start, as many times as needed. */
  for (int64_t j = 0; j < s->num_samples; j++) {
    int64_t p = s->rank + j * s->world;
    out[j] = s->perm[p % s->n];
  }
}

/* The order of runs (docs/storage.md has the rule): the runs in a
 * per-epoch permutation (the same on every rank), laid end to end; rank r
 * takes positions [r*L, (r+1)*L) of that sequence, wrapping round for the
 * padding. The sampler's scratch (n entries) holds the run order: the
 * number of runs <= n. */
void stk__sampler_runs(stk__sampler *sp, uint64_t epoch, const int64_t *run_start, int64_t nrun,
                       int64_t *out) {
  int64_t n = sp->n, L = sp->num_samples;
  int64_t *scratch = sp->perm;
  if (sp->shuffle)
    stk__torch_randperm(sp->seed + epoch, nrun, scratch);
  else
    for (int64_t k = 0; k < nrun; k++) scratch[k] = k;
  /* The run holding the rank's first position, and the offset in it. */
  int64_t pos = ((int64_t)sp->rank * L) % n, k = 0;
  for (;; k++) {
    int64_t len = run_start[scratch[k] + 1] - run_start[scratch[k]];
    if (pos < len) break;
    pos -= len;
  }
  for (int64_t j = 0; j < L; j++) {
    int64_t run = scratch[k];
    out[j] = run_start[run] + pos;
    if (++pos == run_start[run + 1] - run_start[run]) {
      pos = 0;
      if (++k == nrun) k = 0; /* the padding wraps round to the start */
    }
  }
}

/* A bounded shuffle buffer of K entries over out[0..L) (when shuffling).
 * The buffer is out[0..K); the rest of out is read ahead of where the
 * output (in the sampler's scratch, n >= L entries) is written, so nothing
 * is overwritten early. Its stream is keyed by the rank (and kept apart
 * from sample streams). */
void stk__sampler_buffer_shuffle(stk__sampler *sp, uint64_t epoch, int64_t K, int64_t *out,
                                 int64_t L) {
  int64_t *scratch = sp->perm;
  if (K > L) K = L;
  if (!sp->shuffle || K <= 1) return;
  stk__rng rng;
  stk__rng_init(&rng, sp->seed, epoch, 0xb0ffe7000000000ULL + (uint64_t)sp->rank);
  int64_t e = 0;
  for (int64_t i = K; i < L; i++) {
    int64_t b = stk__rng_range(&rng, 0, K);
    scratch[e++] = out[b];
    out[b] = out[i];
  }
  for (int64_t left = K; left > 0; left--) {
    int64_t b = stk__rng_range(&rng, 0, left);
    scratch[e++] = out[b];
    out[b] = out[left - 1];
  }
  memcpy(out, scratch, (size_t)L * sizeof *out);
}
