/* bindings/l_priv.h: helpers shared by the bindings files (not by l_io.c). */
#ifndef VL_L_PRIV_H
#define VL_L_PRIV_H

#include <stdbool.h>
#include <stdint.h>

#include "bindings/vl_lua.h"
#include "runtime/core/device.h"
#include "runtime/core/dtype.h"
#include "runtime/core/scalar.h"

typedef struct vl_lua_tensor {
  vl_tensor *t; /* NULL while closed: before the runtime filled it, and after free */
  size_t counted; /* storage bytes this userdata added to the collector accounting (l_tensor.c) */
} vl_lua_tensor;

/* Pushes a closed tensor userdata and returns its slot; pass the slot as the runtime's `out`
 * (the runtime leaves it untouched on failure), then call l_done. */
vl_tensor **l_slot(lua_State *L);
/* Raises when s failed (the closed userdata is collected later); otherwise accounts the tensor
 * in the slot at the top of the stack (live count, collector debt). Returns 1 (one result). */
int l_done(lua_State *L, vl_status s);
/* Like l_done for two new slots at -2 and -1. Returns 2. */
int l_done2(lua_State *L, vl_status s);
/* The freed-or-not userdata at idx (type error otherwise). */
vl_lua_tensor *l_checkud(lua_State *L, int idx);

/* Dims and positions: Lua's 1-based (negative from the end) to the runtime's 0-based. */
int l_checkdim(lua_State *L, int arg);
int l_optdim(lua_State *L, int arg, int def0);
/* A 1-based position along a dim of size n (negative from the end) to 0-based. */
int64_t l_checkpos(lua_State *L, int arg, int64_t n);
/* A size given as a table at arg, or as integers from arg to the top. Returns ndim. */
int l_checksize(lua_State *L, int arg, int64_t size[VL_MAX_DIMS]);
/* Same for a table only (e.g. {1, 2}). */
int l_checksizetable(lua_State *L, int arg, int64_t size[VL_MAX_DIMS]);
/* A list of 1-based dims: a table at arg, or (when varargs) integers from arg to the top, or a
 * single integer. Converted like l_checkdim. Returns the count. */
int l_checkdimlist(lua_State *L, int arg, int dims[VL_MAX_DIMS], bool varargs);

vl_dtype l_checkdtype(lua_State *L, int arg);
vl_device l_parsedevice(lua_State *L, const char *s);
/* An options table at idx: nil or none passes; anything but a table, a key that is not a string
 * and a key not in `known` (NULL-terminated) raise "<fn>: unknown option 'k' (a, b, c)", the
 * valid names listed. Every binding that takes options checks them with this first. */
void l_check_opts(lua_State *L, int idx, const char *fn, const char *const known[]);
/* opts {dtype=, device=} at idx (nil or absent: defaults kept). */
void l_opts(lua_State *L, int idx, const char *fn, bool requires_grad, vl_dtype *dt, vl_device *dev);
/* A CUDA device from an optional argument: nil (current), an ordinal, "cuda" or "cuda:N".
 * Raises "<fname>: no CUDA device" when there is none. */
int l_optcudadev(lua_State *L, int arg, const char *fname);

/* A number argument, booleans accepted as 1/0. */
bool l_isscalar(lua_State *L, int idx);
double l_toscalar(lua_State *L, int idx);
/* The same as a vl_scalar: a Lua integer stays an exact int64 (runtime/core/scalar.h). */
vl_scalar l_toscalarv(lua_State *L, int idx);

void l_register_tensor_methods(lua_State *L); /* l_tensor.c: into the table at the top */
/* l_tensor.c: creates the "v100.Tensor" metatable whose __index looks in the methods table at
 * the top first; leaves the stack as it was. */
