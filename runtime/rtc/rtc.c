/* runtime/rtc/rtc.c: signatures, the prelude, the key, the disk cache and vl_rtc_build (rtc.h).
 * Plain C without CUDA: the NVRTC compiler and the loading are in rtc_nvrtc.c. */
#define _DEFAULT_SOURCE /* realpath, S_ISVTX */
#define _POSIX_C_SOURCE 200809L
#include "runtime/rtc/rtc.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "runtime/io/replace.h"

/* ---- signatures ---- */

typedef struct type_name {
  const char *name;
  vl_dtype dtype;
  bool any;   /* void */
  bool scalar_ok, pointer_ok;
} type_name;

/* Several spellings per type: the C one kernels are written with and our dtype names. */
static const type_name TYPES[] = {
    {"float", VL_F32, false, true, true},         {"f32", VL_F32, false, true, true},
    {"double", VL_F64, false, true, true},        {"f64", VL_F64, false, true, true},
    {"half", VL_F16, false, false, true},         {"__half", VL_F16, false, false, true},
    {"vl_half", VL_F16, false, false, true},      {"f16", VL_F16, false, false, true},
    {"bfloat16", VL_BF16, false, false, true},    {"__nv_bfloat16", VL_BF16, false, false, true},
    {"vl_bf16", VL_BF16, false, false, true},     {"bf16", VL_BF16, false, false, true},
    {"int", VL_I32, false, true, true},           {"int32_t", VL_I32, false, true, true},
    {"int32", VL_I32, false, true, true},         {"i32", VL_I32, false, true, true},
    {"vl_i32", VL_I32, false, true, true},        {"long long", VL_I64, false, true, true},
    {"int64_t", VL_I64, false, true, true},       {"int64", VL_I64, false, true, true},
    {"i64", VL_I64, false, true, true},           {"vl_i64", VL_I64, false, true, true},
    {"unsigned char", VL_U8, false, false, true}, {"uint8_t", VL_U8, false, false, true},
    {"u8", VL_U8, false, false, true},            {"bool", VL_BOOL, false, false, true},
    {"void", VL_F32, true, false, true},
};

/* Unsigned scalars have no dtype of their own: they travel as the signed type of their width,
 * which is what the bits are. */
typedef struct uname {
  const char *name;
  vl_dtype dtype;
} uname;
static const uname UNSIGNED[] = {{"unsigned", VL_I32},  {"unsigned int", VL_I32}, {"uint32_t", VL_I32},
                                 {"uint32", VL_I32},    {"u32", VL_I32},          {"uint64_t", VL_I64},
                                 {"uint64", VL_I64},    {"u64", VL_I64},          {"size_t", VL_I64},
                                 {"unsigned long long", VL_I64}};

static const type_name *find_type(const char *s) {
  for (size_t i = 0; i < VL_COUNTOF(TYPES); i++)
    if (strcmp(s, TYPES[i].name) == 0) return &TYPES[i];
  return NULL;
}
static const uname *find_unsigned(const char *s) {
  for (size_t i = 0; i < VL_COUNTOF(UNSIGNED); i++)
    if (strcmp(s, UNSIGNED[i].name) == 0) return &UNSIGNED[i];
  return NULL;
}

/* One parameter as C declares it, e.g. "const float* __restrict__ x", "int64 n", "half *y":
 * words and stars; `const` anywhere before the star makes it const, `__restrict__` and a
 * trailing parameter name are allowed and ignored. */
