/* tests/fuzz/fuzz_safetensors.c: vl_safetensors_read on arbitrary bytes (plain, or gzip when
 * the input starts with its magic): a clean error or a file whose tensors all lie inside it. */
#include "fuzz_common.h"
#include "runtime/io/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char path[64];
  int fd = vl_fuzz_file(data, size, path, sizeof path);
  if (fd < 0) return 0;
  vl_safetensors st = {0};
  if (vl_safetensors_read(path, &st) == VL_OK) {
    for (int i = 0; i < st.n; i++) {
      /* touch every element: an out-of-bounds view would be found here */
      const vl_tensor *t = st.tensors[i];
      size_t nb = (size_t)vl_tensor_numel(t) * vl_dtype_size(t->dtype);
      const volatile uint8_t *p = (const uint8_t *)vl_tensor_data(t);
      uint8_t x = 0;
      for (size_t k = 0; k < nb; k++) x ^= p[k];
      (void)x;
    }
    vl_safetensors_free(&st);
  }
  close(fd);
  return 0;
}
