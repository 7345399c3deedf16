/* tests/fuzz/host/fuzz_host.c: the host program's input (bindings/main.c, included here whole
 * with its main renamed, so that its static functions are the ones tested): the command line,
 * and config.json as the BERT loader reads it (bert.read_config, Lua over cJSON, in a state set
 * up as the host sets one up). The input's first byte picks which:
 *   odd:  the rest split at NUL bytes is argv[1..] for collectargs; the index it returns must lie
 *         inside argv (main reads argv[script]).
 *   even: the rest is a config.json; bert.read_config either returns a config whose sizes are
 *         positive integers or raises a Lua error (caught). Anything else is a finding. */
#define main vl_host_main
#include "bindings/main.c"
#undef main

#include "../fuzz_common.h"

static lua_State *FL;

static void setup(void) {
  if (vl_init() != VL_OK) abort();
  FL = luaL_newstate();
  if (!FL) abort();
  luaL_openlibs(FL);
  lua_gc(FL, LUA_GCGEN, 0, 0);
  set_package_path(FL);
  preload_core(FL);
  vl_set_reclaim_hook(reclaim, FL);
  const char *helper =
      "local bert = require 'v100.models.bert'\n"
      "FUZZ_CONFIG = function(path)\n"
      "  local ok, cfg = pcall(bert.read_config, path)\n"
      "  if not ok then assert(type(cfg) == 'string', 'a non-string error') return end\n"
      "  for _, k in ipairs{'hidden_size', 'num_hidden_layers', 'num_attention_heads', 'intermediate_size', 'vocab_size'} do\n"
      "    local v = cfg[k]\n"
      "    assert(math.type(v) == 'integer' and v > 0, k .. ' accepted as ' .. tostring(v))\n"
      "  end\n"
      "end\n";
  if (luaL_dostring(FL, helper) != LUA_OK) {
    fprintf(stderr, "fuzz_host: %s\n", lua_tostring(FL, -1));
    abort();
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!FL) setup();
  if (size == 0) return 0;
  if (data[0] & 1) {
    /* argv: "v100lua", then the NUL-separated words (at most 32), then NULL */
    char *buf = malloc(size);
    if (!buf) return 0;
    memcpy(buf, data + 1, size - 1);
    buf[size - 1] = '\0';
    char *argv[34];
    int argc = 0;
    argv[argc++] = "v100lua";
    for (char *p = buf; p < buf + size - 1 && argc < 33; p += strlen(p) + 1) argv[argc++] = p;
    argv[argc] = NULL;
    int first = 0;
    int args = collectargs(argv, &first);
    if (args != HAS_ERROR && (first < 0 || first > argc)) abort(); /* main would read past argv */
    free(buf);
    return 0;
  }
  char path[64];
  int fd = vl_fuzz_file(data + 1, size - 1, path, sizeof path);
  if (fd < 0) return 0;
  lua_getglobal(FL, "FUZZ_CONFIG");
  lua_pushstring(FL, path);
  if (lua_pcall(FL, 1, 0, 0) != LUA_OK) {
    fprintf(stderr, "fuzz_host: %s\n", lua_tostring(FL, -1));
    abort(); /* the helper's own checks: a config accepted with a bad size */
  }
  close(fd);
  return 0;
}