static vl_status parse_param(const char *what, int idx, const char *text, vl_rtc_param *p) {
  vl_rtc_param r;
  memset(&r, 0, sizeof r);
  snprintf(r.text, sizeof r.text, "%s", text);
  char words[8][32];
  int nw = 0, stars = 0, star_at = -1; /* star_at: words before the first star */
  for (const char *c = text; *c;) {
    if (isspace((unsigned char)*c)) { c++; continue; }
    if (*c == '*') {
      if (stars++ == 0) star_at = nw;
      c++;
      continue;
    }
    if (!(isalnum((unsigned char)*c) || *c == '_'))
      return vl_fail(VL_EINVAL, "%s: signature parameter %d ('%s'): unexpected '%c'", what, idx, text, *c);
    size_t len = 0;
    while (isalnum((unsigned char)c[len]) || c[len] == '_') len++;
    if (nw == 8 || len >= sizeof words[0])
      return vl_fail(VL_EINVAL, "%s: signature parameter %d ('%s'): not a type", what, idx, text);
    memcpy(words[nw], c, len);
    words[nw++][len] = '\0';
    c += len;
  }
  if (stars > 1)
    return vl_fail(VL_EINVAL, "%s: signature parameter %d ('%s'): pointers to pointers are not "
                   "supported (a tensor passes one data pointer)", what, idx, text);
  r.pointer = stars == 1;
  int ntype = r.pointer ? star_at : nw;  /* words that may name the type */
  int after = r.pointer ? nw - star_at : 0;
  /* After the star: __restrict__ and at most one name. */
  int names = 0;
  for (int i = nw - after; i < nw; i++)
    if (strcmp(words[i], "__restrict__") != 0 && strcmp(words[i], "const") != 0) names++;
  if (names > 1)
    return vl_fail(VL_EINVAL, "%s: signature parameter %d ('%s'): not a type", what, idx, text);
  char type[64] = "";
  int used = 0;
  for (int pass = 0; pass < 2; pass++) {
    /* pass 0: every word names the type; pass 1 (scalars, no name seen yet): the last is a name */
    int last = ntype - (pass == 1 ? 1 : 0);
    if (pass == 1 && (r.pointer || ntype < 2)) break;
    type[0] = '\0';
    used = 0;
    r.is_const = false;
    for (int i = 0; i < last; i++) {
      if (strcmp(words[i], "const") == 0) { r.is_const = true; continue; }
      if (strlen(type) + strlen(words[i]) + 2 > sizeof type) break;
      if (used++) strcat(type, " ");
      strcat(type, words[i]);
    }
    if (find_type(type) || (!r.pointer && find_unsigned(type))) break;
  }
  if (!used) return vl_fail(VL_EINVAL, "%s: signature parameter %d is empty", what, idx);
  const type_name *tn = find_type(type);
  if (tn) {
    if (r.pointer ? !tn->pointer_ok : !tn->scalar_ok)
      return vl_fail(VL_EINVAL, "%s: signature parameter %d ('%s'): %s is only supported as a %s", what,
                     idx, text, type, r.pointer ? "scalar" : "pointer (pass scalars as float)");
    r.dtype = tn->dtype;
    r.any_dtype = tn->any;
    r.size = r.pointer ? sizeof(void *) : vl_dtype_size(r.dtype);
    *p = r;
    return VL_OK;
  }
  const uname *un = r.pointer ? NULL : find_unsigned(type);
  if (un) {
    r.dtype = un->dtype;
    r.is_unsigned = true;
    r.size = vl_dtype_size(r.dtype);
    *p = r;
    return VL_OK;
  }
  return vl_fail(VL_EINVAL, "%s: signature parameter %d ('%s'): unknown type '%s' (tensors: float*, "
                 "double*, half*, bfloat16*, int*, int64_t*, uint8_t*, bool*, void*, optionally const; "
                 "scalars: float, double, int, int64, uint32, uint64)", what, idx, text, type);
}

vl_status vl_rtc_parse_signature(const char *what, const char *sig, vl_rtc_param *params, int max,
                                 int *n) {
  if (!sig || !params || !n) return vl_fail(VL_EINVAL, "%s: NULL signature or output", what);
  vl_rtc_param tmp[VL_RTC_MAX_PARAMS];
  int count = 0;
  const char *p = sig;
  while (*p && isspace((unsigned char)*p)) p++;
  if (!*p) {
    *n = 0;
    return VL_OK;
  }
  for (;;) {
    const char *end = strchr(p, ',');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    if (count == VL_RTC_MAX_PARAMS || count == max)
      return vl_fail(VL_EINVAL, "%s: signature has more than %d parameters", what,
                     max < VL_RTC_MAX_PARAMS ? max : VL_RTC_MAX_PARAMS);
    char text[64];
    if (len >= sizeof text)
      return vl_fail(VL_EINVAL, "%s: signature parameter %d is too long (%zu characters)", what,
                     count + 1, len);
    while (len > 0 && isspace((unsigned char)*p)) p++, len--;
    while (len > 0 && isspace((unsigned char)p[len - 1])) len--;
    memcpy(text, p, len);
    text[len] = '\0';
    VL_TRY(parse_param(what, count + 1, text, &tmp[count]));
    count++;
    if (!end) break;
    p = end + 1;
  }
  memcpy(params, tmp, sizeof tmp[0] * (size_t)count);
  *n = count;
  return VL_OK;
}

