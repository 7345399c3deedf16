/* tests/c/test_backend.c: the one device -> backend lookup (runtime/backend/backend.h), the backends'
 * tables and capability queries, and the enum-indexed name tables (status, dtype, op kinds,
 * layouts) that the build checks by count: here every entry is checked to be present and
 * distinct, which a count cannot see. */
#include <string.h>

#include "runtime/backend/backend.h"
#include "runtime/ops/ops_internal.h"
#include "vl_test.h"

/* Every entry of every table of a backend is filled (designated initialisers leave a forgotten
 * one NULL rather than shifting the others). */
static void check_tables(const vl_backend *be) {
  CHECK(be->ops && be->conv && be->pooling && be->norm && be->optim && be->supports, "%s: a table is missing",
        be->name);
  if (!be->ops || !be->conv || !be->pooling || !be->norm || !be->optim) return;
  const vl_kernels *k = be->ops;
  CHECK(k->name && strcmp(k->name, be->name) == 0, "%s: op table named %s", be->name, k->name ? k->name : "NULL");
  CHECK(k->fill && k->copy && k->unary && k->binary && k->binary_scalar && k->where && k->masked_fill && k->arange,
        "%s: an elementwise entry is NULL", be->name);
  CHECK(k->reduce && k->softmax && k->gemm && k->gather && k->scatter_add && k->index_select && k->rand,
        "%s: an op entry is NULL", be->name);
  CHECK(be->conv->forward && be->conv->backward_data && be->conv->backward_filter, "%s: conv", be->name);
  CHECK(be->pooling->forward && be->pooling->backward, "%s: pooling", be->name);
  CHECK(be->norm->batchnorm_forward && be->norm->batchnorm_backward && be->norm->layernorm_forward &&
            be->norm->layernorm_backward && be->norm->softmax_backward,
        "%s: norm", be->name);
  CHECK(be->optim->step && be->optim->l2norms && be->optim->unscale, "%s: optim", be->name);
  CHECK(be->attention && be->attention->supports && be->attention->forward && be->attention->backward,
        "%s: attention", be->name);
  CHECK(be->fused && be->fused->dropout && be->fused->xent_forward && be->fused->xent_backward, "%s: fused",
        be->name);
}

/* What every backend agrees on (vl_supports_base), asked through be->supports. */
static void check_common_support(const vl_backend *be) {
  for (int d = 0; d < VL_NDTYPES; d++) {
    vl_dtype dt = (vl_dtype)d;
    bool fl = vl_dtype_is_float(dt);
    CHECK(be->supports(VL_OP_ELEMENTWISE, dt, VL_LAYOUT_CONTIGUOUS) &&
              be->supports(VL_OP_ELEMENTWISE, dt, VL_LAYOUT_NHWC),
          "%s: elementwise %s", be->name, vl_dtype_name(dt));
    CHECK(be->supports(VL_OP_INDEX, dt, VL_LAYOUT_CONTIGUOUS), "%s: index %s", be->name, vl_dtype_name(dt));
    CHECK(be->supports(VL_OP_CONV, dt, VL_LAYOUT_CONTIGUOUS) == fl, "%s: NCHW conv %s", be->name, vl_dtype_name(dt));
    CHECK(be->supports(VL_OP_POOL, dt, VL_LAYOUT_NHWC) == fl, "%s: NHWC pool %s", be->name, vl_dtype_name(dt));
    CHECK(be->supports(VL_OP_BATCHNORM, dt, VL_LAYOUT_NHWC) == fl, "%s: NHWC batchnorm %s", be->name,
          vl_dtype_name(dt));
    CHECK(be->supports(VL_OP_GEMM, dt, VL_LAYOUT_CONTIGUOUS) == fl, "%s: gemm %s", be->name, vl_dtype_name(dt));
    CHECK(!be->supports(VL_OP_LAYERNORM, dt, VL_LAYOUT_NHWC), "%s: layernorm has no NHWC form", be->name);
  }
  CHECK(!be->supports(VL_OP_CONV, VL_NDTYPES, VL_LAYOUT_CONTIGUOUS), "%s: an invalid dtype", be->name);
  CHECK(!be->supports(VL_OP_CONV, VL_F32, VL_NLAYOUTS), "%s: an invalid layout", be->name);
  CHECK(!be->supports(VL_NOP_KINDS, VL_F32, VL_LAYOUT_CONTIGUOUS), "%s: an invalid op kind", be->name);
}

