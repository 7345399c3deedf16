/* runtime/rtc/rtc.h: kernels compiled at run time (NVRTC), for `v100.kernel` (bindings/l_kernel.c).
 *
 * Three layers, the first two testable without CUDA (tests/c/test_rtc.c):
 *   1. signatures: "float*, const float*, int64" parsed into parameter descriptions, what the
 *      bindings check launch arguments against and how many bytes each scalar takes;
 *   2. the disk cache and vl_rtc_build: a compiled image (cubin, or PTX when NVRTC cannot target
 *      the device's architecture) is looked up under a key = hash(source, options, arch, compiler
 *      version, our prelude header), compiled by a compiler callback on a miss and written
 *      atomically (runtime/io/replace.c). A short, corrupt or foreign cache file is recompiled,
 *      never trusted;
 *   3. with VL_HAVE_CUDA: the NVRTC compiler, loading an image as a cudaLibrary_t (context-
 *      independent, runtime API only), looking kernels up and launching them on the device's
 *      current stream (so a launch inside CUDA-graph capture is captured). Without CUDA these
 *      fail with VL_EUNSUPPORTED.
 *
 * Kernels must be `extern "C" __global__` (looked up by their plain name). The key does not hold
 * a kernel name: one image holds every kernel of its source, so a forward and a backward kernel
 * of one source share one compilation. */
#ifndef VL_RTC_H
#define VL_RTC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/core/dtype.h"
#include "runtime/core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- 1. signatures ---- */

#define VL_RTC_MAX_PARAMS 32

typedef struct vl_rtc_param {
  bool pointer;     /* a tensor's data pointer */
  bool is_const;    /* `const T*`: the kernel only reads it */
  bool any_dtype;   /* void*: any tensor dtype */
  bool is_unsigned; /* an unsigned scalar: travels as the signed type of its width */
  vl_dtype dtype;   /* the element type of a pointer, or the scalar's type */
  size_t size;      /* bytes in the parameter buffer: 8 for pointers */
  char text[64];    /* as written: for messages */
} vl_rtc_param;

/* Parses a comma-separated list of C types. Pointers: `T*` or `const T*` with T one of float,
 * double, half/__half/vl_half, bfloat16/__nv_bfloat16/vl_bf16, int/int32_t, long long/int64_t,
 * unsigned char/uint8_t/bool, or void (any dtype). Scalars: float/f32, double/f64, int/int32/i32,
 * int64/int64_t/long long/i64, unsigned/uint32/u32, uint64/size_t/u64. An empty string is no
 * parameters. VL_EINVAL "<what>: signature parameter N ('text'): ..." on anything else. */
vl_status vl_rtc_parse_signature(const char *what, const char *sig, vl_rtc_param *params, int max,
                                 int *n);
/* The dtype name a parameter takes ("f32", "any") for messages. */
const char *vl_rtc_param_dtype(const vl_rtc_param *p);
/* Checks n parameters (a signature, or the arguments of a launch without one: `args` true)
 * against the byte sizes of the compiled kernel's parameters (nk of them; nk < 0: unknown,
 * nothing to check). A count or size mismatch would make the kernel read garbage: VL_EINVAL
 * "<what>: the signature has 3 parameters but the compiled kernel takes 4" or
 * "<what>: parameter 2 ('int n') is 4 bytes but the kernel's parameter 2 is 8 bytes". */
vl_status vl_rtc_check_params(const char *what, const vl_rtc_param *params, int n, const size_t *sizes, int nk,
                              bool args);

/* ---- 2. hashing, the disk cache, building ---- */

/* FNV-1a, 64 bits, continuing from h (start with VL_RTC_HASH_INIT). */
#define VL_RTC_HASH_INIT 14695981039346656037ULL
uint64_t vl_rtc_hash(uint64_t h, const void *data, size_t n);

/* The prelude every program may include as <v100_rtc.h>: half and bf16 storage types and
 * conversions (NVRTC has no CUDA headers of its own without the toolkit's include directory),
 * 64-bit integer names and an index helper. Part of the key. */
extern const char vl_rtc_prelude[];
#define VL_RTC_PRELUDE_NAME "v100_rtc.h"

typedef struct vl_rtc_source {
  const char *source;            /* CUDA C++ */
  const char *program;           /* file name in the compiler's messages, e.g. "fused_act.cu" */
  int nopts;
  const char *const *opts;       /* the user's NVRTC options (-arch is added) */
} vl_rtc_source;

/* A compiler: compiles src for arch ("sm_90", or "compute_90" for PTX when ptx is true) into a
 * new malloc'd image. On failure sets the message (with the compiler's log) and returns non-OK;
 * outputs untouched. */
typedef vl_status (*vl_rtc_compiler)(void *ud, const vl_rtc_source *src, const char *arch, bool ptx,
                                     void **image, size_t *size);

typedef struct vl_rtc_image {
  void *data;            /* malloc'd; vl_rtc_image_free */
  size_t size;
  bool ptx;              /* PTX text (NUL-terminated) rather than a cubin */
  bool cached;           /* read from the disk cache, not compiled */
  uint64_t key;
  char path[1024];       /* the cache file; "" when the cache is off */
  char note[256];        /* why the cache could not be read or written ("" when it could) */
} vl_rtc_image;

