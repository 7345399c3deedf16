/* ext/onnx/onnx.c: the ONNX model writer (ext/onnx/onnx.h).
 *
 * The model is kept as the protobuf-c structures of the compiled ONNX schema (onnx.pb-c.h,
 * generated from third_party/onnx/onnx.proto at build time), each piece malloc'd on its own, so
 * that protobuf-c packs it directly and protobuf_c_message_free_unpacked (which walks a message
 * and frees every field with the default allocator, the layout this file builds) releases it.
 * Every add_* function builds its piece completely, checks it, reserves the room it needs and
 * only then links it in, so a failed call leaves the model as it was. */
#define _POSIX_C_SOURCE 200809L
#include "ext/onnx/onnx.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <protobuf-c/protobuf-c.h>

#include "onnx.pb-c.h"
#include "runtime/io/file_io.h"
#include "runtime/io/replace.h"
#include "runtime/ops/ops.h"

/* Protobuf parsers (the C++ and Python ones ONNX uses) refuse messages of 2 GiB or more. */
#define VL_ONNX_MAX_BYTES ((size_t)INT32_MAX)

/* ---- a set of names (open addressing, FNV-1a), for single assignment ---- */
typedef struct name_set {
  char **slot; /* NULL = empty; owned copies */
  size_t cap, n;
} name_set;

static uint64_t fnv1a(const char *s) {
  uint64_t h = 1469598103934665603ull;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return h;
}

static bool set_has(const name_set *set, const char *s) {
  if (set->cap == 0) return false;
  for (size_t i = fnv1a(s) & (set->cap - 1);; i = (i + 1) & (set->cap - 1)) {
    if (!set->slot[i]) return false;
    if (strcmp(set->slot[i], s) == 0) return true;
  }
}

static void set_put_raw(name_set *set, char *s) {
  size_t i = fnv1a(s) & (set->cap - 1);
  while (set->slot[i]) i = (i + 1) & (set->cap - 1);
  set->slot[i] = s;
  set->n++;
}

/* Room for `more` insertions at a load of at most 1/2, so that set_put cannot fail after it. */
static bool set_reserve(name_set *set, size_t more) {
  size_t need = set->n + more, cap = set->cap ? set->cap : 64;
  while (cap < 2 * need) cap *= 2;
  if (cap == set->cap) return true;
  char **slot = calloc(cap, sizeof *slot);
  if (!slot) return false;
  name_set bigger = {slot, cap, 0};
  for (size_t i = 0; i < set->cap; i++)
    if (set->slot[i]) set_put_raw(&bigger, set->slot[i]);
  free(set->slot);
  *set = bigger;
  return true;
}

/* After set_reserve: only the copy of the string can fail (false). */
static bool set_put(name_set *set, const char *s) {
  char *c = strdup(s);
  if (!c) return false;
  set_put_raw(set, c);
  return true;
}

static void set_free(name_set *set) {
  for (size_t i = 0; i < set->cap; i++) free(set->slot[i]);
  free(set->slot);
  memset(set, 0, sizeof *set);
}

/* ---- the model ---- */
struct vl_onnx {
  Onnx__ModelProto *model; /* model->graph is the graph */
  int opset;
  name_set values;  /* inputs, initializers and node outputs */
  name_set outputs; /* graph outputs */
  name_set meta;    /* metadata keys */
  size_t cap_node, cap_init, cap_input, cap_output, cap_meta;
};

/* Makes room for one more pointer in a repeated field of n elements (capacity *cap). */
static bool reserve_ptr(void ***arr, size_t n, size_t *cap) {
  if (n < *cap) return true;
  size_t c = *cap ? 2 * *cap : 16;
  void **p = realloc(*arr, c * sizeof *p);
  if (!p) return false;
  *arr = p;
  *cap = c;
  return true;
}

static void free_msg(void *msg) {
  if (msg) protobuf_c_message_free_unpacked((ProtobufCMessage *)msg, NULL);
}

static vl_status oom(const char *what) { return vl_fail(VL_EOOM, "onnx: out of host memory (%s)", what); }

