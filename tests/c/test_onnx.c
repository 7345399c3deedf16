/* tests/c/test_onnx.c: the ONNX model writer (ext/onnx/onnx.c). A model built through the
 * writer is packed, and read back with protobuf-c's own unpack of the same schema
 * (onnx__model_proto__unpack): every field the writer sets is checked there, initializer bytes
 * included (a strided view comes out in logical order, an f32 tensor asked as f16 as IEEE half
 * bits). Then the checks of a malformed graph, each leaving the model unchanged, and the file:
 * saved bytes equal to the packed ones, an unwritable path refused with the path named. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "onnx.pb-c.h"
#include "ext/onnx/onnx.h"
#include "tests/c/vl_test.h"

static vl_tensor *f32_tensor(int ndim, const int64_t *size, const float *vals) {
  vl_tensor *t = NULL;
  if (vl_tensor_empty(ndim, size, VL_F32, vl_cpu_device(), &t) != VL_OK) exit(2);
  memcpy(vl_tensor_data(t), vals, sizeof(float) * (size_t)vl_tensor_numel(t));
  return t;
}

static Onnx__ModelProto *round_trip(vl_onnx *m, size_t *len_out) {
  uint8_t *buf = NULL;
  size_t len = 0;
  if (vl_onnx_pack(m, &buf, &len) != VL_OK) {
    printf("FAIL pack: %s\n", vl_errmsg());
    return NULL;
  }
  Onnx__ModelProto *mp = onnx__model_proto__unpack(NULL, len, buf);
  free(buf);
  if (len_out) *len_out = len;
  return mp;
}

static const Onnx__AttributeProto *attr(const Onnx__NodeProto *n, const char *name) {
  for (size_t i = 0; i < n->n_attribute; i++)
    if (strcmp(n->attribute[i]->name, name) == 0) return n->attribute[i];
  return NULL;
}

static vl_onnx *build(void) {
  vl_onnx *m = NULL;
  CHECK_OK(vl_onnx_new("tiny", 17, "0.1.0", &m));
  if (!m) exit(2);
  vl_onnx_dim in_dims[2] = {{0, "batch"}, {3, NULL}};
  CHECK_OK(vl_onnx_add_input(m, "x", VL_F32, 2, in_dims));
  /* W is stored as a 3 x 2 tensor and given as its 2 x 3 transposed view: the initializer must
   * hold the view's logical order */
  const float w[6] = {1, 2, 3, 4, 5, 6};
  int64_t ws[2] = {3, 2};
  vl_tensor *wt = f32_tensor(2, ws, w), *wv = NULL;
  CHECK_OK(vl_transpose(wt, 0, 1, &wv));
  CHECK_OK(vl_onnx_add_initializer(m, "W", wv, VL_NDTYPES));
  const float b[2] = {0.5f, -1.0f / 3};
  int64_t bs[1] = {2};
  vl_tensor *bt = f32_tensor(1, bs, b);
  CHECK_OK(vl_onnx_add_initializer(m, "b", bt, VL_F16));
  vl_tensor_release(wt), vl_tensor_release(wv), vl_tensor_release(bt);
  const int64_t perm[2] = {1, 0};
  const float fl[2] = {0.25f, 2.5f};
  vl_onnx_attr attrs[5] = {
      {.name = "transB", .kind = VL_ONNX_ATTR_INT, .i = 1},
      {.name = "alpha", .kind = VL_ONNX_ATTR_FLOAT, .f = 1.5f},
      {.name = "perm_like", .kind = VL_ONNX_ATTR_INTS, .n = 2, .ints = perm},
      {.name = "fl", .kind = VL_ONNX_ATTR_FLOATS, .n = 2, .floats = fl},
      {.name = "mode", .kind = VL_ONNX_ATTR_STRING, .s = "constant"},
  };
  const char *gin[3] = {"x", "W", ""}, *gout[1] = {"y"};
  CHECK_OK(vl_onnx_add_node(m, "Gemm", "fc", 3, gin, 1, gout, 5, attrs));
  const char *rin[1] = {"y"}, *rout[1] = {"z"};
  CHECK_OK(vl_onnx_add_node(m, "Relu", NULL, 1, rin, 1, rout, 0, NULL));
  vl_onnx_dim out_dims[2] = {{0, "batch"}, {2, NULL}};
  CHECK_OK(vl_onnx_add_output(m, "z", VL_F32, 2, out_dims));
  CHECK_OK(vl_onnx_add_metadata(m, "k", "v"));
  CHECK_OK(vl_onnx_set_doc(m, "a doc"));
  return m;
}

