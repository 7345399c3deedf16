/* runtime/core/status.h: status codes and the thread-local error message.
 *
 * Every runtime function that can fail returns a vl_status and leaves its outputs untouched on
 * failure. The human-readable message (naming the op, shapes, dtypes, devices) goes into a
 * thread-local buffer that the Lua bindings turn into the Lua error. The runtime never calls
 * exit() and never prints. */
#ifndef VL_STATUS_H
#define VL_STATUS_H

#include <stdarg.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum vl_status {
  VL_OK = 0,
  VL_EINVAL,       /* bad argument value (dim out of range, negative size, bad option) */
  VL_ESHAPE,       /* shapes that do not fit together */
  VL_EDTYPE,       /* dtype not supported by the op, or mismatched */
  VL_EDEVICE,      /* tensors on different devices, or no such device */
  VL_EOOM,         /* out of memory (device or host) */
  VL_EFREED,       /* tensor used after free */
  VL_EUNSUPPORTED, /* built without the feature (e.g. CUDA) */
  VL_EIO,          /* file could not be read or written, or a format error */
  VL_ECUDA,        /* a CUDA runtime call failed */
  VL_ECUBLAS,
  VL_ECUDNN,
  VL_ENCCL,
  VL_EMPI,
  VL_EGRAPH,       /* an operation that a CUDA graph capture cannot record */
  VL_EINTERNAL,    /* a bug: an invariant of ours broke */
  VL_NSTATUS       /* the number of codes, not a code */
} vl_status;

/* Tables indexed by an enum get one entry per value, checked when compiling: `VL_TABLE_SIZE(names,
 * VL_NDTYPES);` next to an unsized array fails the build when a value is added to the enum (or an
 * entry to the table) without the other. C and CUDA C++ alike. */
#define VL_COUNTOF(a) (sizeof(a) / sizeof((a)[0]))
#ifdef __cplusplus
#define VL_STATIC_ASSERT(cond, msg) static_assert(cond, msg)
#else
#define VL_STATIC_ASSERT(cond, msg) _Static_assert(cond, msg)
#endif
#define VL_TABLE_SIZE(table, count) \
  VL_STATIC_ASSERT(VL_COUNTOF(table) == (size_t)(count), #table ": one entry per value of its enum (" #count ")")

/* Sets the thread-local message (printf-style) and returns `code`, so that a failing path is
 * one line: `return vl_fail(VL_ESHAPE, "add: shapes %s and %s ...", ...);` */
vl_status vl_fail(vl_status code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
vl_status vl_failv(vl_status code, const char *fmt, va_list ap);

/* Prepends "<prefix>" to the current message (e.g. the op name or module path) and returns
 * `code` unchanged. */
vl_status vl_fail_prefix(vl_status code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

const char *vl_errmsg(void);          /* the last message of this thread ("" if none) */
void vl_errclear(void);
const char *vl_status_name(vl_status s); /* "VL_ESHAPE" ... */

/* Propagate a failure unchanged. */
#define VL_TRY(expr)                   \
  do {                                 \
    vl_status vl_try_s_ = (expr);      \
    if (vl_try_s_ != VL_OK) return vl_try_s_; \
  } while (0)

#ifdef __cplusplus
}
#endif
#endif
