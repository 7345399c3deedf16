/* runtime/io/file_io.c: reading through zlib (see file_io.h). */
#include "runtime/io/file_io.h"

#include <errno.h>
#include <string.h>

#include "runtime/core/status.h"

int64_t vl_gz_read(gzFile gz, const char *what, const char *path, void *buf, size_t n) {
  size_t got = 0;
  while (got < n) {
    size_t want = n - got;
    if (want > (1u << 30)) want = 1u << 30; /* gzread takes an unsigned and returns an int */
    int r = gzread(gz, (char *)buf + got, (unsigned)want);
    if (r < 0) {
      int errnum = 0;
      const char *msg = gzerror(gz, &errnum);
      if (errnum == Z_BUF_ERROR) return (int64_t)got;
      vl_fail(VL_EIO, "%s: %s: %s", what, path,
              errnum == Z_ERRNO ? strerror(errno) : (msg ? msg : "zlib error"));
      return -1;
    }
    if (r == 0) break;
    got += (size_t)r;
  }
  return (int64_t)got;
}
