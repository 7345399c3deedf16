#!/usr/bin/env bash
# tools/multinode.sh: test hosts for multi-node runs without a cluster: each host is a network
# namespace (its own address on a private bridge), a UTS namespace (its own hostname) and a mount
# namespace (its own /tmp, /etc/hosts), with an sshd on its address, so that Open MPI's mpirun
# starts its daemons there over ssh and the ranks talk TCP over the veths, as between machines.
# Only these namespaces get addresses (10.77.0.0/24, $V100LUA_MN_NET); the machine's own network
# is not touched. Needs root (ip netns, mount), iproute2, util-linux, openssh-server/-client,
# procps (`tools/setup.sh multinode` installs them: `multinode.sh up` calls it). docs/DISTRIBUTED.md, "Tested across
# hosts", says how they are built and what runs on them.
#
#   multinode.sh up [N]            N hosts (default 2) named a, b, c, ...: 10.77.0.1, .2, ...
#   multinode.sh down              every process of every host killed, namespaces and state gone
#   multinode.sh exec HOST CMD...  CMD on HOST (its network, hostname and /tmp), with the
#                                  environment below; the working directory is kept
#   multinode.sh kill HOST         SIGKILL to every process of HOST (a node that dies); its sshd
#                                  too: `restart HOST` brings it back
#   multinode.sh restart HOST      a new sshd (and a new empty /tmp) for HOST
#   multinode.sh cut HOST          HOST's link down (a network partition: its processes live on,
#                                  unreachable); `mend HOST` brings the link back up
#   multinode.sh ps HOST           HOST's processes: pid and command name, a line each
#   multinode.sh env               the variables the tests read (below), as shell assignments
#   multinode.sh test [ARGS...]    up, the ctest label `multinode` of build/ ($BUILD_DIR) run on
#                                  host a (ARGS go to ctest), down, also when a test fails;
#                                  its exit status is ctest's
#
# What `exec` and the tests see (multinode.sh env):
#   V100LUA_MN_STATE     the state folder (default /run/v100lua-mn): keys, configs, logs
#   V100LUA_MN_HOSTFILE  Open MPI's hostfile of the hosts ("a slots=2", ...)
#   V100LUA_MN_HOSTS     the host names, space separated
#   V100LUA_MN_SHARED    a folder every host sees at the same path (a cluster file system):
#                        checkpoints, shared caches; each host's /tmp is its own
#   V100LUA_MN_TOOL      this script (tests call `kill` and `restart` through it)
#   OMPI_MCA_plm_rsh_agent, OMPI_MCA_btl_tcp_if_include, OMPI_MCA_oob_tcp_if_include
#                        ssh with the test key and config; TCP on the bridge's subnet only
#   OMPI_MCA_oob_tcp_keepalive_{time,intvl,probes}=10,5,3: mpirun learns of a host it cannot
#                        reach within ~25 s (Open MPI's default: 300 + 9 x 20 s), the values of
#                        deploy/docker/entrypoint.sh; docs/DISTRIBUTED.md says why
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SELF="$ROOT/tools/multinode.sh"
STATE="${V100LUA_MN_STATE:-/run/v100lua-mn}"
NET="${V100LUA_MN_NET:-10.77.0}"
PREFIX=vlmn # namespace and interface names: vlmn-a, vlmn-sw, veth vlmn-a0 / vlmn-a1
die() { echo "multinode.sh: $*" >&2; exit 1; }

host_names() { # the hosts of the current state, in order
  [ -f "$STATE/hosts.list" ] || die "no test hosts: run '$SELF up' first"
  cat "$STATE/hosts.list"
}
host_index() { # a -> 1, b -> 2, ...
  local i=1 h
  for h in $(host_names); do [ "$h" = "$1" ] && { echo "$i"; return; }; i=$((i + 1)); done
  die "no host '$1' (the hosts are: $(host_names | tr '\n' ' '))"
}
sshd_pid() { cat "$STATE/$1/sshd.pid" 2>/dev/null || true; }

print_env() {
  local hosts
  hosts="$(host_names | tr '\n' ' ')"
  cat <<EOF
export V100LUA_MN_STATE='$STATE'
export V100LUA_MN_HOSTFILE='$STATE/hostfile'
export V100LUA_MN_HOSTS='${hosts% }'
export V100LUA_MN_SHARED='$STATE/shared'
export V100LUA_MN_TOOL='$SELF'
export OMPI_MCA_plm_rsh_agent='ssh -F $STATE/ssh_config'
export OMPI_MCA_btl_tcp_if_include='$NET.0/24'
export OMPI_MCA_oob_tcp_if_include='$NET.0/24'
export OMPI_MCA_oob_tcp_keepalive_time=10
export OMPI_MCA_oob_tcp_keepalive_intvl=5
export OMPI_MCA_oob_tcp_keepalive_probes=3
EOF
}