static void test_round_trip(vl_onnx *m) {
  Onnx__ModelProto *mp = round_trip(m, NULL);
  CHECK(mp != NULL, "protobuf-c could not unpack what the writer packed");
  if (!mp) return;
  CHECK(mp->has_ir_version && mp->ir_version == 8);
  CHECK(mp->n_opset_import == 1 && strcmp(mp->opset_import[0]->domain, "") == 0 &&
        mp->opset_import[0]->version == 17);
  CHECK(strcmp(mp->producer_name, "v100lua") == 0 && strcmp(mp->producer_version, "0.1.0") == 0);
  CHECK(mp->doc_string && strcmp(mp->doc_string, "a doc") == 0);
  CHECK(mp->n_metadata_props == 1 && strcmp(mp->metadata_props[0]->key, "k") == 0);
  Onnx__GraphProto *g = mp->graph;
  CHECK(g && strcmp(g->name, "tiny") == 0);
  CHECK(g->n_input == 1 && strcmp(g->input[0]->name, "x") == 0);
  Onnx__TypeProto *tp = g->input[0]->type;
  CHECK(tp->value_case == ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE && tp->tensor_type->elem_type == 1);
  Onnx__TensorShapeProto *sh = tp->tensor_type->shape;
  CHECK(sh->n_dim == 2);
  CHECK(sh->dim[0]->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM &&
        strcmp(sh->dim[0]->dim_param, "batch") == 0);
  CHECK(sh->dim[1]->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE && sh->dim[1]->dim_value == 3);

  CHECK(g->n_initializer == 2);
  Onnx__TensorProto *W = g->initializer[0], *B = g->initializer[1];
  CHECK(strcmp(W->name, "W") == 0 && W->data_type == 1 && W->n_dims == 2 && W->dims[0] == 2 && W->dims[1] == 3);
  const float wl[6] = {1, 3, 5, 2, 4, 6}; /* the transpose's rows */
  CHECK(W->has_raw_data && W->raw_data.len == sizeof wl && memcmp(W->raw_data.data, wl, sizeof wl) == 0,
        "W's bytes are not the view's logical order");
  CHECK(strcmp(B->name, "b") == 0 && B->data_type == 10 && B->n_dims == 1 && B->raw_data.len == 4);
  uint16_t h[2];
  memcpy(h, B->raw_data.data, 4);
  CHECK(h[0] == vl_f32_to_f16(0.5f) && h[1] == vl_f32_to_f16(-1.0f / 3), "f16 bits %04x %04x", h[0], h[1]);

  CHECK(g->n_node == 2);
  Onnx__NodeProto *n = g->node[0];
  CHECK(strcmp(n->op_type, "Gemm") == 0 && strcmp(n->name, "fc") == 0 && n->domain == NULL);
  CHECK(n->n_input == 3 && strcmp(n->input[2], "") == 0 && n->n_output == 1 && strcmp(n->output[0], "y") == 0);
  const Onnx__AttributeProto *a = attr(n, "transB");
  CHECK(a && a->type == ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT && a->i == 1);
  a = attr(n, "alpha");
  CHECK(a && a->type == ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT && a->f == 1.5f);
  a = attr(n, "perm_like");
  CHECK(a && a->type == ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS && a->n_ints == 2 && a->ints[0] == 1);
  a = attr(n, "fl");
  CHECK(a && a->type == ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOATS && a->n_floats == 2 && a->floats[1] == 2.5f);
  a = attr(n, "mode");
  CHECK(a && a->type == ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING && a->s.len == 8 &&
        memcmp(a->s.data, "constant", 8) == 0);
  CHECK(g->node[1]->name == NULL && strcmp(g->node[1]->op_type, "Relu") == 0);
  CHECK(g->n_output == 1 && strcmp(g->output[0]->name, "z") == 0 &&
        g->output[0]->type->tensor_type->shape->dim[1]->dim_value == 2);
  onnx__model_proto__free_unpacked(mp, NULL);
}

