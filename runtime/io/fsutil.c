/* runtime/io/fsutil.c: directory steps of checkpoints (see fsutil.h). */
#define _GNU_SOURCE /* renameat2, nftw's FTW_PHYS */
#include "runtime/io/fsutil.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/io/replace.h"

vl_status vl_fs_mkdir(const char *what, const char *path) {
  size_t n = strlen(path);
  if (n == 0) return vl_fail(VL_EINVAL, "%s: the directory name is empty", what);
  char *p = malloc(n + 1);
  if (!p) return vl_fail(VL_EOOM, "%s: out of memory", what);
  memcpy(p, path, n + 1);
  /* Each prefix that ends before a '/', then the whole path; an existing one must be a
   * directory (the message names the one that is not, a file where a parent should be). */
  vl_status s = VL_OK;
  for (size_t i = 1; i <= n && s == VL_OK; i++) {
    if (i < n && p[i] != '/') continue;
    char c = p[i];
    p[i] = '\0';
    struct stat st;
    if (mkdir(p, 0777) != 0 && errno != EEXIST) {
      s = vl_fail(VL_EIO, "%s: %s: cannot create directory %s: %s", what, path, p, strerror(errno));
    } else if (stat(p, &st) != 0 || !S_ISDIR(st.st_mode)) { /* existed (or raced away) */
      if (i == n) s = vl_fail(VL_EIO, "%s: %s: exists and is not a directory", what, path);
      else s = vl_fail(VL_EIO, "%s: %s: %s exists and is not a directory", what, path, p);
    }
    p[i] = c;
  }
  free(p);
  return s;
}

vl_status vl_fs_fsync_dir(const char *path) {
  int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return vl_fail(VL_EIO, "fsync_dir: %s: %s", path, strerror(errno));
  /* EINVAL: a file system that cannot sync directories (some FUSE mounts); nothing to do there */
  int r = fsync(fd), err = errno;
  close(fd);
  if (r != 0 && err != EINVAL) return vl_fail(VL_EIO, "fsync_dir: %s: %s", path, strerror(err));
  return VL_OK;
}

vl_status vl_fs_truncate(const char *path, uint64_t size) {
  if (size > (uint64_t)INT64_MAX) return vl_fail(VL_EINVAL, "truncate: %s: size %llu out of range", path, (unsigned long long)size);
  if (truncate(path, (off_t)size) != 0) return vl_fail(VL_EIO, "truncate: %s: %s", path, strerror(errno));
  return VL_OK;
}

void vl_fs_free_list(char **names, int n) {
  if (!names) return;
  for (int i = 0; i < n; i++) free(names[i]);
  free(names);
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

vl_status vl_fs_list_dir(const char *path, char ***names, int *n) {
  DIR *d = opendir(path);
  if (!d) return vl_fail(VL_EIO, "list_dir: %s: %s", path, strerror(errno));
  char **v = NULL;
  int cnt = 0, cap = 0;
  struct dirent *e;
  vl_status s = VL_OK;
  while ((e = readdir(d)) != NULL) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    if (cnt == cap) {
      int nc = cap ? 2 * cap : 16;
      char **nv = (char **)realloc(v, sizeof *v * (size_t)nc);
      if (!nv) { s = vl_fail(VL_EOOM, "list_dir: %s: out of memory", path); break; }
      v = nv, cap = nc;
    }
    if (!(v[cnt] = strdup(e->d_name))) { s = vl_fail(VL_EOOM, "list_dir: %s: out of memory", path); break; }
    cnt++;
  }
  closedir(d);
  if (s != VL_OK) {
    vl_fs_free_list(v, cnt);
    return s;
  }
  if (cnt) qsort(v, (size_t)cnt, sizeof *v, cmp_str);
  *names = v;
  *n = cnt;
  return VL_OK;
}

static int remove_one(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb, (void)flag, (void)ftw;
  return remove(p) == 0 || errno == ENOENT ? 0 : -1;
}

vl_status vl_fs_remove_tree(const char *path) {
  struct stat st;
  if (lstat(path, &st) != 0) {
    if (errno == ENOENT) return VL_OK;
    return vl_fail(VL_EIO, "remove_tree: %s: %s", path, strerror(errno));
  }
  /* depth first (children before their directory), not following symlinks */
  if (nftw(path, remove_one, 16, FTW_DEPTH | FTW_PHYS) != 0)
    return vl_fail(VL_EIO, "remove_tree: %s: %s", path, strerror(errno));
  return VL_OK;
}

vl_status vl_fs_rename(const char *from, const char *to, int exchange) {
  int r = exchange ? renameat2(AT_FDCWD, from, AT_FDCWD, to, RENAME_EXCHANGE) : rename(from, to);
  if (r != 0)
    return vl_fail(VL_EIO, "rename: %s -> %s: %s%s", from, to, strerror(errno), exchange ? " (exchange)" : "");
  return VL_OK;
}

vl_status vl_fs_write_atomic(const char *path, const void *bytes, size_t n) {
  vl_replace rp;
  vl_status s = vl_replace_begin(&rp, "write_atomic", path);
  if (s != VL_OK) return s;
  const char *p = (const char *)bytes;
  while (n > 0) {
    ssize_t w = write(rp.fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      s = vl_fail(VL_EIO, "write_atomic: %s: write failed: %s", path, w < 0 ? strerror(errno) : "no progress");
      vl_replace_abort(&rp);
      return s;
    }
    p += w, n -= (size_t)w;
  }
  s = vl_replace_commit(&rp);
  vl_replace_abort(&rp); /* no-op once committed */
  return s;
}

int vl_fs_is_dir(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

int vl_fs_pid_alive(long pid) {
  if (pid <= 0) return 0;
  return kill((pid_t)pid, 0) == 0 || errno == EPERM;
}