/* The cache directory: $V100_CACHE_DIR, else $XDG_CACHE_HOME/v100lua/kernels, else
 * $HOME/.cache/v100lua/kernels. VL_EINVAL when none is set or the result does not fit. */
vl_status vl_rtc_cache_dir(char *buf, size_t n);

/* Whether a cache directory may be trusted (issue 27: a cubin in it is loaded and run in this
 * process, and its key is a public hash anyone can compute). Trusted: the directory (symlinks
 * resolved) belongs to the caller's effective uid and is not writable by group or others, and
 * every directory above it belongs to the caller or root and is not writable by group or others
 * unless it has the sticky bit (/tmp), so nobody else can rename it away and put their own in its
 * place. false with *why (a sentence naming the directory, its owner and mode) otherwise, or
 * when it cannot be examined. Cache files are checked alike in vl_rtc_cache_read. */
bool vl_rtc_dir_trusted(const char *dir, char *why, size_t why_n);

/* The key of a program: hash of the format version, source, options, arch, ptx flag, the
 * compiler's identity (e.g. "nvrtc 13.0") and the prelude. */
uint64_t vl_rtc_key(const vl_rtc_source *src, const char *arch, bool ptx, const char *compiler_id);

/* Cache files: a 32-byte header (magic, format, kind, key, payload size, CRC-32 of the payload)
 * and the payload, written with mode 0600. vl_rtc_cache_read: *hit false when the file is absent,
 * short, corrupt, of another key, a symlink, or not trusted: not the caller's or writable by group
 * or others (*why says which, "" when absent); *data is malloc'd on a hit. */
vl_status vl_rtc_cache_write(const char *path, uint64_t key, bool ptx, const void *data, size_t size);
vl_status vl_rtc_cache_read(const char *path, uint64_t key, bool ptx, void **data, size_t *size,
                            bool *hit, char *why, size_t why_n);

/* Looks the program up in the cache under cache_dir (NULL: vl_rtc_cache_dir(); "": no cache),
 * compiles it with cc on a miss and stores the result. Missing directories are created 0700; a
 * directory vl_rtc_dir_trusted refuses is neither read nor written. A cache that cannot be
 * created, read, written or trusted is not an error: the image is compiled and img->note says
 * why. */
vl_status vl_rtc_build(const vl_rtc_source *src, const char *arch, bool ptx, const char *cache_dir,
                       vl_rtc_compiler cc, void *cc_ud, const char *compiler_id, vl_rtc_image *img);
void vl_rtc_image_free(vl_rtc_image *img);

/* ---- 3. NVRTC, modules, launches (VL_HAVE_CUDA) ---- */

/* "nvrtc 13.0" into buf. VL_EUNSUPPORTED without CUDA. */
vl_status vl_rtc_compiler_id(char *buf, size_t n);
/* The target for compute capability major.minor: "sm_XY" when NVRTC supports it, else PTX for
 * the newest virtual arch NVRTC has below it ("compute_XY", *ptx true); VL_EUNSUPPORTED when the
 * device is older than anything NVRTC targets. */
vl_status vl_rtc_target(int major, int minor, char *arch, size_t n, bool *ptx);
/* The NVRTC compiler (a vl_rtc_compiler; ud unused). Adds -arch=<arch> and the prelude header.
 * A compile error is VL_EINVAL "<program>: NVRTC compilation failed for <arch>:\n<log>". */
vl_status vl_rtc_nvrtc_compile(void *ud, const vl_rtc_source *src, const char *arch, bool ptx,
                               void **image, size_t *size);

typedef struct vl_rtc_module {
  void *library;         /* cudaLibrary_t */
  int dev;               /* the device whose architecture it was built for */
  char arch[16];
  bool ptx, cached;
  uint64_t key;
  char path[1024], note[256]; /* from vl_rtc_image */
} vl_rtc_module;

/* Builds (through the cache) and loads src for device dev. */
vl_status vl_rtc_module_load(const vl_rtc_source *src, int dev, const char *cache_dir,
                             vl_rtc_module **out);
/* The kernel `name` (a cudaKernel_t). VL_EINVAL naming the program when there is none. */
vl_status vl_rtc_module_kernel(vl_rtc_module *m, const char *name, void **kernel);
/* The byte sizes of the kernel's parameters as compiled (cudaFuncGetParamInfo), at most max;
 * *n = -1 when the driver cannot tell (then nothing can be checked). */
vl_status vl_rtc_kernel_params(vl_rtc_module *m, void *kernel, size_t *sizes, int max, int *n);
/* Launches on the current stream of m->dev; args[i] points at parameter i's bytes. Dynamic shared
 * memory above 48 KiB is opted into first. A bad configuration is VL_ECUDA naming the kernel,
 * grid and block. */
vl_status vl_rtc_launch(vl_rtc_module *m, void *kernel, const char *name, const unsigned grid[3],
                        const unsigned block[3], size_t shared, void **args);
/* Unloads the library (NULL is fine). */
void vl_rtc_module_free(vl_rtc_module *m);

#ifdef __cplusplus
}
#endif
#endif
