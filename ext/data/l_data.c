/* ext/data/l_data.c: v100._data, the C primitives of v100.data's image pipeline
 * (ext/data/lua/v100/image_data.lua builds the documented API on them).
 *   folder(root) -> Folder: f:n(), f:classes() -> {names}, f:path(i), f:label(i) (i 1-based)
 *   decode(bytes_or_path, is_bytes, channels) -> u8 H x W x C tensor
 *   encode(u8 HxWxC tensor, path, quality)
 *   resize(u8 HxWxC tensor, h, w) -> u8 h x w x C (bilinear)
 *   loader(folder, opts) -> Loader: l:epoch(order_i64, epoch, start), l:next() -> x, y | nil,
 *     l:next_to(device) -> x, y | nil (new tensors on device; async copy on CUDA),
 *     l:cpu_fallbacks(), l:nvjpeg_backend() (decoder 'nvjpeg': images decoded on the CPU instead; backend)
 *   have_nvjpeg() -> boolean (built with nvJPEG)
 *     l:batches(n), l:skipped(), l:skip_message(i), l:workers(), l:close() (also __gc, __close)
 * Options arrive checked for type by data.lua; the runtime checks their values. */
#include <lauxlib.h>
#include <lua.h>
#include <string.h>

#include "bindings/l_priv.h"
#include "bindings/vl_lua.h"
#include "ext/data/folder.h"
#include "ext/data/image.h"
#include "ext/data/loader.h"
#include "ext/data/nvjpeg.h"
#include "ext/data/transform.h"
#include "runtime/core/device.h"
#include "runtime/ops/ops.h"

#define FOLDER_MT "v100.data.Folder"
#define LOADER_MT "v100.data.Loader"

static const char *checkpath(lua_State *L, int idx, const char *op) {
  size_t len;
  const char *p = luaL_checklstring(L, idx, &len);
  if (strlen(p) != len) luaL_error(L, "%s: the path \"%s...\" contains a NUL byte", op, p);
  return p;
}

/* ---- Folder ---- */

static vl_folder *checkfolder(lua_State *L, int idx) {
  vl_folder **u = luaL_checkudata(L, idx, FOLDER_MT);
  return *u;
}

static int l_folder(lua_State *L) {
  const char *root = checkpath(L, 1, "ImageFolder");
  vl_folder **u = lua_newuserdatauv(L, sizeof *u, 0);
  *u = NULL;
  luaL_setmetatable(L, FOLDER_MT);
  vl_status s = vl_folder_scan(root, u);
  if (s != VL_OK) return vl_lua_error(L, s);
  return 1;
}

static int folder_gc(lua_State *L) {
  vl_folder **u = luaL_checkudata(L, 1, FOLDER_MT);
  vl_folder_release(*u);
  *u = NULL;
  return 0;
}

static int folder_n(lua_State *L) {
  lua_pushinteger(L, checkfolder(L, 1)->n);
  return 1;
}

static int folder_classes(lua_State *L) {
  vl_folder *f = checkfolder(L, 1);
  lua_createtable(L, f->nclasses, 0);
  for (int c = 0; c < f->nclasses; c++) {
    lua_pushstring(L, f->classes[c]);
    lua_rawseti(L, -2, c + 1);
  }
  return 1;
}

static int64_t check_index(lua_State *L, vl_folder *f, int idx, const char *op) {
  lua_Integer i = luaL_checkinteger(L, idx);
  if (i < 1 || i > f->n) luaL_error(L, "ImageFolder:%s: index %I is outside 1..%I", op, (lua_Integer)i, (lua_Integer)f->n);
  return (int64_t)i - 1;
}

static int folder_path(lua_State *L) {
  vl_folder *f = checkfolder(L, 1);
  lua_pushstring(L, f->paths[check_index(L, f, 2, "path")]);
  return 1;
}

static int folder_label(lua_State *L) {
  vl_folder *f = checkfolder(L, 1);
  lua_pushinteger(L, f->labels[check_index(L, f, 2, "label")]);
  return 1;
}

