/* tests/c/test_replace.c: runtime/io/replace.c against other users (issue 27): a symlink another
 * user plants at the path is replaced or refused, never written through (the 1777 folder of
 * Prometheus textfiles, a shared cache or checkpoint folder); our own link to our own file is
 * still followed; the temporary file is 0600 until the commit; stale temporaries of other users
 * are left alone; a file another user put in a shared folder does not make our new file theirs.
 * The cross-user cases need root (CI runs as root): they fork and drop to two unprivileged uids,
 * a victim and an attacker, as `setpriv --reuid` would. Without root they are skipped, saying so. */
#define _GNU_SOURCE /* setresuid, setgroups */
#include <fcntl.h>
#include <grp.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "runtime/io/fsutil.h"
#include "runtime/io/replace.h"
#include "vl_test.h"

#define VICTIM 65533
#define ATTACKER 65534

static char root[256];

static char *path_of(const char *rel) {
  static char buf[8][512];
  static int k;
  k = (k + 1) % 8;
  snprintf(buf[k], sizeof buf[k], "%s/%s", root, rel);
  return buf[k];
}

static void put(const char *path, const char *text, mode_t mode) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, mode);
  if (fd >= 0) {
    if (write(fd, text, strlen(text)) < 0) { /* checked by the callers' reads */
    }
    close(fd);
  }
  chmod(path, mode);
}

static int file_is(const char *path, const char *want) {
  size_t n = 0;
  unsigned char *got = vl_test_slurp(path, &n);
  int ok = got && n == strlen(want) && memcmp(got, want, n) == 0;
  free(got);
  return ok;
}

/* Runs f(arg) in a child process as uid:gid, returns its exit code (-1 if it did not exit). */
static int as_user(uid_t uid, int (*f)(const char *), const char *arg) {
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    if (setgroups(0, NULL) != 0 || setresgid(uid, uid, uid) != 0 || setresuid(uid, uid, uid) != 0) _exit(99);
    _exit(f(arg));
  }
  int st = 0;
  if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st)) return -1;
  return WEXITSTATUS(st);
}

static const char *link_to; /* what plant_link points to */
static int plant_link(const char *path) { return symlink(link_to, path) == 0 ? 0 : 1; }
static int plant_file(const char *path) {
  put(path, "attacker's", 0666);
  return 0;
}
/* the victim's save: 0 saved, 2 refused naming the link, 3 refused otherwise */
static int save_metrics(const char *path) {
  vl_status s = vl_fs_write_atomic(path, "metrics\n", 8);
  if (s == VL_OK) return 0;
  printf("    (the save said: %s)\n", vl_errmsg());
  return strstr(vl_errmsg(), "symbolic link") && strstr(vl_errmsg(), "not followed") ? 2 : 3;
}

static void test_own_files(void) {
  struct stat sb;
  /* our link to our file: followed, the link stays */
  put(path_of("mine.txt"), "old", 0640);
  CHECK(symlink("mine.txt", path_of("mine.link")) == 0);
  CHECK_OK(vl_fs_write_atomic(path_of("mine.link"), "new", 3));
  CHECK(lstat(path_of("mine.link"), &sb) == 0 && S_ISLNK(sb.st_mode));
  CHECK(file_is(path_of("mine.txt"), "new"));
  CHECK(stat(path_of("mine.txt"), &sb) == 0 && (sb.st_mode & 07777) == 0640, "mode %o", sb.st_mode & 07777);

  /* the temporary file is 0600 while it is written; the result gets 0666 less the umask */
  mode_t um = umask(022);
  vl_replace rp;
  CHECK_OK(vl_replace_begin(&rp, "test", path_of("fresh.txt")));
  CHECK(fstat(rp.fd, &sb) == 0 && (sb.st_mode & 07777) == 0600, "temporary mode %o", sb.st_mode & 07777);
  CHECK(write(rp.fd, "x", 1) == 1);
  CHECK_OK(vl_replace_commit(&rp));
  CHECK(stat(path_of("fresh.txt"), &sb) == 0 && (sb.st_mode & 07777) == 0644, "mode %o", sb.st_mode & 07777);
  umask(077);
  CHECK_OK(vl_fs_write_atomic(path_of("private.txt"), "p", 1));
  CHECK(stat(path_of("private.txt"), &sb) == 0 && (sb.st_mode & 07777) == 0600, "mode %o", sb.st_mode & 07777);
  umask(um);
}

