/* runtime/dist/sampler.h: the data loaders' epoch orders, in C so that an epoch of tens of
 * millions of samples does not go through Lua tables (v100.dist.DistributedSampler, v100.data). */
#ifndef VL_SAMPLER_H
#define VL_SAMPLER_H

#include <stdint.h>

#include "runtime/core/status.h"
#include "runtime/core/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A 0-based random permutation of n as an i64 CPU tensor: Fisher-Yates from the end, drawing
 * with xorshift64* seeded by seed ^ 0x2545F4914F6CDD1D (1 when that is 0), j = (r % i) for the
 * i-th element from the top, r the draw's top 53 bits. The same order v100.data.permutation
 * gave when it was Lua, so resumed runs and documented results keep their batches. */
vl_status vl_permutation(int64_t n, int64_t seed, vl_tensor **out);

/* This rank's share of an epoch (DistributedSampler's rule): `order` (n i64 indices, NULL for
 * 0..n-1) is padded by repeating itself to num_samples * size (or cut to it with drop_last), and
 * the rank takes the positions rank, rank + size, ... : num_samples i64 indices. */
vl_status vl_sampler_indices(const vl_tensor *order, int64_t n, int64_t rank, int64_t size, int64_t num_samples,
                             vl_tensor **out);

#ifdef __cplusplus
}
#endif
#endif