/* ---- images ---- */

static int l_decode(lua_State *L) {
  size_t len;
  const char *src = luaL_checklstring(L, 1, &len);
  int is_bytes = lua_toboolean(L, 2);
  int channels = (int)luaL_checkinteger(L, 3);
  vl_tensor *t = NULL;
  vl_status s;
  if (is_bytes) s = vl_image_decode(src, len, "<memory>", channels, &t);
  else {
    checkpath(L, 1, "decode_jpeg");
    s = vl_image_decode_file(src, channels, &t);
  }
  if (s != VL_OK) return vl_lua_error(L, s);
  vl_lua_pushtensor(L, t);
  return 1;
}

static int l_encode(lua_State *L) {
  vl_tensor *t = vl_lua_checktensor(L, 1);
  const char *path = checkpath(L, 2, "encode_jpeg");
  int quality = (int)luaL_checkinteger(L, 3);
  vl_status s = vl_image_encode_file(t, path, quality);
  if (s != VL_OK) return vl_lua_error(L, s);
  return 0;
}

static int l_resize(lua_State *L) {
  vl_tensor *t = vl_lua_checktensor(L, 1);
  lua_Integer h = luaL_checkinteger(L, 2), w = luaL_checkinteger(L, 3);
  char desc[256];
  if (t->storage->device.type != VL_CPU || t->dtype != VL_U8 || t->ndim != 3 || t->size[0] < 1 || t->size[1] < 1)
    return luaL_error(L, "resize_image: the image must be a non-empty u8 HxWxC CPU tensor (got %s)",
                      vl_tensor_desc(t, desc, sizeof desc));
  if (h < 1 || w < 1 || h > 65535 || w > 65535)
    return luaL_error(L, "resize_image: output size %Ix%I is outside 1..65535", h, w);
  vl_tensor *c = NULL, *out = NULL;
  vl_status s = vl_contiguous(t, &c);
  int64_t size[3] = {h, w, t->size[2]};
  if (s == VL_OK) s = vl_tensor_empty(3, size, VL_U8, vl_cpu_device(), &out);
  if (s == VL_OK)
    s = vl_resample_u8(vl_tensor_data(c), (int)c->size[0], (int)c->size[1], (int)c->size[2], (int)h, (int)w,
                       vl_tensor_data(out));
  vl_tensor_release(c);
  if (s != VL_OK) {
    vl_tensor_release(out);
    return vl_lua_error(L, s);
  }
  vl_lua_pushtensor(L, out);
  return 1;
}

/* ---- Loader ---- */

typedef struct l_loader {
  vl_loader *l;
} l_loader;

static vl_loader *checkloader(lua_State *L, int idx) {
  l_loader *u = luaL_checkudata(L, idx, LOADER_MT);
  if (!u->l) luaL_error(L, "ImageLoader: used after close");
  return u->l;
}

static lua_Integer opt_int(lua_State *L, int t, const char *k, lua_Integer def) {
  lua_getfield(L, t, k);
  lua_Integer v = lua_isnil(L, -1) ? def : luaL_checkinteger(L, -1);
  lua_pop(L, 1);
  return v;
}

static void opt_floats(lua_State *L, int t, const char *k, float *out, int n) {
  lua_getfield(L, t, k);
  if (!lua_isnil(L, -1)) {
    for (int i = 0; i < n; i++) {
      lua_rawgeti(L, -1, i + 1);
      out[i] = (float)luaL_checknumber(L, -1);
      lua_pop(L, 1);
    }
  }
  lua_pop(L, 1);
}