# The inside of a host, run by `ip netns exec NS unshare --uts --mount` (private propagation:
# nothing mounted here reaches the machine): its hostname, a /tmp of
# its own (the folders that must stay visible through it, the checkout when it lives in /tmp,
# are bound back from the machine's /tmp), its /etc/hosts, then sshd in the foreground.
host_init() {
  local h="$1"
  hostname "$h"
  mkdir -p "$STATE/$h/tmp" "$STATE/$h/machine-tmp"
  chmod 1777 "$STATE/$h/tmp"
  mount --bind /tmp "$STATE/$h/machine-tmp"
  mount --bind "$STATE/$h/tmp" /tmp
  local keep
  for keep in "$ROOT" ${V100LUA_MN_KEEP:-}; do
    case "$keep" in
      /tmp/*) mkdir -p "$keep" && mount --bind "$STATE/$h/machine-tmp/${keep#/tmp/}" "$keep" ;;
    esac
  done
  [ -e /etc/hosts ] || : >/etc/hosts # a minimal root (tools/fresh-root.sh) may have none to mount over
  mount --bind "$STATE/etc-hosts" /etc/hosts
  mkdir -p /run/sshd
  echo $$ >"$STATE/$h/sshd.pid"
  exec /usr/sbin/sshd -D -e -f "$STATE/$h/sshd_config" 2>>"$STATE/$h/sshd.log"
}

start_host() {
  local h="$1" i
  i="$(host_index "$h")"
  cat >"$STATE/$h/sshd_config" <<EOF
ListenAddress $NET.$i
Port 22
HostKey $STATE/ssh_host_key
AuthorizedKeysFile $STATE/authorized_keys
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
PrintMotd no
MaxStartups 64
MaxSessions 64
EOF
  rm -f "$STATE/$h/sshd.pid"
  rm -rf "$STATE/$h/tmp"
  # from the machine's mount namespace (held by the keeper `up` started), also when called from
  # inside a host (a test restarting the host it killed): a host's namespaces never nest
  setsid nsenter --target "$(cat "$STATE/keeper.pid")" --mount --root --wd=/ -- ip netns exec "$PREFIX-$h" unshare --uts --mount --propagation private \
    bash "$SELF" _host_init "$h" </dev/null >>"$STATE/$h/sshd.log" 2>&1 &
  disown # its end (down, kill) is not this shell's news
  local t
  for t in $(seq 100); do # sshd answers within a second or two
    if [ -n "$(sshd_pid "$h")" ] && ip netns exec "$PREFIX-$h" bash -c "exec 3<>/dev/tcp/$NET.$i/22" 2>/dev/null; then
      return 0
    fi
    sleep 0.1
  done
  cat "$STATE/$h/sshd.log" >&2
  die "host $h: sshd did not start on $NET.$i:22"
}

up() {
  local n="${1:-2}"
  [ "$n" -ge 1 ] && [ "$n" -le 8 ] || die "up: 1 to 8 hosts, got '$n'"
  [ "$(id -u)" -eq 0 ] || die "needs root (network and mount namespaces)"
  bash "$ROOT/tools/setup.sh" multinode >/dev/null
  down quiet
  mkdir -p "$STATE/shared"
  chmod 700 "$STATE"
  chmod 1777 "$STATE/shared"
  ssh-keygen -q -t ed25519 -N '' -C v100lua-multinode -f "$STATE/id" >/dev/null
  ssh-keygen -q -t ed25519 -N '' -C v100lua-multinode-host -f "$STATE/ssh_host_key" >/dev/null
  cp "$STATE/id.pub" "$STATE/authorized_keys"
  cat >"$STATE/ssh_config" <<EOF
Host *
  User root
  IdentityFile $STATE/id
  IdentitiesOnly yes
  StrictHostKeyChecking no
  UserKnownHostsFile /dev/null
  GlobalKnownHostsFile /dev/null
  LogLevel ERROR
  BatchMode yes
  ConnectTimeout 10
EOF
  setsid sleep infinity </dev/null >/dev/null 2>&1 &
  disown
  echo $! >"$STATE/keeper.pid"
  printf '127.0.0.1 localhost\n' >"$STATE/etc-hosts"
  : >"$STATE/hostfile"
  : >"$STATE/hosts.list"
  ip netns add "$PREFIX-sw"
  ip -n "$PREFIX-sw" link add br0 type bridge
  ip -n "$PREFIX-sw" link set br0 up
  local i h
  for i in $(seq "$n"); do
    h="$(printf "\\$(printf '%03o' $((96 + i)))")" # 1 -> a
    echo "$h" >>"$STATE/hosts.list"
    printf '%s.%d %s\n' "$NET" "$i" "$h" >>"$STATE/etc-hosts"
    printf '%s slots=2\n' "$h" >>"$STATE/hostfile"
    mkdir -p "$STATE/$h"
    ip netns add "$PREFIX-$h"
    ip link add "$PREFIX-${h}0" netns "$PREFIX-$h" type veth peer name "$PREFIX-${h}1" netns "$PREFIX-sw"
    ip -n "$PREFIX-sw" link set "$PREFIX-${h}1" master br0 up
    ip -n "$PREFIX-$h" addr add "$NET.$i/24" dev "$PREFIX-${h}0"
    ip -n "$PREFIX-$h" link set "$PREFIX-${h}0" up
    ip -n "$PREFIX-$h" link set lo up
  done
  for h in $(host_names); do start_host "$h"; done
  # every host reaches every other by name, through ssh (what mpirun's daemons need)
  local a
  for a in $(host_names); do
    for h in $(host_names); do
      out="$(exec_on "$a" ssh -F "$STATE/ssh_config" "$h" hostname 2>&1)" || die "up: ssh from $a to $h failed: $out"
      [ "$out" = "$h" ] || die "up: ssh from $a to $h reached a host named '$out'"
    done
  done
  echo "multinode.sh: $n hosts up: $(host_names | tr '\n' ' ')(state $STATE)"
}

kill_host() { # every process in the host's network namespace
  local h="$1" pids t
  for t in $(seq 50); do
    pids="$(ip netns pids "$PREFIX-$h" 2>/dev/null || true)"
    [ -z "$pids" ] && return 0
    kill -9 $pids 2>/dev/null || true
    sleep 0.1
  done
  die "kill $h: processes remain: $pids"
}

down() {
  local ns
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^$PREFIX-" || true); do
    kill_host "${ns#"$PREFIX-"}"
    ip netns del "$ns"
  done
  # the hosts' mount namespaces are gone with their processes; the state folder with them
  [ -f "$STATE/keeper.pid" ] && kill -9 "$(cat "$STATE/keeper.pid")" 2>/dev/null || true
  rm -rf "$STATE"
  [ "${1:-}" = quiet ] || echo "multinode.sh: down"
}

exec_on() { # HOST CMD...: in the host's namespaces (entered through its sshd, which holds them)
  local h="$1" pid
  shift
  pid="$(sshd_pid "$h")"
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || die "host $h is down (its sshd is gone): '$SELF restart $h'"
  eval "$(print_env)"
  # --root: entering a mount namespace resets the root to the namespace's; the host's own (a chroot
  # such as tools/fresh-root.sh's) is kept
  nsenter --target "$pid" --net --uts --mount --root --wd="$PWD" -- "$@"
}

cmd="${1:-}"
[ $# -gt 0 ] && shift
case "$cmd" in
  up) up "$@" ;;
  down) down ;;
  env) print_env ;;
  exec) [ $# -ge 2 ] || die "usage: exec HOST CMD..."; exec_on "$@" ;;
  kill) [ $# -eq 1 ] || die "usage: kill HOST"; host_index "$1" >/dev/null; kill_host "$1" ;;
  restart) [ $# -eq 1 ] || die "usage: restart HOST"; host_index "$1" >/dev/null; kill_host "$1"; start_host "$1" ;;
  cut | mend)
    [ $# -eq 1 ] || die "usage: $cmd HOST"
    host_index "$1" >/dev/null
    ip -n "$PREFIX-$1" link set "$PREFIX-${1}0" "$([ "$cmd" = cut ] && echo down || echo up)"
    ;;
  ps)
    [ $# -eq 1 ] || die "usage: ps HOST"
    host_index "$1" >/dev/null
    for p in $(ip netns pids "$PREFIX-$1"); do echo "$p $(cat "/proc/$p/comm" 2>/dev/null)"; done
    ;;
  _host_init) host_init "$1" ;;
  test)
    BUILD="${BUILD_DIR:-$ROOT/build}"
    [ -f "$BUILD/CTestTestfile.cmake" ] || die "no build in $BUILD: run tools/build.sh (or set BUILD_DIR)"
    trap 'down quiet' EXIT
    t0=$SECONDS
    up
    echo "multinode.sh: hosts up in $((SECONDS - t0)) s"
    rc=0
    (cd "$BUILD" && exec_on a ctest -L multinode --output-on-failure --timeout 600 "$@") || rc=$?
    echo "multinode.sh: tests done in $((SECONDS - t0)) s (exit $rc)"
    exit $rc
    ;;
  *) sed -n '2,/^set -euo/p' "$SELF" | sed '$d; s/^# \{0,1\}//' >&2; exit 2 ;;
esac
