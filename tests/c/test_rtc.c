/* tests/c/test_rtc.c: the CPU half of runtime/rtc/rtc.h: signatures, the key, the cache directory,
 * cache files (round trip, short, corrupt, foreign, appended) and vl_rtc_build with a fake
 * compiler (miss, hit, recompile of a damaged file, cache off, unwritable cache, compile error),
 * and trust (issue 27): directories made 0700, files 0600; a directory or file that is not ours
 * or that group/others can write is never read (compiled instead, the note says why), as root
 * also one another uid made with 0777 and filled with a cubin under the right key.
 * With CUDA (but no GPU needed) the NVRTC compiler itself: a program compiles for sm_90, the
 * prelude's half/bf16 helpers compile, and a compile error carries the log with its line. */
#define _DEFAULT_SOURCE
#include <dirent.h>
#include <errno.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/core/cuda.h"
#include "runtime/rtc/rtc.h"
#include "tests/c/vl_test.h"

static char dir[256];

/* ---- signatures ---- */

static void test_signature(void) {
  vl_rtc_param p[VL_RTC_MAX_PARAMS];
  int n = -1;
  CHECK_OK(vl_rtc_parse_signature("k", "float*, const float* __restrict__ x, half *y, const bfloat16*, "
                                  "int64 n, int, double, uint32 u, void*, unsigned long long, size_t",
                                  p, VL_RTC_MAX_PARAMS, &n));
  CHECK(n == 11, "n = %d", n);
  CHECK(p[0].pointer && !p[0].is_const && p[0].dtype == VL_F32 && p[0].size == sizeof(void *));
  CHECK(p[1].pointer && p[1].is_const && p[1].dtype == VL_F32);
  CHECK(strcmp(p[1].text, "const float* __restrict__ x") == 0, "text '%s'", p[1].text);
  CHECK(p[2].pointer && !p[2].is_const && p[2].dtype == VL_F16);
  CHECK(p[3].pointer && p[3].is_const && p[3].dtype == VL_BF16);
  CHECK(!p[4].pointer && p[4].dtype == VL_I64 && p[4].size == 8 && !p[4].is_unsigned);
  CHECK(!p[5].pointer && p[5].dtype == VL_I32 && p[5].size == 4);
  CHECK(!p[6].pointer && p[6].dtype == VL_F64 && p[6].size == 8);
  CHECK(!p[7].pointer && p[7].dtype == VL_I32 && p[7].is_unsigned);
  CHECK(p[8].pointer && p[8].any_dtype && strcmp(vl_rtc_param_dtype(&p[8]), "any") == 0);
  CHECK(!p[9].pointer && p[9].dtype == VL_I64 && p[9].is_unsigned);
  CHECK(!p[10].pointer && p[10].size == 8 && p[10].is_unsigned);
  CHECK_OK(vl_rtc_parse_signature("k", "   ", p, VL_RTC_MAX_PARAMS, &n));
  CHECK(n == 0);
  CHECK_OK(vl_rtc_parse_signature("k", "long long, f32, i64*", p, VL_RTC_MAX_PARAMS, &n));
  CHECK(n == 3 && p[0].dtype == VL_I64 && p[1].dtype == VL_F32 && p[2].pointer && p[2].dtype == VL_I64);

  n = 99;
  CHECK_ERR(vl_rtc_parse_signature("k", "float*, quux", p, VL_RTC_MAX_PARAMS, &n), VL_EINVAL,
            "k: signature parameter 2 ('quux'): unknown type 'quux'");
  CHECK(n == 99, "n untouched on failure");
  CHECK_ERR(vl_rtc_parse_signature("k", "float**", p, VL_RTC_MAX_PARAMS, &n), VL_EINVAL, "pointers to pointers");
  CHECK_ERR(vl_rtc_parse_signature("k", "float*, ", p, VL_RTC_MAX_PARAMS, &n), VL_EINVAL, "parameter 2 is empty");
  CHECK_ERR(vl_rtc_parse_signature("k", "half", p, VL_RTC_MAX_PARAMS, &n), VL_EINVAL, "only supported as a pointer");
  CHECK_ERR(vl_rtc_parse_signature("k", "float[4]", p, VL_RTC_MAX_PARAMS, &n), VL_EINVAL, "unexpected '['");
  CHECK_ERR(vl_rtc_parse_signature("k", "float* a b", p, VL_RTC_MAX_PARAMS, &n), VL_EINVAL, "not a type");
  CHECK_ERR(vl_rtc_parse_signature("k", "int, int, int", p, 2, &n), VL_EINVAL, "more than 2 parameters");

  /* against the compiled kernel's parameter sizes */
  CHECK_OK(vl_rtc_parse_signature("k", "float*, const float*, float, int64 n", p, VL_RTC_MAX_PARAMS, &n));
  size_t sizes[4] = {8, 8, 4, 8};
  CHECK_OK(vl_rtc_check_params("k", p, 4, sizes, 4, false));
  CHECK_OK(vl_rtc_check_params("k", p, 4, sizes, -1, false)); /* unknown: nothing to check */
  CHECK_ERR(vl_rtc_check_params("k", p, 3, sizes, 4, false), VL_EINVAL,
            "k: the signature has 3 parameters but the compiled kernel takes 4");
  CHECK_ERR(vl_rtc_check_params("k", p, 4, sizes, 5, true), VL_EINVAL, "k: 4 arguments given but the compiled kernel takes 5");
  sizes[3] = 4;
  CHECK_ERR(vl_rtc_check_params("k", p, 4, sizes, 4, false), VL_EINVAL,
            "k: parameter 4 ('int64 n') is 8 bytes but the kernel's parameter 4 is 4 bytes");
  CHECK_ERR(vl_rtc_check_params("k", p, 4, sizes, 4, true), VL_EINVAL, "k: argument 4 ('int64 n') is 8 bytes");
}

