/* runtime/core/device.h: devices ("cpu", "cuda:N"). */
#ifndef VL_DEVICE_H
#define VL_DEVICE_H

#include <stdbool.h>
#include <stddef.h>

#include "runtime/core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define VL_MAX_DEVICES 16

typedef enum vl_device_type { VL_CPU = 0, VL_CUDA = 1, VL_NDEVICE_TYPES } vl_device_type;

typedef struct vl_device {
  vl_device_type type;
  int index; /* CUDA ordinal; 0 for the CPU */
} vl_device;

static inline vl_device vl_cpu_device(void) { vl_device d = {VL_CPU, 0}; return d; }
static inline vl_device vl_cuda_device(int i) { vl_device d = {VL_CUDA, i}; return d; }
static inline bool vl_device_eq(vl_device a, vl_device b) {
  return a.type == b.type && (a.type == VL_CPU || a.index == b.index);
}
/* Memory the host addresses directly (memcpy, host pointers), as opposed to device memory that
 * needs vl_memcpy and a stream. Copy and I/O code asks this; ops ask their backend
 * (runtime/backend/backend.h), never the device type. */
static inline bool vl_device_is_host(vl_device d) { return d.type == VL_CPU; }

/* "cpu", "cuda" (= cuda:<current>), "cuda:N". Fails with VL_EDEVICE naming the string when
 * it is malformed or N is not a present device. */
vl_status vl_device_parse(const char *s, vl_device *out);
/* Writes "cpu" or "cuda:N" into buf; returns buf. */
const char *vl_device_str(vl_device d, char *buf, size_t n);

#ifdef __cplusplus
}
#endif
#endif
