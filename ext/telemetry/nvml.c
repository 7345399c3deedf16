/* ext/telemetry/nvml.c: the NVML source of telemetry.h. libnvidia-ml.so.1 (installed with the
 * driver) is opened with dlopen, so that a machine without a driver runs everything else: the
 * source then fails to open with the reason, and the telemetry reports itself unavailable.
 * Only NVML's reading functions are looked up (nvml_api.h): nothing on a device is ever set. */
#define _POSIX_C_SOURCE 200809L
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ext/telemetry/nvml_api.h"
#include "ext/telemetry/telemetry.h"

#ifdef VL_HAVE_CUDA
#include <cuda_runtime.h>

#include "runtime/core/cuda_check.h"
#endif

typedef struct nvml_api {
  vl_nvmlInit_v2_fn Init;
  vl_nvmlShutdown_fn Shutdown;
  vl_nvmlErrorString_fn ErrorString;
  vl_nvmlDeviceGetCount_v2_fn GetCount;
  vl_nvmlDeviceGetHandleByIndex_v2_fn GetHandleByIndex;
  /* optional (NULL when this driver's NVML lacks them) */
  vl_nvmlDeviceGetHandleByPciBusId_v2_fn GetHandleByPciBusId;
  vl_nvmlDeviceGetIndex_fn GetIndex;
  vl_nvmlDeviceGetName_fn GetName;
  vl_nvmlDeviceGetUUID_fn GetUUID;
  vl_nvmlDeviceGetPowerUsage_fn GetPowerUsage;
  vl_nvmlDeviceGetFieldValues_fn GetFieldValues;
  vl_nvmlDeviceGetTotalEnergyConsumption_fn GetTotalEnergy;
  vl_nvmlDeviceGetEnforcedPowerLimit_fn GetEnforcedPowerLimit;
  vl_nvmlDeviceGetTemperature_fn GetTemperature;
  vl_nvmlDeviceGetClockInfo_fn GetClockInfo;
  vl_nvmlDeviceGetApplicationsClock_fn GetApplicationsClock;
  vl_nvmlDeviceGetUtilizationRates_fn GetUtilization;
  vl_nvmlDeviceGetMemoryInfo_fn GetMemoryInfo;
  vl_nvmlDeviceGetCurrentClocksEventReasons_fn GetEventReasons;
} nvml_api;

typedef struct nvml_dev {
  vl_nvmlDevice_t h;   /* NULL: this device cannot be opened (the reason in err) */
  int instant;         /* the instant power field: 1 works, 0 untried, -1 unsupported */
  char pci[32];        /* the bus id this device was found by (vl_tm_nvml_index_of_cuda), or "" */
  vl_nvmlReturn_t err;
} nvml_dev;

typedef struct nvml_src {
  void *lib;
  nvml_api f;
  unsigned n;
  nvml_dev *dev;
} nvml_src;