/* ---- the key ---- */

static void test_key(void) {
  const char *o1[] = {"--use_fast_math"}, *o2[] = {"--use_fast_math", "-lineinfo"};
  vl_rtc_source a = {.source = "src", .program = "a.cu"};
  vl_rtc_source b = a, c = a, d = a;
  b.source = "src ";
  c.nopts = 1;
  c.opts = o1;
  d.nopts = 2;
  d.opts = o2;
  uint64_t ka = vl_rtc_key(&a, "sm_90", false, "nvrtc 13.0");
  CHECK(ka == vl_rtc_key(&a, "sm_90", false, "nvrtc 13.0"), "the key is a function of its inputs");
  vl_rtc_source a2 = a;
  a2.program = "other.cu";
  CHECK(ka == vl_rtc_key(&a2, "sm_90", false, "nvrtc 13.0"), "the file name is not part of the key");
  CHECK(ka != vl_rtc_key(&b, "sm_90", false, "nvrtc 13.0"), "source");
  CHECK(ka != vl_rtc_key(&c, "sm_90", false, "nvrtc 13.0"), "options");
  CHECK(vl_rtc_key(&c, "sm_90", false, "x") != vl_rtc_key(&d, "sm_90", false, "x"), "more options");
  CHECK(ka != vl_rtc_key(&a, "sm_80", false, "nvrtc 13.0"), "arch");
  CHECK(ka != vl_rtc_key(&a, "sm_90", true, "nvrtc 13.0"), "ptx");
  CHECK(ka != vl_rtc_key(&a, "sm_90", false, "nvrtc 13.1"), "compiler version");
  /* Field boundaries count: ("ab", "c") and ("a", "bc") are different programs. */
  const char *ob[] = {"c"}, *oc[] = {"bc"};
  vl_rtc_source e = {.source = "ab", .program = "e.cu", .nopts = 1, .opts = ob};
  vl_rtc_source f = {.source = "a", .program = "f.cu", .nopts = 1, .opts = oc};
  CHECK(vl_rtc_key(&e, "sm_90", false, "x") != vl_rtc_key(&f, "sm_90", false, "x"));
  /* FNV-1a 64 test vector: "a" -> 0xaf63dc4c8601ec8c. */
  CHECK(vl_rtc_hash(VL_RTC_HASH_INIT, "a", 1) == 0xaf63dc4c8601ec8cULL);
}

