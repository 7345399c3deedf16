/* ext/telemetry/nvml_api.h: the few NVML declarations ext/telemetry/nvml.c uses.
 *
 * NVML is loaded at run time (dlopen("libnvidia-ml.so.1"), the driver's library), so that the
 * binary runs and CI passes where there is no driver, and nvml.h (not part of the CUDA toolkit's
 * default install here) is not needed to build. The types, constants and signatures below are
 * those of NVIDIA's NVML API reference (docs.nvidia.com/deploy/nvml-api: "Device Queries",
 * "Initialization and Cleanup", "Error reporting", "Field Value Queries") and of nvml.h as
 * shipped by the nvidia-nvml-dev wheels (checked against nvml.h 12.9.79, whose functions used here
 * keep the same signatures since NVML 5.319). Only reading functions are declared: the telemetry
 * never sets anything on a device.
 *
 * Each function is looked up by name with dlsym and called through a pointer of the type given
 * here; a missing symbol (an old driver) makes that one field unavailable, not the module. */
#ifndef VL_NVML_API_H
#define VL_NVML_API_H

typedef int vl_nvmlReturn_t;            /* nvmlReturn_t: an enum in nvml.h; int-sized */
typedef struct vl_nvmlDevice_st *vl_nvmlDevice_t; /* nvmlDevice_t: an opaque handle */

enum {
  VL_NVML_SUCCESS = 0,                  /* NVML_SUCCESS */
  VL_NVML_ERROR_NOT_SUPPORTED = 3,      /* NVML_ERROR_NOT_SUPPORTED */
  VL_NVML_ERROR_NO_PERMISSION = 4,      /* NVML_ERROR_NO_PERMISSION */
  VL_NVML_ERROR_NOT_FOUND = 6,          /* NVML_ERROR_NOT_FOUND */
  VL_NVML_ERROR_DRIVER_NOT_LOADED = 9,  /* NVML_ERROR_DRIVER_NOT_LOADED */
  VL_NVML_ERROR_GPU_IS_LOST = 15,       /* NVML_ERROR_GPU_IS_LOST */
};

enum { VL_NVML_TEMPERATURE_GPU = 0 };                              /* nvmlTemperatureSensors_t */
enum { VL_NVML_CLOCK_GRAPHICS = 0, VL_NVML_CLOCK_SM = 1, VL_NVML_CLOCK_MEM = 2 }; /* nvmlClockType_t */

#define VL_NVML_DEVICE_NAME_V2_BUFFER_SIZE 96  /* NVML_DEVICE_NAME_V2_BUFFER_SIZE */
#define VL_NVML_DEVICE_UUID_V2_BUFFER_SIZE 96  /* NVML_DEVICE_UUID_V2_BUFFER_SIZE */
#define VL_NVML_FI_DEV_POWER_INSTANT 186       /* NVML_FI_DEV_POWER_INSTANT: current power, mW */

typedef struct vl_nvmlUtilization_t { /* nvmlUtilization_t */
  unsigned int gpu;    /* % of the last sample period with a kernel running */
  unsigned int memory; /* % of it with device memory being read or written */
} vl_nvmlUtilization_t;

typedef struct vl_nvmlMemory_t { /* nvmlMemory_t (v1) */
  unsigned long long total, free, used; /* bytes */
} vl_nvmlMemory_t;

typedef union vl_nvmlValue_t { /* nvmlValue_t */
  double dVal;
  int siVal;
  unsigned int uiVal;
  unsigned long ulVal;
  unsigned long long ullVal;
  signed long long sllVal;
  unsigned short usVal;
} vl_nvmlValue_t;

enum { /* nvmlValueType_t */
  VL_NVML_VALUE_TYPE_DOUBLE = 0, VL_NVML_VALUE_TYPE_UNSIGNED_INT = 1, VL_NVML_VALUE_TYPE_UNSIGNED_LONG = 2,
  VL_NVML_VALUE_TYPE_UNSIGNED_LONG_LONG = 3, VL_NVML_VALUE_TYPE_SIGNED_LONG_LONG = 4,
  VL_NVML_VALUE_TYPE_SIGNED_INT = 5, VL_NVML_VALUE_TYPE_UNSIGNED_SHORT = 6,
};

