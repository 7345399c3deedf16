#!/usr/bin/env bash
# tests/tools/test_repl.sh BUILD_DIR: the interactive prompt, driven through a terminal (tmux
# send-keys / capture-pane) as a user types: Tab completes `v100.ze` to `v100.zeros` and a
# tensor's method after ':', the globals v100, nn and optim are there, and results print through
# v100.repl (a shape as {2, 3}, a state_dict as names, dtypes and shapes, deep tables cut).
# Exits 77 (skipped) only when the build has no line editing (V100LUA_READLINE=OFF or no
# readline found): completion is readline's.
set -uo pipefail
B="${1:?usage: test_repl.sh BUILD_DIR}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BIN="$B/v100lua"
[ -x "$BIN" ] || { echo "test_repl: no $BIN"; exit 1; }
command -v tmux >/dev/null || { echo "test_repl: tmux is missing (tools/setup.sh installs it)"; exit 1; }
if grep -qE '^V100LUA_READLINE:STRING=OFF|^READLINE_LIB:FILEPATH=.*NOTFOUND' "$B/CMakeCache.txt" 2>/dev/null; then
  echo "test_repl: built without readline: no completion to test"; exit 77
fi
sock="v100lua-test-repl-$$"
tmp=$(mktemp -d)
trap 'tmux -L "$sock" kill-server 2>/dev/null; rm -rf "$tmp"' EXIT
T() { tmux -L "$sock" "$@"; }
pane() { T capture-pane -t s -p -S -200; }
pass=0 failed=0
# waits until the pane shows a line matching the ERE $1 (5 s), then counts the check $2
expect() {
  local i
  for i in $(seq 50); do
    if pane | grep -qE -- "$1"; then pass=$((pass + 1)); echo "ok: $2"; return 0; fi
    sleep 0.1
  done
  failed=$((failed + 1)); echo "FAIL: $2 (no line matching /$1/ in the pane:)"; pane | grep -v '^$' | tail -20
  return 1
}
# INPUTRC: readline's defaults, whatever the machine's /etc/inputrc says
T new-session -d -s s -x 150 -y 50 "env HOME=$tmp INPUTRC=/dev/null LUA_PATH='$ROOT/tests/lua/?.lua;;' $BIN"
expect '^> ?$' 'the prompt comes up'
T send-keys -t s 'x = v100.ze' Tab
expect '^> x = v100\.zeros$' 'v100.ze<Tab> completes to v100.zeros'
T send-keys -t s C-u 't = v100.ones{2, 3}' Enter
T send-keys -t s 't:resh' Tab
expect '^> t:reshape$' "a tensor's method completes after ':'"
T send-keys -t s C-u 'mdl = nn.Linear(2, 3)' Enter
T send-keys -t s 'mdl.wei' Tab
expect '^> mdl\.weight$' "a module's parameter completes after '.'"
T send-keys -t s C-u 'optim.SGD ~= nil and nn.Linear ~= nil' Enter
expect '^true$' 'nn and optim are globals'
T send-keys -t s '{2, 3}' Enter
expect '^\{2, 3\}$' 'a shape prints as {2, 3}'
T send-keys -t s 'mdl:state_dict()' Enter
expect '^  weight  f32 cpu \{3, 2\}$' 'a state_dict prints its names, dtypes and shapes'
T send-keys -t s '{a = {b = {c = {d = 1}}}}' Enter
expect '^      c = \{\.\.\.\} \(1 entry\),$' 'nesting is cut at the depth limit'
T send-keys -t s 'v100.zeros{2}' Enter
expect '^\[v100\.Tensor cpu f32 2\]$' 'a tensor prints with its values and header'
T send-keys -t s C-d
for i in $(seq 50); do T has-session -t s 2>/dev/null || break; sleep 0.1; done
if T has-session -t s 2>/dev/null; then failed=$((failed + 1)); echo "FAIL: Ctrl-D did not end the prompt"
else pass=$((pass + 1)); echo "ok: Ctrl-D ends the prompt"; fi
echo "test_repl: $pass passed, $failed failed"
[ "$failed" -eq 0 ]
