/* tests/fuzz/fuzz_common.h: what every libFuzzer target here shares. The runtime's readers take
 * paths (and the shard reader maps its file), so an input is written to a memfd and read back
 * through /proc/self/fd/N: no disk, and the reader runs exactly as on a user's file. */
#ifndef VL_FUZZ_COMMON_H
#define VL_FUZZ_COMMON_H
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

/* A memfd holding data; its path in *path. Returns the fd (close it), or -1. */
static inline int vl_fuzz_file(const uint8_t *data, size_t size, char *path, size_t cap) {
  int fd = memfd_create("vl_fuzz", 0);
  if (fd < 0) return -1;
  size_t off = 0;
  while (off < size) {
    ssize_t w = write(fd, data + off, size - off);
    if (w <= 0) {
      close(fd);
      return -1;
    }
    off += (size_t)w;
  }
  snprintf(path, cap, "/proc/self/fd/%d", fd);
  return fd;
}

#endif
