/* The epoch sampler: DistributedSampler's index sets, exactly once per epoch;
 * with repetitions, RASampler's order. */
#define _POSIX_C_SOURCE 200809L /* mkstemp */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "sources/sampler.h"
#include "stoker.h"

/* torch.randperm(10, generator=torch.Generator().manual_seed(0)).tolist() and
 * seed 42, n = 7, as torch's CPU generator gives them. */
static const int64_t k_perm_seed0_n10[10] = {4, 1, 7, 5, 3, 9, 0, 8, 6, 2};

static void test_randperm_is_permutation(void) {
  for (int64_t n = 1; n < 300; n += 37) {
    int64_t *p = malloc((size_t)n * sizeof *p);
    char *seen = calloc((size_t)n, 1);
    stk__torch_randperm(7, n, p);
    int ok = 1;
    for (int64_t i = 0; i < n; i++) {
      if (p[i] < 0 || p[i] >= n || seen[p[i]]) ok = 0;
      else seen[p[i]] = 1;
    }
    CHECK_MSG(ok, "randperm(%lld) is not a permutation", (long long)n);
    free(p);
    free(seen);
  }
}

static void test_randperm_matches_torch(void) {
  int64_t p[10];
  stk__torch_randperm(0, 10, p);
  int same = 1;
  for (int i = 0; i < 10; i++) same &= p[i] == k_perm_seed0_n10[i];
  CHECK_MSG(same, "randperm(10, seed 0) differs from torch: %lld %lld %lld ...", (long long)p[0],
            (long long)p[1], (long long)p[2]);
}

/* Every sample exactly once over all ranks (padding aside). */
static void test_shards(int64_t n, int world, int shuffle, int drop_last) {
  int *count = calloc((size_t)n, sizeof *count);
  int64_t per = -1;
  for (int r = 0; r < world; r++) {
    stk__sampler s;
    CHECK_EQ_INT(stk__sampler_init(&s, n, r, world, shuffle, drop_last, 3), STK_OK);
    if (per < 0) per = s.num_samples;
    CHECK_EQ_INT(s.num_samples, per); /* every rank: the same number of samples */
    int64_t *out = malloc((size_t)s.num_samples * sizeof *out);
    stk__sampler_epoch(&s, 5, out);
    for (int64_t i = 0; i < s.num_samples; i++) count[out[i]]++;
    free(out);
    stk__sampler_free(&s);
  }
  int64_t total = per * world, once = 0, twice = 0, zero = 0;
  for (int64_t i = 0; i < n; i++) {
    once += count[i] == 1;
    twice += count[i] == 2;
    zero += count[i] == 0;
  }
  if (drop_last) {
    /* DistributedSampler drops the tail: n - total samples unseen, the rest once. */
    CHECK_EQ_INT(zero, n - total);
    CHECK_EQ_INT(once, total);
  } else {
    /* padding repeats the order from its start: every sample at least once,
     * none more than ceil(total / n) times, total positions in all */
    int64_t sum = 0, max = 0;
    for (int64_t i = 0; i < n; i++) {
      sum += count[i];
      if (count[i] > max) max = count[i];
    }
    CHECK_EQ_INT(zero, 0);
    CHECK_EQ_INT(sum, total);
    CHECK(max <= (total + n - 1) / n);
    if (total == n) CHECK_EQ_INT(once, n);
    if (total - n <= n) CHECK_EQ_INT(twice, total - n);
  }
  free(count);
}

static void test_epochs_differ(void) {
  stk__sampler s;
  stk__sampler_init(&s, 100, 0, 1, 1, 0, 0);
  int64_t a[100], b[100];
  stk__sampler_epoch(&s, 0, a);
  stk__sampler_epoch(&s, 1, b);
  int same = 1;
  for (int i = 0; i < 100; i++) same &= a[i] == b[i];
  CHECK(!same);
  stk__sampler_epoch(&s, 0, b);
  same = 1;
  for (int i = 0; i < 100; i++) same &= a[i] == b[i];
  CHECK(same);
  stk__sampler_free(&s);
  /* no shuffle: identity order, rank-strided */
  stk__sampler_init(&s, 10, 1, 3, 0, 0, 0);
  int64_t c[4];
  stk__sampler_epoch(&s, 0, c);
  CHECK_EQ_INT(s.num_samples, 4);
  CHECK(c[0] == 1 && c[1] == 4 && c[2] == 7 && c[3] == 0); /* position 10 wraps to 0 */
  stk__sampler_free(&s);
}