static void test_cpu_backend(void) {
  const vl_backend *be = vl_backend_of(vl_cpu_device());
  CHECK(be == &vl_cpu_backend);
  if (!be) return;
  CHECK(strcmp(be->name, "cpu") == 0 && be->type == VL_CPU);
  check_tables(be);
  check_common_support(be);
  /* The CPU runs every float convolution in both layouts, f64 NHWC included. */
  CHECK(be->supports(VL_OP_CONV, VL_F64, VL_LAYOUT_NHWC));
  CHECK(be->supports(VL_OP_CONV, VL_F16, VL_LAYOUT_NHWC));
  CHECK(be->current_stream == NULL && be->check_async == NULL && be->shutdown == NULL);
  const vl_backend *got = NULL;
  CHECK_OK(vl_backend_check("op", vl_cpu_device(), &got));
  CHECK(got == be);
  vl_exec ex = {.device = 7, .stream = (void *)&ex};
  CHECK_OK(vl_exec_of("op", vl_cpu_device(), &ex));
  CHECK(ex.device == 0 && ex.stream == NULL);
}

static void test_cuda_lookup(void) {
  const vl_backend *sentinel = &vl_cpu_backend, *got = sentinel;
#ifdef VL_HAVE_CUDA
  const vl_backend *be = vl_backend_of(vl_cuda_device(0));
  CHECK(be == &vl_cuda_backend);
  if (!be) return;
  CHECK(strcmp(be->name, "cuda") == 0 && be->type == VL_CUDA);
  check_tables(be);
  check_common_support(be);
  /* cuDNN's double convolutions are NCHW only: the one capability difference the front end
   * (runtime/nn/conv.c: run_nhwc) asks about. */
  CHECK(!be->supports(VL_OP_CONV, VL_F64, VL_LAYOUT_NHWC));
  CHECK(be->supports(VL_OP_CONV, VL_F64, VL_LAYOUT_CONTIGUOUS));
  CHECK(be->supports(VL_OP_CONV, VL_F32, VL_LAYOUT_NHWC) && be->supports(VL_OP_CONV, VL_BF16, VL_LAYOUT_NHWC));
  CHECK(be->supports(VL_OP_POOL, VL_F64, VL_LAYOUT_NHWC) && be->supports(VL_OP_BATCHNORM, VL_F64, VL_LAYOUT_NHWC));
  CHECK(be->current_stream && be->check_async && be->shutdown);
  CHECK_OK(vl_backend_check("op", vl_cuda_device(0), &got));
  CHECK(got == be);
#else
  CHECK(vl_backend_of(vl_cuda_device(0)) == NULL);
  CHECK_ERR(vl_backend_check("conv2d", vl_cuda_device(0), &got), VL_EUNSUPPORTED,
            "conv2d: a CUDA tensor but v100lua was built without CUDA");
  CHECK(got == sentinel);
  vl_exec ex = {.device = 5, .stream = NULL};
  CHECK_ERR(vl_exec_of("add", vl_cuda_device(1), &ex), VL_EUNSUPPORTED,
            "add: a CUDA tensor but v100lua was built without CUDA");
  CHECK(ex.device == 5, "vl_exec_of left its output untouched on failure");
#endif
  vl_device bad = {.type = VL_NDEVICE_TYPES, .index = 0};
  CHECK(vl_backend_of(bad) == NULL);
  got = sentinel;
  CHECK_ERR(vl_backend_check("op", bad, &got), VL_EINTERNAL, "op: invalid device type 2");
  CHECK(got == sentinel);
}

