/* runtime/autograd/ops_util.c: helpers shared by the recorded ops (runtime/autograd/ops.h):
 * the end of an op and of a formula, fitting a gradient to its input, in-place checks. */
#include <stdio.h>

#include "runtime/autograd/ops.h"
#include "runtime/ops/ops_internal.h"

vl_status vl_ag_out(vl_status s, vl_tensor *r, vl_tensor **out) {
  if (s != VL_OK) {
    vl_tensor_release(r);
    return s;
  }
  *out = r;
  return VL_OK;
}

vl_status vl_ag_give(vl_node *n, int j, vl_tensor *g, vl_tensor **grads_in) {
  if (!g) return VL_OK;
  const vl_node *to = n->next[j].node;
  if (!to) {
    vl_tensor_release(g);
    return VL_OK;
  }
  int nr = n->next[j].input_nr;
  if (to->out_ndim[nr] < 0) { /* no metadata to fit to: hand it over as is */
    grads_in[j] = g;
    return VL_OK;
  }
  vl_tensor *r;
  vl_status s = vl_sum_to_size(g, to->out_ndim[nr], to->out_size[nr], &r);
  vl_tensor_release(g);
  VL_TRY(s);
  if (r->dtype != to->out_dtype[nr] || !vl_device_eq(r->storage->device, to->out_device)) {
    vl_tensor *c;
    s = vl_to(r, to->out_dtype[nr], to->out_device, &c);
    vl_tensor_release(r);
    VL_TRY(s);
    r = c;
  }
  grads_in[j] = r;
  return VL_OK;
}

vl_status vl_ag_give_n(vl_node *n, vl_status s, int k, vl_tensor **g, vl_tensor **grads_in) {
  for (int j = 0; j < k; j++) {
    if (s == VL_OK) s = vl_ag_give(n, j, g[j], grads_in);
    else vl_tensor_release(g[j]);
    g[j] = NULL;
  }
  return s;
}

vl_status vl_ag_zeros_out(const vl_node *n, int i, vl_tensor **out) {
  if (n->out_ndim[i] < 0) return vl_fail(VL_EINTERNAL, "%s: output %d has no metadata", n->name, i + 1);
  return vl_zeros(n->out_ndim[i], n->out_size[i], n->out_dtype[i], n->out_device, out);
}

vl_status vl_ag_zeros_in(const vl_node *n, int j, vl_tensor **out) {
  const vl_node *to = n->next[j].node;
  if (!to) return vl_fail(VL_EINTERNAL, "%s: input %d needs no gradient", n->name, j + 1);
  return vl_ag_zeros_out(to, n->next[j].input_nr, out);
}

const int64_t *vl_ag_in_shape(const vl_node *n, int j, int *ndim) {
  const vl_node *to = n->next[j].node;
  *ndim = to->out_ndim[n->next[j].input_nr];
  return to->out_size[n->next[j].input_nr];
}

vl_status vl_ag_check_inplace(const char *op, vl_tensor *a, bool recording) {
  char d[VL_DESC_LEN];
  if (!vl_grad_enabled()) return VL_OK;
  if (vl_is_leaf(a) && vl_requires_grad(a))
    return vl_fail(VL_EINVAL, "a leaf tensor that requires grad is used in an in-place operation (%s; %s): "
                   "use an out-of-place op, or v100.no_grad",
                   op, vl_tensor_desc(a, d, sizeof d));
  const vl_autograd_meta *m = (const vl_autograd_meta *)a->autograd;
  if (recording && m && m->is_view)
    return vl_fail(VL_EUNSUPPORTED,
                   "%s: in-place operations on a view of a tensor that requires grad are not supported (%s); "
                   "use the out-of-place op or clone() the view first",
                   op, vl_tensor_desc(a, d, sizeof d));
  return VL_OK;
}