static void test_other_users(void) {
  struct stat sb;
  /* the victim's secret, in a folder only the victim can write */
  CHECK(mkdir(path_of("home"), 0755) == 0 && chown(path_of("home"), VICTIM, VICTIM) == 0);
  char keys[512]; /* path_of's buffers rotate: keep a copy */
  snprintf(keys, sizeof keys, "%s", path_of("home/authorized_keys"));
  put(keys, "ssh-ed25519 AAAA victim\n", 0600);
  CHECK(chown(keys, VICTIM, VICTIM) == 0);
  link_to = keys;

  /* 1. a 1777 folder (a textfile collector's): the attacker plants a link at the metrics name.
   * The victim's save must not write through it; the sticky bit forbids replacing the
   * attacker's entry, so the save fails, naming the link. */
  CHECK(mkdir(path_of("shared"), 0777) == 0 && chmod(path_of("shared"), 01777) == 0);
  char prom[512], ck[512], planted[512];
  snprintf(prom, sizeof prom, "%s", path_of("shared/v100lua_rank0.prom"));
  CHECK(as_user(ATTACKER, plant_link, prom) == 0);
  int r = as_user(VICTIM, save_metrics, prom);
  CHECK(r == 2, "the victim's save through a planted link: code %d (2: refused naming the link)", r);
  CHECK(file_is(keys, "ssh-ed25519 AAAA victim\n"), "the victim's file was overwritten through the link");
  CHECK(lstat(prom, &sb) == 0 && S_ISLNK(sb.st_mode) && sb.st_uid == ATTACKER);

  /* 2. root saving there: the link is replaced by root's file, the victim's file untouched */
  CHECK_OK(vl_fs_write_atomic(prom, "metrics\n", 8));
  CHECK(lstat(prom, &sb) == 0 && S_ISREG(sb.st_mode) && sb.st_uid == geteuid());
  CHECK(file_is(prom, "metrics\n") && file_is(keys, "ssh-ed25519 AAAA victim\n"));

  /* 3. a world-writable folder without the sticky bit: the victim replaces the link itself */
  CHECK(mkdir(path_of("open"), 0777) == 0 && chmod(path_of("open"), 0777) == 0);
  snprintf(ck, sizeof ck, "%s", path_of("open/latest"));
  CHECK(as_user(ATTACKER, plant_link, ck) == 0);
  r = as_user(VICTIM, save_metrics, ck);
  CHECK(r == 0, "code %d", r);
  CHECK(lstat(ck, &sb) == 0 && S_ISREG(sb.st_mode) && sb.st_uid == VICTIM && file_is(ck, "metrics\n"));
  CHECK(file_is(keys, "ssh-ed25519 AAAA victim\n"));

  /* 4. our own link to someone else's file is not followed either (root's link to the victim's) */
  CHECK(symlink(keys, path_of("to_victim")) == 0);
  CHECK_OK(vl_fs_write_atomic(path_of("to_victim"), "root\n", 5));
  CHECK(lstat(path_of("to_victim"), &sb) == 0 && S_ISREG(sb.st_mode) && file_is(keys, "ssh-ed25519 AAAA victim\n"));

  /* 4b. our link to a link another user planted (to our own file): not followed either */
  CHECK(symlink(ck, path_of("to_plant")) == 0); /* ck is a regular file now: plant a link there */
  CHECK(unlink(ck) == 0);
  link_to = path_of("mine.txt");
  CHECK(as_user(ATTACKER, plant_link, ck) == 0);
  CHECK_OK(vl_fs_write_atomic(path_of("to_plant"), "via\n", 4));
  CHECK(lstat(path_of("to_plant"), &sb) == 0 && S_ISREG(sb.st_mode) && file_is(path_of("mine.txt"), "new"),
        "written through another user's link in the chain");
  link_to = keys;

  /* 5. a plain file another user put in the shared folder: our new file stays ours (given to
   * them, they could rewrite what we wrote later) */
  snprintf(planted, sizeof planted, "%s", path_of("open/meta.json"));
  CHECK(as_user(ATTACKER, plant_file, planted) == 0);
  CHECK_OK(vl_fs_write_atomic(planted, "{}\n", 3));
  CHECK(stat(planted, &sb) == 0 && sb.st_uid == geteuid(), "owner %ld", (long)sb.st_uid);
  /* ... while in a user's own folder, root's rewrite of their file leaves it theirs */
  CHECK_OK(vl_fs_write_atomic(keys, "ssh-ed25519 BBBB victim\n", 24));
  CHECK(stat(keys, &sb) == 0 && sb.st_uid == VICTIM && (sb.st_mode & 07777) == 0600);

  /* 6. a stale-looking temporary of another user is not ours to remove */
  char stale[64];
  snprintf(stale, sizeof stale, "open/.x.txt.v100tmp-%d-1", 999999);
  CHECK(as_user(ATTACKER, plant_file, path_of(stale)) == 0);
  CHECK_OK(vl_fs_write_atomic(path_of("open/x.txt"), "x", 1));
  CHECK(access(path_of(stale), F_OK) == 0, "another user's file was removed");
}

int main(void) {
  if (!vl_test_init()) return 1;
  /* /tmp, not $TMPDIR: the other uids must reach it (a TMPDIR under a 0700 home they could not) */
  snprintf(root, sizeof root, "/tmp/vl_replace_XXXXXX");
  if (!mkdtemp(root)) {
    printf("FAIL: mkdtemp\n");
    return 1;
  }
  chmod(root, 0755); /* the other uids must reach the folders inside */
  test_own_files();
  if (geteuid() == 0) test_other_users();
  else printf("SKIP the cross-user cases: they need root to act as uids %d and %d (CI runs as root)\n", VICTIM, ATTACKER);
  vl_fs_remove_tree(root);
  return vl_test_finish();
}
