/* runtime/io/replace.h: replacing a file atomically and durably, for the savers (safetensors.c).
 *
 * The new bytes go to a temporary file in the target's directory, which is fsync'd, renamed over
 * the target, and the directory fsync'd: after a crash the path holds the old file or the new
 * one, never a mix, and a failed save leaves the old file as it was.
 *
 * The temporary name, ".<name>.v100tmp-<pid>-<tid>", is hidden and says which process wrote it,
 * so what a killed process (kill -9 mid-save) leaves behind can be found: vl_replace_begin
 * removes those of the same target whose process no longer exists (and that are ours). It is
 * created with O_CREAT|O_EXCL|O_NOFOLLOW, mode 0600 while it is written.
 *
 * Symlinks, the one rule of every writer (savers, write_atomic, the kernel cache, Prometheus
 * textfiles, checkpoints' latest and meta.json, vocab.txt, shards, ONNX): a symlink at the path is
 * followed (the link stays, the file it resolves to is replaced) only when the link, every link
 * it leads through and that file belong to the caller's effective uid; our own dangling link is refused. Any other link is
 * replaced itself, never written through; in a sticky directory that forbids it, the save fails
 * naming the link's owner. An existing file's permission bits are kept (its owner too when that
 * owner owns the directory); a new file gets 0666 less the umask.
 * Internal to the runtime. */
#ifndef VL_REPLACE_H
#define VL_REPLACE_H

#include "runtime/core/status.h"

typedef struct vl_replace {
  const char *what, *path; /* for messages; not owned */
  char *target;            /* the file to replace: path, or what our own symlink at path resolves to */
  char *dir;               /* its directory */
  char *tmp;               /* the temporary file, open for writing as fd */
  int fd;
  int active;              /* begun and not yet committed or aborted */
  long link_uid;           /* owner of a symlink at path that is replaced, not followed; else -1 */
  int have_old;            /* a regular file is being replaced: its owner and mode below */
  long old_uid, old_gid, dir_uid;
  unsigned old_mode;
  unsigned mode;           /* set by the caller after begin: the new file's mode (0: the old
                            * file's, or 0666 less the umask for a new one) */
  int no_sync;             /* set by the caller after begin: skip the fsyncs (a data set export of
                            * many small files; a crash may lose them, never tear or redirect one) */
} vl_replace;

/* Resolves the target, removes stale temporaries and creates this save's temporary file (fd,
 * with the mode the result must have). On failure (message "<what>: <path>: ...") nothing is
 * left behind and vl_replace_abort is a no-op. */
vl_status vl_replace_begin(vl_replace *rp, const char *what, const char *path);

/* fsync, close, rename over the target, fsync the directory. The caller has finished writing
 * to fd (and closed any duplicate of it). On success rp is released; on failure call
 * vl_replace_abort. A failure after the rename (the directory sync) leaves the new file in place
 * and says so. */
vl_status vl_replace_commit(vl_replace *rp);

/* Closes and removes the temporary file of an uncommitted replacement and releases rp; a no-op
 * on a committed, aborted or failed-to-begin one. */
void vl_replace_abort(vl_replace *rp);

/* Opens path for appending (a log that grows in place: metrics.jsonl) under the same symlink
 * rule: our link to our file is followed; any other link is removed and a new file created in
 * its place (O_EXCL|O_NOFOLLOW), or the open fails naming the link where it cannot be removed. A
 * missing file is created with 0666 less the umask. *fd (O_APPEND, close-on-exec) is the
 * caller's to close. */
vl_status vl_replace_open_append(const char *what, const char *path, int *fd);

#endif
