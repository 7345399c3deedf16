/* runtime/io/tfevents.h: TensorBoard event files (scalars): a writer, a reader, and the pieces
 * they are made of (CRC32C, TFRecord framing, a small protobuf writer).
 *
 * An event file is a sequence of TFRecords:
 *   u64 length (little-endian), u32 masked CRC32C of those 8 bytes, length bytes of data,
 *   u32 masked CRC32C of the data;   mask(c) = ((c >> 15) | (c << 17)) + 0xa282ead8
 * whose data are serialized tensorflow.Event protobufs. The first Event carries
 * file_version "brain.Event:2"; each later one a wall time, a step and a Summary of scalar
 * Values (the fields used, from tensorflow/core/util/event.proto and framework/summary.proto):
 *   Event   { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5; }
 *   Summary { repeated Value value = 1; }
 *   Value   { string tag = 1; float simple_value = 2; }
 * Every field is written, zeros included (legal protobuf; proto3 parsers read it the same).
 * CRC32C comes from Intel ISA-L (Debian libisal-dev): crc32_iscsi is CRC32C without the final
 * inversion, so vl_crc32c inverts around it. Internal to the runtime. */
#ifndef VL_TFEVENTS_H
#define VL_TFEVENTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/core/status.h"

#define VL_TFEVENTS_VERSION "brain.Event:2"

/* CRC32C (Castagnoli; check value of "123456789" is 0xE3069283) and TFRecord's mask of it. */
uint32_t vl_crc32c(const void *buf, size_t n);
uint32_t vl_crc32c_mask(uint32_t crc);

/* ---- a growing byte buffer and protobuf encoding into it ---- */
typedef struct vl_pbuf {
  unsigned char *p;
  size_t n, cap;
  int oom; /* an allocation failed: later appends do nothing, vl_pbuf_status reports it */
} vl_pbuf;

void vl_pb_varint(vl_pbuf *b, uint64_t v);
void vl_pb_key(vl_pbuf *b, int field, int wire_type); /* wire types: 0 varint, 1 fixed64, 2 bytes, 5 fixed32 */
void vl_pb_double(vl_pbuf *b, int field, double v);
void vl_pb_float(vl_pbuf *b, int field, float v);
void vl_pb_int64(vl_pbuf *b, int field, int64_t v); /* two's complement varint (10 bytes when < 0) */
void vl_pb_bytes(vl_pbuf *b, int field, const void *data, size_t n);
vl_status vl_pbuf_status(const vl_pbuf *b, const char *what); /* VL_EOOM "<what>: out of memory" */
void vl_pbuf_free(vl_pbuf *b);

/* Appends one serialized Event: a scalar one, or the file_version one. */
void vl_tfevents_encode_scalar(vl_pbuf *b, double wall_time, int64_t step, const char *tag, size_t tag_len,
                               float value);
void vl_tfevents_encode_version(vl_pbuf *b, double wall_time, const char *version);
/* Appends data framed as one TFRecord. */
void vl_tfrecord_frame(vl_pbuf *b, const void *data, size_t n);

/* Seconds since the Unix epoch (CLOCK_REALTIME), the wall_time TensorBoard expects. */
double vl_unix_time(void);

/* ---- the writer ---- */
typedef struct vl_tfevents vl_tfevents;

/* Creates dir (runtime/io/fsutil.h: vl_fs_mkdir) and a new file
 *   <dir>/events.out.tfevents.<unix secs>.<host>.<pid>.v100lua
 * (".<pid>.<k>.v100lua" when that name is taken, so two writers never share a file), writes
 * the file_version record and flushes it, so TensorBoard sees the run at once. */
vl_status vl_tfevents_open(const char *dir, vl_tfevents **out);
const char *vl_tfevents_path(const vl_tfevents *w);
/* Appends one scalar Event (buffered until flush/close). The tag must be non-empty valid UTF-8
 * without NUL bytes (protobuf strings are UTF-8; TensorBoard shows tags as text): see
 * vl_tfevents_check_tag. A double beyond the float range becomes +-inf rather than an undefined
 * conversion. After a failed write or flush (a full disk) the file is cut back to the records
 * of the last good flush (ftruncate; again at close, after stdio let go of its buffer) and the
 * writer refuses further records: the file would hold a torn record in the middle. */
/* VL_EINVAL when tag cannot be a scalar's tag (empty, a NUL byte, not UTF-8); what the writer
 * checks, for callers that must know before they write anything (the Logger's two files). */
vl_status vl_tfevents_check_tag(const char *tag, size_t tag_len);
vl_status vl_tfevents_scalar(vl_tfevents *w, const char *tag, size_t tag_len, double value, int64_t step,
                             double wall_time);
vl_status vl_tfevents_flush(vl_tfevents *w);
/* Flushes, closes and frees w (NULL is fine); the status is the flush/close's. */
vl_status vl_tfevents_close(vl_tfevents *w);

/* ---- the reader ---- */
typedef struct vl_tfevent {
  double wall_time;
  int64_t step;
  char *tag; /* NUL-terminated, owned */
  size_t tag_len;
  float value;
} vl_tfevent;

typedef struct vl_tfevents_data {
  char *file_version; /* of the first Event that has one; NULL when none */
  size_t records;     /* TFRecords read */
  size_t n;           /* scalars: one per Value with a simple_value, in file order */
  vl_tfevent *ev;
  /* The file ends inside a record (a write cut short by a full disk or a crash): the records
   * before it were read; torn_at is the byte where the torn record starts (the size of the
   * whole records), torn_what says which record and how much of it is there:
   *   "record 4 (byte 120): truncated: 10 of 28 data+CRC bytes" */
  bool torn;
  size_t torn_at;
  char torn_what[128];
} vl_tfevents_data;

/* Reads every record of path, checking both CRCs of each, and decodes the Events: Values without
 * a simple_value (images, histograms, TF2 tensor summaries) and unknown fields are skipped.
 * A file that ends inside a record is read up to that record, as TensorBoard reads it, and the
 * tear is reported in out->torn* (not an error: a full disk or a crash leaves such a file, and
 * the writer cuts its file back when it can). Errors (VL_EIO) name the path and the 1-based
 * record with its byte offset:
 *   "read_events: <path>: record 3 (byte 96): data CRC mismatch (stored 0x..., computed 0x...)",
 * or a malformed Event. out is untouched on failure. */
vl_status vl_tfevents_read(const char *path, vl_tfevents_data *out);
void vl_tfevents_data_free(vl_tfevents_data *d);

#endif