/* torchvision's RASampler (references/classification/sampler.py) with
 * torch 1.13: list(RASampler(range(n), world, rank, shuffle, seed, reps))
 * after set_epoch(epoch), its first 24 entries. */
static const int64_t k_ra_300_3_w2_r1_s5_e2[24] = {15,  91,  91,  103, 122, 122, 199, 217,
                                                   217, 47,  17,  17,  148, 146, 146, 248,
                                                   252, 252, 20,  77,  77,  128, 205, 205};
static const int64_t k_ra_513_4_w3_r2_s0_e0[24] = {53,  48,  422, 422, 393, 144, 280, 280,
                                                   217, 282, 330, 330, 252, 320, 59,  59,
                                                   426, 412, 15,  15,  125, 370, 333, 333};

/* RASampler's __iter__ written out literally: repeat, pad by wrapping,
 * stride by rank, cut. Also the copy number of each entry (how many times
 * its index came earlier in the padded list). Returns the length. */
static int64_t ra_reference(int64_t n, int reps, int world, int rank, int shuffle, uint64_t seed,
                            uint64_t epoch, int64_t *out, int64_t *copy) {
  int64_t *perm = malloc((size_t)n * sizeof *perm);
  if (shuffle)
    stk__torch_randperm(seed + epoch, n, perm);
  else
    for (int64_t i = 0; i < n; i++) perm[i] = i;
  int64_t per = (n * reps + world - 1) / world, total = per * world;
  int64_t *list = malloc((size_t)total * sizeof *list), len = 0;
  for (int64_t i = 0; i < n; i++)
    for (int k = 0; k < reps; k++) list[len++] = perm[i];
  for (int64_t p = 0; len < total; p++) list[len++] = list[p]; /* indices += indices[:pad] */
  int64_t *seen = calloc((size_t)n, sizeof *seen), *nth = malloc((size_t)total * sizeof *nth);
  for (int64_t p = 0; p < total; p++) nth[p] = seen[list[p]]++;
  int64_t selected = n / 256 * 256 / world, m = 0;
  for (int64_t p = rank; p < total && m < selected; p += world, m++) {
    out[m] = list[p];
    copy[m] = nth[p];
  }
  free(perm);
  free(list);
  free(seen);
  free(nth);
  return m;
}

static void test_ra_matches_reference(int64_t n, int reps, int world, int shuffle, uint64_t seed) {
  for (int r = 0; r < world; r++) {
    stk__sampler s;
    CHECK_EQ_INT(stk__sampler_init(&s, n, r, world, shuffle, 0, seed), STK_OK);
    CHECK_EQ_INT(stk__sampler_repeat(&s, reps), STK_OK);
    int64_t cap = n * reps + world;
    int64_t *want = malloc((size_t)cap * sizeof *want), *wcopy = malloc((size_t)cap * sizeof *wcopy);
    int64_t *got = malloc((size_t)(s.num_samples + 1) * sizeof *got);
    for (uint64_t epoch = 0; epoch < 3; epoch += 2) {
      int64_t m = ra_reference(n, reps, world, r, shuffle, seed, epoch, want, wcopy);
      CHECK_EQ_INT(s.num_samples, m);
      stk__sampler_epoch(&s, epoch, got);
      int same = 1, copies = 1;
      for (int64_t j = 0; j < m; j++) {
        same &= got[j] == want[j];
        copies &= stk__sampler_copy(&s, j) == wcopy[j];
      }
      CHECK_MSG(same, "RA order differs: n %lld reps %d world %d rank %d shuffle %d epoch %llu",
                (long long)n, reps, world, r, shuffle, (unsigned long long)epoch);
      CHECK_MSG(copies, "RA copy numbers differ: n %lld reps %d world %d rank %d", (long long)n,
                reps, world, r);
    }
    free(want);
    free(wcopy);
    free(got);
    stk__sampler_free(&s);
  }
}

