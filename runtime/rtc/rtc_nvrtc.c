/* runtime/rtc/rtc_nvrtc.c: the NVRTC compiler, loading images as cudaLibrary_t and launching
 * their kernels (rtc.h, part 3). Always compiled; the CUDA calls only with VL_HAVE_CUDA, like
 * runtime/core/cuda.c. Loading goes through the runtime API's library management (CUDA >= 12.0)
 * so that no driver-API context handling is needed: a cudaLibrary_t is context-independent and a
 * cudaKernel_t may be passed to cudaLaunchKernel as the function pointer. */
#define _POSIX_C_SOURCE 200809L
#include "runtime/rtc/rtc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/core/cuda.h"

#ifdef VL_HAVE_CUDA

#include <cuda_runtime.h>
#include <nvrtc.h>

#include "runtime/core/cuda_check.h"

#define VL_NVRTC_CHECK(call)                                                                   \
  do {                                                                                         \
    nvrtcResult vl_nr_ = (call);                                                               \
    if (vl_nr_ != NVRTC_SUCCESS)                                                               \
      return vl_fail(VL_ECUDA, "%s:%d: %s: %s", __FILE__, __LINE__, #call,                     \
                     nvrtcGetErrorString(vl_nr_));                                             \
  } while (0)

vl_status vl_rtc_compiler_id(char *buf, size_t n) {
  int major = 0, minor = 0;
  VL_NVRTC_CHECK(nvrtcVersion(&major, &minor));
  snprintf(buf, n, "nvrtc %d.%d", major, minor);
  return VL_OK;
}

vl_status vl_rtc_target(int major, int minor, char *arch, size_t n, bool *ptx) {
  int want = major * 10 + minor, count = 0;
  VL_NVRTC_CHECK(nvrtcGetNumSupportedArchs(&count));
  if (count <= 0 || count > 256) return vl_fail(VL_ECUDA, "nvrtc: %d supported architectures?", count);
  int archs[256];
  VL_NVRTC_CHECK(nvrtcGetSupportedArchs(archs));
  int best = -1;
  for (int i = 0; i < count; i++) {
    if (archs[i] == want) {
      snprintf(arch, n, "sm_%d", want);
      *ptx = false;
      return VL_OK;
    }
    if (archs[i] < want && archs[i] > best) best = archs[i];
  }
  if (best < 0)
    return vl_fail(VL_EUNSUPPORTED, "v100.kernel: NVRTC cannot target sm_%d (its oldest is sm_%d)", want,
                   archs[0]);
  /* A newer GPU than this NVRTC knows: PTX of the newest virtual arch, JIT-compiled by the driver. */
  snprintf(arch, n, "compute_%d", best);
  *ptx = true;
  return VL_OK;
}

/* Compiles; on a compilation error returns VL_EINVAL with the log (outputs untouched). */
static vl_status compile_program(nvrtcProgram prog, const vl_rtc_source *src, const char *arch, bool ptx,
                                 void **image, size_t *size) {
  int nopt = src->nopts + 1;
  const char **opts = (const char **)calloc((size_t)nopt, sizeof *opts);
  char arch_opt[48];
  if (!opts) return vl_fail(VL_EOOM, "%s: out of host memory", src->program);
  snprintf(arch_opt, sizeof arch_opt, "-arch=%s", arch);
  opts[0] = arch_opt;
  for (int i = 0; i < src->nopts; i++) opts[i + 1] = src->opts[i];
  nvrtcResult r = nvrtcCompileProgram(prog, nopt, opts);
  free(opts);
  if (r == NVRTC_ERROR_COMPILATION || r == NVRTC_ERROR_INVALID_OPTION) {
    size_t logn = 0;
    VL_NVRTC_CHECK(nvrtcGetProgramLogSize(prog, &logn));
    char *log = (char *)malloc(logn + 1);
    if (!log) return vl_fail(VL_EOOM, "%s: out of host memory for the compile log", src->program);
    log[0] = '\0';
    if (logn > 0 && nvrtcGetProgramLog(prog, log) != NVRTC_SUCCESS) log[0] = '\0';
    log[logn] = '\0';
    /* The log ends with a newline; the message should not. */
    size_t len = strlen(log);
    while (len > 0 && (log[len - 1] == '\n' || log[len - 1] == '\r')) log[--len] = '\0';
    vl_status s = vl_fail(VL_EINVAL, "%s: NVRTC %s for %s:\n%s", src->program,
                          r == NVRTC_ERROR_COMPILATION ? "compilation failed" : "rejected an option",
                          arch, len ? log : nvrtcGetErrorString(r));
    free(log);
    return s;
  }
  VL_NVRTC_CHECK(r);
  size_t n = 0;
  if (ptx) VL_NVRTC_CHECK(nvrtcGetPTXSize(prog, &n));
  else VL_NVRTC_CHECK(nvrtcGetCUBINSize(prog, &n));
  if (n == 0) return vl_fail(VL_ECUDA, "%s: NVRTC produced an empty image for %s", src->program, arch);
  char *buf = (char *)malloc(n + 1);
  if (!buf) return vl_fail(VL_EOOM, "%s: out of host memory for a %zu-byte image", src->program, n);
  r = ptx ? nvrtcGetPTX(prog, buf) : nvrtcGetCUBIN(prog, buf);
  if (r != NVRTC_SUCCESS) {
    free(buf);
    VL_NVRTC_CHECK(r);
  }
  buf[n] = '\0';
  *image = buf;
  *size = n;
  return VL_OK;
}