/* ---- the cache directory ---- */

static void test_cache_dir(void) {
  char buf[512];
  const char *v = getenv("V100_CACHE_DIR"), *x = getenv("XDG_CACHE_HOME"), *h = getenv("HOME");
  char *sv = v ? strdup(v) : NULL, *sx = x ? strdup(x) : NULL, *sh = h ? strdup(h) : NULL;
  setenv("V100_CACHE_DIR", "/a/b", 1);
  setenv("XDG_CACHE_HOME", "/x", 1);
  setenv("HOME", "/home/u", 1);
  CHECK_OK(vl_rtc_cache_dir(buf, sizeof buf));
  CHECK(strcmp(buf, "/a/b") == 0, "%s", buf);
  setenv("V100_CACHE_DIR", "", 1);
  CHECK_OK(vl_rtc_cache_dir(buf, sizeof buf));
  CHECK(strcmp(buf, "/x/v100lua/kernels") == 0, "%s", buf);
  unsetenv("XDG_CACHE_HOME");
  CHECK_OK(vl_rtc_cache_dir(buf, sizeof buf));
  CHECK(strcmp(buf, "/home/u/.cache/v100lua/kernels") == 0, "%s", buf);
  unsetenv("HOME");
  unsetenv("V100_CACHE_DIR");
  CHECK_ERR(vl_rtc_cache_dir(buf, sizeof buf), VL_EINVAL, "no cache directory");
  setenv("HOME", "/home/u", 1);
  CHECK_ERR(vl_rtc_cache_dir(buf, 8), VL_EINVAL, "too long");
  if (sv) setenv("V100_CACHE_DIR", sv, 1); else unsetenv("V100_CACHE_DIR");
  if (sx) setenv("XDG_CACHE_HOME", sx, 1); else unsetenv("XDG_CACHE_HOME");
  if (sh) setenv("HOME", sh, 1); else unsetenv("HOME");
  free(sv);
  free(sx);
  free(sh);
}

/* ---- cache files ---- */

static void put_file(const char *path, const void *data, size_t n) {
  FILE *f = fopen(path, "wb");
  CHECK(f != NULL, "open %s", path);
  if (!f) return;
  CHECK(fwrite(data, 1, n, f) == n);
  fclose(f);
}

static void test_cache_file(void) {
  char path[512];
  snprintf(path, sizeof path, "%s/file.cubin", dir);
  const char payload[] = "not really a cubin, but bytes";
  CHECK_OK(vl_rtc_cache_write(path, 42, false, payload, sizeof payload));
  void *data = NULL;
  size_t size = 0;
  bool hit = false;
  char why[256];
  CHECK_OK(vl_rtc_cache_read(path, 42, false, &data, &size, &hit, why, sizeof why));
  CHECK(hit && size == sizeof payload && memcmp(data, payload, size) == 0 && why[0] == '\0');
  free(data);
  data = NULL;
  CHECK_OK(vl_rtc_cache_read(path, 43, false, &data, &size, &hit, why, sizeof why));
  CHECK(!hit && data == NULL && strstr(why, "holds another program"), "why: %s", why);
  CHECK_OK(vl_rtc_cache_read(path, 42, true, &data, &size, &hit, why, sizeof why));
  CHECK(!hit && strstr(why, "holds another program"), "a cubin is not PTX: %s", why);

  size_t n = 0;
  unsigned char *bytes = vl_test_slurp(path, &n);
  CHECK(bytes != NULL && n == 40 + sizeof payload, "n = %zu", n);
  if (!bytes) return;
  put_file(path, bytes, 20); /* short header */
  CHECK_OK(vl_rtc_cache_read(path, 42, false, &data, &size, &hit, why, sizeof why));
  CHECK(!hit && strstr(why, "shorter than its header"), "why: %s", why);
  put_file(path, bytes, n - 3); /* truncated payload */
  CHECK_OK(vl_rtc_cache_read(path, 42, false, &data, &size, &hit, why, sizeof why));
  CHECK(!hit && strstr(why, "size does not match"), "why: %s", why);
  bytes[n - 5] ^= 0x20; /* one flipped bit in the payload */
  put_file(path, bytes, n);
  CHECK_OK(vl_rtc_cache_read(path, 42, false, &data, &size, &hit, why, sizeof why));
  CHECK(!hit && strstr(why, "CRC-32 mismatch"), "why: %s", why);
  bytes[n - 5] ^= 0x20;
  bytes[0] = 'X'; /* another format */
  put_file(path, bytes, n);
  CHECK_OK(vl_rtc_cache_read(path, 42, false, &data, &size, &hit, why, sizeof why));
  CHECK(!hit && strstr(why, "not a v100lua kernel cache file"), "why: %s", why);
  free(bytes);
  snprintf(path, sizeof path, "%s/absent.cubin", dir);
  CHECK_OK(vl_rtc_cache_read(path, 42, false, &data, &size, &hit, why, sizeof why));
  CHECK(!hit && why[0] == '\0', "an absent file is a plain miss: %s", why);
  CHECK(data == NULL);
}