static int l_loader_new(lua_State *L) {
  vl_folder *f = checkfolder(L, 1);
  luaL_checktype(L, 2, LUA_TTABLE);
  static const char *const known[] = {"transform", "size", "resize", "channels", "seed", "mean", "std", "layout", "dtype",
                                      "batch_size", "workers", "prefetch", "drop_last", "pinned", "decoder", NULL};
  l_check_opts(L, 2, "data.loader", known);
  vl_loader_opts o;
  lua_getfield(L, 2, "transform");
  const char *tf = luaL_optstring(L, -1, "train");
  vl_tf_kind kind = strcmp(tf, "train") == 0 ? VL_TF_TRAIN : strcmp(tf, "val") == 0 ? VL_TF_VAL : VL_TF_NONE;
  lua_pop(L, 1);
  vl_tf_defaults(&o.tf, kind);
  o.tf.size = (int)opt_int(L, 2, "size", 224);
  o.tf.resize = (int)opt_int(L, 2, "resize", 256);
  o.tf.channels = (int)opt_int(L, 2, "channels", 3);
  o.tf.seed = (uint64_t)opt_int(L, 2, "seed", 0);
  opt_floats(L, 2, "mean", o.tf.mean, o.tf.channels == 1 ? 1 : 3);
  opt_floats(L, 2, "std", o.tf.std, o.tf.channels == 1 ? 1 : 3);
  lua_getfield(L, 2, "layout");
  o.tf.nhwc = strcmp(luaL_optstring(L, -1, "nchw"), "nhwc") == 0;
  lua_getfield(L, 2, "dtype");
  vl_status s = vl_dtype_parse(luaL_optstring(L, -1, "f32"), &o.tf.dtype);
  lua_pop(L, 2);
  if (s != VL_OK) return vl_lua_error(L, s);
  o.batch_size = (int)opt_int(L, 2, "batch_size", 256);
  o.workers = (int)opt_int(L, 2, "workers", 0);
  o.prefetch = (int)opt_int(L, 2, "prefetch", 4);
  lua_getfield(L, 2, "drop_last");
  o.drop_last = lua_toboolean(L, -1);
  lua_getfield(L, 2, "pinned");
  o.pinned = lua_toboolean(L, -1);
  lua_getfield(L, 2, "decoder");
  const char *dec = luaL_optstring(L, -1, "cpu");
  o.decoder = strcmp(dec, "nvjpeg") == 0 ? VL_DECODER_NVJPEG : VL_DECODER_CPU;
  lua_pop(L, 3);
  l_loader *u = lua_newuserdatauv(L, sizeof *u, 1);
  u->l = NULL;
  luaL_setmetatable(L, LOADER_MT);
  lua_pushvalue(L, 1); /* keeps the Folder userdata alive as long as the loader */
  lua_setiuservalue(L, -2, 1);
  s = vl_loader_create(f, &o, &u->l);
  if (s != VL_OK) return vl_lua_error(L, s);
  return 1;
}

static int loader_close(lua_State *L) {
  l_loader *u = luaL_checkudata(L, 1, LOADER_MT);
  vl_loader_close(u->l);
  u->l = NULL;
  return 0;
}

static int loader_epoch(lua_State *L) {
  vl_loader *l = checkloader(L, 1);
  vl_tensor *order = vl_lua_checktensor(L, 2);
  lua_Integer epoch = luaL_checkinteger(L, 3), start = luaL_checkinteger(L, 4);
  char desc[256];
  if (order->dtype != VL_I64 || order->ndim != 1 || order->storage->device.type != VL_CPU)
    return luaL_error(L, "ImageLoader: the epoch order must be a 1-D i64 CPU tensor (got %s)",
                      vl_tensor_desc(order, desc, sizeof desc));
  if (epoch < 0 || epoch > (lua_Integer)UINT32_MAX)
    return luaL_error(L, "ImageLoader: epoch %I is outside 0..%I", epoch, (lua_Integer)UINT32_MAX);
  vl_tensor *c = NULL;
  vl_status s = vl_contiguous(order, &c);
  if (s == VL_OK) s = vl_loader_epoch(l, vl_tensor_data(c), c->size[0], (uint32_t)epoch, start);
  vl_tensor_release(c);
  if (s != VL_OK) return vl_lua_error(L, s);
  return 0;
}