const char *vl_rtc_param_dtype(const vl_rtc_param *p) {
  return p->any_dtype ? "any" : vl_dtype_name(p->dtype);
}

vl_status vl_rtc_check_params(const char *what, const vl_rtc_param *params, int n, const size_t *sizes, int nk,
                              bool args) {
  if (nk < 0) return VL_OK;
  if (n != nk) {
    if (args)
      return vl_fail(VL_EINVAL, "%s: %d argument%s given but the compiled kernel takes %d", what, n,
                     n == 1 ? "" : "s", nk);
    return vl_fail(VL_EINVAL, "%s: the signature has %d parameter%s but the compiled kernel takes %d", what, n,
                   n == 1 ? "" : "s", nk);
  }
  for (int i = 0; i < n; i++)
    if (params[i].size != sizes[i])
      return vl_fail(VL_EINVAL, "%s: %s %d ('%s') is %zu bytes but the kernel's parameter %d is %zu bytes", what,
                     args ? "argument" : "parameter", i + 1, params[i].text, params[i].size, i + 1, sizes[i]);
  return VL_OK;
}

/* ---- the prelude ---- */

/* Storage-only half types with conversions through PTX `cvt` (what cuda_fp16.h does inside),
 * so that f16/bf16 kernels compile with nothing but libnvrtc. Its first line still names this
 * file's old place, runtime/core/rtc.c: the prelude is hashed into every cache key, and editing
 * it would orphan every kernel already cached on disk. */
const char vl_rtc_prelude[] =
    "/* v100_rtc.h: shipped with v100lua (runtime/core/rtc.c) */\n"
    "#pragma once\n"
    "typedef long long vl_i64;\n"
    "typedef unsigned long long vl_u64;\n"
    "typedef int vl_i32;\n"
    "typedef unsigned int vl_u32;\n"
    "struct __align__(2) vl_half { unsigned short x; };\n"
    "struct __align__(2) vl_bf16 { unsigned short x; };\n"
    "static __device__ __forceinline__ float vl_h2f(vl_half h) {\n"
    "  float f; asm(\"cvt.f32.f16 %0, %1;\" : \"=f\"(f) : \"h\"(h.x)); return f; }\n"
    "static __device__ __forceinline__ vl_half vl_f2h(float f) {\n"
    "  vl_half h; asm(\"cvt.rn.f16.f32 %0, %1;\" : \"=h\"(h.x) : \"f\"(f)); return h; }\n"
    "static __device__ __forceinline__ float vl_bf2f(vl_bf16 b) {\n"
    "  return __uint_as_float(((unsigned)b.x) << 16); }\n"
    "static __device__ __forceinline__ vl_bf16 vl_f2bf(float f) {\n"
    "  vl_bf16 b; unsigned u = __float_as_uint(f);\n"
    "  if ((u & 0x7fffffffu) > 0x7f800000u) { b.x = (unsigned short)((u >> 16) | 0x40u); return b; }\n"
    "  u += 0x7fffu + ((u >> 16) & 1u); b.x = (unsigned short)(u >> 16); return b; }\n"
    "/* Loads as float and stores from float for every element type, so that one template body\n"
    " * serves f32, f16 and bf16 kernels. */\n"
    "static __device__ __forceinline__ float vl_float(float x) { return x; }\n"
    "static __device__ __forceinline__ float vl_float(double x) { return (float)x; }\n"
    "static __device__ __forceinline__ float vl_float(vl_half x) { return vl_h2f(x); }\n"
    "static __device__ __forceinline__ float vl_float(vl_bf16 x) { return vl_bf2f(x); }\n"
    "static __device__ __forceinline__ void vl_store(float *p, float v) { *p = v; }\n"
    "static __device__ __forceinline__ void vl_store(double *p, float v) { *p = v; }\n"
    "static __device__ __forceinline__ void vl_store(vl_half *p, float v) { *p = vl_f2h(v); }\n"
    "static __device__ __forceinline__ void vl_store(vl_bf16 *p, float v) { *p = vl_f2bf(v); }\n"
    "/* The global index of this thread along x (64-bit: grids may cover more than 2^31 elements). */\n"
    "static __device__ __forceinline__ vl_i64 vl_index(void) {\n"
    "  return (vl_i64)blockIdx.x * blockDim.x + threadIdx.x; }\n"
    "static __device__ __forceinline__ vl_i64 vl_stride(void) {\n"
    "  return (vl_i64)gridDim.x * blockDim.x; }\n";

