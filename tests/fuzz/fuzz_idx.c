/* tests/fuzz/fuzz_idx.c: vl_idx_read (the MNIST/Fashion-MNIST format, plain or gzip) on
 * arbitrary bytes. */
#include "fuzz_common.h"
#include "runtime/io/idx.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char path[64];
  int fd = vl_fuzz_file(data, size, path, sizeof path);
  if (fd < 0) return 0;
  vl_tensor *t = NULL;
  if (vl_idx_read(path, &t) == VL_OK) vl_tensor_release(t);
  close(fd);
  return 0;
}