/* A name as ONNX wants it: non-empty UTF-8 (protobuf strings must be UTF-8). */
static vl_status check_name(const char *what, const char *name) {
  if (!name || !name[0]) return vl_fail(VL_EINVAL, "onnx: %s has an empty name", what);
  size_t len = strlen(name);
  if (vl_utf8_valid_prefix((const unsigned char *)name, len) != len) {
    char shown[160];
    return vl_fail(VL_EINVAL, "onnx: %s name \"%s\" is not valid UTF-8", what,
                   vl_escape_bytes(name, len, shown, sizeof shown));
  }
  return VL_OK;
}

static vl_status check_text(const char *what, const char *s) {
  if (!s) return vl_fail(VL_EINVAL, "onnx: %s is NULL", what);
  size_t len = strlen(s);
  if (vl_utf8_valid_prefix((const unsigned char *)s, len) != len)
    return vl_fail(VL_EINVAL, "onnx: %s is not valid UTF-8", what);
  return VL_OK;
}

int vl_onnx_elem_type(vl_dtype dt) {
  switch (dt) {
  case VL_F32: return ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT;
  case VL_F16: return ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16;
  case VL_BF16: return ONNX__TENSOR_PROTO__DATA_TYPE__BFLOAT16;
  case VL_F64: return ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE;
  case VL_I32: return ONNX__TENSOR_PROTO__DATA_TYPE__INT32;
  case VL_I64: return ONNX__TENSOR_PROTO__DATA_TYPE__INT64;
  case VL_U8: return ONNX__TENSOR_PROTO__DATA_TYPE__UINT8;
  case VL_BOOL: return ONNX__TENSOR_PROTO__DATA_TYPE__BOOL;
  default: return 0;
  }
}

/* ONNX's versioning table (docs/Versioning.md): the IR version each opset was released with. */
int64_t vl_onnx_ir_version(int opset) {
  if (opset <= 18) return 8;
  if (opset <= 20) return 9;
  return 10;
}

vl_status vl_onnx_new(const char *name, int opset, const char *producer_version, vl_onnx **out) {
  if (!out) return vl_fail(VL_EINVAL, "onnx: no output pointer");
  VL_TRY(check_name("graph", name));
  if (producer_version) VL_TRY(check_text("producer version", producer_version));
  if (opset < VL_ONNX_OPSET_MIN || opset > VL_ONNX_OPSET_MAX)
    return vl_fail(VL_EINVAL, "onnx: opset %d is not supported (%d to %d)", opset, VL_ONNX_OPSET_MIN,
                   VL_ONNX_OPSET_MAX);
  vl_onnx *m = calloc(1, sizeof *m);
  Onnx__ModelProto *model = malloc(sizeof *model);
  Onnx__GraphProto *graph = malloc(sizeof *graph);
  Onnx__OperatorSetIdProto *ops = malloc(sizeof *ops);
  Onnx__OperatorSetIdProto **opv = malloc(sizeof *opv);
  char *gname = strdup(name), *prod = strdup("v100lua");
  char *pver = producer_version ? strdup(producer_version) : NULL;
  char *dom = strdup(""); /* the default domain "ai.onnx" is spelled "" */
  if (!m || !model || !graph || !ops || !opv || !gname || !prod || !dom || (producer_version && !pver)) {
    free(m), free(model), free(graph), free(ops), free(opv), free(gname), free(prod), free(pver), free(dom);
    return oom("a new model");
  }
  onnx__model_proto__init(model);
  onnx__graph_proto__init(graph);
  onnx__operator_set_id_proto__init(ops);
  ops->domain = dom;
  ops->has_version = 1;
  ops->version = opset;
  opv[0] = ops;
  graph->name = gname;
  model->has_ir_version = 1;
  model->ir_version = vl_onnx_ir_version(opset);
  model->n_opset_import = 1;
  model->opset_import = opv;
  model->producer_name = prod;
  model->producer_version = pver;
  model->graph = graph;
  m->model = model;
  m->opset = opset;
  *out = m;
  return VL_OK;
}

void vl_onnx_free(vl_onnx *m) {
  if (!m) return;
  free_msg(m->model);
  set_free(&m->values);
  set_free(&m->outputs);
  set_free(&m->meta);
  free(m);
}