static int loader_next(lua_State *L) {
  vl_loader *l = checkloader(L, 1);
  vl_tensor *x = NULL, *y = NULL;
  vl_status s = vl_loader_next(l, &x, &y);
  if (s != VL_OK) return vl_lua_error(L, s);
  if (!x) return 0;
  vl_lua_pushtensor(L, x);
  vl_lua_pushtensor(L, y);
  return 2;
}

static int loader_next_to(lua_State *L) {
  vl_loader *l = checkloader(L, 1);
  vl_device dev;
  vl_status s = vl_device_parse(luaL_checkstring(L, 2), &dev);
  vl_tensor *x = NULL, *y = NULL;
  if (s == VL_OK) s = vl_loader_next_to(l, dev, &x, &y);
  if (s != VL_OK) return vl_lua_error(L, s);
  if (!x) return 0;
  vl_lua_pushtensor(L, x);
  vl_lua_pushtensor(L, y);
  return 2;
}

static int loader_cpu_fallbacks(lua_State *L) {
  lua_pushinteger(L, vl_loader_cpu_fallbacks(checkloader(L, 1)));
  return 1;
}

static int loader_nvjpeg_backend(lua_State *L) {
  lua_pushstring(L, vl_loader_nvjpeg_backend(checkloader(L, 1)));
  return 1;
}

static int l_have_nvjpeg(lua_State *L) {
  lua_pushboolean(L, vl_have_nvjpeg());
  return 1;
}

static int loader_batches(lua_State *L) {
  lua_pushinteger(L, vl_loader_batches(checkloader(L, 1), luaL_checkinteger(L, 2)));
  return 1;
}

static int loader_skipped(lua_State *L) {
  lua_pushinteger(L, vl_loader_skipped(checkloader(L, 1)));
  return 1;
}

static int loader_skip_message(lua_State *L) {
  char buf[1200];
  if (!vl_loader_skip_message(checkloader(L, 1), luaL_checkinteger(L, 2) - 1, buf, sizeof buf)) return 0;
  lua_pushstring(L, buf);
  return 1;
}

static int loader_workers(lua_State *L) {
  lua_pushinteger(L, vl_loader_workers(checkloader(L, 1)));
  return 1;
}

static const luaL_Reg folder_methods[] = {
    {"n", folder_n}, {"classes", folder_classes}, {"path", folder_path}, {"label", folder_label}, {NULL, NULL}};

static const luaL_Reg loader_methods[] = {{"epoch", loader_epoch},     {"next", loader_next},
                                          {"next_to", loader_next_to},
                                          {"cpu_fallbacks", loader_cpu_fallbacks},
                                          {"nvjpeg_backend", loader_nvjpeg_backend},
                                          {"batches", loader_batches}, {"skipped", loader_skipped},
                                          {"skip_message", loader_skip_message}, {"workers", loader_workers},
                                          {"close", loader_close},     {NULL, NULL}};

static const luaL_Reg data_funcs[] = {{"folder", l_folder}, {"decode", l_decode}, {"encode", l_encode},
                                      {"resize", l_resize}, {"loader", l_loader_new},
                                      {"have_nvjpeg", l_have_nvjpeg}, {NULL, NULL}};

static void new_mt(lua_State *L, const char *name, const luaL_Reg *methods, lua_CFunction gc) {
  luaL_newmetatable(L, name);
  lua_newtable(L);
  luaL_setfuncs(L, methods, 0);
  lua_setfield(L, -2, "__index");
  lua_pushcfunction(L, gc);
  lua_setfield(L, -2, "__gc");
  lua_pushcfunction(L, gc);
  lua_setfield(L, -2, "__close");
  lua_pop(L, 1);
}

int luaopen_v100_data(lua_State *L) {
  new_mt(L, FOLDER_MT, folder_methods, folder_gc);
  new_mt(L, LOADER_MT, loader_methods, loader_close);
  luaL_newlib(L, data_funcs);
  return 1;
}
