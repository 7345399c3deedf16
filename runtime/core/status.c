/* runtime/core/status.c: the thread-local error message behind vl_status. */
#define _POSIX_C_SOURCE 200809L
#include "runtime/core/status.h"

#include <stdio.h>
#include <string.h>

#define VL_ERRMSG_MAX 2048

static _Thread_local char vl_errbuf[VL_ERRMSG_MAX];

vl_status vl_failv(vl_status code, const char *fmt, va_list ap) {
  vsnprintf(vl_errbuf, sizeof vl_errbuf, fmt, ap);
  return code;
}

vl_status vl_fail(vl_status code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vl_failv(code, fmt, ap);
  va_end(ap);
  return code;
}

vl_status vl_fail_prefix(vl_status code, const char *fmt, ...) {
  char prefix[512], old[VL_ERRMSG_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(prefix, sizeof prefix, fmt, ap);
  va_end(ap);
  memcpy(old, vl_errbuf, sizeof old);
  /* Truncation of very long messages is acceptable: the start names the op. */
  int n = snprintf(vl_errbuf, sizeof vl_errbuf, "%s", prefix);
  if (n >= 0 && (size_t)n < sizeof vl_errbuf) memcpy(vl_errbuf + n, old, strnlen(old, sizeof vl_errbuf - (size_t)n - 1) + 1);
  vl_errbuf[sizeof vl_errbuf - 1] = 0;
  return code;
}

const char *vl_errmsg(void) { return vl_errbuf; }

void vl_errclear(void) { vl_errbuf[0] = '\0'; }

static const char *const status_names[] = {
    [VL_OK] = "VL_OK",         [VL_EINVAL] = "VL_EINVAL",   [VL_ESHAPE] = "VL_ESHAPE",
    [VL_EDTYPE] = "VL_EDTYPE", [VL_EDEVICE] = "VL_EDEVICE", [VL_EOOM] = "VL_EOOM",
    [VL_EFREED] = "VL_EFREED", [VL_EUNSUPPORTED] = "VL_EUNSUPPORTED", [VL_EIO] = "VL_EIO",
    [VL_ECUDA] = "VL_ECUDA",   [VL_ECUBLAS] = "VL_ECUBLAS", [VL_ECUDNN] = "VL_ECUDNN",
    [VL_ENCCL] = "VL_ENCCL",   [VL_EMPI] = "VL_EMPI", [VL_EGRAPH] = "VL_EGRAPH",       [VL_EINTERNAL] = "VL_EINTERNAL",
};
VL_TABLE_SIZE(status_names, VL_NSTATUS);

const char *vl_status_name(vl_status s) {
  if ((unsigned)s < VL_NSTATUS) return status_names[s];
  return "VL_E?";
}
