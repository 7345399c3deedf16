/* bindings/main.c: the host program, after Lua 5.4's lua.c.
 *
 *   v100lua [options] [script.lua [args...]]
 *
 * Differences from lua.c: the v100 runtime is initialised before and shut down after the Lua
 * state; `v100.core` is preloaded, the v100 scripts directory is put first on package.path and
 * Lua's system module folders are kept on it (set_package_path);
 * the allocator's out-of-memory path can ask Lua for a full collection; -v also lists library
 * versions and GPUs; under a launcher (mpirun, srun, torchrun-style) every error line carries
 * "[rank N host] " so interleaved output from many ranks stays attributable; a script that fails
 * after dist.init at world size > 1 aborts the whole job (MPI_Abort), so that no other rank waits
 * forever in a collective for this one. */
#define _POSIX_C_SOURCE 200809L

#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

#include "bindings/l_priv.h"
#include "runtime/core/context.h"
#include "runtime/core/cuda.h"
#include "runtime/dist/comm.h"

#ifdef VL_HAVE_READLINE
#include <readline/history.h>
#include <readline/readline.h>
#endif

#ifndef VL_VERSION_STRING
#define VL_VERSION_STRING "0.0.0"
#endif
#ifndef VL_INSTALL_SCRIPTS_REL
#define VL_INSTALL_SCRIPTS_REL "share/v100lua/lua"
#endif

#define MAXINPUT 512

static const char *progname = "v100lua";
static char rank_prefix[128] = "";
static lua_State *globalL = NULL;

/* ---- messages ---- */

/* Every line of msg on stderr, each with the rank prefix, the first also with "pname: ". */
static void l_message(const char *pname, const char *msg) {
  const char *p = msg;
  bool first = true;
  do {
    const char *nl = strchr(p, '\n');
    int len = nl ? (int)(nl - p) : (int)strlen(p);
    fprintf(stderr, "%s%s%s%.*s\n", rank_prefix, first && pname ? pname : "", first && pname ? ": " : "",
            len, p);
    first = false;
    p = nl ? nl + 1 : NULL;
  } while (p && *p);
  fflush(stderr);
}

static int report(lua_State *L, int status) {
  if (status != LUA_OK) {
    const char *msg = lua_tostring(L, -1);
    l_message(progname, msg ? msg : "(error object is not a string)");
    lua_pop(L, 1);
  }
  return status;
}

static int msghandler(lua_State *L) {
  const char *msg = lua_tostring(L, 1);
  if (msg == NULL) {
    if (luaL_callmeta(L, 1, "__tostring") && lua_type(L, -1) == LUA_TSTRING) return 1;
    msg = lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, 1));
  }
  luaL_traceback(L, L, msg, 1);
  return 1;
}

/* ---- Ctrl-C: stop the running chunk at the next hook (lua.c's approach) ---- */

static void lstop(lua_State *L, lua_Debug *ar) {
  (void)ar;
  lua_sethook(L, NULL, 0, 0);
  luaL_error(L, "interrupted!");
}

static void laction(int i) {
  int flag = LUA_MASKCALL | LUA_MASKRET | LUA_MASKLINE | LUA_MASKCOUNT;
  signal(i, SIG_DFL);
  lua_sethook(globalL, lstop, flag, 1);
}

static int docall(lua_State *L, int narg, int nres) {
  int base = lua_gettop(L) - narg;
  lua_pushcfunction(L, msghandler);
  lua_insert(L, base);
  globalL = L;
  signal(SIGINT, laction);
  int status = lua_pcall(L, narg, nres, base);
  signal(SIGINT, SIG_DFL);
  lua_remove(L, base);
  return status;
}

/* ---- versions ---- */