/* ---- value infos (graph inputs and outputs) ---- */

static vl_status check_dims(const char *what, const char *name, vl_dtype dt, int ndim, const vl_onnx_dim *dims) {
  if (vl_onnx_elem_type(dt) == 0) return vl_fail(VL_EINVAL, "onnx: %s \"%s\": bad dtype %d", what, name, (int)dt);
  if (ndim < 0 || ndim > VL_MAX_DIMS || (ndim > 0 && !dims))
    return vl_fail(VL_EINVAL, "onnx: %s \"%s\": bad rank %d", what, name, ndim);
  for (int d = 0; d < ndim; d++) {
    if (dims[d].param) {
      if (!dims[d].param[0] || check_text("dim name", dims[d].param) != VL_OK)
        return vl_fail(VL_EINVAL, "onnx: %s \"%s\": dim %d has an empty or non-UTF-8 symbolic name", what, name, d);
    } else if (dims[d].size < 0) {
      return vl_fail(VL_EINVAL, "onnx: %s \"%s\": dim %d has size %lld", what, name, d, (long long)dims[d].size);
    }
  }
  return VL_OK;
}

static Onnx__ValueInfoProto *make_value_info(const char *name, vl_dtype dt, int ndim, const vl_onnx_dim *dims) {
  Onnx__ValueInfoProto *vi = malloc(sizeof *vi);
  Onnx__TypeProto *tp = malloc(sizeof *tp);
  Onnx__TypeProto__Tensor *tt = malloc(sizeof *tt);
  Onnx__TensorShapeProto *sh = malloc(sizeof *sh);
  if (vi) onnx__value_info_proto__init(vi);
  if (tp) onnx__type_proto__init(tp);
  if (tt) onnx__type_proto__tensor__init(tt);
  if (sh) onnx__tensor_shape_proto__init(sh);
  if (!vi || !tp || !tt || !sh) {
    free(vi), free(tp), free(tt), free(sh);
    return NULL;
  }
  vi->type = tp;
  tp->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
  tp->tensor_type = tt;
  tt->has_elem_type = 1;
  tt->elem_type = vl_onnx_elem_type(dt);
  tt->shape = sh;
  bool ok = (vi->name = strdup(name)) != NULL;
  if (ok && ndim > 0) {
    ok = (sh->dim = calloc((size_t)ndim, sizeof *sh->dim)) != NULL;
    for (int d = 0; ok && d < ndim; d++) {
      Onnx__TensorShapeProto__Dimension *dim = malloc(sizeof *dim);
      if (!dim) { ok = false; break; }
      onnx__tensor_shape_proto__dimension__init(dim);
      sh->dim[d] = dim;
      sh->n_dim = (size_t)d + 1;
      if (dims[d].param) {
        dim->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
        ok = (dim->dim_param = strdup(dims[d].param)) != NULL;
      } else {
        dim->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
        dim->dim_value = dims[d].size;
      }
    }
  }
  if (!ok) {
    free_msg(vi);
    return NULL;
  }
  return vi;
}

vl_status vl_onnx_add_input(vl_onnx *m, const char *name, vl_dtype dt, int ndim, const vl_onnx_dim *dims) {
  VL_TRY(check_name("input", name));
  if (set_has(&m->values, name)) return vl_fail(VL_EINVAL, "onnx: input \"%s\": the name is already a value", name);
  VL_TRY(check_dims("input", name, dt, ndim, dims));
  Onnx__GraphProto *g = m->model->graph;
  Onnx__ValueInfoProto *vi = make_value_info(name, dt, ndim, dims);
  if (!vi || !reserve_ptr((void ***)&g->input, g->n_input, &m->cap_input) || !set_reserve(&m->values, 1) ||
      !set_put(&m->values, name)) {
    free_msg(vi);
    return oom("an input");
  }
  g->input[g->n_input++] = vi;
  return VL_OK;
}

