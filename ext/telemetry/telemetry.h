/* ext/telemetry/telemetry.h: GPU power, energy, clocks and the rest, sampled by a background
 * thread; read-only (nothing on a device is ever set).
 *
 * A source is a table of functions that reads devices: NVML (nvml.c, loaded with dlopen at run
 * time, unavailable with a clear reason where there is no driver), the synthetic device of
 * fake.c (deterministic series, for tests on machines without a GPU), or a test's own. A sampler
 * (vl_telemetry) owns one source, samples the chosen devices now (vl_telemetry_sample) or every
 * interval on its thread, and keeps per device the latest sample and two aggregates of the
 * samples: since it was made (totals) and since the last reset (window).
 *
 * Aggregation, per field and per interval between consecutive samples of a device where the
 * field was read at both ends: integral += (v0 + v1) / 2 * dt (the trapezoid rule), covered +=
 * dt; for the energy counter integral += E1 - E0 instead (joules the device counted; an interval
 * where the counter went back, a driver reload, adds nothing). So
 *   energy (counter)      = integral[VL_TM_ENERGY]                J
 *   energy (power x time) = integral[VL_TM_POWER]                 J (the cross-check)
 *   mean of a field       = integral[f] / covered[f]
 * min and max are over the samples, throttle_any ORs the throttle reasons of every sample.
 * Samples carry their source's time (NVML: CLOCK_MONOTONIC at the read; the fake: its own
 * steps), so the aggregation of a fake source is exact and repeatable. */
#ifndef VL_TELEMETRY_H
#define VL_TELEMETRY_H

#include <stdbool.h>
#include <stdint.h>

#include "runtime/core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum vl_tm_field {
  VL_TM_POWER = 0,  /* W: power draw (NVML: the instant reading where the driver has it) */
  VL_TM_ENERGY,     /* J: the device's total-energy counter (since the driver was loaded) */
  VL_TM_TEMP,       /* degrees C: GPU die */
  VL_TM_SM_CLOCK,   /* MHz */
  VL_TM_MEM_CLOCK,  /* MHz */
  VL_TM_UTIL_GPU,   /* %: of the driver's sample period with a kernel running */
  VL_TM_UTIL_MEM,   /* %: of it with device memory being read or written */
  VL_TM_MEM_USED,   /* bytes of device memory in use (every process) */
  VL_TM_THROTTLE,   /* NVML's clock event ("throttle") reason bits, as a number (exact below 2^53) */
  VL_TM_NFIELDS
} vl_tm_field;

/* "power_w", "energy_j", "temp_c", "sm_clock_mhz", "mem_clock_mhz", "util_gpu_pct",
 * "util_mem_pct", "mem_used_bytes", "throttle_reasons"; NULL out of range. */
const char *vl_tm_field_name(int f);

typedef struct vl_tm_sample {
  double t;              /* seconds on the source's clock */
  uint32_t valid;        /* bit f: v[f] was read */
  double v[VL_TM_NFIELDS];
} vl_tm_sample;

typedef struct vl_tm_device_info {
  int index;                       /* the source's device index (NVML's) */
  char name[96], uuid[96], pci_bus_id[32];
  double power_limit_w;            /* the enforced power limit; 0 when unknown */
  double app_sm_clock_mhz, app_mem_clock_mhz; /* applications clocks; 0 when unknown */
  double mem_total_bytes;          /* 0 when unknown */
  const char *power_source;        /* how power is read, e.g. "instant", "average" (static string) */
  bool energy_counter;             /* the device has the total-energy counter */
} vl_tm_device_info;

/* A source of samples. read fills the fields it could read (valid bits) and t; it fails only
 * when the device cannot be read at all (the message says why). info reads live values. */
typedef struct vl_tm_source {
  void *ud;
  int ndevices;
  const char *name;    /* "nvml", "fake", ... (static) */
  vl_status (*info)(void *ud, int dev, vl_tm_device_info *out);
  vl_status (*read)(void *ud, int dev, vl_tm_sample *out);
  void (*close)(void *ud); /* may be NULL */
} vl_tm_source;

/* NVML through dlopen("libnvidia-ml.so.1"). VL_EUNSUPPORTED when it cannot be used, with the
 * reason: no library (no NVIDIA driver), nvmlInit failing (driver not loaded, no permission), or
 * no device. */