static void print_versions(void) {
  vl_versions v;
  memset(&v, 0, sizeof v);
  vl_get_versions(&v);
  printf("v100lua %s\n%s\n", VL_VERSION_STRING, LUA_RELEASE);
  if (v.cuda_runtime)
    printf("CUDA runtime %d.%d, driver %d.%d\n", v.cuda_runtime / 1000, (v.cuda_runtime % 1000) / 10,
           v.cuda_driver / 1000, (v.cuda_driver % 1000) / 10);
  else
    printf("CUDA: not built with CUDA\n");
  if (v.cublas) printf("cuBLAS %d.%d.%d\n", v.cublas / 10000, (v.cublas / 100) % 100, v.cublas % 100);
  if (v.cudnn || v.cudnn_compiled) {
    /* cuDNN 9 encodes major*10000 + minor*100 + patch, cuDNN 8 major*1000 + minor*100 + patch */
    size_t c[2] = {v.cudnn, v.cudnn_compiled};
    char s[2][32];
    for (int i = 0; i < 2; i++) {
      size_t x = c[i], base = x >= 90000 ? 10000 : 1000;
      snprintf(s[i], sizeof s[i], "%zu.%zu.%zu", x / base, (x % base) / 100, x % 100);
    }
    printf("cuDNN %s (compiled with %s)\n", s[0], s[1]);
  }
  if (v.nccl) {
    int base = v.nccl >= 20900 ? 10000 : 1000;
    printf("NCCL %d.%d.%d\n", v.nccl / base, (v.nccl % base) / 100, v.nccl % 100);
  }
  printf("MPI: %s\n", v.mpi[0] ? v.mpi : "not linked");
  int n = vl_cuda_device_count();
  if (n == 0) printf("no CUDA devices\n");
  for (int i = 0; i < n; i++) {
    vl_device_info info;
    memset(&info, 0, sizeof info);
    if (vl_cuda_device_info(i, &info) != VL_OK) {
      printf("GPU %d: %s\n", i, vl_errmsg());
      continue;
    }
    printf("GPU %d: %s, %.1f GiB, compute capability %d.%d\n", i, info.name,
           (double)info.total_memory / (1024.0 * 1024.0 * 1024.0), info.major, info.minor);
  }
  fflush(stdout);
}

static void print_usage(FILE *f, const char *badoption) {
  if (badoption && badoption[0] == '-' && (badoption[1] == 'e' || badoption[1] == 'l'))
    fprintf(f, "%s'%s' needs argument\n", rank_prefix, badoption);
  else if (badoption)
    fprintf(f, "%sunrecognized option '%s'\n", rank_prefix, badoption);
  fprintf(f,
          "usage: %s [options] [script.lua [args...]]\n"
          "Available options are:\n"
          "  -e stmt        execute string 'stmt'\n"
          "  -i             enter interactive mode after executing 'script'\n"
          "  -l mod         require library 'mod' into global 'mod'\n"
          "  -v, --version  show version information (libraries and GPUs)\n"
          "  -h, --help     show this help\n"
          "  --             stop handling options\n"
          "  -              stop handling options and execute stdin\n",
          progname);
  fflush(f);
}

/* ---- arguments (lua.c's scheme) ---- */

#define HAS_ERROR 1
#define HAS_I 2
#define HAS_V 4
#define HAS_E 8
#define HAS_H 16

static int collectargs(char **argv, int *first) {
  int args = 0;
  if (argv[0] == NULL) {
    *first = -1;
    return 0;
  }
  for (int i = 1; argv[i] != NULL; i++) {
    *first = i;
    if (argv[i][0] != '-') return args;
    if (strcmp(argv[i], "--version") == 0) { args |= HAS_V; continue; }
    if (strcmp(argv[i], "--help") == 0) { args |= HAS_H; continue; }
    switch (argv[i][1]) {
      case '-':
        if (argv[i][2] != '\0') return HAS_ERROR;
        *first = i + 1;
        return args;
      case '\0': return args; /* '-': the script is stdin */
      case 'i':
        if (argv[i][2] != '\0') return HAS_ERROR;
        args |= HAS_I;
        break;
      case 'v':
        if (argv[i][2] != '\0') return HAS_ERROR;
        args |= HAS_V;
        break;
      case 'h':
        if (argv[i][2] != '\0') return HAS_ERROR;
        args |= HAS_H;
        break;
      case 'e':
        args |= HAS_E;
        /* -e and -l both take an argument */
        /* fall through */
      case 'l':
        if (argv[i][2] == '\0') {
          i++;
          if (argv[i] == NULL || argv[i][0] == '-') return HAS_ERROR;
        }
        break;
      default: return HAS_ERROR;
    }
  }
  *first = 0;
  return args;
}