vl_status vl_rtc_nvrtc_compile(void *ud, const vl_rtc_source *src, const char *arch, bool ptx,
                               void **image, size_t *size) {
  (void)ud;
  const char *hdr_src[1] = {vl_rtc_prelude};
  const char *hdr_name[1] = {VL_RTC_PRELUDE_NAME};
  nvrtcProgram prog = NULL;
  VL_NVRTC_CHECK(nvrtcCreateProgram(&prog, src->source, src->program, 1, hdr_src, hdr_name));
  vl_status s = compile_program(prog, src, arch, ptx, image, size);
  nvrtcResult d = nvrtcDestroyProgram(&prog);
  if (s == VL_OK && d != NVRTC_SUCCESS) {
    free(*image);
    VL_NVRTC_CHECK(d);
  }
  return s;
}

static vl_status set_device(int dev) {
  int cur = -1;
  VL_CUDA_CHECK(cudaGetDevice(&cur));
  if (cur != dev) VL_CUDA_CHECK(cudaSetDevice(dev));
  return VL_OK;
}

vl_status vl_rtc_module_load(const vl_rtc_source *src, int dev, const char *cache_dir,
                             vl_rtc_module **out) {
  if (!src || !src->source || !src->program || !out) return vl_fail(VL_EINVAL, "vl_rtc_module_load: NULL argument");
  vl_device_info info;
  VL_TRY(vl_cuda_device_info(dev, &info));
  char arch[16], id[32];
  bool ptx = false;
  VL_TRY(vl_rtc_target(info.major, info.minor, arch, sizeof arch, &ptx));
  VL_TRY(vl_rtc_compiler_id(id, sizeof id));
  vl_rtc_image img;
  VL_TRY(vl_rtc_build(src, arch, ptx, cache_dir, vl_rtc_nvrtc_compile, NULL, id, &img));
  vl_rtc_module *m = (vl_rtc_module *)calloc(1, sizeof *m);
  if (!m) {
    vl_rtc_image_free(&img);
    return vl_fail(VL_EOOM, "%s: out of host memory", src->program);
  }
  vl_status s = set_device(dev);
  cudaLibrary_t lib = NULL;
  if (s == VL_OK) {
    cudaError_t e = cudaLibraryLoadData(&lib, img.data, NULL, NULL, 0, NULL, NULL, 0);
    if (e != cudaSuccess)
      s = vl_fail(VL_ECUDA, "%s: loading the %s image%s failed: %s", src->program, arch,
                  img.cached ? " from the cache" : "", cudaGetErrorString(e));
  }
  if (s != VL_OK) {
    vl_rtc_image_free(&img);
    free(m);
    return s;
  }
  m->library = lib;
  m->dev = dev;
  snprintf(m->arch, sizeof m->arch, "%s", arch);
  m->ptx = ptx;
  m->cached = img.cached;
  m->key = img.key;
  memcpy(m->path, img.path, sizeof m->path);
  memcpy(m->note, img.note, sizeof m->note);
  vl_rtc_image_free(&img); /* the library keeps its own copy */
  *out = m;
  return VL_OK;
}

vl_status vl_rtc_module_kernel(vl_rtc_module *m, const char *name, void **kernel) {
  if (!m || !m->library || !name || !kernel) return vl_fail(VL_EINVAL, "vl_rtc_module_kernel: NULL argument");
  cudaKernel_t k = NULL;
  cudaError_t e = cudaLibraryGetKernel(&k, (cudaLibrary_t)m->library, name);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return vl_fail(VL_EINVAL, "v100.kernel: the program has no kernel '%s' (declare it extern \"C\" "
                   "__global__, so that it keeps its plain name): %s", name, cudaGetErrorString(e));
  }
  *kernel = (void *)k;
  return VL_OK;
}

vl_status vl_rtc_kernel_params(vl_rtc_module *m, void *kernel, size_t *sizes, int max, int *n) {
  if (!m || !kernel || !sizes || !n) return vl_fail(VL_EINVAL, "vl_rtc_kernel_params: NULL argument");
  VL_TRY(set_device(m->dev));
  int count = 0;
  for (; count <= max; count++) {
    size_t off = 0, size = 0;
    cudaError_t e = cudaFuncGetParamInfo((const void *)kernel, (size_t)count, &off, &size);
    if (e != cudaSuccess) {
      (void)cudaGetLastError(); /* the end of the list is reported as an error */
      /* Index 0 failing may be "no parameters" or "cannot tell": the checks must not refuse a
       * good launch, so a kernel that reports nothing is left unchecked. */
      if (count == 0) count = -1;
      break;
    }
    if (count == max) return vl_fail(VL_EINVAL, "v100.kernel: the kernel takes more than %d parameters", max);
    sizes[count] = size;
  }
  *n = count;
  return VL_OK;
}