/* ---- hashing and the key ---- */

uint64_t vl_rtc_hash(uint64_t h, const void *data, size_t n) {
  const unsigned char *p = (const unsigned char *)data;
  for (size_t i = 0; i < n; i++) {
    h ^= p[i];
    h *= 1099511628211ULL;
  }
  return h;
}

/* Length first, so that ("ab","c") and ("a","bc") hash apart. */
static uint64_t hash_str(uint64_t h, const char *s) {
  uint64_t len = s ? (uint64_t)strlen(s) : UINT64_MAX;
  h = vl_rtc_hash(h, &len, sizeof len);
  return s ? vl_rtc_hash(h, s, (size_t)len) : h;
}

#define CACHE_FORMAT 1u
static const char CACHE_MAGIC[8] = {'V', '1', '0', '0', 'R', 'T', 'C', '\0'};

uint64_t vl_rtc_key(const vl_rtc_source *src, const char *arch, bool ptx, const char *compiler_id) {
  uint64_t h = VL_RTC_HASH_INIT;
  uint32_t fmt = CACHE_FORMAT;
  h = vl_rtc_hash(h, &fmt, sizeof fmt);
  h = hash_str(h, src->source);
  uint64_t nopts = (uint64_t)(src->nopts > 0 ? src->nopts : 0);
  h = vl_rtc_hash(h, &nopts, sizeof nopts);
  for (int i = 0; i < src->nopts; i++) h = hash_str(h, src->opts[i]);
  h = hash_str(h, arch);
  unsigned char k = ptx ? 1 : 0;
  h = vl_rtc_hash(h, &k, 1);
  h = hash_str(h, compiler_id);
  return hash_str(h, vl_rtc_prelude);
}

/* ---- the cache directory ---- */

vl_status vl_rtc_cache_dir(char *buf, size_t n) {
  const char *env = getenv("V100_CACHE_DIR");
  int w;
  if (env && *env) {
    w = snprintf(buf, n, "%s", env);
  } else if ((env = getenv("XDG_CACHE_HOME")) && *env) {
    w = snprintf(buf, n, "%s/v100lua/kernels", env);
  } else if ((env = getenv("HOME")) && *env) {
    w = snprintf(buf, n, "%s/.cache/v100lua/kernels", env);
  } else {
    return vl_fail(VL_EINVAL, "v100.kernel: no cache directory (set V100_CACHE_DIR, XDG_CACHE_HOME or HOME)");
  }
  if (w < 0 || (size_t)w >= n) return vl_fail(VL_EINVAL, "v100.kernel: cache directory path is too long");
  return VL_OK;
}

/* mkdir -p: every missing component 0700 (the cache is the user's own: vl_rtc_dir_trusted
 * refuses one that others can write, and so one somebody else made for us with 0777). */
static vl_status make_dirs(const char *dir) {
  char p[1024];
  int w = snprintf(p, sizeof p, "%s", dir);
  if (w < 0 || (size_t)w >= sizeof p) return vl_fail(VL_EIO, "%s: path too long", dir);
  for (char *c = p + 1;; c++) {
    if (*c != '/' && *c != '\0') continue;
    char save = *c;
    *c = '\0';
    if (mkdir(p, 0700) != 0 && errno != EEXIST)
      return vl_fail(VL_EIO, "%s: cannot create %s: %s", dir, p, strerror(errno));
    *c = save;
    if (!save) break;
  }
  struct stat st;
  if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) return vl_fail(VL_EIO, "%s: not a directory", dir);
  return VL_OK;
}

/* One directory of the path: the last must be ours and closed to group and others; those above
 * ours or root's, and closed to group and others unless sticky (where only an entry's owner may
 * rename or remove it). */
static bool dir_ok(const char *p, bool last, char *why, size_t why_n) {
  struct stat st;
  if (stat(p, &st) != 0) {
    snprintf(why, why_n, "cache directory %s: %s", p, strerror(errno));
    return false;
  }
  unsigned mode = (unsigned)(st.st_mode & 07777);
  if (last && st.st_uid != geteuid()) {
    snprintf(why, why_n, "cache directory %s belongs to uid %ld, not to you (uid %ld): not trusted", p,
             (long)st.st_uid, (long)geteuid());
    return false;
  }
  if (last && (mode & 022)) {
    snprintf(why, why_n, "cache directory %s is writable by group or others (mode %04o; chmod 700 it): not trusted",
             p, mode);
    return false;
  }
  if (!last && st.st_uid != geteuid() && st.st_uid != 0) {
    snprintf(why, why_n, "cache directory: %s above it belongs to uid %ld: not trusted", p, (long)st.st_uid);
    return false;
  }
  if (!last && (mode & 022) && !(mode & S_ISVTX)) {
    snprintf(why, why_n, "cache directory: %s above it is writable by group or others without the sticky bit "
             "(mode %04o): not trusted", p, mode);
    return false;
  }
  return true;
}