/* arg[0] = script, arg[1..] its arguments, negative indices for the interpreter and options. */
static void createargtable(lua_State *L, char **argv, int argc, int script) {
  if (script == argc) script = 0;
  int narg = argc - (script + 1);
  lua_createtable(L, narg, script + 1);
  for (int i = 0; i < argc; i++) {
    lua_pushstring(L, argv[i]);
    lua_rawseti(L, -2, i - script);
  }
  lua_setglobal(L, "arg");
}

static int dochunk(lua_State *L, int status) {
  if (status == LUA_OK) status = docall(L, 0, 0);
  return report(L, status);
}

static int dostring(lua_State *L, const char *s, const char *name) {
  return dochunk(L, luaL_loadbuffer(L, s, strlen(s), name));
}

static int dolibrary(lua_State *L, char *globname) {
  char *modname = strchr(globname, '=');
  if (modname == NULL) modname = globname;
  else {
    *modname = '\0';
    modname++;
  }
  lua_getglobal(L, "require");
  lua_pushstring(L, modname);
  int status = docall(L, 1, 1);
  if (status == LUA_OK) lua_setglobal(L, globname);
  return report(L, status);
}

static int runargs(lua_State *L, char **argv, int n) {
  for (int i = 1; i < n; i++) {
    int option = argv[i][1];
    if (option != 'e' && option != 'l') continue;
    char *extra = argv[i] + 2;
    if (*extra == '\0') extra = argv[++i];
    int status = option == 'e' ? dostring(L, extra, "=(command line)") : dolibrary(L, extra);
    if (status != LUA_OK) return 0;
  }
  return 1;
}

static int pushargs(lua_State *L) {
  if (lua_getglobal(L, "arg") != LUA_TTABLE) luaL_error(L, "'arg' is not a table");
  int n = (int)luaL_len(L, -1);
  luaL_checkstack(L, n + 3, "too many arguments to script");
  for (int i = 1; i <= n; i++) lua_rawgeti(L, -i, i);
  lua_remove(L, -(n + 1));
  return n;
}

static int handle_script(lua_State *L, char **argv) {
  const char *fname = argv[0];
  if (strcmp(fname, "-") == 0 && strcmp(argv[-1], "--") != 0) fname = NULL; /* stdin */
  int status = luaL_loadfile(L, fname);
  if (status == LUA_OK) {
    int n = pushargs(L);
    status = docall(L, n, LUA_MULTRET);
  }
  return report(L, status);
}

static int handle_luainit(lua_State *L) {
  const char *name = "=LUA_INIT_5_4";
  const char *init = getenv(name + 1);
  if (init == NULL) {
    name = "=LUA_INIT";
    init = getenv(name + 1);
  }
  if (init == NULL) return LUA_OK;
  if (init[0] == '@') return dochunk(L, luaL_loadfile(L, init + 1));
  return dostring(L, init, name);
}

/* ---- the REPL ---- */

static const char *get_prompt(lua_State *L, int firstline) {
  if (lua_getglobal(L, firstline ? "_PROMPT" : "_PROMPT2") == LUA_TNIL)
    return firstline ? "> " : ">> ";
  const char *p = luaL_tolstring(L, -1, NULL);
  lua_remove(L, -2);
  return p;
}

