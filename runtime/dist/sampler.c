/* runtime/dist/sampler.c: see sampler.h. */
#include "runtime/dist/sampler.h"

#include "runtime/core/device.h"

vl_status vl_permutation(int64_t n, int64_t seed, vl_tensor **out) {
  if (n < 0) return vl_fail(VL_EINVAL, "permutation: n must not be negative, got %lld", (long long)n);
  int64_t size[1] = {n};
  vl_tensor *t = NULL;
  VL_TRY(vl_tensor_empty(1, size, VL_I64, vl_cpu_device(), &t));
  int64_t *p = vl_tensor_data(t);
  for (int64_t i = 0; i < n; i++) p[i] = i;
  uint64_t s = (uint64_t)seed ^ 0x2545F4914F6CDD1Dull;
  if (s == 0) s = 1;
  for (int64_t i = n; i >= 2; i--) {
    s ^= s >> 12;
    s ^= s << 25;
    s ^= s >> 27;
    uint64_t r = (s * 0x2545F4914F6CDD1Dull) >> 11;
    int64_t j = (int64_t)(r % (uint64_t)i); /* 0-based: Lua's rand(i) - 1 */
    int64_t a = p[i - 1];
    p[i - 1] = p[j];
    p[j] = a;
  }
  *out = t;
  return VL_OK;
}

vl_status vl_sampler_indices(const vl_tensor *order, int64_t n, int64_t rank, int64_t size, int64_t num_samples,
                             vl_tensor **out) {
  if (n < 0 || size < 1 || rank < 0 || rank >= size || num_samples < 0)
    return vl_fail(VL_EINVAL, "sampler: rank %lld of size %lld, n %lld, num_samples %lld", (long long)rank,
                   (long long)size, (long long)n, (long long)num_samples);
  if (num_samples > 0 && n == 0) return vl_fail(VL_EINVAL, "sampler: %lld samples of an empty data set", (long long)num_samples);
  if (order && (order->dtype != VL_I64 || (order->storage && order->storage->device.type != VL_CPU) || vl_tensor_numel(order) != n ||
                !vl_tensor_is_contiguous(order)))
    return vl_fail(VL_EINVAL, "sampler: the order must be %lld contiguous i64 CPU indices", (long long)n);
  int64_t sz[1] = {num_samples};
  vl_tensor *t = NULL;
  VL_TRY(vl_tensor_empty(1, sz, VL_I64, vl_cpu_device(), &t));
  int64_t *o = vl_tensor_data(t);
  const int64_t *ord = order ? vl_tensor_data(order) : NULL;
  for (int64_t k = 0; k < num_samples; k++) {
    int64_t pos = (rank + k * size) % n; /* the padded order repeats itself */
    o[k] = ord ? ord[pos] : pos;
  }
  *out = t;
  return VL_OK;
}