vl_status vl_onnx_add_output(vl_onnx *m, const char *name, vl_dtype dt, int ndim, const vl_onnx_dim *dims) {
  VL_TRY(check_name("output", name));
  if (!set_has(&m->values, name))
    return vl_fail(VL_EINVAL, "onnx: output \"%s\" is not a value of the graph (no input, initializer or node makes it)",
                   name);
  if (set_has(&m->outputs, name)) return vl_fail(VL_EINVAL, "onnx: output \"%s\" is declared twice", name);
  VL_TRY(check_dims("output", name, dt, ndim, dims));
  Onnx__GraphProto *g = m->model->graph;
  Onnx__ValueInfoProto *vi = make_value_info(name, dt, ndim, dims);
  if (!vi || !reserve_ptr((void ***)&g->output, g->n_output, &m->cap_output) || !set_reserve(&m->outputs, 1) ||
      !set_put(&m->outputs, name)) {
    free_msg(vi);
    return oom("an output");
  }
  g->output[g->n_output++] = vi;
  return VL_OK;
}

/* ---- initializers ---- */

vl_status vl_onnx_add_initializer(vl_onnx *m, const char *name, vl_tensor *t, vl_dtype as) {
  VL_TRY(check_name("initializer", name));
  if (!t) return vl_fail(VL_EINVAL, "onnx: initializer \"%s\" has no tensor", name);
  if (set_has(&m->values, name))
    return vl_fail(VL_EINVAL, "onnx: initializer \"%s\": the name is already a value", name);
  vl_dtype dt = as == VL_NDTYPES ? t->dtype : as;
  if (vl_onnx_elem_type(dt) == 0) return vl_fail(VL_EINVAL, "onnx: initializer \"%s\": bad dtype %d", name, (int)dt);
  /* The bytes: t converted to dt on the host (a new reference to t when nothing changes), then
   * read out in logical order whatever its strides (channels-last weights come out NCHW). */
  vl_tensor *h = NULL;
  vl_status s = vl_to(t, dt, vl_cpu_device(), &h);
  if (s != VL_OK) return vl_fail_prefix(s, "onnx: initializer \"%s\": ", name);
  size_t nbytes = (size_t)vl_tensor_numel(h) * vl_dtype_size(dt);
  Onnx__TensorProto *tp = malloc(sizeof *tp);
  uint8_t *bytes = malloc(nbytes ? nbytes : 1);
  int64_t *dims = malloc(sizeof *dims * (size_t)(h->ndim ? h->ndim : 1));
  char *nm = strdup(name);
  if (!tp || !bytes || !dims || !nm) {
    vl_tensor_release(h);
    free(tp), free(bytes), free(dims), free(nm);
    return oom("an initializer's bytes");
  }
  if (nbytes) s = vl_read_host("onnx", h, bytes);
  vl_tensor_release(h);
  if (s != VL_OK) {
    free(tp), free(bytes), free(dims), free(nm);
    return vl_fail_prefix(s, "onnx: initializer \"%s\": ", name);
  }
  onnx__tensor_proto__init(tp);
  for (int d = 0; d < t->ndim; d++) dims[d] = t->size[d];
  tp->n_dims = (size_t)t->ndim;
  tp->dims = dims;
  tp->has_data_type = 1;
  tp->data_type = vl_onnx_elem_type(dt);
  tp->name = nm;
  /* raw_data is little-endian element bytes; ONNX's bool is one byte 0/1, as ours. An empty
   * tensor still gets a (zero-length) raw_data, so that it reads as "stored, empty". */
  tp->has_raw_data = 1;
  tp->raw_data.len = nbytes;
  tp->raw_data.data = bytes;
  Onnx__GraphProto *g = m->model->graph;
  if (!reserve_ptr((void ***)&g->initializer, g->n_initializer, &m->cap_init) || !set_reserve(&m->values, 1) ||
      !set_put(&m->values, name)) {
    free_msg(tp);
    return oom("an initializer");
  }
  g->initializer[g->n_initializer++] = tp;
  return VL_OK;
}

/* ---- nodes ---- */

