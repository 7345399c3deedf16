-- tests/lua/test_shared_files.lua: files in folders shared with other users (issue 27). Every
-- writer reachable from Lua goes through runtime/io/replace.c's rule: a symlink at the path is
-- followed only when the link and its target are both the caller's; a link of another user is
-- replaced itself (or the write refused), never written through. Covers write_atomic (checkpoint
-- latest/meta.json, vocab.txt), Prometheus textfiles, safetensors (and v100.save), ONNX's writer, JPEG export,
-- WordNet corpus/task files and the logger's metrics.jsonl. The foreign link is made by root with
-- `chown -h` (another uid's link); one case runs two real uids through setpriv(1), as in the issue.
-- Needs root (CI runs as root); skipped with a message otherwise.
local v100 = require 'v100'
local T = require 'testlib'
require('v100.recipe').add_path('../../recipes/lib') -- wordnet.lua

local function sh(cmd) return os.execute(cmd) end
local function q(s) return "'" .. s:gsub("'", "'\\''") .. "'" end
local function is_root()
  local f = io.popen('id -u')
  local u = f:read('l')
  f:close()
  return u == '0'
end

if not is_root() then
  print('SKIP test_shared_files: the cross-user cases need root (to own links as another uid); CI runs as root')
  return
end

local dir = T.tmpdir()
assert(sh('chmod 755 ' .. q(dir)))
local SECRET = 'ssh-ed25519 AAAA the victim\n'

local function kind(p)
  local f = io.popen('stat -c %F ' .. q(p) .. ' 2>/dev/null')
  local k = f:read('l')
  f:close()
  return k
end

-- A secret file and, at `name`, a link to it owned by uid 65534 (planted by another user).
local function plant(name)
  local secret = dir .. '/secret-' .. name
  T.write_file(secret, SECRET)
  local link = dir .. '/' .. name
  assert(sh('ln -sfn ' .. q(secret) .. ' ' .. q(link) .. ' && chown -h 65534:65534 ' .. q(link)))
  return link, secret
end

local function not_followed(link, secret)
  T.eq(T.read_file(secret), SECRET, 'the file the link points to is untouched')
  T.eq(kind(link), 'regular file', 'the planted link was replaced by the new file')
end

T.test('write_atomic (Prometheus textfile, checkpoint latest, vocab.txt) does not follow a foreign link', function()
  local link, secret = plant('v100lua_rank0.prom')
  require('v100.prometheus').write_textfile(link, 'v100lua_up 1\n')
  not_followed(link, secret)
  T.eq(T.read_file(link), 'v100lua_up 1\n')
  link, secret = plant('latest')
  require('v100.core')._ckpt.write_atomic(link, 'epoch0-step0\n')
  not_followed(link, secret)
end)

T.test('our own link to our own file is still followed', function()
  local target = dir .. '/mine.prom'
  T.write_file(target, 'old\n')
  assert(sh('ln -sfn mine.prom ' .. q(dir .. '/mine.link')))
  require('v100.prometheus').write_textfile(dir .. '/mine.link', 'new\n')
  T.eq(T.read_file(target), 'new\n')
  T.eq(kind(dir .. '/mine.link'), 'symbolic link')
end)

T.test('safetensors, v100.save, JPEG export and WordNet files do not follow a foreign link', function()
  local link, secret = plant('w.safetensors')
  v100.save_safetensors(link, { w = v100.ones { 2 } })
  not_followed(link, secret)
  link, secret = plant('value.safetensors')
  v100.save(link, { w = v100.ones { 2 }, n = 1 })
  not_followed(link, secret)
  link, secret = plant('x.jpg')
  require('v100.data').encode_jpeg(v100.zeros({ 4, 4, 3 }, { dtype = 'u8' }), link)
  not_followed(link, secret)
  link, secret = plant('task.tsv')
  require('wordnet').write_task(link, { { label = 1, id = '00001740-n', text = 'a gloss' } })
  not_followed(link, secret)
end)

T.test("the logger's metrics.jsonl does not append through a foreign link", function()
  local ldir = dir .. '/logs'
  v100.io.makedirs(ldir)
  local secret = dir .. '/secret-jsonl'
  T.write_file(secret, SECRET)
  assert(sh('ln -sfn ' .. q(secret) .. ' ' .. q(ldir .. '/metrics.jsonl') .. ' && chown -h 65534:65534 ' .. q(ldir .. '/metrics.jsonl')))
  local lg = require('v100.log').Logger { dir = ldir, tensorboard = false }
  lg:log(1, { loss = 0.5 })
  lg:close()
  not_followed(ldir .. '/metrics.jsonl', secret)
  T.ok(T.read_file(ldir .. '/metrics.jsonl'):find('"loss"', 1, true), 'the line went to the new file')
end)

T.test('two uids (setpriv): a victim writing its metrics into a 1777 folder never overwrites its own file through a plant', function()
  if not sh('command -v setpriv >/dev/null 2>&1') then
    print('    SKIP: setpriv(1) not installed')
    return
  end
  local as = 'setpriv --reuid=%d --regid=%d --clear-groups '
  -- the victim runs this v100lua: its build folder must be reachable by another uid (not so in a
  -- checkout under a 0700 home)
  local probe = io.popen(string.format(as, 65533, 65533) .. q(T.binary()) .. " -e 'print(42)' 2>&1")
  local said = probe:read('a')
  probe:close()
  if not said:find('^42') then
    print('    SKIP: uid 65533 cannot run ' .. T.binary() .. ' (' .. said:gsub('\n', ' ') .. ')')
    return
  end
  local home, shared = dir .. '/home', dir .. '/shared'
  assert(sh(string.format('mkdir -p %s %s && chmod 1777 %s && chown 65533:65533 %s', q(home), q(shared), q(shared), q(home))))
  local keys = home .. '/authorized_keys'
  T.write_file(keys, SECRET)
  assert(sh('chown 65533:65533 ' .. q(keys) .. ' && chmod 600 ' .. q(keys)))
  local prom = shared .. '/v100lua_rank0.prom'
  assert(sh(string.format(as, 65534, 65534) .. 'ln -s ' .. q(keys) .. ' ' .. q(prom)))
  -- the victim's Lua library as uid 65533 can read it: a checkout in a 0700 folder (mktemp -d, as
  -- CI clones) is not, and then the host falls back to LUA_PATH, here a copy beside the test's files
  -- (v100.prometheus is the extension ext/telemetry's: its Lua folder is merged into the copy)
  local scripts = assert(package.searchpath('v100.base', package.path)):match('^(.*)/v100/base%.lua$')
  local ext = assert(package.searchpath('v100.obs.prometheus', package.path)):match('^(.*)/v100/obs/prometheus%.lua$')
  local lib = dir .. '/lib'
  assert(sh(string.format('cp -r %s %s && cp -r %s/. %s && chmod -R a+rX %s', q(scripts), q(lib), q(ext), q(lib), q(lib))))
  local env = 'env ' .. q('LUA_PATH=' .. lib .. '/?.lua;' .. lib .. '/?/init.lua;;') .. ' '
  local code = string.format("local ok, e = pcall(require('v100.prometheus').write_textfile, %q, 'v100lua_up 1\\n') print(ok, e)", prom)
  local p = io.popen(env .. string.format(as, 65533, 65533) .. q(T.binary()) .. ' -e ' .. q(code) .. ' 2>&1')
  local out = p:read('a')
  p:close()
  T.eq(T.read_file(keys), SECRET, "the victim's file is untouched (" .. out:gsub('\n', ' ') .. ')')
  T.ok(out:find('not followed', 1, true), 'the write is refused naming the link: ' .. out)
end)

T.run()
os.execute('rm -rf ' .. q(dir))
