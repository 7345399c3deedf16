/* runtime/autograd/ops_einsum.c: einsum composed from recorded ops, so its gradient, both
 * devices and every float dtype follow from theirs. The equation is parsed and checked once by
 * runtime/ops/einsum.c; here each operand
 *   1. takes its diagonals (a label repeated within it: 'ii->i') as one strided view of its own
 *      storage (the EinsumDiagonalBackward node below: the gradient scattered back along the same
 *      view of zeros),
 *   2. sums the labels nothing else needs (neither the output nor a later operand),
 * and is contracted with the result so far, left to right, as one batched GEMM through the matmul
 * front end: [batch..., left, contracted] @ [batch..., contracted, right], reached by a permute and
 * a reshape of each side (the batch labels merged into at most three batch dims: those of size 1
 * on a's side, on b's side, and the rest; matmul broadcasts the size-1 ones). f16/bf16
 * therefore accumulate in f32 inside the GEMM, and sums through the reduction's own f32
 * accumulation. Left to right keeps the order the user wrote (an optimal contraction order, as
 * opt_einsum's, is a search this does not attempt; a user who knows a cheaper order can write the
 * operands in it). The result is a permuted view when the output order differs from the
 * contraction's. */
#include <stdlib.h>
#include <string.h>

#include "runtime/amp/autocast.h"
#include "runtime/autograd/formula.h"
#include "runtime/autograd/ops.h"
#include "runtime/ops/einsum.h"

/* ---- the diagonal view ---- */

typedef struct diag_ctx {
  int nd;                /* the input's dims */
  int nout;              /* the view's dims */
  int map[VL_MAX_DIMS];  /* input dim -> view dim (repeated labels map to one) */
} diag_ctx;

/* The view of t whose dim j walks every input dim mapped to j at once (strides summed). */
static vl_status diag_view(vl_tensor *t, const diag_ctx *c, vl_tensor **out) {
  int64_t size[VL_MAX_DIMS], stride[VL_MAX_DIMS] = {0};
  for (int d = 0; d < c->nd; d++) {
    size[c->map[d]] = t->size[d];
    stride[c->map[d]] += t->stride[d];
  }
  return vl_as_strided(t, c->nout, size, stride, t->offset, out);
}

static vl_status diag_bw(vl_node *n, vl_tensor *const *go, vl_tensor **gi) {
  const diag_ctx *c = VL_AG_CTX(n, diag_ctx);
  VL_FS(f);
  vl_tensor *z = F_RUN(vl_ag_zeros_in(n, 0, F_OUT));
  vl_tensor *v = F_RUN(diag_view(z, c, F_OUT));
  F_DO(vl_copy_(v, go[0])); /* g onto the diagonal of zeros of the input's shape */
  return vl_fs_give(f, n, 1, &z, gi);
}

/* ---- the operands as they are contracted ---- */

typedef struct lt {
  vl_tensor *t; /* owned */
  int nd;
  int lab[VL_MAX_DIMS];
} lt;

static void lt_set(lt *x, vl_tensor *t) {
  vl_tensor_release(x->t);
  x->t = t;
}

/* Operand k with its repeated labels collapsed (a view; x->t owned). */
static vl_status diagonal(const vl_einsum_plan *p, int k, vl_tensor *t, lt *x) {
  diag_ctx c = {.nd = p->ndim[k]};
  int pos[VL_EINSUM_LABELS];
  for (int l = 0; l < VL_EINSUM_LABELS; l++) pos[l] = -1;
  for (int d = 0; d < c.nd; d++) {
    int l = p->label[k][d];
    if (pos[l] < 0) {
      pos[l] = c.nout;
      x->lab[c.nout++] = l;
    }
    c.map[d] = pos[l];
  }
  x->nd = c.nout;
  if (c.nout == c.nd) {
    x->t = vl_tensor_retain(t);
    return VL_OK;
  }
  vl_tensor *r;
  VL_TRY(diag_view(t, &c, &r));
  return vl_ag_out(VL_AG_RECORD(.name = "EinsumDiagonalBackward", .backward = diag_bw, .nin = 1, .in = &t, .out = &r,
                                .view = true, VL_AG_CTX_OF(c)),
                   r, &x->t);
}

/* Sums the dims of x whose labels `keep` does not hold; with keepdim the dims stay (size 1). */
static vl_status sum_labels(lt *x, const bool *keep, bool keepdim) {
  int dims[VL_MAX_DIMS], nd = 0, lab[VL_MAX_DIMS], nl = 0;
  for (int d = 0; d < x->nd; d++) {
    if (keep[x->lab[d]]) {
      lab[nl++] = x->lab[d];
    } else {
      dims[nd++] = d;
      if (keepdim) lab[nl++] = x->lab[d];
    }
  }
  if (nd == 0) return VL_OK; /* (ndims 0 would mean every dim) */
  vl_tensor *r;
  VL_TRY(vl_ag_reduce(VL_RED_SUM, x->t, nd, dims, keepdim, 0, &r, NULL));
  lt_set(x, r);
  x->nd = nl;
  memcpy(x->lab, lab, sizeof(int) * (size_t)nl);
  return VL_OK;
}