/* Files in d whose name holds sub (the replace.c temporaries are ".<name>.v100tmp-..."). */
static int count_named(const char *d, const char *sub) {
  DIR *dd = opendir(d);
  if (!dd) return -1;
  int k = 0;
  struct dirent *e;
  while ((e = readdir(dd)) != NULL) k += strstr(e->d_name, sub) != NULL;
  closedir(dd);
  return k;
}

/* ---- building with a fake compiler ---- */

typedef struct fake {
  int calls;
  bool fail;
  char last_arch[32];
} fake;

static vl_status fake_compile(void *ud, const vl_rtc_source *src, const char *arch, bool ptx, void **image,
                              size_t *size) {
  fake *f = (fake *)ud;
  f->calls++;
  snprintf(f->last_arch, sizeof f->last_arch, "%s", arch);
  if (f->fail) return vl_fail(VL_EINVAL, "%s: NVRTC compilation failed for %s:\n%s(3): error: nope", src->program, arch, src->program);
  size_t n = strlen(src->source) + 1;
  char *p = (char *)malloc(n);
  if (!p) return vl_fail(VL_EOOM, "fake: oom");
  memcpy(p, src->source, n);
  *image = p;
  *size = n;
  return VL_OK;
}

static void test_build(void) {
  char cdir[400];
  snprintf(cdir, sizeof cdir, "%s/cache/nested/kernels", dir); /* created on the first write */
  vl_rtc_source src = {.source = "extern \"C\" __global__ void k() {}", .program = "k.cu"};
  fake f = {0};
  vl_rtc_image img;
  CHECK_OK(vl_rtc_build(&src, "sm_90", false, cdir, fake_compile, &f, "fake 1.0", &img));
  CHECK(f.calls == 1 && !img.cached && strcmp(f.last_arch, "sm_90") == 0);
  CHECK(img.size == strlen(src.source) + 1 && memcmp(img.data, src.source, img.size) == 0);
  CHECK(strstr(img.path, cdir) == img.path && strstr(img.path, "-sm_90.cubin"), "path %s", img.path);
  CHECK(img.note[0] == '\0', "note: %s", img.note);
  char path[1024];
  snprintf(path, sizeof path, "%s", img.path);
  struct stat st;
  CHECK(stat(path, &st) == 0 && (size_t)st.st_size == 40 + img.size, "the cache file was written");
  CHECK(count_named(cdir, ".v100tmp-") == 0 && count_named(cdir, ".cubin") == 1, "one file, no temporary left");
  vl_rtc_image_free(&img);

  CHECK_OK(vl_rtc_build(&src, "sm_90", false, cdir, fake_compile, &f, "fake 1.0", &img));
  CHECK(f.calls == 1 && img.cached, "second build: a cache hit (calls %d)", f.calls);
  CHECK(img.size == strlen(src.source) + 1 && memcmp(img.data, src.source, img.size) == 0);
  vl_rtc_image_free(&img);

  /* Another compiler version or arch is another file, compiled anew. */
  CHECK_OK(vl_rtc_build(&src, "sm_90", false, cdir, fake_compile, &f, "fake 1.1", &img));
  CHECK(f.calls == 2 && !img.cached && strcmp(img.path, path) != 0);
  vl_rtc_image_free(&img);

  /* A damaged file is recompiled and replaced, never trusted. */
  size_t n = 0;
  unsigned char *bytes = vl_test_slurp(path, &n);
  CHECK(bytes != NULL);
  if (bytes) {
    bytes[n - 2] ^= 1;
    put_file(path, bytes, n);
    free(bytes);
  }
  CHECK_OK(vl_rtc_build(&src, "sm_90", false, cdir, fake_compile, &f, "fake 1.0", &img));
  CHECK(f.calls == 3 && !img.cached && strstr(img.note, "CRC-32 mismatch") && strstr(img.note, "recompiled"),
        "note: %s", img.note);
  CHECK(memcmp(img.data, src.source, img.size) == 0, "the recompiled image, not the damaged bytes");
  vl_rtc_image_free(&img);
  CHECK_OK(vl_rtc_build(&src, "sm_90", false, cdir, fake_compile, &f, "fake 1.0", &img));
  CHECK(f.calls == 3 && img.cached, "the replaced file is good again");
  vl_rtc_image_free(&img);
  put_file(path, "junk", 4);
  CHECK_OK(vl_rtc_build(&src, "sm_90", false, cdir, fake_compile, &f, "fake 1.0", &img));
  CHECK(f.calls == 4 && !img.cached && strstr(img.note, "shorter than its header"), "note: %s", img.note);
  vl_rtc_image_free(&img);

  /* PTX images are their own files. */
  CHECK_OK(vl_rtc_build(&src, "compute_90", true, cdir, fake_compile, &f, "fake 1.0", &img));
  CHECK(f.calls == 5 && img.ptx && strstr(img.path, "-compute_90.ptx"), "path %s", img.path);
  vl_rtc_image_free(&img);

  /* Cache off: compiled every time, no path. */
  CHECK_OK(vl_rtc_build(&src, "sm_90", false, "", fake_compile, &f, "fake 1.0", &img));
  CHECK(f.calls == 6 && !img.cached && img.path[0] == '\0' && img.note[0] == '\0');
  vl_rtc_image_free(&img);

  /* A cache that cannot be written is a note; the image still comes back. */
  char blocked[400];
  snprintf(blocked, sizeof blocked, "%s/plainfile", dir);
  put_file(blocked, "x", 1);
  char under[450];
  snprintf(under, sizeof under, "%s/sub", blocked);
  CHECK_OK(vl_rtc_build(&src, "sm_90", false, under, fake_compile, &f, "fake 1.0", &img));
  CHECK(f.calls == 7 && img.data != NULL && strstr(img.note, "not cached"), "note: %s", img.note);
  vl_rtc_image_free(&img);

  /* The default directory comes from the environment. */
  char envdir[400];
  snprintf(envdir, sizeof envdir, "%s/env", dir);
  const char *old = getenv("V100_CACHE_DIR");
  char *saved = old ? strdup(old) : NULL;
  setenv("V100_CACHE_DIR", envdir, 1);
  CHECK_OK(vl_rtc_build(&src, "sm_90", false, NULL, fake_compile, &f, "fake 1.0", &img));
  CHECK(strstr(img.path, envdir) == img.path, "path %s", img.path);
  vl_rtc_image_free(&img);
  if (saved) setenv("V100_CACHE_DIR", saved, 1); else unsetenv("V100_CACHE_DIR");
  free(saved);

  /* A compile error propagates, with the output untouched and nothing cached. */
  vl_rtc_source bad = {.source = "broken", .program = "bad.cu"};
  f.fail = true;
  memset(&img, 0x5a, sizeof img);
  CHECK_ERR(vl_rtc_build(&bad, "sm_90", false, cdir, fake_compile, &f, "fake 1.0", &img), VL_EINVAL,
            "bad.cu(3): error: nope");
  CHECK(((unsigned char *)&img)[0] == 0x5a, "output untouched on failure");
  f.fail = false;
  CHECK_OK(vl_rtc_build(&bad, "sm_90", false, cdir, fake_compile, &f, "fake 1.0", &img));
  CHECK(!img.cached, "a failed compile left no cache file");
  vl_rtc_image_free(&img);
}

