/* bindings/l_log.h: the parts of the v100.io table that logging uses, added to it by
 * luaopen_v100_io (bindings/l_io.c). */
#ifndef VL_L_LOG_H
#define VL_L_LOG_H

#include <lua.h>

/* bindings/l_log.c: EventWriter, read_events, isatty, unix_time, makedirs. */
void l_io_register_log(lua_State *L);
/* bindings/l_json.c: json_encode, json_decode. */
void l_io_register_json(lua_State *L);

#endif
