/* runtime/autograd/layout.c: the differentiable layout change to channels-last.
 *
 * The copy is made of recorded ops (permute to N x H x W x C, clone, permute back), so its backward
 * comes from those nodes: a layout change is a copy, and its gradient is the identity in the
 * logical (NCHW-indexed) view. A clone, not contiguous(): N x 1 x H x W permuted to N x H x W x 1
 * already counts as contiguous, and contiguous() would hand it back with its NCHW strides. */
#include "runtime/autograd/layout.h"

#include "runtime/autograd/autograd.h"
#include "runtime/autograd/formula.h"
#include "runtime/autograd/ops.h"
#include "runtime/core/layout.h"

vl_status vl_ag_to_channels_last(vl_tensor *t, vl_tensor **out) {
  /* Not 4-D: vl_to_channels_last raises its own message. Already channels-last or nothing to
   * record: the raw conversion (which returns t itself when there is nothing to do). */
  if (t->ndim != 4 || vl_is_channels_last(t) || !vl_ag_needs(1, &t)) return vl_to_channels_last(t, out);
  static const int to_nhwc[4] = {0, 2, 3, 1}, to_nchw[4] = {0, 3, 1, 2};
  VL_FS(f); /* recorded ops: the scope only owns their results */
  vl_tensor *a = F_RUN(vl_ag_permute(t, 4, to_nhwc, F_OUT));
  vl_tensor *b = F_RUN(vl_ag_clone(a, F_OUT));
  vl_tensor *r = F_RUN(vl_ag_permute(b, 4, to_nchw, F_OUT));
  return vl_fs_end(f, r, out);
}
