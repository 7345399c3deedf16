/* runtime/ops/einsum.c: the einsum equation's parser and every check against its operands
 * (runtime/ops/einsum.h). Nothing here runs a kernel: runtime/autograd/ops_einsum.c composes the
 * contraction from the plan. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/core/dtype.h"
#include "runtime/ops/einsum.h"
#include "runtime/ops/ops_internal.h"

static int letter_label(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return 26 + (c - 'a');
  return -1;
}

const char *vl_einsum_label_str(int l, char buf[4]) {
  if (l >= VL_EINSUM_ELL) return "...";
  buf[0] = (char)(l < 26 ? 'A' + l : 'a' + (l - 26));
  buf[1] = '\0';
  return buf;
}

/* One side's subscripts: letters (at most VL_MAX_DIMS, as no tensor has more dims) and where the
 * ellipsis stands among them (-1: none). */
typedef struct term {
  const char *text; /* into the stripped equation, len chars */
  int len;
  int nl;
  int lab[VL_MAX_DIMS];
  int ell;
} term;

/* `what` names the side in messages: "operand 2" or "the output". */
static vl_status parse_term(const vl_einsum_plan *p, const char *s, int len, const char *what, term *t) {
  t->text = s;
  t->len = len;
  t->nl = 0;
  t->ell = -1;
  for (int i = 0; i < len; i++) {
    char c = s[i];
    int l = letter_label(c);
    if (l >= 0) {
      if (t->nl == VL_MAX_DIMS)
        return vl_fail(VL_ESHAPE, "einsum '%s': the subscripts of %s '%.*s' name more than %d dims", p->eq, what, len, s,
                       VL_MAX_DIMS);
      t->lab[t->nl++] = l;
    } else if (c == '.') {
      if (i + 2 >= len || s[i + 1] != '.' || s[i + 2] != '.')
        return vl_fail(VL_EINVAL, "einsum '%s': %s has a '.' that is not part of an ellipsis '...'", p->eq, what);
      if (t->ell >= 0) return vl_fail(VL_EINVAL, "einsum '%s': %s has more than one ellipsis '...'", p->eq, what);
      t->ell = t->nl;
      i += 2;
    } else {
      return vl_fail(VL_EINVAL, "einsum '%s': invalid character '%c' in the subscripts of %s (subscripts are letters a-z, A-Z and '...')",
                     p->eq, c, what);
    }
  }
  return VL_OK;
}

/* The checks that need the equation only as far as the operand count: the dtype and device of
 * every operand against operand 1's. */
static vl_status check_operands(const vl_einsum_plan *p, int n, vl_tensor *const *ops) {
  char d1[VL_DESC_LEN], d2[VL_DESC_LEN];
  if (!vl_dtype_is_float(ops[0]->dtype))
    return vl_fail(VL_EDTYPE, "einsum '%s': operand 1 is %s; einsum takes float tensors (f32, f16, bf16, f64)", p->eq,
                   vl_tensor_desc(ops[0], d1, sizeof d1));
  for (int k = 1; k < n; k++) {
    if (ops[k]->dtype != ops[0]->dtype)
      return vl_fail(VL_EDTYPE, "einsum '%s': operand %d is %s but operand 1 is %s (the operands share one dtype)", p->eq,
                     k + 1, vl_dtype_name(ops[k]->dtype), vl_dtype_name(ops[0]->dtype));
    if (!vl_device_eq(ops[k]->storage->device, ops[0]->storage->device))
      return vl_fail(VL_EDEVICE, "einsum '%s': operand %d (%s) and operand 1 (%s) are on different devices", p->eq, k + 1,
                     vl_tensor_desc(ops[k], d2, sizeof d2), vl_tensor_desc(ops[0], d1, sizeof d1));
  }
  return VL_OK;
}

/* Labels of each operand's dims, the sizes of every label (equal or 1 across operands, equal
 * within one: a repeated label is a diagonal). */