/* Reads a line into a new string on the stack; 0 at end of input. */
static int pushline(lua_State *L, int firstline) {
  const char *prmt = get_prompt(L, firstline);
#ifdef VL_HAVE_READLINE
  char *b = readline(prmt);
  lua_pop(L, 1);
  if (b == NULL) return 0;
  size_t l = strlen(b);
  if (l > 0 && b[l - 1] == '\n') b[--l] = '\0';
  if (firstline && b[0] == '=') lua_pushfstring(L, "return %s", b + 1);
  else lua_pushlstring(L, b, l);
  free(b);
#else
  char buffer[MAXINPUT];
  fputs(prmt, stdout);
  fflush(stdout);
  lua_pop(L, 1);
  if (fgets(buffer, MAXINPUT, stdin) == NULL) return 0;
  size_t l = strlen(buffer);
  if (l > 0 && buffer[l - 1] == '\n') buffer[--l] = '\0';
  if (firstline && buffer[0] == '=') lua_pushfstring(L, "return %s", buffer + 1);
  else lua_pushlstring(L, buffer, l);
#endif
  return 1;
}

static void saveline(const char *line) {
#ifdef VL_HAVE_READLINE
  if (line[0] != '\0') add_history(line);
#else
  (void)line;
#endif
}

/* Tries "return <line>" so that expressions print their values. */
static int addreturn(lua_State *L) {
  const char *line = lua_tostring(L, -1);
  const char *retline = lua_pushfstring(L, "return %s;", line);
  int status = luaL_loadbuffer(L, retline, strlen(retline), "=stdin");
  if (status == LUA_OK) {
    lua_remove(L, -2);
    saveline(line);
  } else {
    lua_pop(L, 2);
  }
  return status;
}

static int incomplete(lua_State *L, int status) {
  static const char eofmark[] = "<eof>";
  const size_t marklen = sizeof eofmark - 1;
  if (status == LUA_ERRSYNTAX) {
    size_t lmsg;
    const char *msg = lua_tolstring(L, -1, &lmsg);
    if (lmsg >= marklen && strcmp(msg + lmsg - marklen, eofmark) == 0) {
      lua_pop(L, 1);
      return 1;
    }
  }
  return 0;
}

static int multiline(lua_State *L) {
  for (;;) {
    size_t len;
    const char *line = lua_tolstring(L, 1, &len);
    int status = luaL_loadbuffer(L, line, len, "=stdin");
    if (!incomplete(L, status) || !pushline(L, 0)) {
      saveline(line);
      return status;
    }
    lua_pushliteral(L, "\n");
    lua_insert(L, -2);
    lua_concat(L, 3);
  }
}

static int loadline(lua_State *L) {
  lua_settop(L, 0);
  if (!pushline(L, 1)) return -1;
  int status = addreturn(L);
  if (status != LUA_OK) status = multiline(L);
  lua_remove(L, 1);
  return status;
}

/* The prompt's helpers (scripts/v100/repl.lua): loaded when the REPL starts and kept in the
 * registry; without them (a library that fails to load) the prompt is Lua's plain one. */
#define REPL_KEY "v100lua.repl"

static void repl_load(lua_State *L) {
  lua_getglobal(L, "require");
  lua_pushliteral(L, "v100.repl");
  if (lua_pcall(L, 1, 1, 0) != LUA_OK) {
    l_message(progname, lua_pushfstring(L, "the prompt's helpers (v100.repl) did not load: %s", lua_tostring(L, -2)));
    lua_pop(L, 2);
    return;
  }
  if (lua_getfield(L, -1, "setup") == LUA_TFUNCTION && lua_pcall(L, 0, 0, 0) != LUA_OK) {
    l_message(progname, lua_tostring(L, -1));
    lua_pop(L, 1);
  }
  lua_setfield(L, LUA_REGISTRYINDEX, REPL_KEY);
}

/* Pushes repl[name] (a function) and returns true, or pushes nothing. */
static bool repl_fn(lua_State *L, const char *name) {
  if (lua_getfield(L, LUA_REGISTRYINDEX, REPL_KEY) != LUA_TTABLE) {
    lua_pop(L, 1);
    return false;
  }
  bool ok = lua_getfield(L, -1, name) == LUA_TFUNCTION;
  lua_remove(L, -2);
  if (!ok) lua_pop(L, 1);
  return ok;
}

#ifdef VL_HAVE_READLINE
/* Tab completion through readline: repl.complete(line before the cursor, word) gives the
 * candidates; readline shows them or completes their common prefix. */