static void check_distinct(const char *what, const char *const *names, int n) {
  for (int i = 0; i < n; i++) {
    CHECK(names[i] && names[i][0] && strcmp(names[i], "?") != 0, "%s %d has no name", what, i);
    for (int j = 0; j < i; j++)
      CHECK(!names[i] || !names[j] || strcmp(names[i], names[j]) != 0, "%s %d and %d share the name %s", what, j, i,
            names[i]);
  }
}

static void test_name_tables(void) {
  const char *names[64];
  for (int i = 0; i < VL_NSTATUS; i++) {
    names[i] = vl_status_name((vl_status)i);
    CHECK(strncmp(names[i], "VL_", 3) == 0 && strcmp(names[i], "VL_E?") != 0, "status %d: %s", i, names[i]);
  }
  check_distinct("status", names, VL_NSTATUS);
  CHECK(strcmp(vl_status_name(VL_OK), "VL_OK") == 0 && strcmp(vl_status_name(VL_EINTERNAL), "VL_EINTERNAL") == 0);
  CHECK(strcmp(vl_status_name(VL_ECUDNN), "VL_ECUDNN") == 0);
  CHECK(strcmp(vl_status_name(VL_NSTATUS), "VL_E?") == 0);

  for (int i = 0; i < VL_NDTYPES; i++) {
    names[i] = vl_dtype_name((vl_dtype)i);
    size_t sz = vl_dtype_size((vl_dtype)i);
    CHECK(sz == 1 || sz == 2 || sz == 4 || sz == 8, "dtype %s has size %zu", names[i], sz);
  }
  check_distinct("dtype", names, VL_NDTYPES);
  CHECK(strcmp(vl_dtype_name(VL_BF16), "bf16") == 0 && vl_dtype_size(VL_BF16) == 2 && vl_dtype_size(VL_I64) == 8);
  CHECK(strcmp(vl_dtype_name(VL_NDTYPES), "?") == 0 && vl_dtype_size(VL_NDTYPES) == 0);

  /* The exported name table: the short names first in enum order, then aliases; every name
   * parses back to its dtype, and no name is listed twice. */
  const char *name, *all[64];
  vl_dtype dt;
  int n = 0;
  while (n < 64 && vl_dtype_name_at(n, &name, &dt)) {
    if (n < VL_NDTYPES) CHECK(dt == (vl_dtype)n && strcmp(name, vl_dtype_name(dt)) == 0, "name %d: %s", n, name);
    vl_dtype parsed = VL_NDTYPES;
    CHECK_OK(vl_dtype_parse(name, &parsed));
    CHECK(parsed == dt, "%s parses to %s, listed as %s", name, vl_dtype_name(parsed), vl_dtype_name(dt));
    all[n++] = name;
  }
  CHECK(n == VL_NDTYPES + 13, "%d dtype names", n);
  check_distinct("dtype name", all, n);
  CHECK(!vl_dtype_name_at(-1, &name, &dt));
  dt = VL_U8;
  CHECK_OK(vl_dtype_parse("float64", &dt));
  CHECK(dt == VL_F64);
  CHECK_ERR(vl_dtype_parse("cuda", &dt), VL_EDTYPE, "unknown dtype 'cuda'");
  CHECK(dt == VL_F64, "vl_dtype_parse left its output untouched on failure");

  for (int i = 0; i < VL_NOP_KINDS; i++) names[i] = vl_op_kind_name((vl_op_kind)i);
  check_distinct("op kind", names, VL_NOP_KINDS);
  CHECK(strcmp(vl_op_kind_name(VL_OP_CONV), "conv") == 0 && strcmp(vl_op_kind_name(VL_NOP_KINDS), "?") == 0);
  for (int i = 0; i < VL_NLAYOUTS; i++) names[i] = vl_layout_name((vl_layout)i);
  check_distinct("layout", names, VL_NLAYOUTS);
  CHECK(strcmp(vl_layout_name(VL_LAYOUT_NHWC), "nhwc") == 0 && strcmp(vl_layout_name(VL_NLAYOUTS), "?") == 0);
}

int main(void) {
  if (!vl_test_init()) return 1;
  test_cpu_backend();
  test_cuda_lookup();
  test_name_tables();
  vl_shutdown();
  return vl_test_finish();
}
