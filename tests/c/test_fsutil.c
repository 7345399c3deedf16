/* tests/c/test_fsutil.c: runtime/io/fsutil.h, the directory steps of checkpoints: mkdir (an
 * existing directory is fine, a file is not), sorted listing, atomic small-file writes (the old
 * content stays on failure, no temporary left), rename and the atomic exchange of two non-empty
 * directories, removing a tree (symlinks removed, not followed), is_dir, pid_alive. */
#define _POSIX_C_SOURCE 200809L
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/io/fsutil.h"
#include "vl_test.h"

static char root[256];

static void put(const char *path, const char *text) {
  FILE *f = fopen(path, "wb");
  if (f) {
    fputs(text, f);
    fclose(f);
  }
}

static char *path_of(const char *rel) {
  static char buf[4][512];
  static int k;
  k = (k + 1) % 4;
  snprintf(buf[k], sizeof buf[k], "%s/%s", root, rel);
  return buf[k];
}

static int file_is(const char *path, const char *want) {
  size_t n = 0;
  unsigned char *got = vl_test_slurp(path, &n);
  int ok = got && n == strlen(want) && memcmp(got, want, n) == 0;
  free(got);
  return ok;
}

int main(void) {
  if (!vl_test_init()) return 1;
  const char *tmp = getenv("TMPDIR");
  snprintf(root, sizeof root, "%s/v100lua_test_fsutil_%ld", tmp ? tmp : "/tmp", (long)getpid());
  CHECK_OK(vl_fs_remove_tree(root));
  CHECK_OK(vl_fs_mkdir("mkdir", root));
  CHECK_OK(vl_fs_mkdir("mkdir", root)); /* again: fine */
  CHECK(vl_fs_is_dir(root));

  /* atomic writes: content, replacement, nothing else left in the directory */
  CHECK_OK(vl_fs_write_atomic(path_of("latest"), "epoch1-step2\n", 13));
  CHECK(file_is(path_of("latest"), "epoch1-step2\n"));
  CHECK_OK(vl_fs_write_atomic(path_of("latest"), "epoch3-step4\n", 13));
  CHECK(file_is(path_of("latest"), "epoch3-step4\n"));
  CHECK(!vl_fs_is_dir(path_of("latest")));
  CHECK_ERR(vl_fs_mkdir("mkdir", path_of("latest")), VL_EIO, "mkdir: ");
  CHECK_ERR(vl_fs_mkdir("mkdir", path_of("latest")), VL_EIO, "exists and is not a directory");
  CHECK_ERR(vl_fs_mkdir("ckpt", path_of("latest/sub")), VL_EIO, "ckpt: ");
  CHECK_ERR(vl_fs_mkdir("ckpt", path_of("latest/sub/x")), VL_EIO, "latest exists and is not a directory");
  CHECK_ERR(vl_fs_mkdir("mkdir", ""), VL_EINVAL, "the directory name is empty");
  /* recursive, as mkdir -p (v100.io.makedirs and checkpoint directories) */
  CHECK_OK(vl_fs_mkdir("mkdir", path_of("deep/er/dir/")));
  CHECK(vl_fs_is_dir(path_of("deep/er/dir")));
  CHECK_OK(vl_fs_mkdir("mkdir", path_of("deep/er")));
  CHECK_OK(vl_fs_remove_tree(path_of("deep")));
  CHECK_ERR(vl_fs_write_atomic(path_of("no/such/dir/x"), "x", 1), VL_EIO, "no/such/dir/x");

  CHECK_OK(vl_fs_mkdir("mkdir", path_of("b")));
  CHECK_OK(vl_fs_mkdir("mkdir", path_of("a")));
  put(path_of("a/one"), "A");
  put(path_of("b/two"), "B");
  char **names = NULL;
  int n = 0;
  CHECK_OK(vl_fs_list_dir(root, &names, &n));
  CHECK(n == 3, "3 entries, got %d", n);
  if (n == 3) CHECK(strcmp(names[0], "a") == 0 && strcmp(names[1], "b") == 0 && strcmp(names[2], "latest") == 0,
                    "sorted: %s %s %s", names[0], names[1], names[2]);
  vl_fs_free_list(names, n);
  CHECK_ERR(vl_fs_list_dir(path_of("absent"), &names, &n), VL_EIO, "absent");

  /* exchange: both non-empty directories swap at once */
  CHECK_OK(vl_fs_rename(path_of("a"), path_of("b"), 1));
  CHECK(file_is(path_of("b/one"), "A") && file_is(path_of("a/two"), "B"));
  CHECK_ERR(vl_fs_rename(path_of("a"), path_of("b"), 0), VL_EIO, "rename:"); /* b is not empty */
  CHECK_OK(vl_fs_rename(path_of("a"), path_of("c"), 0));
  CHECK(vl_fs_is_dir(path_of("c")) && !vl_fs_is_dir(path_of("a")));
  CHECK_ERR(vl_fs_rename(path_of("a"), path_of("d"), 1), VL_EIO, "(exchange)");
  CHECK_OK(vl_fs_fsync_dir(root));
  CHECK_ERR(vl_fs_fsync_dir(path_of("absent")), VL_EIO, "fsync_dir:");

  /* remove_tree does not follow a symlink out of the tree */
  CHECK(symlink(path_of("c"), path_of("b/link")) == 0);
  CHECK_OK(vl_fs_remove_tree(path_of("b")));
  CHECK(!vl_fs_is_dir(path_of("b")));
  CHECK(file_is(path_of("c/two"), "B"), "the link's target survives");
  CHECK_OK(vl_fs_remove_tree(path_of("b"))); /* absent: fine */

  CHECK(vl_fs_pid_alive((long)getpid()));
  CHECK(!vl_fs_pid_alive(0));

  CHECK_OK(vl_fs_remove_tree(root));
  CHECK(!vl_fs_is_dir(root));
  return vl_test_finish();
}
