/* ext/data/folder.c: the ImageFolder scan (see folder.h). */
#define _DEFAULT_SOURCE
#include "ext/data/folder.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

typedef struct strvec { char **v; int64_t n, cap; } strvec;

static int push(strvec *s, char *str) {
  if (!str) return -1;
  if (s->n == s->cap) {
    int64_t cap = s->cap ? 2 * s->cap : 64;
    char **v = realloc(s->v, sizeof(char *) * (size_t)cap);
    if (!v) {
      free(str);
      return -1;
    }
    s->v = v;
    s->cap = cap;
  }
  s->v[s->n++] = str;
  return 0;
}

static void strvec_free(strvec *s) {
  for (int64_t i = 0; i < s->n; i++) free(s->v[i]);
  free(s->v);
  s->v = NULL;
  s->n = s->cap = 0;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static char *join(const char *a, const char *b) {
  size_t la = strlen(a), lb = strlen(b);
  char *s = malloc(la + lb + 2);
  if (!s) return NULL;
  memcpy(s, a, la);
  s[la] = '/';
  memcpy(s + la + 1, b, lb + 1);
  return s;
}

static int is_dir(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static int is_jpeg_name(const char *name) {
  size_t n = strlen(name);
  return (n > 4 && strcasecmp(name + n - 4, ".jpg") == 0) || (n > 5 && strcasecmp(name + n - 5, ".jpeg") == 0);
}

/* The entries of dir (no hidden ones) that are directories (want_dirs) or JPEG-named non-directories,
 * sorted. */
static vl_status list(const char *dir, int want_dirs, strvec *out) {
  DIR *d = opendir(dir);
  if (!d) return vl_fail(VL_EIO, "ImageFolder: %s: %s", dir, strerror(errno));
  struct dirent *e;
  vl_status s = VL_OK;
  while (s == VL_OK && (e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.') continue;
    if (!want_dirs && !is_jpeg_name(e->d_name)) continue;
    char *full = join(dir, e->d_name);
    if (!full) {
      s = vl_fail(VL_EOOM, "ImageFolder: out of host memory");
      break;
    }
    int isd = is_dir(full);
    free(full);
    if (isd != want_dirs) continue;
    if (push(out, strdup(e->d_name)) != 0) s = vl_fail(VL_EOOM, "ImageFolder: out of host memory");
  }
  closedir(d);
  if (s == VL_OK && out->n > 1) qsort(out->v, (size_t)out->n, sizeof(char *), cmp_str);
  return s;
}

vl_status vl_folder_scan(const char *root, vl_folder **out) {
  struct stat st;
  if (stat(root, &st) != 0) return vl_fail(VL_EIO, "ImageFolder: %s: %s", root, strerror(errno));
  if (!S_ISDIR(st.st_mode)) return vl_fail(VL_EIO, "ImageFolder: %s: not a directory", root);
  strvec classes = {0}, paths = {0}, files = {0};
  int32_t *labels = NULL;
  int64_t labels_cap = 0;
  vl_folder *f = NULL;
  vl_status s = list(root, 1, &classes);
  if (s == VL_OK && classes.n == 0)
    s = vl_fail(VL_EIO, "ImageFolder: %s has no class directories (expected <root>/<class>/<image>.JPEG)", root);
  for (int64_t c = 0; s == VL_OK && c < classes.n; c++) {
    char *cdir = join(root, classes.v[c]);
    if (!cdir) {
      s = vl_fail(VL_EOOM, "ImageFolder: out of host memory");
      break;
    }
    s = list(cdir, 0, &files);
    if (s == VL_OK && files.n == 0)
      s = vl_fail(VL_EIO, "ImageFolder: class directory %s has no .jpg/.jpeg files", cdir);
    for (int64_t i = 0; s == VL_OK && i < files.n; i++) {
      if (push(&paths, join(cdir, files.v[i])) != 0) {
        s = vl_fail(VL_EOOM, "ImageFolder: out of host memory");
        break;
      }
      if (paths.n > labels_cap) {
        int64_t cap = labels_cap ? 2 * labels_cap : 1024;
        int32_t *l = realloc(labels, sizeof(int32_t) * (size_t)cap);
        if (!l) {
          s = vl_fail(VL_EOOM, "ImageFolder: out of host memory");
          break;
        }
        labels = l;
        labels_cap = cap;
      }
      labels[paths.n - 1] = (int32_t)c;
    }
    strvec_free(&files);
    free(cdir);
  }
  if (s == VL_OK && classes.n > INT32_MAX) s = vl_fail(VL_EIO, "ImageFolder: %s: too many classes", root);
  if (s == VL_OK) {
    f = calloc(1, sizeof *f);
    if (!f || !(f->root = strdup(root))) {
      free(f);
      f = NULL;
      s = vl_fail(VL_EOOM, "ImageFolder: out of host memory");
    }
  }
  if (s != VL_OK) {
    strvec_free(&classes);
    strvec_free(&paths);
    free(labels);
    return s;
  }
  f->refcount = 1;
  f->nclasses = (int)classes.n;
  f->classes = classes.v;
  f->n = paths.n;
  f->paths = paths.v;
  f->labels = labels;
  *out = f;
  return VL_OK;
}

vl_folder *vl_folder_retain(vl_folder *f) {
  if (f) f->refcount++;
  return f;
}

void vl_folder_release(vl_folder *f) {
  if (!f || --f->refcount > 0) return;
  for (int c = 0; c < f->nclasses; c++) free(f->classes[c]);
  free(f->classes);
  for (int64_t i = 0; i < f->n; i++) free(f->paths[i]);
  free(f->paths);
  free(f->labels);
  free(f->root);
  free(f);
}