static bool is_identifier(const char *s) {
  if (!s || !((*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z') || *s == '_')) return false;
  for (; *s; s++)
    if (!((*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') || *s == '_'))
      return false;
  return true;
}

static Onnx__AttributeProto *make_attr(const vl_onnx_attr *a) {
  Onnx__AttributeProto *ap = malloc(sizeof *ap);
  if (!ap) return NULL;
  onnx__attribute_proto__init(ap);
  bool ok = (ap->name = strdup(a->name)) != NULL;
  ap->has_type = 1;
  switch (a->kind) {
  case VL_ONNX_ATTR_INT:
    ap->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT;
    ap->has_i = 1;
    ap->i = a->i;
    break;
  case VL_ONNX_ATTR_FLOAT:
    ap->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT;
    ap->has_f = 1;
    ap->f = a->f;
    break;
  case VL_ONNX_ATTR_STRING:
    ap->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING;
    ap->has_s = 1;
    ap->s.len = strlen(a->s);
    ok = ok && (ap->s.data = (uint8_t *)strdup(a->s)) != NULL;
    break;
  case VL_ONNX_ATTR_INTS:
    ap->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS;
    if (a->n > 0) {
      ok = ok && (ap->ints = malloc(sizeof *ap->ints * (size_t)a->n)) != NULL;
      if (ok) memcpy(ap->ints, a->ints, sizeof *ap->ints * (size_t)a->n), ap->n_ints = (size_t)a->n;
    }
    break;
  case VL_ONNX_ATTR_FLOATS:
    ap->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOATS;
    if (a->n > 0) {
      ok = ok && (ap->floats = malloc(sizeof *ap->floats * (size_t)a->n)) != NULL;
      if (ok) memcpy(ap->floats, a->floats, sizeof *ap->floats * (size_t)a->n), ap->n_floats = (size_t)a->n;
    }
    break;
  }
  if (!ok) {
    free_msg(ap);
    return NULL;
  }
  return ap;
}

/* "Conv \"layer1.0.conv1\"" or "Conv" for messages. */
static const char *node_desc(char *buf, size_t cap, const char *op, const char *name) {
  if (name && name[0]) snprintf(buf, cap, "%s node \"%s\"", op, name);
  else snprintf(buf, cap, "%s node", op);
  return buf;
}

static vl_status check_node(vl_onnx *m, const char *op, const char *name, int nin, const char *const *inputs,
                            int nout, const char *const *outputs, int nattr, const vl_onnx_attr *attrs) {
  if (!is_identifier(op)) return vl_fail(VL_EINVAL, "onnx: node op type \"%s\" is not an identifier", op ? op : "");
  char nd[256];
  node_desc(nd, sizeof nd, op, name);
  if (name && name[0]) VL_TRY(check_name(nd, name));
  if (nin < 0 || nout < 1 || nattr < 0 || (nin && !inputs) || !outputs || (nattr && !attrs))
    return vl_fail(VL_EINVAL, "onnx: %s: bad counts (%d inputs, %d outputs, %d attributes)", nd, nin, nout, nattr);
  for (int i = 0; i < nin; i++) {
    if (!inputs[i]) return vl_fail(VL_EINVAL, "onnx: %s: input %d is NULL", nd, i + 1);
    if (inputs[i][0] && !set_has(&m->values, inputs[i]))
      return vl_fail(VL_EINVAL, "onnx: %s: input %d \"%s\" is not a value defined before it", nd, i + 1, inputs[i]);
  }
  for (int i = 0; i < nout; i++) {
    VL_TRY(check_name(nd, outputs[i]));
    if (set_has(&m->values, outputs[i]))
      return vl_fail(VL_EINVAL, "onnx: %s: output \"%s\" is already a value (names are assigned once)", nd,
                     outputs[i]);
    for (int j = 0; j < i; j++)
      if (strcmp(outputs[i], outputs[j]) == 0)
        return vl_fail(VL_EINVAL, "onnx: %s: output \"%s\" is named twice", nd, outputs[i]);
  }
  for (int i = 0; i < nattr; i++) {
    const vl_onnx_attr *a = &attrs[i];
    VL_TRY(check_name(nd, a->name));
    for (int j = 0; j < i; j++)
      if (strcmp(a->name, attrs[j].name) == 0)
        return vl_fail(VL_EINVAL, "onnx: %s: attribute \"%s\" is given twice", nd, a->name);
    switch (a->kind) {
    case VL_ONNX_ATTR_INT:
    case VL_ONNX_ATTR_FLOAT: break;
    case VL_ONNX_ATTR_STRING:
      if (check_text("attribute string", a->s) != VL_OK)
        return vl_fail(VL_EINVAL, "onnx: %s: attribute \"%s\": the string is NULL or not UTF-8", nd, a->name);
      break;
    case VL_ONNX_ATTR_INTS:
    case VL_ONNX_ATTR_FLOATS:
      if (a->n < 0 || (a->n > 0 && !(a->kind == VL_ONNX_ATTR_INTS ? (const void *)a->ints : (const void *)a->floats)))
        return vl_fail(VL_EINVAL, "onnx: %s: attribute \"%s\": bad list of %d values", nd, a->name, a->n);
      break;
    default: return vl_fail(VL_EINVAL, "onnx: %s: attribute \"%s\" has an unknown kind %d", nd, a->name, (int)a->kind);
    }
  }
  return VL_OK;
}

static char **copy_names(int n, const char *const *names) {
  char **out = calloc((size_t)(n ? n : 1), sizeof *out);
  if (!out) return NULL;
  for (int i = 0; i < n; i++) {
    if (!(out[i] = strdup(names[i]))) {
      for (int j = 0; j < i; j++) free(out[j]);
      free(out);
      return NULL;
    }
  }
  return out;
}

vl_status vl_onnx_add_node(vl_onnx *m, const char *op_type, const char *name, int nin, const char *const *inputs,
                           int nout, const char *const *outputs, int nattr, const vl_onnx_attr *attrs) {
  VL_TRY(check_node(m, op_type, name, nin, inputs, nout, outputs, nattr, attrs));
  Onnx__NodeProto *np = malloc(sizeof *np);
  if (!np) return oom("a node");
  onnx__node_proto__init(np);
  bool ok = (np->op_type = strdup(op_type)) != NULL;
  if (ok && name && name[0]) ok = (np->name = strdup(name)) != NULL;
  if (ok && nin > 0) ok = (np->input = copy_names(nin, inputs)) != NULL, np->n_input = ok ? (size_t)nin : 0;
  if (ok) ok = (np->output = copy_names(nout, outputs)) != NULL, np->n_output = ok ? (size_t)nout : 0;
  if (ok && nattr > 0) {
    ok = (np->attribute = calloc((size_t)nattr, sizeof *np->attribute)) != NULL;
    for (int i = 0; ok && i < nattr; i++) {
      ok = (np->attribute[i] = make_attr(&attrs[i])) != NULL;
      if (ok) np->n_attribute = (size_t)i + 1;
    }
  }
  /* The set's copies are made before anything is linked in, so that inserting them cannot fail. */
  char **keys = ok ? copy_names(nout, outputs) : NULL;
  Onnx__GraphProto *g = m->model->graph;
  ok = ok && keys && reserve_ptr((void ***)&g->node, g->n_node, &m->cap_node) &&
       set_reserve(&m->values, (size_t)nout);
  if (!ok) {
    for (int i = 0; keys && i < nout; i++) free(keys[i]);
    free(keys);
    free_msg(np);
    return oom("a node");
  }
  for (int i = 0; i < nout; i++) set_put_raw(&m->values, keys[i]);
  free(keys);
  g->node[g->n_node++] = np;
  return VL_OK;
}

/* ---- metadata ---- */

vl_status vl_onnx_add_metadata(vl_onnx *m, const char *key, const char *value) {
  VL_TRY(check_name("metadata key", key));
  VL_TRY(check_text("metadata value", value));
  if (set_has(&m->meta, key)) return vl_fail(VL_EINVAL, "onnx: metadata key \"%s\" is given twice", key);
  Onnx__ModelProto *md = m->model;
  Onnx__StringStringEntryProto *e = malloc(sizeof *e);
  if (e) {
    onnx__string_string_entry_proto__init(e);
    e->key = strdup(key);
    e->value = strdup(value);
  }
  if (!e || !e->key || !e->value ||
      !reserve_ptr((void ***)&md->metadata_props, md->n_metadata_props, &m->cap_meta) ||
      !set_reserve(&m->meta, 1) || !set_put(&m->meta, key)) {
    free_msg(e);
    return oom("metadata");
  }
  md->metadata_props[md->n_metadata_props++] = e;
  return VL_OK;
}

vl_status vl_onnx_set_doc(vl_onnx *m, const char *doc) {
  VL_TRY(check_text("doc string", doc));
  char *d = strdup(doc);
  if (!d) return oom("the doc string");
  free(m->model->doc_string);
  m->model->doc_string = d;
  return VL_OK;
}

/* ---- serialising ---- */

static vl_status check_complete(vl_onnx *m, size_t *size) {
  if (m->model->graph->n_output == 0) return vl_fail(VL_EINVAL, "onnx: the graph has no outputs");
  size_t n = protobuf_c_message_get_packed_size(&m->model->base);
  if (n > VL_ONNX_MAX_BYTES)
    return vl_fail(VL_EINVAL,
                   "onnx: the model is %zu bytes, over protobuf's 2 GiB message limit (export 16-bit weights, "
                   "or a smaller model)",
                   n);
  *size = n;
  return VL_OK;
}

vl_status vl_onnx_pack(vl_onnx *m, uint8_t **out, size_t *len) {
  size_t n = 0;
  VL_TRY(check_complete(m, &n));
  uint8_t *buf = malloc(n ? n : 1);
  if (!buf) return oom("the packed model");
  size_t w = protobuf_c_message_pack(&m->model->base, buf);
  if (w != n) {
    free(buf);
    return vl_fail(VL_EINTERNAL, "onnx: packed %zu bytes where %zu were announced", w, n);
  }
  *out = buf;
  *len = n;
  return VL_OK;
}

/* protobuf-c's streaming sink: the packed model goes to the file in 1 MiB writes instead of
 * through a second in-memory copy of every weight. */
typedef struct fd_sink {
  ProtobufCBuffer base;
  int fd;
  int err; /* errno of the first failed write */
  size_t used, total;
  uint8_t buf[1 << 20];
} fd_sink;

static void sink_flush(fd_sink *s) {
  size_t off = 0;
  while (!s->err && off < s->used) {
    ssize_t w = write(s->fd, s->buf + off, s->used - off);
    if (w < 0) {
      if (errno == EINTR) continue;
      s->err = errno;
    } else {
      off += (size_t)w;
    }
  }
  s->used = 0;
}

static void sink_append(ProtobufCBuffer *b, size_t len, const uint8_t *data) {
  fd_sink *s = (fd_sink *)b;
  s->total += len;
  while (len > 0 && !s->err) {
    size_t room = sizeof s->buf - s->used, k = len < room ? len : room;
    memcpy(s->buf + s->used, data, k);
    s->used += k, data += k, len -= k;
    if (s->used == sizeof s->buf) sink_flush(s);
  }
}

vl_status vl_onnx_save(vl_onnx *m, const char *path) {
  if (!path || !path[0]) return vl_fail(VL_EINVAL, "onnx: empty path");
  size_t n = 0;
  VL_TRY(check_complete(m, &n));
  fd_sink *sink = malloc(sizeof *sink);
  if (!sink) return oom("the write buffer");
  vl_replace rp;
  vl_status s = vl_replace_begin(&rp, "onnx.export", path);
  if (s != VL_OK) {
    free(sink);
    return s;
  }
  sink->base.append = sink_append;
  sink->fd = rp.fd;
  sink->err = 0;
  sink->used = sink->total = 0;
  protobuf_c_message_pack_to_buffer(&m->model->base, &sink->base);
  sink_flush(sink);
  if (sink->err) s = vl_fail(VL_EIO, "onnx.export: %s: write failed: %s", path, strerror(sink->err));
  else if (sink->total != n)
    s = vl_fail(VL_EINTERNAL, "onnx.export: %s: packed %zu bytes where %zu were announced", path, sink->total, n);
  else s = vl_replace_commit(&rp);
  vl_replace_abort(&rp); /* removes the temporary file unless committed */
  free(sink);
  return s;
}
