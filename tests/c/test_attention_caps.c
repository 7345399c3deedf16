/* tests/c/test_attention_caps.c: the capability rule of the CUDA fused attention
 * (runtime/backend/nn_kernels.h vl_attention_fused_eligible), checked on a CPU build: below compute
 * capability 8 (the V100 is 7.0, the T4 7.5) the fused kernels decline every problem, so
 * F.scaled_dot_product_attention composes attention there; from 8.0 on they take f16 and bf16 at
 * head dim 64 and nothing else. */
#include "runtime/backend/nn_kernels.h"
#include "tests/c/vl_test.h"

static void test_rule(void) {
  const vl_dtype half[] = {VL_F16, VL_BF16};
  for (int i = 0; i < 2; i++) {
    for (int cc = 3; cc <= 7; cc++)
      CHECK(!vl_attention_fused_eligible(half[i], 64, cc), "%s on sm_%d0 must fall back", vl_dtype_name(half[i]), cc);
    for (int cc = 8; cc <= 12; cc++)
      CHECK(vl_attention_fused_eligible(half[i], 64, cc), "%s head dim 64 on sm_%d0 takes the fused kernels",
            vl_dtype_name(half[i]), cc);
    const int64_t other_dims[] = {16, 32, 63, 65, 80, 96, 128, 256};
    for (size_t d = 0; d < sizeof other_dims / sizeof other_dims[0]; d++)
      CHECK(!vl_attention_fused_eligible(half[i], other_dims[d], 9), "head dim %lld falls back",
            (long long)other_dims[d]);
  }
  const vl_dtype wide[] = {VL_F32, VL_F64};
  for (int i = 0; i < 2; i++)
    CHECK(!vl_attention_fused_eligible(wide[i], 64, 9), "%s falls back (the kernels are f16/bf16)",
          vl_dtype_name(wide[i]));
  CHECK(!vl_attention_fused_eligible(VL_F16, 64, 0), "an unknown device (capability 0) falls back");
}

int main(void) {
  test_rule();
  return vl_test_finish();
}