bool vl_rtc_dir_trusted(const char *dir, char *why, size_t why_n) {
  if (why_n) why[0] = '\0';
  char *real = realpath(dir, NULL);
  if (!real) {
    snprintf(why, why_n, "cache directory %s: %s", dir, strerror(errno));
    return false;
  }
  bool ok = dir_ok("/", real[1] == '\0', why, why_n);
  for (char *c = real + 1; ok && *c; c++) {
    if (*c != '/') continue;
    *c = '\0';
    ok = dir_ok(real, false, why, why_n);
    *c = '/';
  }
  if (ok && real[1]) ok = dir_ok(real, true, why, why_n);
  free(real);
  return ok;
}

/* ---- cache files ---- */

typedef struct cache_header {
  char magic[8];
  uint32_t format, kind; /* kind: 0 cubin, 1 PTX */
  uint64_t key;
  uint64_t size;
  uint32_t crc, pad;
} cache_header;
VL_STATIC_ASSERT(sizeof(cache_header) == 40, "cache header layout");

/* Cubins of real kernels are kilobytes to a few megabytes; anything claiming more is damage. */
#define CACHE_MAX_PAYLOAD ((uint64_t)256 << 20)

static uint32_t crc_of(const void *data, size_t size) {
  uLong c = crc32(0L, Z_NULL, 0);
  const unsigned char *p = (const unsigned char *)data;
  while (size > 0) { /* crc32 takes a uInt length */
    uInt chunk = size > (1u << 30) ? (1u << 30) : (uInt)size;
    c = crc32(c, p, chunk);
    p += chunk;
    size -= chunk;
  }
  return (uint32_t)c;
}

static bool write_all(int fd, const void *data, size_t n) {
  const char *p = (const char *)data;
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= (size_t)w;
  }
  return true;
}

vl_status vl_rtc_cache_write(const char *path, uint64_t key, bool ptx, const void *data, size_t size) {
  cache_header h;
  memset(&h, 0, sizeof h);
  memcpy(h.magic, CACHE_MAGIC, sizeof h.magic);
  h.format = CACHE_FORMAT;
  h.kind = ptx ? 1u : 0u;
  h.key = key;
  h.size = size;
  h.crc = crc_of(data, size);
  vl_replace rp;
  VL_TRY(vl_replace_begin(&rp, "v100.kernel cache", path));
  rp.mode = 0600; /* only ours: vl_rtc_cache_read refuses a file others can write */
  if (!write_all(rp.fd, &h, sizeof h) || !write_all(rp.fd, data, size)) {
    int e = errno;
    vl_replace_abort(&rp);
    return vl_fail(VL_EIO, "v100.kernel cache: %s: write failed: %s", path, strerror(e));
  }
  vl_status s = vl_replace_commit(&rp);
  if (s != VL_OK) vl_replace_abort(&rp);
  return s;
}

