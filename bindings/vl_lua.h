/* bindings/vl_lua.h: what every bindings file (and bindings/l_io.c) shares about the tensor
 * userdata. A tensor userdata is born closed (NULL) and the tensor is stored into it only after
 * the runtime call that made it succeeded, so a Lua error can never leak a reference. */
#ifndef VL_LUA_H
#define VL_LUA_H

#include <lauxlib.h>
#include <lua.h>

#include "runtime/core/status.h"
#include "runtime/core/tensor.h"

#define VL_LUA_TENSOR_MT "v100.Tensor"

/* The tensor at idx; raises "tensor used after free" for a freed one and a type error naming
 * the argument for anything else. */
vl_tensor *vl_lua_checktensor(lua_State *L, int idx);
/* The tensor at idx, or NULL when the value is not a tensor (or a freed one). */
vl_tensor *vl_lua_testtensor(lua_State *L, int idx);
/* Pushes a new userdata owning one reference of t (taken from the caller). */
void vl_lua_pushtensor(lua_State *L, vl_tensor *t);
/* Raises the runtime's last error message as a Lua error; never returns. */
int vl_lua_error(lua_State *L, vl_status s);
/* Makes the metatable `mt` of a userdata class once (a second call leaves it as it is): __index
 * the methods table, or index (a C closure with that table as its upvalue) where index is given
 * (for fields as well as methods); __gc, __close and __tostring from the functions that are not
 * NULL. Leaves the stack as it was. */
void vl_lua_class(lua_State *L, const char *mt, const luaL_Reg *methods, lua_CFunction index, lua_CFunction gc,
                  lua_CFunction close, lua_CFunction tostring);

/* bindings/l_io.c: the `v100.io` module table. */
int luaopen_v100_io(lua_State *L);
/* ext/text/l_text.c: the `v100.text` module table (the WordPiece tokenizer). */
int luaopen_v100_text(lua_State *L);
/* ext/data/l_data.c: `v100.core._data`, the primitives of v100.data's image pipeline. */
int luaopen_v100_data(lua_State *L);

#endif
