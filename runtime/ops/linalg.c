/* runtime/ops/linalg.c: matmul / bmm / addmm front ends over the batched gemm kernel. */
#include <stdio.h>
#include <string.h>

#include "runtime/core/context.h"
#include "runtime/ops/ops_internal.h"

void vl_set_allow_tf32(bool on) { vl_ctx()->allow_tf32 = on; }
bool vl_get_allow_tf32(void) { return vl_ctx()->allow_tf32; }

void vl_gemm_bias_stats(uint64_t *epilogue, uint64_t *prefill) {
  *epilogue = vl_ctx()->gemm_bias_epilogue;
  *prefill = vl_ctx()->gemm_bias_prefill;
}

/* How a rows x cols matrix with strides (rs, cs) can be handed to gemm without copying:
 * 0 = row-major with leading dim *ld, 1 = transposed (column-major) with *ld, -1 = copy needed. */
static int mat_layout(int64_t rows, int64_t cols, int64_t rs, int64_t cs, int64_t *ld) {
  int64_t mc = cols > 1 ? cols : 1, mr = rows > 1 ? rows : 1;
  if ((cols == 1 || cs == 1) && (rows == 1 || rs >= mc)) {
    *ld = rows == 1 ? mc : rs;
    return 0;
  }
  if ((rows == 1 || rs == 1) && (cols == 1 || cs >= mr)) {
    *ld = cols == 1 ? mr : cs;
    return 1;
  }
  return -1;
}

/* One batch stride for the batch dims of t (all but the last two), or false when they do not
 * collapse into a single arithmetic progression. */
static bool batch_stride(const vl_tensor *t, int64_t *stride) {
  int nb = t->ndim - 2;
  int last = -1;
  *stride = 0;
  for (int i = nb - 1; i >= 0; i--) {
    if (t->size[i] == 1) continue;
    if (last < 0) {
      *stride = t->stride[i];
    } else if (t->stride[i] != t->stride[last] * t->size[last]) {
      return false;
    }
    last = i;
  }
  return true;
}

typedef struct mm_operand {
  vl_tensor *t; /* the operand expanded to [batch..., rows, cols]; owned */
  bool trans;
  int64_t ld, bstride;
} mm_operand;

/* Expands t to the batch shape and finds a gemm layout, copying only when the strides allow none. */
static vl_status prepare(vl_tensor *t, int nb, const int64_t *bsize, mm_operand *o) {
  int64_t size[VL_MAX_DIMS];
  memcpy(size, bsize, sizeof(int64_t) * (size_t)nb);
  size[nb] = t->size[t->ndim - 2];
  size[nb + 1] = t->size[t->ndim - 1];
  vl_tensor *e;
  VL_TRY(vl_expand(t, nb + 2, size, &e));
  for (int attempt = 0; attempt < 2; attempt++) {
    int64_t rows = e->size[nb], cols = e->size[nb + 1];
    int mode = mat_layout(rows, cols, e->stride[nb], e->stride[nb + 1], &o->ld);
    if (mode >= 0 && batch_stride(e, &o->bstride)) {
      o->t = e;
      o->trans = mode == 1;
      return VL_OK;
    }
    /* A contiguous copy of the expanded operand always has a layout. */
    vl_tensor *c;
    vl_status s = vl_clone(e, &c);
    vl_tensor_release(e);
    if (s != VL_OK) return s;
    e = c;
  }
  vl_tensor_release(e);
  return vl_fail(VL_EINTERNAL, "matmul: no gemm layout for a contiguous operand");
}