static void test_ra_matches_torch(void) {
  struct {
    int64_t n;
    int reps, world, rank;
    uint64_t seed, epoch;
    const int64_t *want;
  } cases[] = {{300, 3, 2, 1, 5, 2, k_ra_300_3_w2_r1_s5_e2},
               {513, 4, 3, 2, 0, 0, k_ra_513_4_w3_r2_s0_e0}};
  for (int c = 0; c < 2; c++) {
    stk__sampler s;
    CHECK_EQ_INT(stk__sampler_init(&s, cases[c].n, cases[c].rank, cases[c].world, 1, 0,
                                   cases[c].seed),
                 STK_OK);
    CHECK_EQ_INT(stk__sampler_repeat(&s, cases[c].reps), STK_OK);
    /* floor(n // 256 * 256 / world): 128 and 170 */
    CHECK_EQ_INT(s.num_samples, c == 0 ? 128 : 170);
    int64_t *out = malloc((size_t)s.num_samples * sizeof *out);
    stk__sampler_epoch(&s, cases[c].epoch, out);
    int same = 1;
    for (int j = 0; j < 24; j++) same &= out[j] == cases[c].want[j];
    CHECK_MSG(same, "RA order differs from torchvision's RASampler (case %d): %lld %lld %lld ...", c,
              (long long)out[0], (long long)out[1], (long long)out[2]);
    free(out);
    stk__sampler_free(&s);
  }
}

static void test_ra_sizes(void) {
  stk__sampler s;
  stk__sampler_init(&s, 255, 0, 1, 1, 0, 0);
  CHECK_EQ_INT(stk__sampler_repeat(&s, 3), STK_OK);
  CHECK_EQ_INT(s.num_samples, 0); /* n < 256: RASampler's epoch is empty */
  CHECK_EQ_INT(stk__sampler_repeat(&s, 65), STK_EINVAL);
  CHECK_EQ_INT(stk__sampler_repeat(&s, 0), STK_OK); /* back to DistributedSampler's */
  CHECK_EQ_INT(s.num_samples, 255);
  CHECK_EQ_INT(stk__sampler_copy(&s, 7), 0);
  stk__sampler_free(&s);
  stk__sampler_init(&s, 1000, 3, 8, 0, 1, 0);
  int64_t plain = s.num_samples;
  stk__sampler_repeat(&s, 2);
  CHECK_EQ_INT(s.num_samples, 96); /* 1000 // 256 * 256 / 8 */
  CHECK_EQ_INT(s.total_size, 2000);
  stk__sampler_repeat(&s, 0);
  CHECK_EQ_INT(s.num_samples, plain); /* drop_last's size comes back */
  stk__sampler_free(&s);
}

/* Weighted sampling: torch.multinomial(w, 12, True,
 * generator=torch.Generator().manual_seed(s)).tolist() for w = [1, 2, 3, 4, 0,
 * 5] (float64), s = 0 and 5, as torch's CPU generator gives them. */
static const int64_t k_weighted_seed0[12] = {5, 5, 3, 5, 3, 5, 1, 2, 3, 2, 3, 1};
static const int64_t k_weighted_seed5[12] = {3, 2, 2, 2, 2, 5, 3, 5, 5, 3, 2, 2};

static int write_file(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  if (!f) return -1;
  fputs(text, f);
  return fclose(f);
}