/* Each bad call fails with its message and leaves the model as it was (same packed size). */
static void test_errors(vl_onnx *m) {
  size_t before = 0, after = 0;
  Onnx__ModelProto *mp = round_trip(m, &before);
  if (mp) onnx__model_proto__free_unpacked(mp, NULL);
  const char *in_missing[1] = {"nope"}, *out_q[1] = {"q"}, *in_z[1] = {"z"}, *out_x[1] = {"x"};
  CHECK_ERR(vl_onnx_add_node(m, "Relu", NULL, 1, in_missing, 1, out_q, 0, NULL), VL_EINVAL,
            "input 1 \"nope\" is not a value defined before it");
  CHECK_ERR(vl_onnx_add_node(m, "Relu", "r", 1, in_z, 1, out_x, 0, NULL), VL_EINVAL,
            "Relu node \"r\": output \"x\" is already a value");
  CHECK_ERR(vl_onnx_add_node(m, "Not an op", NULL, 1, in_z, 1, out_q, 0, NULL), VL_EINVAL, "is not an identifier");
  vl_onnx_attr dup[2] = {{.name = "a", .kind = VL_ONNX_ATTR_INT}, {.name = "a", .kind = VL_ONNX_ATTR_FLOAT}};
  CHECK_ERR(vl_onnx_add_node(m, "Relu", NULL, 1, in_z, 1, out_q, 2, dup), VL_EINVAL, "attribute \"a\" is given twice");
  const char *two[2] = {"q", "q"};
  CHECK_ERR(vl_onnx_add_node(m, "Split", NULL, 1, in_z, 2, two, 0, NULL), VL_EINVAL, "output \"q\" is named twice");
  const char *bad_utf8[1] = {"q\xff"};
  CHECK_ERR(vl_onnx_add_node(m, "Relu", NULL, 1, in_z, 1, bad_utf8, 0, NULL), VL_EINVAL, "not valid UTF-8");
  vl_onnx_dim neg[1] = {{-3, NULL}};
  CHECK_ERR(vl_onnx_add_input(m, "x2", VL_F32, 1, neg), VL_EINVAL, "dim 0 has size -3");
  CHECK_ERR(vl_onnx_add_input(m, "W", VL_F32, 1, neg), VL_EINVAL, "input \"W\": the name is already a value");
  CHECK_ERR(vl_onnx_add_output(m, "q", VL_F32, 0, NULL), VL_EINVAL, "output \"q\" is not a value of the graph");
  CHECK_ERR(vl_onnx_add_output(m, "z", VL_F32, 0, NULL), VL_EINVAL, "output \"z\" is declared twice");
  CHECK_ERR(vl_onnx_add_metadata(m, "k", "w"), VL_EINVAL, "metadata key \"k\" is given twice");
  int64_t s1[1] = {1};
  const float one = 1;
  vl_tensor *t = f32_tensor(1, s1, &one);
  CHECK_ERR(vl_onnx_add_initializer(m, "x", t, VL_NDTYPES), VL_EINVAL, "initializer \"x\": the name is already a value");
  vl_tensor_release(t);
  mp = round_trip(m, &after);
  if (mp) onnx__model_proto__free_unpacked(mp, NULL);
  CHECK(before == after && before > 0, "a failed call changed the model (%zu -> %zu bytes)", before, after);

  vl_onnx *e = NULL;
  CHECK_ERR(vl_onnx_new("g", 16, NULL, &e), VL_EINVAL, "opset 16 is not supported (17 to 21)");
  CHECK_ERR(vl_onnx_new("", 17, NULL, &e), VL_EINVAL, "graph has an empty name");
  CHECK(e == NULL);
  CHECK_OK(vl_onnx_new("g", 21, NULL, &e));
  uint8_t *buf = NULL;
  size_t len = 0;
  CHECK_ERR(vl_onnx_pack(e, &buf, &len), VL_EINVAL, "the graph has no outputs");
  CHECK(vl_onnx_ir_version(21) == 10 && vl_onnx_ir_version(19) == 9 && vl_onnx_ir_version(17) == 8);
  vl_onnx_free(e);
}

static void test_file(vl_onnx *m, const char *root) {
  char p[512];
  snprintf(p, sizeof p, "%s/m.onnx", root);
  CHECK_OK(vl_onnx_save(m, p));
  uint8_t *buf = NULL;
  size_t len = 0, flen = 0;
  CHECK_OK(vl_onnx_pack(m, &buf, &len));
  unsigned char *file = vl_test_slurp(p, &flen);
  CHECK(buf && flen == len && memcmp(file, buf, len) == 0, "the saved file differs from the packed bytes");
  free(file);
  free(buf);
  /* saved again over itself (the replace path), still the same bytes */
  CHECK_OK(vl_onnx_save(m, p));
  file = vl_test_slurp(p, &flen);
  CHECK(flen == len);
  free(file);
  snprintf(p, sizeof p, "%s/missing/m.onnx", root);
  CHECK_ERR(vl_onnx_save(m, p), VL_EIO, "missing/m.onnx");
}

int main(void) {
  if (!vl_test_init()) return 1;
  vl_onnx *m = build();
  test_round_trip(m);
  test_errors(m);
  char root[] = "/tmp/vl_onnx_XXXXXX";
  if (!mkdtemp(root)) return 2;
  test_file(m, root);
  vl_onnx_free(m);
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
  if (system(cmd) != 0) return 2;
  return vl_test_finish();
}