static vl_status check_mm_operands(const char *op, vl_tensor *a, vl_tensor *b) {
  char d1[VL_DESC_LEN], d2[VL_DESC_LEN];
  VL_TRY(vl_check_same_device(op, a, "a", b, "b"));
  if (!vl_dtype_is_float(a->dtype) || a->dtype != b->dtype)
    return vl_fail(VL_EDTYPE, "%s: expected float tensors of one dtype (a %s, b %s)", op,
                   vl_tensor_desc(a, d1, sizeof d1), vl_tensor_desc(b, d2, sizeof d2));
  if (a->ndim == 0 || b->ndim == 0)
    return vl_fail(VL_ESHAPE, "%s: both arguments need at least 1 dim (a %s, b %s)", op,
                   vl_tensor_desc(a, d1, sizeof d1), vl_tensor_desc(b, d2, sizeof d2));
  return VL_OK;
}

/* out = alpha * a @ b + beta * out for a [..., m, k], b [..., k, n] (batch dims broadcast to
 * bsize), out contiguous [bsize..., m, n]. */
static vl_status gemm_batched(const char *op, vl_tensor *a, vl_tensor *b, int nb, const int64_t *bsize, vl_tensor *out,
                              double alpha, double beta, const vl_tensor *bias) {
  int64_t m = a->size[a->ndim - 2], k = a->size[a->ndim - 1], n = b->size[b->ndim - 1];
  int64_t batch = vl_shape_numel(nb, bsize);
  if (m == 0 || n == 0 || batch == 0) return VL_OK;
  if (k == 0 && !bias) {
    /* An empty sum: beta * out, never reading out when beta == 0 (it may hold NaN). */
    if (beta == 0) return vl_fill_(out, 0);
    return beta == 1 ? VL_OK : vl_binary_scalar_(VL_BIN_MUL, out, beta);
  }
  mm_operand oa = {0}, ob = {0};
  vl_status s = prepare(a, nb, bsize, &oa);
  if (s == VL_OK) s = prepare(b, nb, bsize, &ob);
  if (s == VL_OK) {
    vl_gemm_args g = {out->dtype, oa.trans, ob.trans, m, n, k, batch,
                      vl_tensor_data(oa.t), oa.ld, oa.bstride, vl_tensor_data(ob.t), ob.ld, ob.bstride,
                      vl_tensor_data(out), n, m * n, alpha, beta, vl_get_allow_tf32(), {0, NULL}, NULL, NULL};
    vl_gemm_bias_path path = VL_GEMM_BIAS_NONE;
    if (bias) {
      g.bias = vl_tensor_data(bias);
      g.bias_path = &path;
    }
    s = vl_exec_of(op, out->storage->device, &g.ex);
    if (s == VL_OK) s = vl_backend_of(out->storage->device)->ops->gemm(&g);
    if (s == VL_OK && path == VL_GEMM_BIAS_EPILOGUE) vl_ctx()->gemm_bias_epilogue++;
    if (s == VL_OK && path == VL_GEMM_BIAS_PREFILL) vl_ctx()->gemm_bias_prefill++;
  }
  vl_tensor_release(oa.t);
  vl_tensor_release(ob.t);
  return s;
}

static vl_status inner_mismatch(const char *op, const vl_tensor *a, const vl_tensor *b, int64_t ka, int64_t kb) {
  char s1[VL_DESC_LEN], s2[VL_DESC_LEN], d1[VL_DESC_LEN], d2[VL_DESC_LEN];
  return vl_fail(VL_ESHAPE, "%s: a %s and b %s cannot be multiplied (inner dims %lld and %lld; a %s, b %s)", op,
                 vl_shape_str(a, s1, sizeof s1), vl_shape_str(b, s2, sizeof s2), (long long)ka, (long long)kb,
                 vl_tensor_desc(a, d1, sizeof d1), vl_tensor_desc(b, d2, sizeof d2));
}

