/* ext/text/shard.h: BERT pretraining shards (format version 1): a writer and a zero-copy
 * reader over a read-only mmap of one file or of a set of files seen as one data set.
 *
 * A shard is a 128-byte header followed by n_samples fixed-size records (docs/BERT.md, "The shard
 * format", has the same table). All integers little-endian.
 *
 *   header
 *   off size  field
 *     0    8  magic "VLBERTSH"
 *     8    4  u32 version (1); at this offset in every version, so a reader can name it
 *    12    4  u32 header_size (128)
 *    16    8  u64 n_samples
 *    24    4  u32 seq_len (L, 3..4096)
 *    28    4  u32 max_predictions (P, 0..L)
 *    32    4  u32 vocab_size (V, 5..2^32-1)
 *    36    4  u32 id_bytes (w): 2 when V <= 65536, else 4
 *    40    4  u32 record_size (R) = 8 + L*w + 2*P + P*w rounded up to a multiple of 8
 *    44    4  u32 vocab_crc: CRC32C of the vocab.txt bytes the samples were made with
 *    48    8  u64 payload_bytes = n_samples * R
 *    56    4  u32 payload_crc: CRC32C of the payload_bytes bytes after the header
 *    60    4  u32 flags: bit 0 whole-word masking; other bits 0
 *    64    8  f64 masked_lm_prob   \
 *    72    8  f64 short_seq_prob    | how the samples were made (informational only)
 *    80    8  u64 seed              |
 *    88    4  u32 dupe_factor      /
 *    92   32  zero
 *   124    4  u32 header_crc: CRC32C of bytes 0..123
 *
 *   record (sample-major, R bytes; bytes past the fields are zero)
 *     0    2  u16 length: tokens of the sample, [CLS] A [SEP] B [SEP] (<= L)
 *     2    2  u16 seg_a: tokens of type 0, [CLS] A [SEP] (<= length); positions seg_a..length-1 are type 1
 *     4    2  u16 n_masked (<= P)
 *     6    1  u8  next_sentence_label: 0 B follows A, 1 B is random
 *     7    1  zero
 *     8  L*w  ids: the input tokens after masking; positions >= length are 0
 *   ...  2*P  u16 masked positions, ascending, 0-based, < length; past n_masked 0
 *   ...  P*w  the original ids at those positions; past n_masked 0
 *
 * CRC32C as in runtime/io/tfevents.h (ISA-L). Everything is checked once at open (message
 * "shard <path>: ..."); a gather checks each record it reads (ids < V, positions < length and
 * the counts), because a file made by another tool can carry a correct checksum and bad ids. */
#ifndef VL_SHARD_H
#define VL_SHARD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define VL_SHARD_MAGIC "VLBERTSH"
#define VL_SHARD_VERSION 1u
#define VL_SHARD_HEADER_SIZE 128u
#define VL_SHARD_MAX_SEQ_LEN 4096u
#define VL_SHARD_FLAG_WHOLE_WORD 1u

typedef struct vl_shard_info {
  uint64_t n_samples;
  uint32_t seq_len, max_predictions, vocab_size, id_bytes, record_size, vocab_crc, flags;
  double masked_lm_prob, short_seq_prob;
  uint64_t seed;
  uint32_t dupe_factor;
} vl_shard_info;

/* record_size of (seq_len, max_predictions, id_bytes). */
uint32_t vl_shard_record_size(uint32_t seq_len, uint32_t max_predictions, uint32_t id_bytes);

/* ---- writing ---- */

typedef struct vl_shard_writer vl_shard_writer;

/* One sample to append: ids[0..length), positions/masked_ids[0..n_masked). */
typedef struct vl_shard_sample {
  uint32_t length, seg_a, n_masked;
  int nsp; /* 0 or 1 */
  const uint32_t *ids, *positions, *masked_ids;
} vl_shard_sample;

/* Starts a shard at path from p (n_samples, id_bytes, record_size are filled in by the
 * writer; the rest is checked as the reader checks it). Records go to a temporary file beside
 * path (runtime/io/replace.h): until vl_shard_writer_finish, nothing exists under path. */
vl_status vl_shard_writer_open(const char *path, const vl_shard_info *p, vl_shard_writer **out);
/* Appends one sample, checked as the reader checks records (nothing is written on failure). */
vl_status vl_shard_writer_add(vl_shard_writer *w, const vl_shard_sample *s);
/* Writes the header (counts, checksums), fsyncs and renames the file into place; frees w
 * whatever the outcome (a failure leaves nothing under path). */
vl_status vl_shard_writer_finish(vl_shard_writer *w);
/* Drops an unfinished shard (removes the temporary file) and frees w; NULL is a no-op. */
void vl_shard_writer_abort(vl_shard_writer *w);
uint64_t vl_shard_writer_count(const vl_shard_writer *w);

/* ---- reading: a set of shard files seen as one data set ---- */

typedef struct vl_shard_set vl_shard_set;

/* Opens paths[0..n) (n >= 1) as one data set whose global sample index runs through the files
 * in the given order. Each file is mapped read-only and validated completely (header fields,
 * size, both checksums); all must agree on seq_len, max_predictions, vocab_size and vocab_crc. */
vl_status vl_shard_set_open(const char *const *paths, size_t n, vl_shard_set **out);
/* Opens path: a shard file, or a directory whose regular files named *.shard (sorted by name)
 * are the set; a directory with none is an error. */
vl_status vl_shard_set_open_path(const char *path, vl_shard_set **out);
void vl_shard_set_close(vl_shard_set *s);

/* The info of the set: n_samples is the total; the rest are the first file's. */
const vl_shard_info *vl_shard_set_info(const vl_shard_set *s);
size_t vl_shard_set_files(const vl_shard_set *s);
const char *vl_shard_set_path(const vl_shard_set *s, size_t i);
uint64_t vl_shard_set_file_samples(const vl_shard_set *s, size_t i);

/* Caller buffers of one batch of b samples (row-major; L = seq_len, P = max_predictions):
 * input_ids, token_type_ids, attention_mask, labels (-100 except at masked positions: the
 * original id): b x L; next_sentence_label: b; masked_positions, masked_ids: b x P (0 past
 * n_masked), masked_weights: b x P (1 real, 0 padding). Any pointer may be NULL (not filled). */
typedef struct vl_shard_batch {
  int64_t *input_ids, *token_type_ids, *attention_mask, *labels, *next_sentence_label;
  int64_t *masked_positions, *masked_ids;
  float *masked_weights;
} vl_shard_batch;

/* Gathers the samples idx[0..b) (0-based global indices) straight from the mappings. Every
 * index and record is checked before the first write: on failure the buffers are untouched. */
vl_status vl_shard_set_gather(const vl_shard_set *s, const int64_t *idx, size_t b, const vl_shard_batch *out);

#ifdef __cplusplus
}
#endif
#endif
