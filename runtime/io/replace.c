/* runtime/io/replace.c: atomic, durable file replacement (see replace.h). */
#define _DEFAULT_SOURCE /* syscall(SYS_gettid) for the temporary name, realpath */
#define _POSIX_C_SOURCE 200809L
#include "runtime/io/replace.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

static void release(vl_replace *rp) {
  free(rp->target);
  free(rp->dir);
  free(rp->tmp);
  rp->target = rp->dir = rp->tmp = NULL;
  rp->fd = -1;
  rp->active = 0;
}

/* Removes "<prefix><pid>-<tid>" files in dir whose process no longer exists. A pid that exists
 * (or cannot be signalled: EPERM) may still be writing, so its file stays; ours is skipped too
 * (a stale name of our own pid and thread is replaced when opened). */
static void remove_stale(const char *dir, const char *prefix) {
  DIR *d = opendir(dir);
  if (!d) return;
  size_t plen = strlen(prefix);
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (strncmp(e->d_name, prefix, plen) != 0) continue;
    const char *q = e->d_name + plen;
    char *endp = NULL;
    errno = 0;
    long pid = strtol(q, &endp, 10);
    if (errno || endp == q || *endp != '-' || pid <= 0 || (pid_t)pid == getpid()) continue;
    if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue;
    unlinkat(dirfd(d), e->d_name, 0);
  }
  closedir(d);
}

vl_status vl_replace_begin(vl_replace *rp, const char *what, const char *path) {
  memset(rp, 0, sizeof *rp);
  rp->fd = -1;
  rp->what = what;
  rp->path = path;
  struct stat ls;
  if (lstat(path, &ls) == 0 && S_ISLNK(ls.st_mode)) {
    rp->target = realpath(path, NULL);
    if (!rp->target)
      return vl_fail(VL_EIO, "%s: %s: is a symbolic link that cannot be followed (%s); remove it or "
                     "create what it points to", what, path, strerror(errno));
  } else {
    rp->target = strdup(path);
  }
  if (!rp->target) return vl_fail(VL_EOOM, "%s: %s: out of host memory", what, path);
  const char *slash = strrchr(rp->target, '/');
  const char *base = slash ? slash + 1 : rp->target;
  if (!*base) {
    release(rp);
    return vl_fail(VL_EINVAL, "%s: %s: the path names a directory, not a file", what, path);
  }
  size_t dlen = slash ? (size_t)(slash - rp->target) : 1;
  if (slash && dlen == 0) dlen = 1; /* "/name": the root */
  size_t blen = strlen(base);
  rp->dir = malloc(dlen + 1);
  rp->tmp = malloc(strlen(rp->target) + 64);
  char *prefix = malloc(blen + 16);
  if (!rp->dir || !rp->tmp || !prefix) {
    free(prefix);
    release(rp);
    return vl_fail(VL_EOOM, "%s: %s: out of host memory", what, path);
  }
  memcpy(rp->dir, slash ? rp->target : ".", dlen);
  rp->dir[dlen] = '\0';
  snprintf(prefix, blen + 16, ".%s.v100tmp-", base);
  remove_stale(rp->dir, prefix);
  snprintf(rp->tmp, strlen(rp->target) + 64, "%.*s%s%ld-%ld", (int)(base - rp->target), rp->target,
           prefix, (long)getpid(), (long)syscall(SYS_gettid));
  free(prefix);

  struct stat old;
  int have_old = stat(rp->target, &old) == 0 && S_ISREG(old.st_mode);
  /* O_EXCL: never write through a file someone else put at the temporary name. The name can
   * exist only as a leftover of an earlier process that had our pid and thread id. */
  rp->fd = open(rp->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  if (rp->fd < 0 && errno == EEXIST && unlink(rp->tmp) == 0)
    rp->fd = open(rp->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  if (rp->fd < 0) {
    vl_status s = vl_fail(VL_EIO, "%s: %s: cannot create %s: %s", what, path, rp->tmp, strerror(errno));
    release(rp);
    return s;
  }
  rp->active = 1;
  /* The owner too where we may set it (root, or a group we are in); otherwise the new file is
   * ours, as any rewrite would make it. Before fchmod: a chown clears set-id bits. */
  if (have_old && (old.st_uid != geteuid() || old.st_gid != getegid()) &&
      fchown(rp->fd, old.st_uid, old.st_gid) != 0 && fchown(rp->fd, (uid_t)-1, old.st_gid) != 0) {
    /* best effort: keeping the contents matters more than keeping the owner */
  }
  if (have_old && fchmod(rp->fd, old.st_mode & 07777) != 0) {
    vl_status s = vl_fail(VL_EIO, "%s: %s: cannot give %s the mode %04o of the existing file: %s", what,
                          path, rp->tmp, (unsigned)(old.st_mode & 07777), strerror(errno));
    vl_replace_abort(rp);
    return s;
  }
  return VL_OK;
}

vl_status vl_replace_commit(vl_replace *rp) {
  const char *what = rp->what, *path = rp->path;
  int fd = rp->fd;
  rp->fd = -1;
  if (fsync(fd) != 0) {
    vl_status s = vl_fail(VL_EIO, "%s: %s: fsync failed: %s", what, path, strerror(errno));
    close(fd);
    return s;
  }
  if (close(fd) != 0) return vl_fail(VL_EIO, "%s: %s: close failed: %s", what, path, strerror(errno));
  if (rename(rp->tmp, rp->target) != 0)
    return vl_fail(VL_EIO, "%s: %s: cannot rename %s to %s: %s", what, path, rp->tmp, rp->target,
                   strerror(errno));
  rp->active = 0; /* the temporary name is gone: nothing left to remove */
  /* The rename is durable once the directory is; a file system that cannot sync a directory
   * (EINVAL) has nothing more to offer. */
  vl_status s = VL_OK;
  int dfd = open(rp->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    if (fsync(dfd) != 0 && errno != EINVAL)
      s = vl_fail(VL_EIO, "%s: %s: the file is written but syncing its directory %s failed: %s", what,
                  path, rp->dir, strerror(errno));
    close(dfd);
  }
  release(rp);
  return s;
}

void vl_replace_abort(vl_replace *rp) {
  if (rp->fd >= 0) close(rp->fd);
  if (rp->active && rp->tmp) unlink(rp->tmp);
  release(rp);
}
