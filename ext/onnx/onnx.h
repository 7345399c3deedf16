/* ext/onnx/onnx.h: an ONNX model writer (the graph, its nodes, attributes and initializers),
 * serialised by protobuf-c (Debian's libprotobuf-c) from the ONNX schema compiled by protoc-c at
 * build time (third_party/onnx/onnx.proto, see third_party/onnx/README.md).
 *
 * The writer knows nothing about layers: ext/onnx/lua/v100/export/onnx.lua walks a model and
 * says which inputs, initializers, nodes and outputs make its graph; this file checks that what
 * it is told forms a valid graph and writes it. What is checked, once, as each piece arrives (so that a
 * broken exporter is named at the node that breaks, not by a parser later):
 *   - names are non-empty, valid UTF-8 and assigned once (ONNX graphs are single assignment):
 *     a graph input, an initializer or a node output may not reuse a name;
 *   - a node's inputs are names already assigned (or "" for an omitted optional input), so the
 *     node list is in topological order by construction; its op type is a C identifier;
 *   - attributes have distinct non-empty names and a kind of the list below;
 *   - dims of inputs and outputs are sizes >= 0 or symbolic names ("batch", "sequence");
 *   - dtypes are those ONNX has (every vl_dtype has one);
 *   - a graph output names a value that exists, once; a model has at least one output;
 *   - the serialised size stays below protobuf's 2 GiB message limit (a larger model would need
 *     ONNX's external data files, which this writer does not make).
 * Initializers are copied when added (any device, layout or strides; converted to the dtype
 * asked), so the tensors may change or go away afterwards. The opset is the default domain's
 * (17 to 21); the IR version is the one that opset came with.
 *
 * Saving is atomic and durable (runtime/io/replace.h): a failed save leaves an existing file
 * as it was. Errors are VL_EINVAL for a malformed graph and VL_EIO for the file, naming the
 * node or value and the path; the writer itself is unchanged by a failed call.
 * Internal to the extension ext/onnx; bound in ext/onnx/l_onnx.c. */
#ifndef VL_ONNX_H
#define VL_ONNX_H

#include <stdint.h>

#include "runtime/core/status.h"
#include "runtime/core/tensor.h"

#define VL_ONNX_OPSET_MIN 17
#define VL_ONNX_OPSET_MAX 21

typedef struct vl_onnx vl_onnx; /* a model being built */

typedef enum vl_onnx_attr_kind {
  VL_ONNX_ATTR_INT,    /* i */
  VL_ONNX_ATTR_FLOAT,  /* f */
  VL_ONNX_ATTR_STRING, /* s */
  VL_ONNX_ATTR_INTS,   /* n values at ints */
  VL_ONNX_ATTR_FLOATS, /* n values at floats */
} vl_onnx_attr_kind;

typedef struct vl_onnx_attr {
  const char *name;
  vl_onnx_attr_kind kind;
  int64_t i;
  float f;
  const char *s;
  int n;
  const int64_t *ints;
  const float *floats;
} vl_onnx_attr;

/* One dim of a graph input or output: a fixed size (param NULL, size >= 0) or a symbolic one
 * (param, e.g. "batch": the same name means the same size everywhere in the graph). */
typedef struct vl_onnx_dim {
  int64_t size;
  const char *param;
} vl_onnx_dim;

/* A new empty model: graph `name`, default-domain opset `opset` (VL_ONNX_OPSET_MIN..MAX),
 * producer "v100lua" of version `producer_version` (may be NULL). */
vl_status vl_onnx_new(const char *name, int opset, const char *producer_version, vl_onnx **out);
void vl_onnx_free(vl_onnx *m); /* NULL is fine */

/* A graph input of dtype dt and ndim dims. */
vl_status vl_onnx_add_input(vl_onnx *m, const char *name, vl_dtype dt, int ndim, const vl_onnx_dim *dims);
/* A graph output: `name` must already be a value (an input, initializer or node output). */
vl_status vl_onnx_add_output(vl_onnx *m, const char *name, vl_dtype dt, int ndim, const vl_onnx_dim *dims);
/* A constant tensor (a weight, a shape vector): t's values in logical (row-major) order, as
 * dtype `as` (VL_NDTYPES: t's own). */
vl_status vl_onnx_add_initializer(vl_onnx *m, const char *name, vl_tensor *t, vl_dtype as);
/* A node of the default domain. `name` may be NULL or "" (then unnamed). */
vl_status vl_onnx_add_node(vl_onnx *m, const char *op_type, const char *name, int nin, const char *const *inputs,
                           int nout, const char *const *outputs, int nattr, const vl_onnx_attr *attrs);
/* A metadata_props entry of the model (key distinct, both UTF-8). */
vl_status vl_onnx_add_metadata(vl_onnx *m, const char *key, const char *value);
/* The model's doc_string (replaces an earlier one). */
vl_status vl_onnx_set_doc(vl_onnx *m, const char *doc);

/* Serialises the model to `path` (atomically). The model stays valid and may be saved again. */
vl_status vl_onnx_save(vl_onnx *m, const char *path);
/* The serialised bytes in a new malloc'd buffer (*out, *len), for tests. */
vl_status vl_onnx_pack(vl_onnx *m, uint8_t **out, size_t *len);

/* ONNX's TensorProto.DataType of a dtype (FLOAT = 1, ... BFLOAT16 = 16); 0 for none. */
int vl_onnx_elem_type(vl_dtype dt);
/* The IR version written for an opset. */
int64_t vl_onnx_ir_version(int opset);

#endif
