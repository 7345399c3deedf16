/* runtime/ops/einsum.h: the einsum equation, parsed and checked against its operands once
 * (runtime/ops/einsum.c). The contraction itself is composed from recorded ops (diagonal views,
 * sums, permutes, reshapes and the matmul front end) by vl_ag_einsum (runtime/autograd/
 * ops_einsum.c), so both devices, every float dtype and autograd follow from those ops.
 *
 * Labels are numbers: 'A'..'Z' are 0..25, 'a'..'z' 26..51 (so the implicit output, sorted by
 * label, is in ASCII order, as PyTorch's), and the dims an ellipsis stands for are
 * VL_EINSUM_ELL + 0 .. VL_EINSUM_ELL + nell - 1, right-aligned: an operand whose ellipsis covers
 * fewer dims than the widest one has the last labels of that range (broadcasting as numpy's). */
#ifndef VL_OPS_EINSUM_H
#define VL_OPS_EINSUM_H

#include "runtime/core/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

#define VL_EINSUM_ELL 52
#define VL_EINSUM_LABELS (VL_EINSUM_ELL + VL_MAX_DIMS)
#define VL_EINSUM_MAX_OPERANDS 64
#define VL_EINSUM_EQ_LEN 96 /* the equation as quoted in messages (longer ones are cut with "...") */

typedef struct vl_einsum_plan {
  char eq[VL_EINSUM_EQ_LEN];                         /* for messages: "einsum 'ij,jk->ik': ..." */
  int n;                                             /* operands */
  int ndim[VL_EINSUM_MAX_OPERANDS];                  /* each operand's dims */
  int label[VL_EINSUM_MAX_OPERANDS][VL_MAX_DIMS];    /* the label of each of its dims */
  int nout;                                          /* the result's dims */
  int out[VL_MAX_DIMS];                              /* their labels, in order */
  int64_t size[VL_EINSUM_LABELS];                    /* each label's size (broadcast; 1 when unused) */
} vl_einsum_plan;

/* Parses `eq` (spaces ignored; explicit "->" output or the implicit one: the ellipsis dims, then
 * the labels seen once, sorted) and checks it against the n operands: the subscripts of each
 * operand name its dims, a label repeated in one operand has one size there (its diagonal), a
 * label's sizes across operands are equal or 1, the ellipsis dims broadcast, the operands are
 * float tensors of one dtype on one device. Every message starts "einsum '<eq>': " and names the
 * operand (1-based), the label and the sizes. */
vl_status vl_einsum_plan_make(const char *eq, int n, vl_tensor *const *ops, vl_einsum_plan *p);

/* The subscript of label l for messages ("i", or "..." for an ellipsis dim). */
const char *vl_einsum_label_str(int l, char buf[4]);

#ifdef __cplusplus
}
#endif
#endif
