/*
 * pool.h: the device and pinned memory nvJPEG allocates for itself. Freed
 * blocks are kept and handed out again, and freed only when a gpu closes:
 * cuMemFree and cuMemFreeHost synchronise the whole device, which would
 * stall a training model at every growth of nvJPEG's buffers.
 */
#ifndef STK_GPU_POOL_H
#define STK_GPU_POOL_H

#include <stdint.h>

#include "gpu/binding.h"

/* nvjpegDevAllocator_t and nvjpegPinnedAllocator_t for nvjpegCreateEx */
void *stk__pool_dev_allocator(void);
void *stk__pool_pinned_allocator(void);
/* Frees the unused blocks of context ctx. */
void stk__pool_release(CUcontext ctx);
/* Real allocations so far: the statistics show whether nvJPEG still
 * allocates after open. */
uint64_t stk__pool_fresh(void);

#endif
