/* tests/fuzz/fuzz_jpeg.c: the image decode entry point (libjpeg-turbo through
 * ext/data/image.c) on arbitrary bytes, as gray and as RGB. */
#include "fuzz_common.h"
#include "ext/data/image.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  for (int channels = 1; channels <= 3; channels += 2) {
    vl_tensor *t = NULL;
    if (vl_image_decode(data, size, "fuzz.jpg", channels, &t) == VL_OK) vl_tensor_release(t);
  }
  return 0;
}