static void test_weighted(void) {
  char path[] = "/tmp/stoker-weights-XXXXXX";
  int fd = mkstemp(path);
  CHECK(fd >= 0);
  if (fd < 0) return;
  close(fd);
  char err[256];
  stk__sampler s;
  /* the draws of one epoch, world 1: torch's, for seed + epoch */
  CHECK(write_file(path, "1\n2\n3 4\n0\n5e0\n") == 0);
  CHECK(stk__sampler_init(&s, 6, 0, 1, 1, 0, 0) == STK_OK);
  CHECK(stk__sampler_weights(&s, path, err, sizeof err) == STK_OK);
  int64_t out[12];
  stk__sampler_epoch(&s, 0, out);
  CHECK(memcmp(out, k_weighted_seed0, 6 * sizeof *out) == 0);
  stk__sampler_epoch(&s, 5, out);
  CHECK(memcmp(out, k_weighted_seed5, 6 * sizeof *out) == 0);
  stk__sampler_free(&s);
  /* world 2, n 6 padded to 6: rank r keeps positions r, r + 2, ... */
  for (int rank = 0; rank < 2; rank++) {
    CHECK(stk__sampler_init(&s, 6, rank, 2, 1, 0, 0) == STK_OK);
    CHECK(stk__sampler_weights(&s, path, err, sizeof err) == STK_OK);
    stk__sampler_epoch(&s, 0, out);
    int ok = 1;
    for (int j = 0; j < 3; j++) ok &= out[j] == k_weighted_seed0[rank + 2 * j];
    CHECK_MSG(ok, "rank %d of 2 is not its slice of the global draw", rank);
    stk__sampler_free(&s);
  }
  /* world 4: 8 draws (the padded total), rank r keeps draws r and r + 4 */
  for (int rank = 0; rank < 4; rank++) {
    CHECK(stk__sampler_init(&s, 6, rank, 4, 1, 0, 0) == STK_OK);
    CHECK(stk__sampler_weights(&s, path, err, sizeof err) == STK_OK);
    CHECK_EQ_INT(s.num_samples, 2);
    stk__sampler_epoch(&s, 0, out);
    CHECK_MSG(out[0] == k_weighted_seed0[rank] && out[1] == k_weighted_seed0[rank + 4],
              "rank %d of 4 is not its slice of the global draw", rank);
    stk__sampler_free(&s);
  }
  /* refusals, naming the file's problem */
  const char *bad[] = {"1 2 3 4 0", "1 2 3 4 0 5 6", "1 2 -3 4 0 5", "1 2 x 4 0 5",
                       "0 0 0 0 0 0", "1 2 nan 4 0 5", "1 2 inf 4 0 5"};
  const char *why[] = {"holds 5 weights", "more than 6", "must be finite and >= 0",
                       "not a number", "sum to 0", "must be finite", "must be finite"};
  for (int k = 0; k < 7; k++) {
    CHECK(write_file(path, bad[k]) == 0);
    CHECK(stk__sampler_init(&s, 6, 0, 1, 1, 0, 0) == STK_OK);
    err[0] = 0;
    CHECK_MSG(stk__sampler_weights(&s, path, err, sizeof err) == STK_EINVAL && strstr(err, why[k]),
              "weights '%s': %s", bad[k], err);
    CHECK(s.cum == NULL);
    stk__sampler_free(&s);
  }
  unlink(path);
  CHECK(stk__sampler_init(&s, 6, 0, 1, 1, 0, 0) == STK_OK);
  CHECK(stk__sampler_weights(&s, path, err, sizeof err) == STK_EIO);
  stk__sampler_free(&s);
}

int main(void) {
  test_weighted();
  test_randperm_is_permutation();
  test_randperm_matches_torch();
  int worlds[] = {1, 2, 3, 8};
  int64_t sizes[] = {1, 7, 8, 24, 97, 1000};
  for (int w = 0; w < 4; w++)
    for (int k = 0; k < 6; k++)
      for (int dl = 0; dl < 2; dl++) {
        if (dl && sizes[k] < worlds[w]) continue;
        test_shards(sizes[k], worlds[w], 1, dl);
        test_shards(sizes[k], worlds[w], 0, dl);
      }
  test_epochs_differ();
  test_ra_matches_torch();
  test_ra_sizes();
  /* padding reached only where the cut lets it: world > n // 256 * 256 is empty */
  int64_t ra_sizes[] = {256, 300, 513, 1000, 1031};
  int ra_reps[] = {1, 2, 3, 4, 7};
  int ra_worlds[] = {1, 2, 3, 4, 8, 16};
  for (int a = 0; a < 5; a++)
    for (int b = 0; b < 5; b++)
      for (int w = 0; w < 6; w++) {
        test_ra_matches_reference(ra_sizes[a], ra_reps[b], ra_worlds[w], 1, (uint64_t)(a + b));
        if (w % 2 == 0) test_ra_matches_reference(ra_sizes[a], ra_reps[b], ra_worlds[w], 0, 0);
      }
  CHECK(stk__sampler_init(&(stk__sampler){0}, 10, 3, 3, 1, 0, 0) == STK_EINVAL);
  return CHECK_DONE();
}
