/* runtime/io/replace.c: atomic, durable file replacement (see replace.h). */
#define _DEFAULT_SOURCE /* syscall(SYS_gettid) for the temporary name, realpath */
#define _POSIX_C_SOURCE 200809L
#include "runtime/io/replace.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
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
 * (a stale name of our own pid and thread is replaced when opened). Only our own files go: in a
 * directory shared with other users a name of this shape may be anybody's (a temporary file stays
 * ours until the commit, see finish_mode). */
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
    struct stat st;
    if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || st.st_uid != geteuid()) continue;
    unlinkat(dirfd(d), e->d_name, 0);
  }
  closedir(d);
}

/* The process's umask without changing it (umask(2) can only be read by setting it, which would
 * race with other threads creating files): Linux reports it in /proc/self/status. */
static mode_t current_umask(void) {
  FILE *f = fopen("/proc/self/status", "re");
  unsigned m = 022;
  if (f) {
    char line[256];
    while (fgets(line, sizeof line, f))
      if (sscanf(line, "Umask: %o", &m) == 1) break;
    fclose(f);
  }
  return (mode_t)(m & 0777);
}

/* The symlink rule, the one place every writer goes through (docs/RELIABILITY.md, "files shared
 * with other users"): a symlink at the path is followed only when the link and the file it
 * resolves to both belong to the caller (effective uid), and so does every link between them,
 * i.e. when the caller could have written that file by its own path anyway. Any other link (planted by another user in a shared
 * directory: a 1777 textfile-collector folder, a shared cache or checkpoint folder) is replaced
 * itself, as rename(2) replaces a link and never writes through it; where the directory's sticky
 * bit forbids replacing another user's entry the save fails, naming the link's owner. realpath()
 * must not be trusted for a foreign link: it resolves with readlink, which the kernel's
 * fs.protected_symlinks does not guard. Sets rp->target (owned) or fails. */
/* Whether every link of the chain that starts at path (a link) is the caller's: our link to a
 * link someone else planted in a shared folder must not lead our write to wherever theirs points.
 * A chain longer than the kernel's 40 links counts as foreign. */
static bool chain_is_ours(const char *path) {
  char cur[4096], next[4096], link[4096];
  if (snprintf(cur, sizeof cur, "%s", path) >= (int)sizeof cur) return false;
  for (int hop = 0; hop < 40; hop++) {
    struct stat st;
    if (lstat(cur, &st) != 0 || !S_ISLNK(st.st_mode)) return true; /* the end (or dangling) */
    if (st.st_uid != geteuid()) return false;
    ssize_t n = readlink(cur, link, sizeof link - 1);
    if (n < 0) return false;
    link[n] = '\0';
    const char *slash = strrchr(cur, '/');
    int w = link[0] == '/' || !slash ? snprintf(next, sizeof next, "%s", link)
                                     : snprintf(next, sizeof next, "%.*s/%s", (int)(slash - cur), cur, link);
    if (w < 0 || w >= (int)sizeof next) return false;
    memcpy(cur, next, (size_t)w + 1);
  }
  return false;
}

static vl_status choose_target(vl_replace *rp, const char *what, const char *path) {
  struct stat ls, ts;
  if (lstat(path, &ls) != 0 || !S_ISLNK(ls.st_mode)) {
    rp->target = strdup(path);
  } else if (ls.st_uid != geteuid() || !chain_is_ours(path)) {
    rp->target = strdup(path);
    rp->link_uid = (long)ls.st_uid;
  } else {
    char *t = realpath(path, NULL);
    if (!t)
      return vl_fail(VL_EIO, "%s: %s: is a symbolic link that cannot be followed (%s); remove it or "
                     "create what it points to", what, path, strerror(errno));
    if (stat(t, &ts) == 0 && ts.st_uid == geteuid()) {
      rp->target = t;
    } else { /* our link to someone else's file: replace the link, not their file */
      free(t);
      rp->target = strdup(path);
      rp->link_uid = (long)ls.st_uid;
    }
  }
  if (!rp->target) return vl_fail(VL_EOOM, "%s: %s: out of host memory", what, path);
  return VL_OK;
}

vl_status vl_replace_begin(vl_replace *rp, const char *what, const char *path) {
  memset(rp, 0, sizeof *rp);
  rp->fd = -1;
  rp->what = what;
  rp->path = path;
  rp->link_uid = -1;
  VL_TRY(choose_target(rp, what, path));
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

  /* The file being replaced (lstat: a link we replace is not a file whose mode we keep). */
  struct stat old, dst;
  rp->have_old = lstat(rp->target, &old) == 0 && S_ISREG(old.st_mode);
  if (rp->have_old) {
    rp->old_uid = (long)old.st_uid;
    rp->old_gid = (long)old.st_gid;
    rp->old_mode = (unsigned)(old.st_mode & 07777);
    rp->dir_uid = stat(rp->dir, &dst) == 0 ? (long)dst.st_uid : -1;
  }
  /* O_EXCL|O_NOFOLLOW: never write through a file or link someone else put at the temporary
   * name (the name can exist only as a leftover of an earlier process that had our pid and
   * thread id, or as a plant). 0600 while it is written: nobody else can open it and keep a
   * descriptor to what becomes the file; the final mode is set at the commit. */
  int flags = O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC;
  rp->fd = open(rp->tmp, flags, 0600);
  if (rp->fd < 0 && errno == EEXIST && unlink(rp->tmp) == 0) rp->fd = open(rp->tmp, flags, 0600);
  if (rp->fd < 0) {
    vl_status s = vl_fail(VL_EIO, "%s: %s: cannot create %s: %s", what, path, rp->tmp, strerror(errno));
    release(rp);
    return s;
  }
  rp->active = 1;
  return VL_OK;
}

