/* bindings/l_print.c: tostring(t) in the Torch7 style: right-aligned columns with one format
 * for the whole tensor, "(i,j,.,.) =" headed matrices for 3-D and more, then the header line
 * "[v100.Tensor cuda:0 f16 2x3]". Above SUMMARY_AT elements only EDGE entries at each end of
 * every long dim are shown, with "..." between; those parts are cut out on the tensor's own device
 * (narrow + cat) so only a few elements cross to the host. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "bindings/l_priv.h"
#include "runtime/ops/ops.h"

#define SUMMARY_AT 1000
#define EDGE 3

typedef struct fmt {
  vl_dtype dt;
  const char *buf; /* contiguous host copy of the shown elements */
  size_t esz;
  int kind;        /* 0 integer, 1 bool, 2 float as integers, 3 fixed, 4 scientific */
  int width;
} fmt;

static int fmt_elem(const fmt *f, int64_t i, char *out, size_t n) {
  const char *p = f->buf + (size_t)i * f->esz;
  if (f->kind == 0) {
    long long v = f->dt == VL_I64 ? (long long)*(const int64_t *)p
                : f->dt == VL_I32 ? (long long)*(const int32_t *)p
                                  : (long long)*(const uint8_t *)p;
    return snprintf(out, n, "%lld", v);
  }
  if (f->kind == 1) return snprintf(out, n, "%s", *(const uint8_t *)p ? "true" : "false");
  double v = vl_load_as_f64(p, f->dt);
  if (isnan(v)) return snprintf(out, n, "nan");
  if (isinf(v)) return snprintf(out, n, v > 0 ? "inf" : "-inf");
  if (f->kind == 2) return snprintf(out, n, "%.0f", v);
  return snprintf(out, n, f->kind == 3 ? "%.4f" : "%.4e", v);
}

static void fmt_setup(fmt *f, int64_t n) {
  if (f->dt == VL_BOOL) f->kind = 1;
  else if (!vl_dtype_is_float(f->dt)) f->kind = 0;
  else {
    double maxabs = 0, minabs = INFINITY;
    bool integral = true;
    for (int64_t i = 0; i < n; i++) {
      double v = vl_load_as_f64(f->buf + (size_t)i * f->esz, f->dt);
      if (!isfinite(v)) continue;
      double a = fabs(v);
      if (a > maxabs) maxabs = a;
      if (a > 0 && a < minabs) minabs = a;
      if (v != floor(v)) integral = false;
    }
    if (integral && maxabs < 1e9) f->kind = 2;
    else if (maxabs >= 1e5 || minabs < 1e-4) f->kind = 4;
    else f->kind = 3;
  }
  char tmp[64];
  f->width = 1;
  for (int64_t i = 0; i < n; i++) {
    int w = fmt_elem(f, i, tmp, sizeof tmp);
    if (w > f->width) f->width = w;
  }
}

static void add_elem(luaL_Buffer *b, const fmt *f, int64_t i) {
  char tmp[64], cell[96];
  fmt_elem(f, i, tmp, sizeof tmp);
  snprintf(cell, sizeof cell, "%*s", f->width, tmp);
  luaL_addstring(b, cell);
}

/* A rows x cols matrix starting at element `base`; folded_r/c: "..." after EDGE rows/cols. */
static void add_matrix(luaL_Buffer *b, const fmt *f, int64_t base, int64_t rows, int64_t cols,
                       bool folded_r, bool folded_c) {
  for (int64_t r = 0; r < rows; r++) {
    if (folded_r && r == EDGE) luaL_addstring(b, " ...\n");
    for (int64_t c = 0; c < cols; c++) {
      if (folded_c && c == EDGE) luaL_addstring(b, "  ...");
      luaL_addstring(b, c ? "  " : " ");
      add_elem(b, f, base + r * cols + c);
    }
    luaL_addchar(b, '\n');
  }
}

