/* tests/c/test_blas_threads.c: a CPU convolution's bits do not depend on what ran before it in
 * the process.
 *
 * The convolution's GEMMs are OpenBLAS calls, and OpenBLAS splits a product by its thread count,
 * which changes the last bits of the result with the Haswell/Zen kernels. The backend runs
 * OpenBLAS single-threaded (cpu_gemm.c's vl_cpu_blas_threads), but cpu_conv.c once called
 * cblas_sgemm without setting the count: until the first matmul of the process set it to 1, a
 * convolution ran on the library's default of all cores. A resumed ResNet-50 run's first forward
 * (every convolution before the first Linear) then differed by an ulp here and there from the
 * uninterrupted run's, and the loss curves drifted apart (tests/lua/recipe_resnet50.lua's resume
 * test, on a 2-core AMD EPYC with OpenBLAS 0.3.21's Haswell kernels).
 *
 * So: OpenBLAS is given 4 threads first (its default on a 4-core machine, whatever this one has),
 * a convolution runs (forward, data and filter gradients, NCHW and NHWC, ResNet's 3x3 shape),
 * then a matmul, then the same convolution again: every output must be the same bits. This must
 * be the process's first GEMM work, so it is a program of its own. The last line is
 * "N passed, N failed". */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/backend/nn_kernels.h"
#include "runtime/core/context.h"
#include "runtime/ops/ops.h"
#include "runtime/core/tensor.h"
#include "vl_test.h"

/* OpenBLAS's own switch (cblas.h declares it too; declared here so the test needs no header path). */
extern void openblas_set_num_threads(int num_threads);

enum { N = 2, C = 8, K = 8, H = 28, W = 28, R = 3, S = 3 };

static float *rand_f32(int64_t n) {
  float *b = malloc((size_t)n * sizeof *b);
  for (int64_t i = 0; i < n; i++) b[i] = (float)(2.0 * vl_test_urand() - 1.0);
  return b;
}

typedef struct {
  float *y, *dx, *dw;
} outs;

static outs conv_all(bool nhwc, const float *x, const float *w, const float *dy) {
  const int64_t nx = (int64_t)N * C * H * W, nw = (int64_t)K * C * R * S, ny = (int64_t)N * K * H * W;
  outs o = {malloc((size_t)ny * 4), malloc((size_t)nx * 4), malloc((size_t)nw * 4)};
  vl_conv_args a = {.dtype = VL_F32, .nhwc = nhwc, .n = N, .c = C, .h = H, .w = W, .k = K, .r = R, .s = S,
                    .p = H, .q = W, .stride = {1, 1}, .pad = {1, 1}, .dilation = {1, 1}, .groups = 1,
                    .x = (void *)x, .wt = (void *)w, .dy = (void *)dy, .y = o.y, .dx = o.dx, .dwt = o.dw};
  CHECK_OK(vl_cpu_conv_kernels.forward(&a));
  CHECK_OK(vl_cpu_conv_kernels.backward_data(&a));
  CHECK_OK(vl_cpu_conv_kernels.backward_filter(&a));
  return o;
}

static int64_t differing(const float *a, const float *b, int64_t n) {
  int64_t d = 0;
  for (int64_t i = 0; i < n; i++) d += memcmp(a + i, b + i, sizeof *a) != 0;
  return d;
}

static void outs_free(outs *o) {
  free(o->y);
  free(o->dx);
  free(o->dw);
}

int main(void) {
  uint64_t seed = vl_test_seed();
  printf("seed %llu\n", (unsigned long long)seed);
  vl_init();
  const int64_t nx = (int64_t)N * C * H * W, nw = (int64_t)K * C * R * S, ny = (int64_t)N * K * H * W;
  float *x = rand_f32(nx), *w = rand_f32(nw), *dy = rand_f32(ny);

  /* The state of a fresh process on a 4-core machine: OpenBLAS on its default thread count. */
  openblas_set_num_threads(4);
  outs first[2] = {conv_all(false, x, w, dy), conv_all(true, x, w, dy)};

  /* A matmul through the backend (what the first Linear of a step does). */
  vl_tensor *a = NULL, *b = NULL, *c = NULL;
  int64_t sz[2] = {128, 128};
  CHECK_OK(vl_rand(2, sz, -1, 1, VL_F32, vl_cpu_device(), &a));
  CHECK_OK(vl_rand(2, sz, -1, 1, VL_F32, vl_cpu_device(), &b));
  CHECK_OK(vl_matmul(a, b, &c));
  vl_tensor_release(a);
  vl_tensor_release(b);
  vl_tensor_release(c);

  for (int l = 0; l < 2; l++) {
    const char *lay = l ? "nhwc" : "nchw";
    outs again = conv_all(l == 1, x, w, dy);
    int64_t d;
    d = differing(first[l].y, again.y, ny);
    CHECK(d == 0, "conv forward %s: %lld of %lld outputs differ after a matmul ran", lay, (long long)d, (long long)ny);
    d = differing(first[l].dx, again.dx, nx);
    CHECK(d == 0, "conv backward data %s: %lld of %lld differ after a matmul ran", lay, (long long)d, (long long)nx);
    d = differing(first[l].dw, again.dw, nw);
    CHECK(d == 0, "conv backward filter %s: %lld of %lld differ after a matmul ran", lay, (long long)d, (long long)nw);
    outs_free(&again);
    outs_free(&first[l]);
  }
  free(x);
  free(w);
  free(dy);
  vl_shutdown();
  return vl_test_finish();
}