static vl_status bind_operands(vl_einsum_plan *p, vl_tensor *const *ops, const term *terms, int nell) {
  int src[VL_EINSUM_LABELS]; /* the operand that set size[l] (-1: none yet) */
  char b[4], s1[VL_DESC_LEN], s2[VL_DESC_LEN];
  for (int l = 0; l < VL_EINSUM_LABELS; l++) {
    p->size[l] = 1;
    src[l] = -1;
  }
  for (int k = 0; k < p->n; k++) {
    const term *t = &terms[k];
    const vl_tensor *x = ops[k];
    int e = t->ell >= 0 ? x->ndim - t->nl : 0, d = 0;
    p->ndim[k] = x->ndim;
    for (int i = 0; i <= t->nl; i++) {
      if (i == t->ell)
        for (int j = 0; j < e; j++) p->label[k][d++] = VL_EINSUM_ELL + (nell - e) + j;
      if (i < t->nl) p->label[k][d++] = t->lab[i];
    }
    int first[VL_EINSUM_LABELS]; /* the dim of operand k where label l was first seen (-1: not yet) */
    for (int l = 0; l < VL_EINSUM_LABELS; l++) first[l] = -1;
    for (d = 0; d < x->ndim; d++) {
      int l = p->label[k][d];
      int64_t sz = x->size[d];
      if (first[l] >= 0) {
        if (x->size[first[l]] != sz)
          return vl_fail(VL_ESHAPE, "einsum '%s': index %s is repeated in operand %d with sizes %lld and %lld (operand %d is %s)",
                         p->eq, vl_einsum_label_str(l, b), k + 1, (long long)x->size[first[l]], (long long)sz, k + 1,
                         vl_shape_str(x, s1, sizeof s1));
        continue;
      }
      first[l] = d;
      if (sz == 1) continue;
      if (src[l] < 0 || p->size[l] == 1) {
        p->size[l] = sz;
        src[l] = k;
      } else if (p->size[l] != sz) {
        if (l >= VL_EINSUM_ELL)
          return vl_fail(VL_ESHAPE, "einsum '%s': the ellipsis dims of operand %d (%s) and operand %d (%s) cannot be broadcast (sizes %lld and %lld)",
                         p->eq, src[l] + 1, vl_shape_str(ops[src[l]], s1, sizeof s1), k + 1,
                         vl_shape_str(x, s2, sizeof s2), (long long)p->size[l], (long long)sz);
        return vl_fail(VL_ESHAPE, "einsum '%s': index %s has size %lld in operand %d but %lld in operand %d", p->eq,
                       vl_einsum_label_str(l, b), (long long)p->size[l], src[l] + 1, (long long)sz, k + 1);
      }
    }
  }
  return VL_OK;
}

/* The output's labels: explicit (the "->" side) or implicit. `seen` counts each letter's
 * occurrences in the operands' subscripts. */
static vl_status output_labels(vl_einsum_plan *p, const term *o, const int *seen, bool any_ell, int nell) {
  char b[4];
  int nout = 0, lab[VL_EINSUM_LABELS];
  if (o) {
    bool used[VL_EINSUM_LABELS] = {false};
    for (int i = 0; i <= o->nl; i++) {
      if (i == o->ell)
        for (int j = 0; j < nell; j++) lab[nout++] = VL_EINSUM_ELL + j;
      if (i == o->nl) break;
      int l = o->lab[i];
      if (used[l])
        return vl_fail(VL_EINVAL, "einsum '%s': index %s appears more than once in the output", p->eq,
                       vl_einsum_label_str(l, b));
      if (!seen[l])
        return vl_fail(VL_EINVAL, "einsum '%s': output index %s does not appear in any operand", p->eq,
                       vl_einsum_label_str(l, b));
      used[l] = true;
      lab[nout++] = l;
    }
  } else {
    /* PyTorch's and numpy's implicit form: the ellipsis dims first, then every letter that
     * occurs exactly once (a letter repeated, even within one operand, is summed), sorted. */
    if (any_ell)
      for (int j = 0; j < nell; j++) lab[nout++] = VL_EINSUM_ELL + j;
    for (int l = 0; l < VL_EINSUM_ELL; l++)
      if (seen[l] == 1) lab[nout++] = l;
  }
  if (nout > VL_MAX_DIMS)
    return vl_fail(VL_ESHAPE, "einsum '%s': the result would have %d dims (at most %d)", p->eq, nout, VL_MAX_DIMS);
  p->nout = nout;
  memcpy(p->out, lab, sizeof(int) * (size_t)nout);
  return VL_OK;
}