static lua_State *repl_state;
static char **repl_matches;
static int repl_nmatches, repl_next;

static char *repl_generator(const char *text, int state) {
  (void)text;
  if (state == 0) repl_next = 0;
  return repl_next < repl_nmatches ? strdup(repl_matches[repl_next++]) : NULL;
}

static void repl_free_matches(void) {
  for (int i = 0; i < repl_nmatches; i++) free(repl_matches[i]);
  free(repl_matches);
  repl_matches = NULL;
  repl_nmatches = 0;
}

static char **repl_completion(const char *text, int start, int end) {
  (void)start;
  lua_State *L = repl_state;
  rl_attempted_completion_over = 1; /* never fall back to file names */
  repl_free_matches();
  int top = lua_gettop(L);
  if (!repl_fn(L, "complete")) return NULL;
  lua_pushlstring(L, rl_line_buffer, (size_t)end);
  lua_pushstring(L, text);
  if (lua_pcall(L, 2, 1, 0) == LUA_OK && lua_istable(L, -1)) {
    lua_Integer n = luaL_len(L, -1);
    repl_matches = n > 0 ? calloc((size_t)n, sizeof *repl_matches) : NULL;
    for (lua_Integer i = 1; repl_matches && i <= n; i++) {
      lua_geti(L, -1, i);
      const char *m = lua_tostring(L, -1);
      if (m && (repl_matches[repl_nmatches] = strdup(m))) repl_nmatches++;
      lua_pop(L, 1);
    }
  }
  lua_settop(L, top);
  rl_completion_append_character = '\0';
  return repl_nmatches > 0 ? rl_completion_matches(text, repl_generator) : NULL;
}
#endif

static void l_print(lua_State *L) {
  int n = lua_gettop(L);
  if (n > 0) {
    luaL_checkstack(L, LUA_MINSTACK, "too many results to print");
    if (!repl_fn(L, "show")) lua_getglobal(L, "print");
    lua_insert(L, 1);
    if (lua_pcall(L, n, 0, 0) != LUA_OK)
      l_message(progname, lua_pushfstring(L, "error calling 'print' (%s)", lua_tostring(L, -1)));
  }
}

static void doREPL(lua_State *L) {
  const char *oldprogname = progname;
  progname = NULL;
  int status;
  repl_load(L);
#ifdef VL_HAVE_READLINE
  repl_state = L;
  rl_readline_name = "v100lua";
  rl_basic_word_break_characters = " \t\n\"\\'`@$><=;|&{(+-*/%^~,[]#)";
  rl_attempted_completion_function = repl_completion;
#endif
  while ((status = loadline(L)) != -1) {
    if (status == LUA_OK) status = docall(L, 0, LUA_MULTRET);
    if (status == LUA_OK) l_print(L);
    else report(L, status);
  }
  lua_settop(L, 0);
#ifdef VL_HAVE_READLINE
  repl_free_matches();
  rl_attempted_completion_function = NULL;
#endif
  fputs("\n", stdout);
  fflush(stdout);
  progname = oldprogname;
}

/* ---- startup ---- */

