/* runtime/core/device.c: parsing and printing device names. */
#include "runtime/core/device.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/core/context.h"
#include "runtime/core/cuda.h"

vl_status vl_device_parse(const char *s, vl_device *out) {
  if (!s) return vl_fail(VL_EDEVICE, "device: expected a device string such as 'cpu', 'cuda' or 'cuda:0', got nil");
  if (strcmp(s, "cpu") == 0) {
    *out = vl_cpu_device();
    return VL_OK;
  }
  long idx = 0;
  bool bare = strcmp(s, "cuda") == 0;
  if (bare) {
    idx = vl_cuda_default_index();
  } else if (strncmp(s, "cuda:", 5) == 0 && s[5] >= '0' && s[5] <= '9') {
    char *end;
    errno = 0;
    idx = strtol(s + 5, &end, 10);
    if (*end != '\0' || errno != 0 || idx >= VL_MAX_DEVICES)
      return vl_fail(VL_EDEVICE, "device '%s': malformed or too large device index", s);
  } else {
    return vl_fail(VL_EDEVICE, "device '%s': expected 'cpu', 'cuda' or 'cuda:N'", s);
  }
  if (!vl_have_cuda()) return vl_fail(VL_EDEVICE, "device '%s': v100lua was built without CUDA", s);
  VL_TRY(vl_init());
  int n = vl_ctx()->ndevices;
  if (idx >= n) return vl_fail(VL_EDEVICE, "device '%s': no CUDA device %ld (%d present)", s, idx, n);
  *out = vl_cuda_device((int)idx);
  return VL_OK;
}

const char *vl_device_str(vl_device d, char *buf, size_t n) {
  if (d.type == VL_CPU) snprintf(buf, n, "cpu");
  else snprintf(buf, n, "cuda:%d", d.index);
  return buf;
}
