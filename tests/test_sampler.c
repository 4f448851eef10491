/* The epoch sampler: DistributedSampler's index sets, exactly once per epoch. */
#include <stdlib.h>

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

int main(void) {
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
  CHECK(stk__sampler_init(&(stk__sampler){0}, 10, 3, 3, 1, 0, 0) == STK_EINVAL);
  return CHECK_DONE();
}
