/*
 * sampler.h: which samples an epoch visits, in which order, on which rank.
 *
 * The order is exactly that of torch.utils.data.DistributedSampler with the
 * same (seed, epoch, num_replicas, rank, shuffle, drop_last): the shuffled
 * permutation is torch.randperm(n) from a torch.Generator seeded with
 * seed + epoch (a Mersenne Twister, reproduced here bit for bit), then padded
 * by wrapping around, or truncated, and strided by rank.
 *
 * With repetitions (stk__sampler_repeat), the order is instead that of the
 * RASampler of torchvision's classification references (repeated
 * augmentation): the same permutation, each index repeated `reps` times in a
 * row, padded by wrapping to a multiple of world, strided by rank, then cut
 * to floor(n // 256 * 256 / world) per rank.
 */
#ifndef STK_SAMPLER_H
#define STK_SAMPLER_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
  int64_t n;          /* dataset size */
  int rank, world;
  int shuffle;
  int drop_last;      /* DistributedSampler's drop_last */
  uint64_t seed;
  int64_t num_samples;/* per rank */
  int64_t total_size; /* num_samples * world */
  int64_t *perm;      /* scratch: n entries */
  int reps;           /* RASampler's repetitions; 0 = DistributedSampler's order */
  double *cum;        /* weighted sampling: the normalised cumulative weights (n),
                         or NULL */
} stk__sampler;

int stk__sampler_init(stk__sampler *s, int64_t n, int rank, int world, int shuffle, int drop_last,
                      uint64_t seed);
void stk__sampler_free(stk__sampler *s);

/* Switches to RASampler's order with `reps` repetitions (1..64; 0 switches
 * back): num_samples becomes RASampler's num_selected_samples, which is 0
 * when n < 256 (or n // 256 * 256 < world). drop_last plays no part. */
int stk__sampler_repeat(stk__sampler *s, int reps);

/* Which repetition of its index position j of this rank's epoch is: 0 for
 * the first occurrence in RASampler's padded list, 1 for the next, ...; 0
 * without repetitions. The augmentation keys its draws with it, so that the
 * copies of an index differ. */
int64_t stk__sampler_copy(const stk__sampler *s, int64_t j);

/* Switches to weighted sampling with replacement (torch's WeightedRandomSampler):
 * reads n weights from the text file `path` (numbers separated by white
 * space, finite and >= 0, not all 0). Each epoch then draws total_size
 * samples, torch.multinomial(weights, total_size, replacement=True,
 * generator=torch.Generator().manual_seed(seed + epoch)) bit for bit, and
 * this rank takes positions rank, rank + world, ... Fails with STK_EINVAL
 * (or STK_EIO) and a message naming the file. */
int stk__sampler_weights(stk__sampler *s, const char *path, char *err, size_t errlen);

/* Writes this rank's num_samples indices for `epoch` into out. */
void stk__sampler_epoch(stk__sampler *s, uint64_t epoch, int64_t *out);

/* torch.randperm(n, generator=torch.Generator().manual_seed(seed)) into out. */
void stk__torch_randperm(uint64_t seed, int64_t n, int64_t *out);

/* Orders of sources with runs (tar shards): this rank's L = num_samples
 * positions of an epoch, the nrun runs [run_start[k], run_start[k+1]) in a
 * per-epoch permutation laid end to end; then a bounded shuffle buffer of
 * K entries over out[0..L) (nothing when not shuffling). */
void stk__sampler_runs(stk__sampler *sp, uint64_t epoch, const int64_t *run_start, int64_t nrun,
                       int64_t *out);
void stk__sampler_buffer_shuffle(stk__sampler *sp, uint64_t epoch, int64_t K, int64_t *out,
                                 int64_t L);

#endif