/* The new file's owner and mode, just before it takes the path. An existing file's mode is kept,
 * a new one gets 0666 less the umask. The existing file's owner is kept (where we may set it:
 * root, or a group we are in) only when that owner also owns the directory: root saving into a
 * user's folder leaves the user's file theirs, but in a folder shared with others a file somebody
 * else put there does not get our contents under their name (they could rewrite it later).
 * Before fchmod: a chown clears set-id bits. */
static vl_status finish_mode(vl_replace *rp) {
  mode_t mode = (mode_t)(0666 & ~current_umask());
  if (rp->have_old) {
    bool mine = rp->old_uid == (long)geteuid();
    bool keep_owner = !mine && rp->old_uid == rp->dir_uid;
    mode = (mode_t)(mine || keep_owner ? rp->old_mode : (rp->old_mode & 0777));
    if (keep_owner && (rp->old_uid != (long)geteuid() || rp->old_gid != (long)getegid()) &&
        fchown(rp->fd, (uid_t)rp->old_uid, (gid_t)rp->old_gid) != 0 &&
        fchown(rp->fd, (uid_t)-1, (gid_t)rp->old_gid) != 0) {
      /* best effort: keeping the contents matters more than keeping the owner */
    }
  }
  if (rp->mode) mode = (mode_t)rp->mode;
  if (fchmod(rp->fd, mode) != 0)
    return vl_fail(VL_EIO, "%s: %s: cannot give %s the mode %04o: %s", rp->what, rp->path, rp->tmp,
                   (unsigned)mode, strerror(errno));
  return VL_OK;
}

vl_status vl_replace_commit(vl_replace *rp) {
  const char *what = rp->what, *path = rp->path;
  VL_TRY(finish_mode(rp));
  int fd = rp->fd;
  rp->fd = -1;
  if (!rp->no_sync && fsync(fd) != 0) {
    vl_status s = vl_fail(VL_EIO, "%s: %s: fsync failed: %s", what, path, strerror(errno));
    close(fd);
    return s;
  }
  if (close(fd) != 0) return vl_fail(VL_EIO, "%s: %s: close failed: %s", what, path, strerror(errno));
  if (rename(rp->tmp, rp->target) != 0) {
    int e = errno;
    if (rp->link_uid >= 0 && (e == EPERM || e == EACCES))
      return vl_fail(VL_EIO, "%s: %s: is a symbolic link of uid %ld, not followed (only a link and a file "
                     "that are both yours are), and this directory does not let it be replaced (%s); "
                     "remove the link", what, path, rp->link_uid, strerror(e));
    return vl_fail(VL_EIO, "%s: %s: cannot rename %s to %s: %s", what, path, rp->tmp, rp->target, strerror(e));
  }
  rp->active = 0; /* the temporary name is gone: nothing left to remove */
  /* The rename is durable once the directory is; a file system that cannot sync a directory
   * (EINVAL) has nothing more to offer. */
  vl_status s = VL_OK;
  int dfd = rp->no_sync ? -1 : open(rp->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
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

vl_status vl_replace_open_append(const char *what, const char *path, int *fd_out) {
  vl_replace rp;
  memset(&rp, 0, sizeof rp);
  rp.link_uid = -1;
  VL_TRY(choose_target(&rp, what, path));
  int fd = -1;
  if (rp.link_uid >= 0) {
    /* a link that is not followed is replaced: removed, and a new file made in its place */
    if (unlink(path) != 0) {
      vl_status s = vl_fail(VL_EIO, "%s: %s: is a symbolic link of uid %ld, not followed (only a link and a "
                            "file that are both yours are), and it cannot be removed (%s); remove the link",
                            what, path, rp.link_uid, strerror(errno));
      release(&rp);
      return s;
    }
    fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
  } else {
    /* O_NOFOLLOW: a link put there since choose_target looked is refused (ELOOP), not followed */
    fd = open(rp.target, O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0666);
  }
  if (fd < 0) {
    vl_status s = vl_fail(VL_EIO, "%s: cannot open %s: %s", what, path, strerror(errno));
    release(&rp);
    return s;
  }
  release(&rp);
  *fd_out = fd;
  return VL_OK;
}
