/* runtime/dist/check.c: the ranks' agreement on each collective before it starts, and the
 * environment that sets it up (V100LUA_DIST_CHECK, V100LUA_DIST_TIMEOUT).
 *
 * Ranks that pass different element counts to one collective do not just get wrong numbers: Open
 * MPI writes the longer message past the shorter buffer (issue 27: 1,000 vs 1,000,000 floats
 * segfaulted rank 0, whose handler then deadlocked: a job that never ended). So on the CPU (MPI)
 * every collective first compares its signature (which collective, element count, dtype, op,
 * root) across the ranks by one small reduction, on by default: a disagreement fails on every
 * rank with the same message instead. Its cost is measured in docs/DISTRIBUTED.md. CUDA
 * collectives (NCCL) compare only with V100LUA_DIST_CHECK=1: there the host round trip would
 * serialise the stream-ordered collectives and break CUDA graph capture. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/dist/internal.h"

static const char *const kind_names[] = {"?", "all_reduce", "broadcast", "reduce", "all_gather", "reduce_scatter", "barrier"};

const char *vl_dist_kind_name(int64_t kind) {
  return kind > 0 && kind < (int64_t)VL_COUNTOF(kind_names) ? kind_names[kind] : "?";
}

vl_status vl_dist_read_env(vl_comm *c) {
  /* V100LUA_DIST_CHECK: unset = the CPU's on, CUDA's off; 0 = both off; anything else = both on. */
  const char *chk = getenv("V100LUA_DIST_CHECK");
  bool set = chk && *chk;
  c->check = !set || strcmp(chk, "0") != 0;
  c->check_cuda = set && strcmp(chk, "0") != 0;
  /* V100LUA_DIST_TIMEOUT: seconds a CPU collective may wait (600 as NCCL's watchdog; 0: none). */
  c->timeout_s = 600;
  const char *v = getenv("V100LUA_DIST_TIMEOUT");
  if (v && *v) {
    char *end;
    errno = 0;
    double t = strtod(v, &end);
    if (errno || *end || !(t >= 0))
      return vl_fail(VL_EINVAL, "dist.init: V100LUA_DIST_TIMEOUT='%s' is not a number of seconds (0: no limit)", v);
    c->timeout_s = t;
  }
  return VL_OK;
}

/* Every collective calls this first: it numbers the collective (the ranks count alike, which is how
 * a rank that left is known to have skipped one) and, when on, compares the signatures. */
vl_status vl_dist_agree(const char *op, vl_comm *c, const vl_comm_backend *be, int kind, vl_tensor *t, int dop, int root) {
  c->seq_next = ++c->coll_seq;
  bool on = be == c->backend[VL_CPU] ? c->check : c->check_cuda;
  if (!on || !be->check) return VL_OK;
  int64_t sig[VL_DIST_SIG] = {kind, t ? vl_tensor_numel(t) : 0, t ? (int64_t)t->dtype : -1, dop, root};
  int64_t lo[VL_DIST_SIG], hi[VL_DIST_SIG];
  VL_TRY(be->check(c, sig, lo, hi));
  bool same = true;
  for (int i = 0; i < VL_DIST_SIG; i++) same = same && lo[i] == hi[i];
  if (same) return VL_OK;
  c->failure_shared = true; /* every rank sees the same disagreement and reports it */
  if (lo[0] != hi[0])
    return vl_fail(VL_EINVAL, "%s: the ranks are not all in the same collective: this rank (%d) is in %s, others in "
                   "%s (collective #%lld)", op, c->rank, vl_dist_kind_name(kind),
                   vl_dist_kind_name(lo[0] != kind ? lo[0] : hi[0]), (long long)c->coll_seq);
  if (lo[1] != hi[1])
    return vl_fail(VL_ESHAPE, "%s: the ranks pass different element counts, %lld to %lld (this rank %d: %lld; "
                   "collective #%lld)", op, (long long)lo[1], (long long)hi[1], c->rank, (long long)sig[1],
                   (long long)c->coll_seq);
  if (lo[2] != hi[2])
    return vl_fail(VL_EDTYPE, "%s: the ranks pass different dtypes (this rank %d: %s; collective #%lld)", op, c->rank,
                   t ? vl_dtype_name(t->dtype) : "none", (long long)c->coll_seq);
  return vl_fail(VL_EINVAL, "%s: the ranks pass different ops or roots (this rank %d: op %s, root %d; collective #%lld)",
                 op, c->rank, dop >= 0 ? vl_dist_op_name((vl_dist_op)dop) : "none", root, (long long)c->coll_seq);
}