/* ---- trusting the cache (issue 27) ---- */

static mode_t mode_of(const char *p) {
  struct stat st;
  return stat(p, &st) == 0 ? (st.st_mode & 07777) : 01;
}

/* A cache file under the right key whose payload is not what the compiler makes. */
static void plant_cubin(const char *cdir, const vl_rtc_source *src) {
  char p[600];
  snprintf(p, sizeof p, "%s/%016llx-sm_90.cubin", cdir, (unsigned long long)vl_rtc_key(src, "sm_90", false, "fake 1.0"));
  CHECK_OK(vl_rtc_cache_write(p, vl_rtc_key(src, "sm_90", false, "fake 1.0"), false, "EVIL", 5));
}

static void test_trust(void) {
  vl_rtc_source src = {.source = "extern \"C\" __global__ void t() {}", .program = "t.cu"};
  fake f = {0};
  vl_rtc_image img;
  char cdir[400], top[400];
  snprintf(top, sizeof top, "%s/trust", dir);
  snprintf(cdir, sizeof cdir, "%s/trust/a/kernels", dir);
  mode_t um = umask(0); /* even with no umask: the cache is the user's own */
  CHECK_OK(vl_rtc_build(&src, "sm_90", false, cdir, fake_compile, &f, "fake 1.0", &img));
  umask(um);
  CHECK(f.calls == 1 && img.note[0] == '\0', "note: %s", img.note);
  CHECK(mode_of(cdir) == 0700 && mode_of(top) == 0700, "made 0700: %o %o", mode_of(cdir), mode_of(top));
  CHECK(mode_of(img.path) == 0600, "file mode %o", mode_of(img.path));
  char path[1024];
  snprintf(path, sizeof path, "%s", img.path);
  vl_rtc_image_free(&img);
  char why[256];
  CHECK(vl_rtc_dir_trusted(cdir, why, sizeof why), "%s", why);

  /* a cache file group or others can write is not loaded: recompiled, and written again 0600 */
  CHECK(chmod(path, 0620) == 0);
  CHECK_OK(vl_rtc_build(&src, "sm_90", false, cdir, fake_compile, &f, "fake 1.0", &img));
  CHECK(f.calls == 2 && !img.cached && strstr(img.note, "writable by group or others") && strstr(img.note, "not trusted"),
        "note: %s", img.note);
  vl_rtc_image_free(&img);
  CHECK(mode_of(path) == 0600);
  /* a symlink at the cache file's name is not followed */
  char real[1100];
  snprintf(real, sizeof real, "%s.real", path);
  CHECK(rename(path, real) == 0 && symlink(real, path) == 0);
  CHECK_OK(vl_rtc_build(&src, "sm_90", false, cdir, fake_compile, &f, "fake 1.0", &img));
  CHECK(f.calls == 3 && !img.cached && strstr(img.note, "symbolic link"), "note: %s", img.note);
  vl_rtc_image_free(&img);

  /* a directory group or others can write: nothing in it is read, nothing written */
  plant_cubin(cdir, &src);
  CHECK(chmod(cdir, 0777) == 0);
  CHECK_OK(vl_rtc_build(&src, "sm_90", false, cdir, fake_compile, &f, "fake 1.0", &img));
  CHECK(f.calls == 4 && !img.cached && strstr(img.note, "is writable by group or others") &&
        strstr(img.note, "compiled, not cached"), "note: %s", img.note);
  CHECK(img.size == strlen(src.source) + 1 && memcmp(img.data, src.source, img.size) == 0, "the compiled image");
  vl_rtc_image_free(&img);
  CHECK(!vl_rtc_dir_trusted(cdir, why, sizeof why) && strstr(why, "mode 0777"), "%s", why);
  CHECK(chmod(cdir, 0700) == 0);
  /* ... or one above it that others can write without the sticky bit (they could swap ours) */
  CHECK(chmod(top, 0777) == 0);
  CHECK(!vl_rtc_dir_trusted(cdir, why, sizeof why) && strstr(why, "above it"), "%s", why);
  CHECK(chmod(top, 01777) == 0);
  CHECK(vl_rtc_dir_trusted(cdir, why, sizeof why), "sticky is fine: %s", why);
  CHECK(chmod(top, 0700) == 0);

  if (geteuid() != 0) {
    printf("SKIP the cross-user cache cases: they need root to act as uid 65534 (CI runs as root)\n");
    return;
  }
  /* Another user made the shared cache directory with 0777 before us and planted a cubin under
   * the key of our program (the key is a public hash). We compile; their bytes never load. */
  char shared[400];
  snprintf(shared, sizeof shared, "%s/shared", top);
  CHECK(chmod(top, 01777) == 0 && chmod(dir, 0755) == 0); /* a shared folder, as /tmp */
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    if (setgid(65534) != 0 || setuid(65534) != 0) _exit(2);
    umask(0);
    if (mkdir(shared, 0777) != 0) _exit(3);
    plant_cubin(shared, &src);
    _exit(0); /* the parent checks what the plant did */
  }
  int st = 0;
  pid_t w = waitpid(pid, &st, 0);
  CHECK(w == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0, "the plant: %ld %ld status %#x %s", (long)w, (long)pid, st, strerror(errno));
  int calls = f.calls;
  CHECK_OK(vl_rtc_build(&src, "sm_90", false, shared, fake_compile, &f, "fake 1.0", &img));
  CHECK(f.calls == calls + 1 && !img.cached && strstr(img.note, "belongs to uid 65534"), "note: %s", img.note);
  CHECK(img.size == strlen(src.source) + 1 && memcmp(img.data, src.source, img.size) == 0, "not the planted bytes");
  vl_rtc_image_free(&img);
  /* their file in our directory: not loaded either */
  char mine[400];
  snprintf(mine, sizeof mine, "%s/mine", top);
  CHECK(mkdir(mine, 0700) == 0);
  plant_cubin(mine, &src);
  char planted[600];
  snprintf(planted, sizeof planted, "%s/%016llx-sm_90.cubin", mine, (unsigned long long)vl_rtc_key(&src, "sm_90", false, "fake 1.0"));
  CHECK(chown(planted, 65534, 65534) == 0);
  CHECK_OK(vl_rtc_build(&src, "sm_90", false, mine, fake_compile, &f, "fake 1.0", &img));
  CHECK(f.calls == calls + 2 && !img.cached && strstr(img.note, "belongs to uid 65534"), "note: %s", img.note);
  CHECK(memcmp(img.data, src.source, img.size) == 0);
  vl_rtc_image_free(&img);
}