static bool read_all(int fd, void *data, size_t n) {
  char *p = (char *)data;
  while (n > 0) {
    ssize_t r = read(fd, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= (size_t)r;
  }
  return true;
}

vl_status vl_rtc_cache_read(const char *path, uint64_t key, bool ptx, void **data, size_t *size,
                            bool *hit, char *why, size_t why_n) {
  *hit = false;
  if (why_n) why[0] = '\0';
  /* O_NOFOLLOW: a link in the cache directory is not a cache file */
  int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ELOOP) snprintf(why, why_n, "%s: a symbolic link, not trusted; recompiled", path);
    else if (errno != ENOENT) snprintf(why, why_n, "cannot open %s: %s", path, strerror(errno));
    return VL_OK;
  }
  const char *bad = NULL;
  void *buf = NULL;
  cache_header h;
  struct stat st;
  char owner[96];
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) bad = "not a regular file";
  else if (st.st_uid != geteuid()) {
    snprintf(owner, sizeof owner, "belongs to uid %ld, not to you: not trusted", (long)st.st_uid);
    bad = owner;
  } else if (st.st_mode & 022) {
    snprintf(owner, sizeof owner, "writable by group or others (mode %04o): not trusted", (unsigned)(st.st_mode & 07777));
    bad = owner;
  }
  else if ((uint64_t)st.st_size < sizeof h || !read_all(fd, &h, sizeof h)) bad = "shorter than its header";
  else if (memcmp(h.magic, CACHE_MAGIC, sizeof h.magic) != 0 || h.format != CACHE_FORMAT)
    bad = "not a v100lua kernel cache file of this format";
  else if (h.key != key || h.kind != (ptx ? 1u : 0u)) bad = "holds another program";
  else if (h.size > CACHE_MAX_PAYLOAD || (uint64_t)st.st_size != sizeof h + h.size)
    bad = "its size does not match its header (truncated or appended to)";
  else if (!(buf = malloc((size_t)h.size + 1))) bad = "out of host memory";
  else if (!read_all(fd, buf, (size_t)h.size)) bad = "short read";
  else if (crc_of(buf, (size_t)h.size) != h.crc) bad = "CRC-32 mismatch (corrupt)";
  close(fd);
  if (bad) {
    free(buf);
    snprintf(why, why_n, "%s: %s; recompiled", path, bad);
    return VL_OK;
  }
  ((char *)buf)[h.size] = '\0'; /* PTX is text: loaders want it terminated */
  *data = buf;
  *size = (size_t)h.size;
  *hit = true;
  return VL_OK;
}

/* ---- building ---- */

vl_status vl_rtc_build(const vl_rtc_source *src, const char *arch, bool ptx, const char *cache_dir,
                       vl_rtc_compiler cc, void *cc_ud, const char *compiler_id, vl_rtc_image *img) {
  if (!src || !src->source || !arch || !cc || !img)
    return vl_fail(VL_EINVAL, "vl_rtc_build: NULL argument");
  vl_rtc_image r;
  memset(&r, 0, sizeof r);
  r.ptx = ptx;
  r.key = vl_rtc_key(src, arch, ptx, compiler_id);
  char dir[900];
  bool use_cache = true;
  if (!cache_dir) {
    if (vl_rtc_cache_dir(dir, sizeof dir) != VL_OK) {
      snprintf(r.note, sizeof r.note, "%s", vl_errmsg());
      use_cache = false;
    }
  } else if (!*cache_dir) {
    use_cache = false;
  } else if ((size_t)snprintf(dir, sizeof dir, "%s", cache_dir) >= sizeof dir) {
    snprintf(r.note, sizeof r.note, "cache directory path is too long");
    use_cache = false;
  }
  if (use_cache) {
    snprintf(r.path, sizeof r.path, "%s/%016llx-%s.%s", dir, (unsigned long long)r.key, arch,
             ptx ? "ptx" : "cubin");
    /* A directory that is there must be trusted before anything in it is read; one that is not
     * there yet is made (0700) and checked after the compile. */
    struct stat st;
    if (stat(dir, &st) == 0 && !vl_rtc_dir_trusted(dir, r.note, sizeof r.note)) {
      use_cache = false;
      snprintf(r.note + strlen(r.note), sizeof r.note - strlen(r.note), "; compiled, not cached");
    }
  }
  if (use_cache) {
    bool hit = false;
    VL_TRY(vl_rtc_cache_read(r.path, r.key, ptx, &r.data, &r.size, &hit, r.note, sizeof r.note));
    if (hit) {
      r.cached = true;
      *img = r;
      return VL_OK;
    }
  }
  VL_TRY(cc(cc_ud, src, arch, ptx, &r.data, &r.size));
  if (use_cache) {
    /* The kernel works without its cache file: a write failure is a note, not an error. */
    vl_status s = make_dirs(dir);
    char why[sizeof r.note];
    if (s == VL_OK && !vl_rtc_dir_trusted(dir, why, sizeof why)) s = vl_fail(VL_EIO, "%s", why);
    if (s == VL_OK) s = vl_rtc_cache_write(r.path, r.key, ptx, r.data, r.size);
    if (s != VL_OK) snprintf(r.note, sizeof r.note, "not cached: %s", vl_errmsg());
    vl_errclear();
  }
  *img = r;
  return VL_OK;
}

void vl_rtc_image_free(vl_rtc_image *img) {
  if (!img) return;
  free(img->data);
  img->data = NULL;
  img->size = 0;
}