int l_tensor_tostring(lua_State *L) {
  vl_tensor *t = vl_lua_checktensor(L, 1);
  lua_settop(L, 1);
  char dev[32], shape[160];
  vl_device_str(t->storage->device, dev, sizeof dev);
  vl_shape_str(t, shape, sizeof shape);
  int64_t numel = vl_tensor_numel(t);
  bool folded[VL_MAX_DIMS] = {false};
  vl_tensor *cur = t;
  if (numel > SUMMARY_AT) {
    luaL_checkstack(L, 3 * VL_MAX_DIMS + 4, "tostring");
    for (int d = 0; d < t->ndim; d++) {
      int64_t n = cur->size[d];
      if (n <= 2 * EDGE) continue;
      folded[d] = true;
      vl_tensor *parts[2];
      vl_tensor **a = l_slot(L);
      l_done(L, vl_narrow(cur, d, 0, EDGE, a));
      vl_tensor **z = l_slot(L);
      l_done(L, vl_narrow(cur, d, n - EDGE, EDGE, z));
      parts[0] = *a;
      parts[1] = *z;
      vl_tensor **c = l_slot(L);
      l_done(L, vl_cat(2, parts, d, c));
      cur = *c;
    }
  }
  luaL_Buffer b;
  int64_t shown = vl_tensor_numel(cur);
  fmt f = {cur->dtype, NULL, vl_dtype_size(cur->dtype), 0, 1};
  /* A userdata buffer: freed by the collector even if a later step raises. */
  char *host = (char *)lua_newuserdatauv(L, (size_t)shown * f.esz + 8, 0);
  if (shown > 0) {
    vl_status s = vl_read_host("print", cur, host);
    if (s != VL_OK) return vl_lua_error(L, s);
  }
  f.buf = host;
  fmt_setup(&f, shown);
  luaL_buffinit(L, &b);
  if (shown == 0) {
    /* no values to show */
  } else if (cur->ndim == 0) {
    add_elem(&b, &f, 0);
    luaL_addchar(&b, '\n');
  } else if (cur->ndim == 1) {
    for (int64_t i = 0; i < cur->size[0]; i++) {
      if (folded[0] && i == EDGE) luaL_addstring(&b, " ...\n");
      luaL_addchar(&b, ' ');
      add_elem(&b, &f, i);
      luaL_addchar(&b, '\n');
    }
  } else {
    int nd = cur->ndim, lead = nd - 2;
    int64_t rows = cur->size[nd - 2], cols = cur->size[nd - 1];
    int64_t idx[VL_MAX_DIMS] = {0};
    int64_t nslices = shown / (rows * cols);
    for (int64_t k = 0; k < nslices; k++) {
      if (lead > 0) {
        for (int d = 0; d < lead; d++) {
          bool rest_zero = true;
          for (int e = d + 1; e < lead; e++) rest_zero = rest_zero && idx[e] == 0;
          if (folded[d] && idx[d] == EDGE && rest_zero) {
            luaL_addstring(&b, "...\n\n");
            break;
          }
        }
        luaL_addchar(&b, '(');
        for (int d = 0; d < lead; d++) {
          int64_t orig = folded[d] && idx[d] >= EDGE ? t->size[d] - 2 * EDGE + idx[d] : idx[d];
          char num[32];
          snprintf(num, sizeof num, "%lld,", (long long)orig + 1);
          luaL_addstring(&b, num);
        }
        luaL_addstring(&b, ".,.) = \n");
      }
      add_matrix(&b, &f, k * rows * cols, rows, cols, folded[nd - 2], folded[nd - 1]);
      if (lead > 0) luaL_addchar(&b, '\n');
      for (int d = lead - 1; d >= 0; d--) { /* odometer over the leading dims */
        if (++idx[d] < cur->size[d]) break;
        idx[d] = 0;
      }
    }
  }
  char head[256];
  snprintf(head, sizeof head, "[v100.Tensor %s %s %s]", dev, vl_dtype_name(t->dtype), shape);
  luaL_addstring(&b, head);
  luaL_pushresult(&b);
  return 1;
}
