#!/usr/bin/env bash
# deploy/docker/entrypoint.sh: the image's entry point (/usr/local/bin/v100lua-entrypoint).
#
#   resnet50|bert [recipe options...]          one process of recipes/resnet50.lua or recipes/bert.lua:
#                                              world size 1 alone, one rank under mpirun or srun
#   launch resnet50|bert [recipe options...]   the launcher of a multi-node job (the MPI Operator's
#                                              Launcher pod): mpirun over the job's hosts, one rank
#                                              per slot (GPU), each rank running the line above
#   anything else                              run as a command (/usr/sbin/sshd -De ..., bash)
#
# Variables (docs/OPERATIONS.md, "Cluster job files"):
#   V100LUA_HOME     where the image installed v100lua (default /opt/v100lua)
#   V100LUA_CACHE    writable folder for the BERT recipe's WordNet corpus and shards
#                    (default /tmp/v100lua-cache); a volume there keeps them between runs
#   V100LUA_NP       ranks for `launch` (default: the slots of the hostfile the MPI Operator
#                    writes, $OMPI_MCA_orte_default_hostfile, i.e. workers x slotsPerWorker)
#   V100LUA_MPIRUN_ARGS  extra mpirun options for `launch` (split on spaces)
# `launch` adds --resume when the options name a --checkpoint-dir that already holds a
# checkpoint (its `latest` file), so a job restarted after a failure continues where it was.
set -euo pipefail
V100LUA_HOME="${V100LUA_HOME:-/opt/v100lua}"
export V100LUA_CACHE="${V100LUA_CACHE:-/tmp/v100lua-cache}"
SELF="$(readlink -f "${BASH_SOURCE[0]}")"

recipe_of() {
  case "$1" in
    resnet50 | bert) echo "$V100LUA_HOME/recipes/$1.lua" ;;
    *) echo "v100lua-entrypoint: unknown recipe '$1' (resnet50 or bert)" >&2; return 1 ;;
  esac
}

# --resume when --checkpoint-dir DIR (or --checkpoint-dir=DIR) holds DIR/latest and no --resume is given.
resume_flag() {
  local dir="" prev="" a
  for a in "$@"; do
    case "$a" in
      --resume) return 0 ;;
      --checkpoint-dir=*) dir="${a#--checkpoint-dir=}" ;;
    esac
    [ "$prev" = "--checkpoint-dir" ] && dir="$a"
    prev="$a"
  done
  if [ -n "$dir" ] && [ -f "$dir/latest" ]; then echo "--resume"; fi
}

# Ranks of the job: V100LUA_NP, else the sum of slots= in the MPI Operator's hostfile.
ranks() {
  if [ -n "${V100LUA_NP:-}" ]; then echo "$V100LUA_NP"; return; fi
  local hf="${OMPI_MCA_orte_default_hostfile:-/etc/mpi/hostfile}"
  if [ ! -f "$hf" ]; then
    echo "v100lua-entrypoint: launch needs V100LUA_NP or a hostfile ($hf)" >&2
    return 1
  fi
  awk '{ for (i = 2; i <= NF; i++) if ($i ~ /^slots=/) { split($i, s, "="); n += s[2] } } END { print n + 0 }' "$hf"
}

case "${1:-}" in
  resnet50 | bert)
    recipe="$(recipe_of "$1")"
    shift
    exec "$V100LUA_HOME/bin/v100lua" "$recipe" "$@"
    ;;
  launch)
    [ $# -ge 2 ] || { echo "usage: launch (resnet50 | bert) [recipe options...]" >&2; exit 2; }
    name="$2"
    recipe_of "$name" >/dev/null
    shift 2
    np="$(ranks)"
    read -r -a extra <<< "${V100LUA_MPIRUN_ARGS:-}"
    mapfile -t resume < <(resume_flag "$@")
    # -bind-to none: the data loader threads and OpenBLAS use the node's cores; -map-by slot:
    # ranks fill a node's GPUs in order; -x: the variables every rank needs. Open MPI starts the
    # ranks of other hosts from its daemon's environment (ssh's), not the launcher's: what is not
    # named by -x reaches only the ranks on this host (tests/multinode/launch_topology.lua), so
    # every V100LUA_* and NCCL_* variable set here is forwarded (V100LUA_DIST_TIMEOUT,
    # V100LUA_DIST_CHECK, V100LUA_NUM_THREADS, NCCL_SOCKET_IFNAME, ...).
    # keepalives on Open MPI's control connections: a host that stops answering (a node lost, a
    # network partition) ends the job in ~25 s instead of Open MPI's 8 min (300 + 9 x 20 s), or
    # never when the launcher's abort message is waiting on that connection (docs/DISTRIBUTED.md)
    ka=(--mca oob_tcp_keepalive_time 10 --mca oob_tcp_keepalive_intvl 5 --mca oob_tcp_keepalive_probes 3)
    fwd=(-x PATH -x LD_LIBRARY_PATH)
    while IFS= read -r v; do
      case "$v" in V100LUA_* | NCCL_*) fwd+=(-x "$v") ;; esac
    done < <(compgen -e)
    echo "v100lua-entrypoint: mpirun -np $np ${ka[*]} ${fwd[*]} ${extra[*]} $name $* ${resume[*]}" >&2
    exec mpirun -np "$np" -bind-to none -map-by slot "${ka[@]}" "${fwd[@]}" \
      "${extra[@]}" "$SELF" "$name" "$@" "${resume[@]}"
    ;;
  "")
    echo "usage: v100lua-entrypoint (resnet50 | bert | launch resnet50 | launch bert) [recipe options...] | COMMAND" >&2
    exec "$V100LUA_HOME/bin/v100lua" --version
    ;;
  *)
    exec "$@"
    ;;
esac