vl_status vl_matmul(vl_tensor *a, vl_tensor *b, vl_tensor **out) {
  VL_TRY(check_mm_operands("matmul", a, b));
  int64_t ka = a->size[a->ndim - 1], kb = b->size[b->ndim > 1 ? b->ndim - 2 : 0];
  if (ka != kb) return inner_mismatch("matmul", a, b, ka, kb);
  /* 1-D operands become 1 x k / k x 1 matrices; their dim is removed from the result. */
  vl_tensor *a2 = NULL, *b2 = NULL, *r = NULL;
  vl_status s = a->ndim == 1 ? vl_unsqueeze(a, 0, &a2) : (a2 = vl_tensor_retain(a), VL_OK);
  if (s == VL_OK) s = b->ndim == 1 ? vl_unsqueeze(b, 1, &b2) : (b2 = vl_tensor_retain(b), VL_OK);
  int nb = 0;
  int64_t bsize[VL_MAX_DIMS];
  if (s == VL_OK) {
    /* Broadcast the batch dims: views of a and b without their matrix dims. */
    int na = a2->ndim - 2, nbb = b2->ndim - 2;
    nb = na > nbb ? na : nbb;
    for (int i = 0; i < nb && s == VL_OK; i++) {
      int ia = na - nb + i, ib = nbb - nb + i;
      int64_t x = ia >= 0 ? a2->size[ia] : 1, y = ib >= 0 ? b2->size[ib] : 1;
      if (x != y && x != 1 && y != 1) {
        char s1[VL_DESC_LEN], s2[VL_DESC_LEN], d1[VL_DESC_LEN], d2[VL_DESC_LEN];
        s = vl_fail(VL_ESHAPE, "matmul: batch dims of a %s and b %s cannot be broadcast (a %s, b %s)",
                    vl_shape_str(a, s1, sizeof s1), vl_shape_str(b, s2, sizeof s2), vl_tensor_desc(a, d1, sizeof d1),
                    vl_tensor_desc(b, d2, sizeof d2));
      }
      bsize[i] = x == 1 ? y : x;
    }
  }
  if (s == VL_OK && nb + 2 > VL_MAX_DIMS) s = vl_fail(VL_EINVAL, "matmul: too many dims");
  if (s == VL_OK) {
    int64_t m = a2->size[a2->ndim - 2], n = b2->size[b2->ndim - 1];
    int64_t osize[VL_MAX_DIMS];
    memcpy(osize, bsize, sizeof(int64_t) * (size_t)nb);
    int ond = nb;
    if (a->ndim > 1) osize[ond++] = m;
    if (b->ndim > 1) osize[ond++] = n;
    s = vl_tensor_empty(ond, osize, a->dtype, a->storage->device, &r);
    if (s == VL_OK) s = gemm_batched("matmul", a2, b2, nb, bsize, r, 1.0, 0.0, NULL);
  }
  vl_tensor_release(a2);
  vl_tensor_release(b2);
  if (s != VL_OK) {
    vl_tensor_release(r);
    return s;
  }
  *out = r;
  return VL_OK;
}

vl_status vl_mm(vl_tensor *a, vl_tensor *b, vl_tensor **out) {
  /* matmul restricted to matrices; checked here so that errors name "mm", the op the user called. */
  if (a->ndim != 2 || b->ndim != 2) {
    char d1[VL_DESC_LEN], d2[VL_DESC_LEN];
    return vl_fail(VL_ESHAPE, "mm: expected 2-D tensors (a %s, b %s)", vl_tensor_desc(a, d1, sizeof d1),
                   vl_tensor_desc(b, d2, sizeof d2));
  }
  VL_TRY(check_mm_operands("mm", a, b));
  if (a->size[1] != b->size[0]) return inner_mismatch("mm", a, b, a->size[1], b->size[0]);
  return vl_matmul(a, b, out);
}