/* ---- NVRTC itself (CUDA builds; no GPU needed to compile) ---- */

static void test_nvrtc(void) {
  if (!vl_have_cuda()) {
    vl_rtc_module *m = NULL;
    vl_rtc_source src = {.source = "x", .program = "x.cu"};
    CHECK_ERR(vl_rtc_module_load(&src, 0, "", &m), VL_EUNSUPPORTED, "built without CUDA (NVRTC unavailable)");
    CHECK(m == NULL);
    return;
  }
  char id[32];
  CHECK_OK(vl_rtc_compiler_id(id, sizeof id));
  CHECK(strncmp(id, "nvrtc ", 6) == 0, "%s", id);
  char arch[16];
  bool ptx = true;
  CHECK_OK(vl_rtc_target(9, 0, arch, sizeof arch, &ptx));
  CHECK(strcmp(arch, "sm_90") == 0 && !ptx, "%s", arch);
  CHECK_OK(vl_rtc_target(99, 9, arch, sizeof arch, &ptx));
  CHECK(ptx && strncmp(arch, "compute_", 8) == 0, "a GPU newer than NVRTC gets PTX: %s", arch);
  CHECK_ERR(vl_rtc_target(3, 0, arch, sizeof arch, &ptx), VL_EUNSUPPORTED, "cannot target sm_30");

  vl_rtc_source good = {.source = "#include <v100_rtc.h>\n"
                                  "extern \"C\" __global__ void cvt(vl_half *h, vl_bf16 *b, const float *x, vl_i64 n) {\n"
                                  "  for (vl_i64 i = vl_index(); i < n; i += vl_stride()) {\n"
                                  "    vl_store(h + i, vl_float(vl_f2h(x[i])));\n"
                                  "    vl_store(b + i, vl_float(vl_f2bf(x[i])));\n"
                                  "  }\n"
                                  "}\n",
                        .program = "cvt.cu"};
  void *image = NULL;
  size_t size = 0;
  CHECK_OK(vl_rtc_nvrtc_compile(NULL, &good, "sm_90", false, &image, &size));
  CHECK(image != NULL && size > 16 && memcmp(image, "\177ELF", 4) == 0, "a cubin (ELF) of %zu bytes", size);
  free(image);
  image = NULL;
  CHECK_OK(vl_rtc_nvrtc_compile(NULL, &good, "compute_90", true, &image, &size));
  CHECK(image != NULL && strstr((const char *)image, ".entry cvt"), "PTX with the kernel's entry");
  free(image);

  vl_rtc_source broken = {.source = "extern \"C\" __global__ void fused_act(float *y) {\n"
                                    "  y[0] = 1.0f;\n"
                                    "  y[1] = undefined_thing;\n"
                                    "}\n",
                          .program = "fused_act.cu"};
  image = NULL;
  CHECK_ERR(vl_rtc_nvrtc_compile(NULL, &broken, "sm_90", false, &image, &size), VL_EINVAL,
            "fused_act.cu: NVRTC compilation failed for sm_90");
  CHECK(strstr(vl_errmsg(), "fused_act.cu(3): error") && strstr(vl_errmsg(), "undefined_thing"),
        "the log with its line: %s", vl_errmsg());
  CHECK(image == NULL);
  const char *bad_opt[] = {"--no-such-option"};
  vl_rtc_source badopt = {.source = good.source, .program = "opt.cu", .nopts = 1, .opts = bad_opt};
  CHECK_ERR(vl_rtc_nvrtc_compile(NULL, &badopt, "sm_90", false, &image, &size), VL_EINVAL, "opt.cu: NVRTC");

  /* Through the cache with the real compiler: the second build is a hit. */
  char cdir[400];
  snprintf(cdir, sizeof cdir, "%s/nvrtc", dir);
  vl_rtc_image img;
  CHECK_OK(vl_rtc_build(&good, "sm_90", false, cdir, vl_rtc_nvrtc_compile, NULL, id, &img));
  CHECK(!img.cached);
  vl_rtc_image_free(&img);
  CHECK_OK(vl_rtc_build(&good, "sm_90", false, cdir, vl_rtc_nvrtc_compile, NULL, id, &img));
  CHECK(img.cached && memcmp(img.data, "\177ELF", 4) == 0);
  vl_rtc_image_free(&img);
}

int main(void) {
  vl_test_init();
  snprintf(dir, sizeof dir, "/tmp/vl_test_rtc_XXXXXX");
  if (!mkdtemp(dir)) return 2;
  test_signature();
  test_key();
  test_cache_dir();
  test_cache_file();
  test_build();
  test_trust();
  test_nvrtc();
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
  return vl_test_finish();
}