void l_tensor_metatable(lua_State *L);
void l_register_operators(lua_State *L);      /* l_ops.c: __add etc. into the metatable at the top */
void l_register_ops(lua_State *L);            /* l_ops.c: into the table at the top */
void l_register_ops_module(lua_State *L);     /* l_ops.c: module-level ops (where, cat, ...) */
void l_register_scan_methods(lua_State *L);   /* l_scan.c: cumsum, cumprod, logsumexp, any, all, count_nonzero */
int l_tensor_tostring(lua_State *L);          /* l_print.c */
/* l_sort.c: sort, topk, ... into the methods table at -2, searchsorted into the module at -1. */
void l_register_sort(lua_State *L);
int l_record_stream(lua_State *L);            /* l_cuda.c: t:record_stream(s) */
/* bindings/l_shape.c: the shape ops into the methods table at -2 and v100.pad into the module at -1;
 * t:split({sizes...}, dim), called by t:split when its argument is a table. */
void l_register_shape(lua_State *L);
int l_split_sizes(lua_State *L);
void l_register_einsum(lua_State *L);         /* l_einsum.c: v100.einsum into the module at the top */

/* bindings/l_autograd.c: autograd fields (requires_grad, grad, grad_fn, is_leaf): pushes one and
 * returns 1 for those keys, else 0; __newindex (t.grad = g, t.requires_grad = b); methods into the
 * table at the top; grad-mode functions and the `autograd` subtable into the module table at the
 * top; opts.requires_grad of creation functions applied to the tensor at tidx. */
int l_autograd_field(lua_State *L, vl_tensor *t, const char *k);
/* bindings/l_index.c: x[key] and x[key] = v for a key that is not a string (integer, table of
 * ranges, bool mask, index tensor) at stack index 2, the value at 3. */
int l_tensor_index(lua_State *L, vl_tensor *t);
int l_tensor_newindex(lua_State *L, vl_tensor *t);
extern const luaL_Reg l_index_methods[]; /* nonzero, masked_select */
extern const luaL_Reg l_scatter_methods[]; /* bindings/l_scatter.c: scatter, index_put, one_hot */
/* bindings/l_create.c: randint, randperm, linspace, logspace, eye, multinomial into the module
 * table at the top; t:multinomial, t:exponential_, t:random_ into the methods table below it. */
void l_register_create(lua_State *L);
int l_autograd_newindex(lua_State *L);
void l_register_autograd_methods(lua_State *L);
void l_register_autograd_module(lua_State *L);
void l_opt_requires_grad(lua_State *L, int opts, int tidx);

/* bindings/l_nn.c: the `_nn` table of layer ops; each concern adds its array to l_nn_parts. */
int luaopen_v100_nn_ops(lua_State *L);
extern const luaL_Reg l_norm_funcs[]; /* bindings/l_nn_norm.c */
extern const luaL_Reg l_optim_funcs[]; /* bindings/l_nn_optim.c */
extern const luaL_Reg l_conv_funcs[]; /* bindings/l_nn_conv.c */
extern const luaL_Reg l_check_funcs[]; /* bindings/l_nn_checks.c */
extern const luaL_Reg l_attention_funcs[]; /* bindings/l_nn_attention.c */
extern const luaL_Reg l_fused_funcs[]; /* bindings/l_nn_fused.c */
/* bindings/l_nn.c: an integer or a pair {h, w} at idx into out (raises "op: what must be ...");
 * the one parser of the layers' sizes, strides, paddings and dilations. */
void l_checkpair(lua_State *L, int idx, const char *op, const char *what, int out[2]);
/* Raises the formatted message (lua_pushfstring's formats) without a "file:line:" prefix, as the
 * runtime's errors are raised: the message names the op, and the caller is library code. */
int l_nn_error(lua_State *L, const char *fmt, ...);
/* The tensor at idx, else raises "op: what must be a tensor, got <type>". */
vl_tensor *l_nn_checktensor(lua_State *L, int idx, const char *op, const char *what);

/* bindings/l_safetensors.c: load_safetensors / save_safetensors, set on the core module. */
extern const luaL_Reg l_safetensors_funcs[];

int luaopen_v100_core(lua_State *L);
int luaopen_v100_cuda(lua_State *L);
int luaopen_v100_memory(lua_State *L);

/* Collector accounting of tensor bytes (l_tensor.c). */
long long l_live_tensors(void);
size_t l_gc_debt(void);
size_t l_gc_owned(void);
size_t l_gc_owned_peak(void);
long long l_gc_fulls(void);
size_t l_gc_threshold(void);
void l_set_gc_threshold(size_t bytes);

#endif