typedef struct vl_nvmlFieldValue_t { /* nvmlFieldValue_t */
  unsigned int fieldId;
  unsigned int scopeId;
  long long timestamp;    /* CPU time of the value, microseconds since 1970 */
  long long latencyUsec;
  int valueType;          /* nvmlValueType_t */
  vl_nvmlReturn_t nvmlReturn;
  vl_nvmlValue_t value;
} vl_nvmlFieldValue_t;

/* The entry points (names as exported by libnvidia-ml.so.1). */
typedef vl_nvmlReturn_t (*vl_nvmlInit_v2_fn)(void);
typedef vl_nvmlReturn_t (*vl_nvmlShutdown_fn)(void);
typedef const char *(*vl_nvmlErrorString_fn)(vl_nvmlReturn_t result);
typedef vl_nvmlReturn_t (*vl_nvmlSystemGetDriverVersion_fn)(char *version, unsigned int length);
typedef vl_nvmlReturn_t (*vl_nvmlDeviceGetCount_v2_fn)(unsigned int *deviceCount);
typedef vl_nvmlReturn_t (*vl_nvmlDeviceGetHandleByIndex_v2_fn)(unsigned int index, vl_nvmlDevice_t *device);
typedef vl_nvmlReturn_t (*vl_nvmlDeviceGetHandleByPciBusId_v2_fn)(const char *pciBusId, vl_nvmlDevice_t *device);
typedef vl_nvmlReturn_t (*vl_nvmlDeviceGetIndex_fn)(vl_nvmlDevice_t device, unsigned int *index);
typedef vl_nvmlReturn_t (*vl_nvmlDeviceGetName_fn)(vl_nvmlDevice_t device, char *name, unsigned int length);
typedef vl_nvmlReturn_t (*vl_nvmlDeviceGetUUID_fn)(vl_nvmlDevice_t device, char *uuid, unsigned int length);
typedef vl_nvmlReturn_t (*vl_nvmlDeviceGetPowerUsage_fn)(vl_nvmlDevice_t device, unsigned int *power);
typedef vl_nvmlReturn_t (*vl_nvmlDeviceGetTotalEnergyConsumption_fn)(vl_nvmlDevice_t device, unsigned long long *energy);
typedef vl_nvmlReturn_t (*vl_nvmlDeviceGetEnforcedPowerLimit_fn)(vl_nvmlDevice_t device, unsigned int *limit);
typedef vl_nvmlReturn_t (*vl_nvmlDeviceGetTemperature_fn)(vl_nvmlDevice_t device, int sensorType, unsigned int *temp);
typedef vl_nvmlReturn_t (*vl_nvmlDeviceGetClockInfo_fn)(vl_nvmlDevice_t device, int type, unsigned int *clock);
typedef vl_nvmlReturn_t (*vl_nvmlDeviceGetApplicationsClock_fn)(vl_nvmlDevice_t device, int clockType,
                                                               unsigned int *clockMHz);
typedef vl_nvmlReturn_t (*vl_nvmlDeviceGetUtilizationRates_fn)(vl_nvmlDevice_t device, vl_nvmlUtilization_t *u);
typedef vl_nvmlReturn_t (*vl_nvmlDeviceGetMemoryInfo_fn)(vl_nvmlDevice_t device, vl_nvmlMemory_t *memory);
/* nvmlDeviceGetCurrentClocksEventReasons (CUDA 12.2+ drivers) is the new name of
 * nvmlDeviceGetCurrentClocksThrottleReasons; both take the same arguments. */
typedef vl_nvmlReturn_t (*vl_nvmlDeviceGetCurrentClocksEventReasons_fn)(vl_nvmlDevice_t device,
                                                                       unsigned long long *reasons);
typedef vl_nvmlReturn_t (*vl_nvmlDeviceGetFieldValues_fn)(vl_nvmlDevice_t device, int valuesCount,
                                                         vl_nvmlFieldValue_t *values);

#endif