static const char *nvml_err(const nvml_src *s, vl_nvmlReturn_t r) {
  const char *m = s->f.ErrorString ? s->f.ErrorString(r) : NULL;
  return m ? m : "unknown NVML error";
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Power in W: the instant reading (field NVML_FI_DEV_POWER_INSTANT) where the driver has it;
 * else nvmlDeviceGetPowerUsage, which on Ampere and newer (except GA100) is a 1-second average
 * and lags the load by about half a second. */
static bool read_power(nvml_src *s, nvml_dev *d, double *w) {
  if (d->instant >= 0 && s->f.GetFieldValues) {
    vl_nvmlFieldValue_t fv;
    memset(&fv, 0, sizeof fv);
    fv.fieldId = VL_NVML_FI_DEV_POWER_INSTANT;
    if (s->f.GetFieldValues(d->h, 1, &fv) == VL_NVML_SUCCESS && fv.nvmlReturn == VL_NVML_SUCCESS) {
      double mw = -1;
      switch (fv.valueType) {
      case VL_NVML_VALUE_TYPE_DOUBLE: mw = fv.value.dVal; break;
      case VL_NVML_VALUE_TYPE_UNSIGNED_INT: mw = fv.value.uiVal; break;
      case VL_NVML_VALUE_TYPE_UNSIGNED_LONG: mw = (double)fv.value.ulVal; break;
      case VL_NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: mw = (double)fv.value.ullVal; break;
      case VL_NVML_VALUE_TYPE_SIGNED_LONG_LONG: mw = (double)fv.value.sllVal; break;
      case VL_NVML_VALUE_TYPE_SIGNED_INT: mw = fv.value.siVal; break;
      default: break;
      }
      if (mw >= 0) {
        d->instant = 1;
        *w = mw / 1000.0;
        return true;
      }
    }
    if (d->instant == 0) d->instant = -1; /* never worked: do not ask again */
  }
  unsigned mw;
  if (s->f.GetPowerUsage && s->f.GetPowerUsage(d->h, &mw) == VL_NVML_SUCCESS) {
    *w = mw / 1000.0;
    return true;
  }
  return false;
}

static vl_status nvml_read(void *ud, int i, vl_tm_sample *out) {
  nvml_src *s = ud;
  nvml_dev *d = &s->dev[i];
  if (!d->h) return vl_fail(VL_EUNSUPPORTED, "telemetry: NVML device %d cannot be read: %s", i, nvml_err(s, d->err));
  vl_tm_sample smp;
  memset(&smp, 0, sizeof smp);
  /* Energy and power first, back to back, and the time right after: the two that are integrated. */
  unsigned long long mj;
  if (s->f.GetTotalEnergy && s->f.GetTotalEnergy(d->h, &mj) == VL_NVML_SUCCESS) {
    smp.v[VL_TM_ENERGY] = (double)mj / 1000.0;
    smp.valid |= 1u << VL_TM_ENERGY;
  }
  if (read_power(s, d, &smp.v[VL_TM_POWER])) smp.valid |= 1u << VL_TM_POWER;
  smp.t = now_s();
  unsigned u;
  if (s->f.GetTemperature && s->f.GetTemperature(d->h, VL_NVML_TEMPERATURE_GPU, &u) == VL_NVML_SUCCESS) {
    smp.v[VL_TM_TEMP] = u;
    smp.valid |= 1u << VL_TM_TEMP;
  }
  if (s->f.GetClockInfo && s->f.GetClockInfo(d->h, VL_NVML_CLOCK_SM, &u) == VL_NVML_SUCCESS) {
    smp.v[VL_TM_SM_CLOCK] = u;
    smp.valid |= 1u << VL_TM_SM_CLOCK;
  }
  if (s->f.GetClockInfo && s->f.GetClockInfo(d->h, VL_NVML_CLOCK_MEM, &u) == VL_NVML_SUCCESS) {
    smp.v[VL_TM_MEM_CLOCK] = u;
    smp.valid |= 1u << VL_TM_MEM_CLOCK;
  }
  vl_nvmlUtilization_t ut;
  if (s->f.GetUtilization && s->f.GetUtilization(d->h, &ut) == VL_NVML_SUCCESS) {
    smp.v[VL_TM_UTIL_GPU] = ut.gpu;
    smp.v[VL_TM_UTIL_MEM] = ut.memory;
    smp.valid |= 1u << VL_TM_UTIL_GPU | 1u << VL_TM_UTIL_MEM;
  }
  vl_nvmlMemory_t mem;
  if (s->f.GetMemoryInfo && s->f.GetMemoryInfo(d->h, &mem) == VL_NVML_SUCCESS) {
    smp.v[VL_TM_MEM_USED] = (double)mem.used;
    smp.valid |= 1u << VL_TM_MEM_USED;
  }
  unsigned long long reasons;
  if (s->f.GetEventReasons && s->f.GetEventReasons(d->h, &reasons) == VL_NVML_SUCCESS) {
    smp.v[VL_TM_THROTTLE] = (double)(reasons & ((1ull << 53) - 1));
    smp.valid |= 1u << VL_TM_THROTTLE;
  }
  if (!smp.valid) return vl_fail(VL_EUNSUPPORTED, "telemetry: NVML device %d returned none of its readings", i);
  *out = smp;
  return VL_OK;
}

static vl_status nvml_info(void *ud, int i, vl_tm_device_info *out) {
  nvml_src *s = ud;
  nvml_dev *d = &s->dev[i];
  if (!d->h) return vl_fail(VL_EUNSUPPORTED, "telemetry: NVML device %d cannot be read: %s", i, nvml_err(s, d->err));
  vl_tm_device_info info;
  memset(&info, 0, sizeof info);
  info.index = i;
  if (s->f.GetName) (void)s->f.GetName(d->h, info.name, sizeof info.name);
  if (s->f.GetUUID) (void)s->f.GetUUID(d->h, info.uuid, sizeof info.uuid);
  snprintf(info.pci_bus_id, sizeof info.pci_bus_id, "%s", d->pci);
  unsigned u;
  if (s->f.GetEnforcedPowerLimit && s->f.GetEnforcedPowerLimit(d->h, &u) == VL_NVML_SUCCESS) info.power_limit_w = u / 1000.0;
  if (s->f.GetApplicationsClock && s->f.GetApplicationsClock(d->h, VL_NVML_CLOCK_SM, &u) == VL_NVML_SUCCESS)
    info.app_sm_clock_mhz = u;
  if (s->f.GetApplicationsClock && s->f.GetApplicationsClock(d->h, VL_NVML_CLOCK_MEM, &u) == VL_NVML_SUCCESS)
    info.app_mem_clock_mhz = u;
  vl_nvmlMemory_t mem;
  if (s->f.GetMemoryInfo && s->f.GetMemoryInfo(d->h, &mem) == VL_NVML_SUCCESS) info.mem_total_bytes = (double)mem.total;
  unsigned long long mj;
  info.energy_counter = s->f.GetTotalEnergy && s->f.GetTotalEnergy(d->h, &mj) == VL_NVML_SUCCESS;
  double w;
  if (d->instant == 0) (void)read_power(s, d, &w); /* settles which reading power comes from */
  info.power_source = d->instant > 0 ? "instant" : s->f.GetPowerUsage ? "nvmlDeviceGetPowerUsage" : "none";
  *out = info;
  return VL_OK;
}

static void nvml_close(void *ud) {
  nvml_src *s = ud;
  if (!s) return;
  if (s->f.Shutdown) (void)s->f.Shutdown();
  if (s->lib) dlclose(s->lib);
  free(s->dev);
  free(s);
}

/* dlsym into a typed pointer: ISO C has no conversion from void * to a function pointer, POSIX
 * guarantees the representation, so the bytes are copied. */
static void sym(void *lib, const char *name, void *fnptr, size_t size) {
  void *p = dlsym(lib, name);
  memset(fnptr, 0, size);
  if (p) memcpy(fnptr, &p, size < sizeof p ? size : sizeof p);
}
#define SYM(field, name) sym(s->lib, name, &s->f.field, sizeof s->f.field)

vl_status vl_tm_nvml_open(vl_tm_source *out) {
  nvml_src *s = calloc(1, sizeof *s);
  if (!s) return vl_fail(VL_EOOM, "telemetry: out of host memory");
  s->lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!s->lib) {
    const char *why = dlerror();
    vl_status st = vl_fail(VL_EUNSUPPORTED, "telemetry: NVML is unavailable (no NVIDIA driver on this machine?): %s",
                           why ? why : "libnvidia-ml.so.1 cannot be loaded");
    free(s);
    return st;
  }
  SYM(Init, "nvmlInit_v2");
  SYM(Shutdown, "nvmlShutdown");
  SYM(ErrorString, "nvmlErrorString");
  SYM(GetCount, "nvmlDeviceGetCount_v2");
  SYM(GetHandleByIndex, "nvmlDeviceGetHandleByIndex_v2");
  SYM(GetHandleByPciBusId, "nvmlDeviceGetHandleByPciBusId_v2");
  SYM(GetIndex, "nvmlDeviceGetIndex");
  SYM(GetName, "nvmlDeviceGetName");
  SYM(GetUUID, "nvmlDeviceGetUUID");
  SYM(GetPowerUsage, "nvmlDeviceGetPowerUsage");
  SYM(GetFieldValues, "nvmlDeviceGetFieldValues");
  SYM(GetTotalEnergy, "nvmlDeviceGetTotalEnergyConsumption");
  SYM(GetEnforcedPowerLimit, "nvmlDeviceGetEnforcedPowerLimit");
  SYM(GetTemperature, "nvmlDeviceGetTemperature");
  SYM(GetClockInfo, "nvmlDeviceGetClockInfo");
  SYM(GetApplicationsClock, "nvmlDeviceGetApplicationsClock");
  SYM(GetUtilization, "nvmlDeviceGetUtilizationRates");
  SYM(GetMemoryInfo, "nvmlDeviceGetMemoryInfo");
  SYM(GetEventReasons, "nvmlDeviceGetCurrentClocksEventReasons");
  if (!s->f.GetEventReasons) SYM(GetEventReasons, "nvmlDeviceGetCurrentClocksThrottleReasons");
  if (!s->f.Init || !s->f.Shutdown || !s->f.GetCount || !s->f.GetHandleByIndex) {
    dlclose(s->lib);
    free(s);
    return vl_fail(VL_EUNSUPPORTED, "telemetry: NVML is unavailable: libnvidia-ml.so.1 lacks nvmlInit_v2, "
                                    "nvmlDeviceGetCount_v2 or nvmlDeviceGetHandleByIndex_v2 (a driver older than 5.319?)");
  }
  vl_nvmlReturn_t r = s->f.Init();
  if (r != VL_NVML_SUCCESS) {
    vl_status st = vl_fail(VL_EUNSUPPORTED, "telemetry: NVML is unavailable: nvmlInit_v2: %s", nvml_err(s, r));
    s->f.Shutdown = NULL; /* nothing to shut down */
    nvml_close(s);
    return st;
  }
  r = s->f.GetCount(&s->n);
  if (r != VL_NVML_SUCCESS || s->n == 0) {
    vl_status st = vl_fail(VL_EUNSUPPORTED, "telemetry: NVML is unavailable: %s",
                           r != VL_NVML_SUCCESS ? nvml_err(s, r) : "no GPU on this machine");
    nvml_close(s);
    return st;
  }
  s->dev = calloc(s->n, sizeof *s->dev);
  if (!s->dev) {
    nvml_close(s);
    return vl_fail(VL_EOOM, "telemetry: out of host memory");
  }
  for (unsigned i = 0; i < s->n; i++) {
    s->dev[i].err = s->f.GetHandleByIndex(i, &s->dev[i].h);
    if (s->dev[i].err != VL_NVML_SUCCESS) s->dev[i].h = NULL; /* e.g. no permission: skipped when read */
  }
  memset(out, 0, sizeof *out);
  out->ud = s;
  out->ndevices = (int)s->n;
  out->name = "nvml";
  out->info = nvml_info;
  out->read = nvml_read;
  out->close = nvml_close;
  return VL_OK;
}