static int find(const lt *x, int l) {
  for (int d = 0; d < x->nd; d++)
    if (x->lab[d] == l) return d;
  return -1;
}

/* x permuted to the labels order[0..n) and reshaped to `ndim` sizes (a view when it can be). */
static vl_status arrange(lt *x, const int *order, int ndim, const int64_t *size) {
  int perm[VL_MAX_DIMS];
  bool identity = true;
  for (int i = 0; i < x->nd; i++) {
    perm[i] = find(x, order[i]);
    identity = identity && perm[i] == i;
  }
  vl_tensor *r = NULL, *q;
  if (!identity) {
    VL_TRY(vl_ag_permute(x->t, x->nd, perm, &r));
  }
  vl_status s = vl_ag_reshape(r ? r : x->t, ndim, size, &q);
  vl_tensor_release(r);
  if (s != VL_OK) return s;
  lt_set(x, q);
  return VL_OK;
}

static vl_status too_many_dims(const vl_einsum_plan *p, int k, int nd) {
  return vl_fail(VL_ESHAPE, "einsum '%s': contracting operand %d needs a tensor of %d dims (at most %d)", p->eq, k + 1,
                 nd, VL_MAX_DIMS);
}

/* a <- the contraction of a and b (operand k), keeping the labels in `after` (the output's and
 * the later operands'). */
static vl_status contract(const vl_einsum_plan *p, int k, lt *a, lt *b, const bool *after) {
  bool keep_a[VL_EINSUM_LABELS], keep_b[VL_EINSUM_LABELS];
  for (int l = 0; l < VL_EINSUM_LABELS; l++) keep_a[l] = keep_b[l] = after[l];
  for (int d = 0; d < b->nd; d++) keep_a[b->lab[d]] = true;
  for (int d = 0; d < a->nd; d++) keep_b[a->lab[d]] = true;
  VL_TRY(sum_labels(a, keep_a, false));
  VL_TRY(sum_labels(b, keep_b, false));
  /* batch: in both and kept; contracted: in both, not kept; left / right: on one side only.
   * A batch label's class: 0 when its size is 1 in a only (a broadcast), 1 when 1 in b only,
   * 2 when equal on both sides. */
  int bl[VL_MAX_DIMS], bc[VL_MAX_DIMS], ll[VL_MAX_DIMS], cl[VL_MAX_DIMS], rl[VL_MAX_DIMS];
  int nb = 0, nl = 0, nc = 0, nr = 0;
  bool one[VL_EINSUM_LABELS] = {false};
  for (int d = 0; d < a->nd; d++) {
    int l = a->lab[d], e = find(b, l);
    int64_t sa = a->t->size[d], sb = e >= 0 ? b->t->size[e] : 0;
    if (e < 0) {
      ll[nl++] = l;
    } else if (after[l]) {
      bc[nb] = sa == sb ? 2 : sa == 1 ? 0 : 1;
      bl[nb++] = l;
    } else {
      cl[nc++] = l;
      /* A contracted label of size 1 on one side only: sum the other side's dim first
       * (sum_i x * y_i = x * sum_i y_i), so both sides have size 1. */
      if (sa != sb) one[l] = true;
    }
  }
  for (int d = 0; d < b->nd; d++)
    if (find(a, b->lab[d]) < 0) rl[nr++] = b->lab[d];
  if (nb + nl + nr > VL_MAX_DIMS) return too_many_dims(p, k, nb + nl + nr);
  for (int i = 0; i < nc; i++) {
    if (!one[cl[i]]) continue;
    lt *big = a->t->size[find(a, cl[i])] == 1 ? b : a;
    bool keep[VL_EINSUM_LABELS];
    for (int l = 0; l < VL_EINSUM_LABELS; l++) keep[l] = l != cl[i];
    VL_TRY(sum_labels(big, keep, true));
  }
  /* a as [groups..., L, K], b as [groups..., K, R]: the batch labels of one class made adjacent
   * and merged into one batch dim (its product on each side), so the GEMM has at most three batch
   * dims however many batch labels there are, and matmul broadcasts the size-1 groups. */
  int ob[VL_MAX_DIMS], oa[VL_MAX_DIMS], bo[VL_MAX_DIMS], nbo = 0, ng = 0;
  int64_t sza[VL_MAX_DIMS], szb[VL_MAX_DIMS], szr[VL_MAX_DIMS], L = 1, K = 1, R = 1;
  for (int c = 0; c < 3; c++) {
    int64_t pa = 1, pb = 1;
    int members = 0;
    for (int i = 0; i < nb; i++) {
      if (bc[i] != c) continue;
      int64_t sa = a->t->size[find(a, bl[i])], sb = b->t->size[find(b, bl[i])];
      pa *= sa;
      pb *= sb;
      szr[nbo] = sa == 1 ? sb : sa;
      bo[nbo++] = bl[i];
      members++;
    }
    if (members) {
      sza[ng] = pa;
      szb[ng] = pb;
      ng++;
    }
  }
  memcpy(oa, bo, sizeof(int) * (size_t)nb);
  memcpy(ob, bo, sizeof(int) * (size_t)nb);
  for (int i = 0; i < nl; i++) {
    oa[nb + i] = ll[i];
    szr[nb + i] = a->t->size[find(a, ll[i])];
    L *= szr[nb + i];
  }
  for (int i = 0; i < nc; i++) {
    oa[nb + nl + i] = ob[nb + i] = cl[i];
    K *= a->t->size[find(a, cl[i])];
  }
  for (int i = 0; i < nr; i++) {
    ob[nb + nc + i] = rl[i];
    szr[nb + nl + i] = b->t->size[find(b, rl[i])];
    R *= szr[nb + nl + i];
  }
  sza[ng] = L;
  sza[ng + 1] = K;
  szb[ng] = K;
  szb[ng + 1] = R;
  VL_TRY(arrange(a, oa, ng + 2, sza));
  VL_TRY(arrange(b, ob, ng + 2, szb));
  vl_tensor *m, *r;
  VL_TRY(vl_ag_matmul(a->t, b->t, &m));
  vl_status s = vl_ag_reshape(m, nb + nl + nr, szr, &r);
  vl_tensor_release(m);
  if (s != VL_OK) return s;
  lt_set(a, r);
  a->nd = nb + nl + nr;
  memcpy(a->lab, bo, sizeof(int) * (size_t)nb);
  memcpy(a->lab + nb, ll, sizeof(int) * (size_t)nl);
  memcpy(a->lab + nb + nl, rl, sizeof(int) * (size_t)nr);
  return VL_OK;
}