static bool is_dir(const char *p) {
  struct stat st;
  return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

/* package.path, in search order:
 *   1. the v100 scripts directory: installed next to the binary, else the source tree's;
 *   2. LUA_PATH (or Lua's default when it is unset or holds ";;");
 *   3. the absolute entries of Lua's default (LUA_PATH_DEFAULT: /usr/local/share/lua/5.4,
 *      /usr/share/lua/5.4, ...) that 2 left out: the library needs Debian's lua-argparse, found
 *      there, even when LUA_PATH names only a test folder;
 *   4. <binary's folder>/../lua when it exists: pure-Lua modules packed with a binary for a machine
 *      without Lua (tools/device-pack.sh puts argparse.lua in .dev/lua beside .dev/run).
 * An extension keeps its Lua next to its C (ext/<feature>/lua/v100/...): installed, those folders
 * are merged into the one library folder (CMakeLists.txt); from the source tree each
 * ext/<feature>/lua comes right after the scripts directory, in name order (add_ext_paths). */
#ifdef VL_SOURCE_EXT_DIR
static int ext_filter(const struct dirent *e) { return e->d_name[0] != '.'; }

static void add_ext_paths(luaL_Buffer *b) {
  struct dirent **names;
  int n = scandir(VL_SOURCE_EXT_DIR, &names, ext_filter, alphasort);
  if (n < 0) return;
  for (int i = 0; i < n; i++) {
    char lua[PATH_MAX];
    int len = snprintf(lua, sizeof lua, "%s/%s/lua", VL_SOURCE_EXT_DIR, names[i]->d_name);
    if (len > 0 && (size_t)len < sizeof lua && is_dir(lua))
      lua_pushfstring(b->L, "%s/?.lua;%s/?/init.lua;", lua, lua), luaL_addvalue(b);
    free(names[i]);
  }
  free(names);
}
#endif

static void set_package_path(lua_State *L) {
  char exe[PATH_MAX], dir[PATH_MAX + 64], mods[PATH_MAX + 16];
  const char *scripts = NULL, *packed = NULL;
  bool source_tree = false; /* the scripts are the source tree's: add the extensions' folders */
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n > 0) {
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    if (slash) *slash = '\0';
    snprintf(dir, sizeof dir, "%s/../%s", exe, VL_INSTALL_SCRIPTS_REL);
    if (is_dir(dir)) scripts = dir;
    snprintf(mods, sizeof mods, "%s/../lua", exe);
    if (is_dir(mods)) packed = mods;
  }
#ifdef VL_SOURCE_SCRIPTS_DIR
  if (!scripts && is_dir(VL_SOURCE_SCRIPTS_DIR)) scripts = VL_SOURCE_SCRIPTS_DIR, source_tree = true;
#endif
  lua_getglobal(L, "package");
  lua_getfield(L, -1, "path");
  const char *path = lua_tostring(L, -1);
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  if (scripts) lua_pushfstring(L, "%s/?.lua;%s/?/init.lua;", scripts, scripts), luaL_addvalue(&b);
#ifdef VL_SOURCE_EXT_DIR
  if (source_tree) add_ext_paths(&b);
#endif
  (void)source_tree;
  luaL_addstring(&b, path);
  size_t plen = strlen(path);
  bool sep = plen > 0 && path[plen - 1] != ';'; /* whether an entry added next needs a ';' first */
  for (const char *def = LUA_PATH_DEFAULT; *def;) {
    size_t len = strcspn(def, ";");
    char entry[256];
    if (def[0] == '/' && len < sizeof entry) {
      memcpy(entry, def, len);
      entry[len] = '\0';
      bool have = false; /* a whole entry of path: bounded by ';' or its ends */
      for (const char *at = strstr(path, entry); at && !have; at = strstr(at + 1, entry))
        have = (at == path || at[-1] == ';') && (at[len] == ';' || at[len] == '\0');
      if (!have) {
        if (sep) luaL_addchar(&b, ';');
        luaL_addstring(&b, entry);
        sep = true;
      }
    }
    def += len + (def[len] == ';');
  }
  if (packed) lua_pushfstring(L, "%s%s/?.lua;%s/?/init.lua", sep ? ";" : "", packed, packed), luaL_addvalue(&b);
  luaL_pushresult(&b);
  lua_setfield(L, -3, "path");
  lua_pop(L, 2);
}

static void preload_core(lua_State *L) {
  luaL_getsubtable(L, LUA_REGISTRYINDEX, LUA_PRELOAD_TABLE);
  lua_pushcfunction(L, luaopen_v100_core);
  lua_setfield(L, -2, "v100.core");
  lua_pop(L, 1);
}