static vl_status parse(vl_einsum_plan *p, const char *s, int n, vl_tensor *const *ops) {
  char what[32];
  const char *arrow = strstr(s, "->");
  if (arrow && strstr(arrow + 2, "->"))
    return vl_fail(VL_EINVAL, "einsum '%s': more than one '->'", p->eq);
  int lhs_len = arrow ? (int)(arrow - s) : (int)strlen(s);
  for (int i = 0; i < lhs_len; i++)
    if (s[i] == '-' || s[i] == '>')
      return vl_fail(VL_EINVAL, "einsum '%s': '%c' outside of an arrow '->'", p->eq, s[i]);
  int nterms = 1;
  for (int i = 0; i < lhs_len; i++) nterms += s[i] == ',';
  if (nterms != n)
    return vl_fail(VL_EINVAL, "einsum '%s': the equation has subscripts for %d operand%s but %d operand%s given", p->eq,
                   nterms, nterms == 1 ? "" : "s", n, n == 1 ? " was" : "s were");
  term terms[VL_EINSUM_MAX_OPERANDS], out;
  int seen[VL_EINSUM_LABELS] = {0}, nell = 0;
  bool any_ell = false;
  const char *c = s;
  for (int k = 0; k < n; k++) {
    const char *end = c;
    while (end < s + lhs_len && *end != ',') end++;
    snprintf(what, sizeof what, "operand %d", k + 1);
    VL_TRY(parse_term(p, c, (int)(end - c), what, &terms[k]));
    const term *t = &terms[k];
    int nd = ops[k]->ndim;
    if (t->ell < 0 && nd != t->nl)
      return vl_fail(VL_ESHAPE, "einsum '%s': operand %d has %d dim%s but its subscripts '%.*s' name %d", p->eq, k + 1, nd,
                     nd == 1 ? "" : "s", t->len, t->text, t->nl);
    if (t->ell >= 0 && nd < t->nl)
      return vl_fail(VL_ESHAPE, "einsum '%s': operand %d has %d dim%s but its subscripts '%.*s' name at least %d", p->eq,
                     k + 1, nd, nd == 1 ? "" : "s", t->len, t->text, t->nl);
    if (t->ell >= 0) {
      any_ell = true;
      if (nd - t->nl > nell) nell = nd - t->nl;
    }
    for (int i = 0; i < t->nl; i++) seen[t->lab[i]]++;
    c = end + 1;
  }
  if (arrow) VL_TRY(parse_term(p, arrow + 2, (int)strlen(arrow + 2), "the output", &out));
  VL_TRY(check_operands(p, n, ops));
  VL_TRY(bind_operands(p, ops, terms, nell));
  return output_labels(p, arrow ? &out : NULL, seen, any_ell, nell);
}

vl_status vl_einsum_plan_make(const char *eq, int n, vl_tensor *const *ops, vl_einsum_plan *p) {
  size_t len = strlen(eq);
  if (len < sizeof p->eq) {
    memcpy(p->eq, eq, len + 1);
  } else {
    memcpy(p->eq, eq, sizeof p->eq - 4);
    memcpy(p->eq + sizeof p->eq - 4, "...", 4);
  }
  if (n < 1) return vl_fail(VL_EINVAL, "einsum '%s': no operands", p->eq);
  if (n > VL_EINSUM_MAX_OPERANDS)
    return vl_fail(VL_EINVAL, "einsum '%s': %d operands (at most %d)", p->eq, n, VL_EINSUM_MAX_OPERANDS);
  p->n = n;
  /* Spaces are ignored (PyTorch's rule): parse a copy without them. */
  char *s = malloc(len + 1);
  if (!s) return vl_fail(VL_EOOM, "einsum: out of host memory for the equation");
  size_t m = 0;
  for (size_t i = 0; i < len; i++)
    if (!isspace((unsigned char)eq[i])) s[m++] = eq[i];
  s[m] = '\0';
  vl_status st = parse(p, s, n, ops);
  free(s);
  return st;
}