static vl_status run(const vl_einsum_plan *p, vl_tensor *const *ops, lt *a, lt *b) {
  /* after[l] (for operand k): label l is in the output or in an operand after k */
  bool after[VL_EINSUM_LABELS];
  int last[VL_EINSUM_LABELS];
  for (int l = 0; l < VL_EINSUM_LABELS; l++) last[l] = -1;
  for (int k = 0; k < p->n; k++)
    for (int d = 0; d < p->ndim[k]; d++) last[p->label[k][d]] = k;
  for (int k = 0; k < p->n; k++) {
    for (int l = 0; l < VL_EINSUM_LABELS; l++) after[l] = last[l] > k;
    for (int i = 0; i < p->nout; i++) after[p->out[i]] = true;
    lt *x = k == 0 ? a : b;
    lt_set(x, NULL);
    VL_TRY(diagonal(p, k, ops[k], x));
    if (k == 0) {
      VL_TRY(sum_labels(a, after, false));
    } else {
      VL_TRY(contract(p, k, a, b, after));
    }
  }
  /* every label left is an output label: the output's order is a permuted view */
  int perm[VL_MAX_DIMS];
  if (a->nd != p->nout) return vl_fail(VL_EINTERNAL, "einsum '%s': %d dims left for %d output dims", p->eq, a->nd, p->nout);
  for (int i = 0; i < p->nout; i++) {
    perm[i] = find(a, p->out[i]);
    if (perm[i] < 0) return vl_fail(VL_EINTERNAL, "einsum '%s': an output label was lost", p->eq);
  }
  vl_tensor *r;
  VL_TRY(vl_ag_permute(a->t, p->nout, perm, &r));
  lt_set(a, r);
  return VL_OK;
}

vl_status vl_ag_einsum(const char *eq, int n, vl_tensor *const *ops, vl_tensor **out) {
  /* Under autocast the operands are cast as matmul's (einsum is GEMMs; it is on PyTorch's
   * lower-precision list too), so operands of mixed float dtypes meet in the half dtype. */
  if (n >= 1 && n <= VL_EINSUM_MAX_OPERANDS && vl_autocast_wants(VL_AC_MATMUL, n, ops)) {
    vl_tensor *cast[VL_EINSUM_MAX_OPERANDS];
    VL_TRY(vl_autocast_inputs(VL_AC_MATMUL, n, ops, cast));
    return vl_autocast_done(n, cast, vl_ag_einsum(eq, n, cast, out));
  }
  vl_einsum_plan *p = malloc(sizeof *p); /* ~5 KB: off the stack */
  if (!p) return vl_fail(VL_EOOM, "einsum: out of host memory");
  vl_status s = vl_einsum_plan_make(eq, n, ops, p);
  lt a = {0}, b = {0};
  if (s == VL_OK) s = run(p, ops, &a, &b);
  free(p);
  vl_tensor_release(b.t);
  if (s != VL_OK) {
    vl_tensor_release(a.t);
    return s;
  }
  *out = a.t;
  return VL_OK;
}
