/* runtime/io/fsutil.h: the file-system steps of a checkpoint directory (scripts/v100/checkpoint.lua)
 * that Lua's io/os libraries lack: making and syncing directories, listing, removing a tree,
 * renaming (exchanging) directories and writing a small file atomically.
 *
 * A checkpoint is durable only when every file is fsync'd, renamed into place and the directory
 * holding the new name fsync'd as well (a rename lives in the directory, not in the file);
 * these are the pieces that make that possible from Lua. Every function returns VL_EIO with
 * "<what>: <path>: <strerror>" on failure. Internal to the runtime. */
#ifndef VL_FSUTIL_H
#define VL_FSUTIL_H

#include <stddef.h>
#include <stdint.h>

#include "runtime/core/status.h"

/* Creates path and its missing parents (mode 0777 less the umask), as `mkdir -p`; an existing
 * directory is fine, an existing non-directory is an error. "<what>: <path>: <reason>" on
 * failure (what: the caller's name, "makedirs", "EventWriter"). The one mkdir of the runtime:
 * checkpoints (through v100.io.makedirs) and the logger's directories. */
vl_status vl_fs_mkdir(const char *what, const char *path);

/* Opens the directory and fsyncs it, making the creations, renames and removals in it durable. */
vl_status vl_fs_fsync_dir(const char *path);

/* The entries of a directory other than "." and "..", sorted by strcmp, in a malloc'd array of
 * malloc'd strings (free with vl_fs_free_list). */
vl_status vl_fs_list_dir(const char *path, char ***names, int *n);
void vl_fs_free_list(char **names, int n);

/* Removes path and, when it is a directory, everything below it (symlinks are removed, not
 * followed). A path that does not exist is fine. */
vl_status vl_fs_remove_tree(const char *path);

/* rename(from, to); exchange != 0 swaps two existing paths atomically (renameat2's
 * RENAME_EXCHANGE, Linux 3.15+), which replaces a non-empty directory without a moment where
 * neither exists. */
vl_status vl_fs_rename(const char *from, const char *to, int exchange);

/* Writes n bytes to path atomically and durably (runtime/io/replace.h: temporary file, fsync,
 * rename, directory fsync). On failure path holds what it held before. */
vl_status vl_fs_write_atomic(const char *path, const void *bytes, size_t n);

/* Cuts the file at path to `size` bytes (truncate(2)): an appender whose last write failed half
 * way (a full disk) takes its partial record back. */
vl_status vl_fs_truncate(const char *path, uint64_t size);

/* 1 when path is a directory (symlinks followed), 0 otherwise (absent, a file, unreadable). */
int vl_fs_is_dir(const char *path);

/* 1 when the process exists (or exists but cannot be signalled), 0 when it does not. */
int vl_fs_pid_alive(long pid);

#endif