static int pmain(lua_State *L) {
  int argc = (int)lua_tointeger(L, 1);
  char **argv = (char **)lua_touserdata(L, 2);
  int script;
  int args = collectargs(argv, &script);
  luaL_checkversion(L);
  if (args == HAS_ERROR) {
    print_usage(stderr, argv[script]);
    return 0;
  }
  if (args & HAS_H) {
    print_usage(stdout, NULL);
    lua_pushboolean(L, 1);
    return 1;
  }
  if (args & HAS_V) print_versions();
  luaL_openlibs(L);
  createargtable(L, argv, argc, script);
  lua_gc(L, LUA_GCRESTART);
  lua_gc(L, LUA_GCGEN, 0, 0);
  set_package_path(L);
  preload_core(L);
  if (handle_luainit(L) != LUA_OK) return 0;
  if (!runargs(L, argv, script > 0 ? script : argc)) return 0;
  if (script > 0 && handle_script(L, argv + script) != LUA_OK) return 0;
  if (args & HAS_I) {
    doREPL(L);
  } else if (script < 1 && !(args & (HAS_E | HAS_V))) {
    if (isatty(0)) {
      printf("v100lua %s (%s)\n", VL_VERSION_STRING, LUA_RELEASE);
      doREPL(L);
    } else if (dochunk(L, luaL_loadfile(L, NULL)) != LUA_OK) {
      return 0;
    }
  }
  lua_pushboolean(L, 1);
  return 1;
}

/* The pool's out-of-memory path: unreachable tensors may be holding the memory it needs. */
static int reclaim(void *ud) {
  lua_gc((lua_State *)ud, LUA_GCCOLLECT);
  return 1;
}

int main(int argc, char **argv) {
  /* The launchers' variables in runtime/dist's order of precedence (torchrun's RANK counts
   * only with WORLD_SIZE: RANK alone is too common a name). */
  const char *rank = NULL, *vars[] = {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID", "RANK"};
  for (int i = 0; i < 4 && !rank; i++) {
    const char *v = getenv(vars[i]);
    if (v && *v && (i < 3 || (getenv("WORLD_SIZE") && *getenv("WORLD_SIZE")))) rank = v;
  }
  if (rank) {
    char host[64];
    if (gethostname(host, sizeof host) != 0) snprintf(host, sizeof host, "?");
    host[sizeof host - 1] = '\0';
    snprintf(rank_prefix, sizeof rank_prefix, "[rank %.20s %.63s] ", rank, host);
  }
  if (argv[0] && argv[0][0]) progname = argv[0];
  vl_status s = vl_init();
  if (s != VL_OK) {
    l_message(progname, vl_errmsg());
    return EXIT_FAILURE;
  }
  lua_State *L = luaL_newstate();
  if (L == NULL) {
    l_message(progname, "cannot create state: not enough memory");
    vl_shutdown();
    return EXIT_FAILURE;
  }
  vl_set_reclaim_hook(reclaim, L);
  lua_gc(L, LUA_GCSTOP);
  lua_pushcfunction(L, pmain);
  lua_pushinteger(L, argc);
  lua_pushlightuserdata(L, argv);
  int status = lua_pcall(L, 2, 1, 0);
  int result = lua_toboolean(L, -1);
  report(L, status);
  bool ok = result && status == LUA_OK;
  if (!ok && vl_dist_initialized()) {
    vl_dist_info di;
    vl_dist_get_info(&di);
    /* Before lua_close: closing may wait for handles whose peers are gone. */
    if (di.size > 1) vl_dist_abort(EXIT_FAILURE);
  }
  /* Finalizers release every tensor before the runtime frees the pools under them. */
  vl_set_reclaim_hook(NULL, NULL);
  lua_close(L);
  /* A normal end can still fail the job: another rank waits in a collective this one never joined
   * (runtime/dist/mpi.c's leave handshake says which). Then this rank reports and aborts. */
  if (vl_dist_finalize() != VL_OK) {
    l_message(progname, vl_errmsg());
    ok = false;
    vl_dist_info di;
    vl_dist_get_info(&di);
    if (di.initialized && di.size > 1) vl_dist_abort(EXIT_FAILURE);
  }
  vl_shutdown();
  return ok ? EXIT_SUCCESS : EXIT_FAILURE;
}