vl_status vl_tm_nvml_open(vl_tm_source *out);
/* The NVML index of CUDA device `cuda_dev` of this process (through its PCI bus id, which
 * CUDA_VISIBLE_DEVICES does not renumber); src must be an NVML source. */
vl_status vl_tm_nvml_index_of_cuda(const vl_tm_source *src, int cuda_dev, int *out);

/* The synthetic device: read k (k = 0, 1, ...) of device d is at t = k * dt, with power
 * p(k) = base_w + 10 d + step_w * (k mod period) (a sawtooth), the energy counter the exact
 * integral of the power drawn as straight lines between reads (so that trapezoids over its
 * samples give it back), starting at energy0_j; temperature 40 + p/10, SM clock 1980 - (k mod
 * period) MHz, memory clock 2619, utilisation min(100, p/5) and p/10 %, memory used 1 GiB + k MiB,
 * throttle reasons 0x4 (software power cap) on the last read of each period, else 0.
 * energy_counter false leaves the counter out (as on devices without it). */
typedef struct vl_tm_fake_config {
  int ndevices;        /* >= 1 */
  double dt;           /* > 0 */
  double base_w, step_w, energy0_j;
  int period;          /* >= 1 */
  bool energy_counter;
} vl_tm_fake_config;
vl_status vl_tm_fake_open(const vl_tm_fake_config *cfg, vl_tm_source *out);

typedef struct vl_tm_stats {
  uint64_t samples;                 /* samples aggregated */
  double t_first, t_last;           /* of the first and last of them (the window: t_first is where it starts) */
  double integral[VL_TM_NFIELDS];
  double covered[VL_TM_NFIELDS];    /* seconds */
  double min[VL_TM_NFIELDS], max[VL_TM_NFIELDS]; /* meaningful where bit f of seen is set */
  uint32_t seen;
  uint64_t throttle_any;
} vl_tm_stats;

typedef struct vl_telemetry vl_telemetry;

/* Takes ownership of src (closed by vl_telemetry_free, or here on failure). devs: the source's
 * indices to sample, ndev of them (devs NULL: all of the source's devices). */
vl_status vl_telemetry_new(vl_tm_source *src, const int *devs, int ndev, vl_telemetry **out);
/* Starts the thread: a sample of every device every interval_s (>= 0.001 s) from now (the first
 * one interval_s from now: a caller that wants a start point samples first). */
vl_status vl_telemetry_start(vl_telemetry *tm, double interval_s);
/* Stops and joins the thread; a no-op when not running. */
void vl_telemetry_stop(vl_telemetry *tm);
bool vl_telemetry_running(const vl_telemetry *tm);
double vl_telemetry_interval(const vl_telemetry *tm);
/* One sample of every device now, on the calling thread (serialised with the thread's). A device
 * that cannot be read is skipped and counted (vl_telemetry_errors); the call fails only when no
 * device could be read, with the last reason. */
vl_status vl_telemetry_sample(vl_telemetry *tm);
int vl_telemetry_ndevices(const vl_telemetry *tm);
const char *vl_telemetry_source_name(const vl_telemetry *tm);
/* i: 0 .. ndevices-1 (the sampler's order). */
vl_status vl_telemetry_info(vl_telemetry *tm, int i, vl_tm_device_info *out);
/* VL_EINVAL when the device has no sample yet. */
vl_status vl_telemetry_latest(vl_telemetry *tm, int i, vl_tm_sample *out);
vl_status vl_telemetry_totals(vl_telemetry *tm, int i, vl_tm_stats *out);
/* The window's aggregate; reset: a new window starts at the device's latest sample. */
vl_status vl_telemetry_window(vl_telemetry *tm, int i, bool reset, vl_tm_stats *out);
/* Reads that failed, and the last failure's message ("" when none). */
uint64_t vl_telemetry_errors(vl_telemetry *tm, char *msg, int msg_len);
void vl_telemetry_free(vl_telemetry *tm);

/* The aggregation step (exposed for tests): adds the interval prev -> cur (prev may be NULL for
 * the first sample) to st. */
void vl_tm_stats_add(vl_tm_stats *st, const vl_tm_sample *prev, const vl_tm_sample *cur);
void vl_tm_stats_reset(vl_tm_stats *st);

#ifdef __cplusplus
}
#endif
#endif