vl_status vl_tm_nvml_index_of_cuda(const vl_tm_source *src, int cuda_dev, int *out) {
  if (!src || src->read != nvml_read) return vl_fail(VL_EINVAL, "telemetry: not an NVML source");
#ifdef VL_HAVE_CUDA
  nvml_src *s = src->ud;
  char bus[32];
  VL_CUDA_CHECK(cudaDeviceGetPCIBusId(bus, (int)sizeof bus, cuda_dev));
  if (!s->f.GetHandleByPciBusId || !s->f.GetIndex)
    return vl_fail(VL_EUNSUPPORTED, "telemetry: this NVML cannot look devices up by PCI bus id");
  vl_nvmlDevice_t h;
  vl_nvmlReturn_t r = s->f.GetHandleByPciBusId(bus, &h);
  unsigned idx = 0;
  if (r == VL_NVML_SUCCESS) r = s->f.GetIndex(h, &idx);
  if (r != VL_NVML_SUCCESS)
    return vl_fail(VL_EDEVICE, "telemetry: NVML does not find cuda:%d (PCI %s): %s", cuda_dev, bus, nvml_err(s, r));
  if (idx >= s->n) return vl_fail(VL_EINTERNAL, "telemetry: NVML index %u of cuda:%d is beyond its %u devices", idx, cuda_dev, s->n);
  snprintf(s->dev[idx].pci, sizeof s->dev[idx].pci, "%s", bus);
  *out = (int)idx;
  return VL_OK;
#else
  (void)out;
  return vl_fail(VL_EUNSUPPORTED, "telemetry: cuda:%d: built without CUDA", cuda_dev);
#endif
}