vl_status vl_rtc_launch(vl_rtc_module *m, void *kernel, const char *name, const unsigned grid[3],
                        const unsigned block[3], size_t shared, void **args) {
  if (!m || !kernel) return vl_fail(VL_EINVAL, "vl_rtc_launch: NULL module or kernel");
  void *stream = NULL;
  VL_TRY(vl_cuda_current_stream(m->dev, &stream));
  VL_TRY(set_device(m->dev));
  /* Above 48 KiB of dynamic shared memory a kernel must opt in (per device). */
  if (shared > 48u * 1024u) {
    cudaError_t e = cudaKernelSetAttributeForDevice((cudaKernel_t)kernel,
                                                    cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                    (int)(shared > 0x7fffffff ? 0x7fffffff : shared), m->dev);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      return vl_fail(VL_EINVAL, "v100.kernel '%s': %zu bytes of dynamic shared memory are more than "
                     "cuda:%d allows: %s", name, shared, m->dev, cudaGetErrorString(e));
    }
  }
  dim3 g = {grid[0], grid[1], grid[2]}, b = {block[0], block[1], block[2]};
  cudaError_t e = cudaLaunchKernel((const void *)kernel, g, b, args, shared, (cudaStream_t)stream);
  if (e != cudaSuccess) {
    /* A configuration error is not sticky; clear it so the next checked call starts clean. */
    (void)cudaGetLastError();
    return vl_fail(VL_ECUDA, "v100.kernel '%s': launch with grid {%u, %u, %u}, block {%u, %u, %u}, "
                   "shared %zu on cuda:%d failed: %s", name, grid[0], grid[1], grid[2], block[0], block[1],
                   block[2], shared, m->dev, cudaGetErrorString(e));
  }
  return VL_OK;
}

void vl_rtc_module_free(vl_rtc_module *m) {
  if (!m) return;
  if (m->library) {
    /* Launches are enqueued on the device's current stream: let them finish before their code is
     * unloaded. Not while that stream is capturing a graph (a synchronize would break the
     * capture, and a captured launch runs only when the graph is launched: the graph needs the
     * kernel object alive, docs/KERNELS.md). */
    void *stream = NULL;
    enum cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
    if (set_device(m->dev) == VL_OK && vl_cuda_current_stream(m->dev, &stream) == VL_OK &&
        cudaStreamIsCapturing((cudaStream_t)stream, &cap) == cudaSuccess && cap == cudaStreamCaptureStatusNone) {
      cudaError_t s = cudaStreamSynchronize((cudaStream_t)stream);
      if (s != cudaSuccess)
        (void)vl_fail(VL_ECUDA, "%s:%d: cudaStreamSynchronize: %s", __FILE__, __LINE__, cudaGetErrorString(s));
    }
    cudaError_t e = cudaLibraryUnload((cudaLibrary_t)m->library);
    if (e != cudaSuccess)
      (void)vl_fail(VL_ECUDA, "%s:%d: cudaLibraryUnload: %s", __FILE__, __LINE__, cudaGetErrorString(e));
  }
  free(m);
}

#else /* !VL_HAVE_CUDA */

#define VL_NO_NVRTC(fn) vl_fail(VL_EUNSUPPORTED, "%s: built without CUDA (NVRTC unavailable)", fn)

vl_status vl_rtc_compiler_id(char *buf, size_t n) { return VL_NO_NVRTC("v100.kernel"); }
vl_status vl_rtc_target(int major, int minor, char *arch, size_t n, bool *ptx) {
  return VL_NO_NVRTC("v100.kernel");
}
vl_status vl_rtc_nvrtc_compile(void *ud, const vl_rtc_source *src, const char *arch, bool ptx,
                               void **image, size_t *size) {
  return VL_NO_NVRTC("v100.kernel");
}
vl_status vl_rtc_module_load(const vl_rtc_source *src, int dev, const char *cache_dir,
                             vl_rtc_module **out) {
  return VL_NO_NVRTC("v100.kernel");
}
vl_status vl_rtc_module_kernel(vl_rtc_module *m, const char *name, void **kernel) {
  return VL_NO_NVRTC("v100.kernel");
}
vl_status vl_rtc_kernel_params(vl_rtc_module *m, void *kernel, size_t *sizes, int max, int *n) {
  return VL_NO_NVRTC("v100.kernel");
}
vl_status vl_rtc_launch(vl_rtc_module *m, void *kernel, const char *name, const unsigned grid[3],
                        const unsigned block[3], size_t shared, void **args) {
  return VL_NO_NVRTC("v100.kernel");
}
void vl_rtc_module_free(vl_rtc_module *m) { (void)m; }

#endif
