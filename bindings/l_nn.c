/* bindings/l_nn.c: the internal table `v100.core._nn` of layer ops (conv, pooling, norms,
 * optimizer steps), which scripts/v100/nn/functional.lua and scripts/v100/optim.lua wrap. Each
 * concern's bindings file exports a luaL_Reg array (declared in l_priv.h) and is listed here. */
#include "bindings/l_priv.h"

static const luaL_Reg *const l_nn_parts[] = {
    l_norm_funcs,
    l_optim_funcs,
    l_conv_funcs,
    NULL, /* keep last */
};

int luaopen_v100_nn_ops(lua_State *L) {
  lua_newtable(L);
  for (int i = 0; l_nn_parts[i]; i++) luaL_setfuncs(L, l_nn_parts[i], 0);
  return 1;
}