vl_status vl_bmm(vl_tensor *a, vl_tensor *b, vl_tensor **out) {
  char d1[VL_DESC_LEN], d2[VL_DESC_LEN];
  VL_TRY(check_mm_operands("bmm", a, b));
  if (a->ndim != 3 || b->ndim != 3)
    return vl_fail(VL_ESHAPE, "bmm: expected 3-D tensors (a %s, b %s)", vl_tensor_desc(a, d1, sizeof d1),
                   vl_tensor_desc(b, d2, sizeof d2));
  if (a->size[0] != b->size[0])
    return vl_fail(VL_ESHAPE, "bmm: batch sizes %lld and %lld differ (a %s, b %s)", (long long)a->size[0],
                   (long long)b->size[0], vl_tensor_desc(a, d1, sizeof d1), vl_tensor_desc(b, d2, sizeof d2));
  if (a->size[2] != b->size[1]) return inner_mismatch("bmm", a, b, a->size[2], b->size[1]);
  int64_t osize[3] = {a->size[0], a->size[1], b->size[2]};
  vl_tensor *r;
  VL_TRY(vl_tensor_empty(3, osize, a->dtype, a->storage->device, &r));
  vl_status s = gemm_batched("bmm", a, b, 1, osize, r, 1.0, 0.0, NULL);
  if (s != VL_OK) {
    vl_tensor_release(r);
    return s;
  }
  *out = r;
  return VL_OK;
}

/* A bias that is one dense vector of n elements broadcast over the rows: [n] or [1, n]. */
static bool bias_is_row_vector(const vl_tensor *bias, int64_t n) {
  if (n <= 0 || vl_tensor_numel(bias) != n) return false;
  if (bias->ndim == 1) return n == 1 || bias->stride[0] == 1;
  if (bias->ndim == 2 && bias->size[0] == 1) return n == 1 || bias->stride[1] == 1;
  return false;
}

vl_status vl_addmm(vl_tensor *bias, vl_tensor *a, vl_tensor *b, double beta, double alpha, vl_tensor **out) {
  char d1[VL_DESC_LEN], d2[VL_DESC_LEN], d3[VL_DESC_LEN], s1[VL_DESC_LEN];
  VL_TRY(check_mm_operands("addmm", a, b));
  VL_TRY(vl_check_same_device("addmm", bias, "bias", a, "a"));
  if (a->ndim != 2 || b->ndim != 2)
    return vl_fail(VL_ESHAPE, "addmm: expected 2-D a and b (a %s, b %s)", vl_tensor_desc(a, d1, sizeof d1),
                   vl_tensor_desc(b, d2, sizeof d2));
  if (a->size[1] != b->size[0]) return inner_mismatch("addmm", a, b, a->size[1], b->size[0]);
  if (bias->dtype != a->dtype)
    return vl_fail(VL_EDTYPE, "addmm: bias dtype %s differs from %s (bias %s, a %s, b %s)", vl_dtype_name(bias->dtype),
                   vl_dtype_name(a->dtype), vl_tensor_desc(bias, d3, sizeof d3), vl_tensor_desc(a, d1, sizeof d1),
                   vl_tensor_desc(b, d2, sizeof d2));
  int64_t osize[2] = {a->size[0], b->size[1]};
  if (!vl_broadcasts_to(bias, 2, osize))
    return vl_fail(VL_ESHAPE, "addmm: bias of shape %s cannot be broadcast to the result %lldx%lld (bias %s, a %s, b %s)",
                   vl_shape_str(bias, s1, sizeof s1), (long long)osize[0], (long long)osize[1],
                   vl_tensor_desc(bias, d3, sizeof d3), vl_tensor_desc(a, d1, sizeof d1),
                   vl_tensor_desc(b, d2, sizeof d2));
  vl_tensor *r;
  VL_TRY(vl_tensor_empty(2, osize, a->dtype, a->storage->device, &r));
  vl_status s = VL_OK;
  if (beta == 1 && bias_is_row_vector(bias, osize[1])) {
    /* Linear's case: the kernel adds the vector to every row (cuBLASLt's bias epilogue on CUDA). */
    s = gemm_batched("addmm", a, b, 0, osize, r, alpha, 0.0, bias);
  } else {
    if (beta != 0) s = vl_copy_same_device(r, bias);
    if (s == VL_OK) s = gemm_batched("addmm", a, b, 0, osize, r, alpha, beta, NULL);
  }
  if (s != VL_OK) {
    vl_tensor_release(r);
    return s;
  }
  *out = r;
  return VL_OK;
}
