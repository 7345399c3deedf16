/* ext/text/pretrain.h: BERT pretraining samples from text, as Google's
 * create_pretraining_data.py (google-research/bert) makes them, written as shards (shard.h).
 *
 * Input: text files, one sentence per line, a blank line between documents (a new file also
 * starts a new document); each line is WordPiece-tokenized (wordpiece.h), lines without tokens
 * are dropped, documents without sentences too. Then dupe_factor passes over the documents, each
 * document d giving samples as Google's create_instances_from_document:
 *   - target length max_seq_len - 3, or with probability short_seq_prob a uniform 2..that;
 *   - sentences gather into a chunk until it reaches the target (or the document ends); segment A
 *     is the chunk's first a_end sentences (a_end uniform in 1..chunk-1, 1 for a chunk of one);
 *   - B is the rest of the chunk (label 0), or, with probability 0.5 and always for a chunk of one
 *     sentence, sentences from a random start in a random other document (10 draws to avoid d)
 *     until B reaches target - |A| (label 1; the chunk's unused sentences are put back);
 *   - the pair is cut to max_seq_len - 3 tokens, one token at a time from the longer side (B on
 *     a tie, as Google's), at its front or back with probability 0.5 each;
 *   - [CLS] A [SEP] B [SEP]; masking: candidates are all tokens but the three added ones (and
 *     [CLS] [SEP] [PAD] [MASK] written in the text); with whole_word_mask a "##" piece joins the
 *     candidate before it; candidates shuffled; n = min(max_predictions, max(1, round(len *
 *     masked_lm_prob))) with len counting the added tokens and Python 3's round (half to even);
 *     whole candidates are taken in order while they fit in n; each chosen token becomes [MASK]
 *     with probability 0.8, else it is kept with probability 0.5, else a uniform random id of the
 *     whole vocab (Google's vocab_words).
 * Differences from Google's script, all deliberate: a file boundary ends a document; Google
 * shuffles documents and samples in memory, here samples are written in corpus order (document,
 * then pass) and the loader shuffles globally (shards are random access); a "##" piece after
 * [SEP] does not join the word before it.
 *
 * The random numbers: xoshiro256** seeded by four splitmix64 outputs of `seed`; uniform reals
 * are the top 53 bits / 2^53, uniform integers in [0, n) Lemire's multiply-shift with rejection.
 * One stream over the whole run: the same inputs, vocab, options and seed give byte-identical
 * shards. Memory: 4 bytes per corpus token and 8 per sentence; the text is read in rounds of 4 MiB
 * per tokenizing thread, the one parallel step. */
#ifndef VL_PRETRAIN_H
#define VL_PRETRAIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct vl_pretrain_opts {
  const char *const *inputs; /* files, or directories meaning every regular file below them, by name */
  size_t n_inputs;
  const char *vocab_path;
  bool lower;                /* uncased tokenizer (HF's do_lower_case) */
  const char *output_dir;    /* made when missing; shards are <dir>/part-NNNNN.shard */
  uint32_t seq_len;          /* 5..4096 */
  uint32_t max_predictions;  /* 0..seq_len */
  double masked_lm_prob;     /* [0, 1] */
  double short_seq_prob;     /* [0, 1] */
  uint32_t dupe_factor;      /* >= 1 */
  uint64_t seed;
  bool whole_word_mask;
  uint64_t samples_per_shard; /* >= 1 */
  int threads;                /* tokenizing threads, 0..256; 0: the online CPUs, at most 16 (the
                               * shards are the same for any number) */
  size_t piece_bytes;         /* text per thread and round; 0: 4 MiB (small values test the split) */
} vl_pretrain_opts;

typedef struct vl_pretrain_stats {
  uint64_t files, documents, sentences, corpus_tokens; /* the input, after tokenization */
  uint64_t samples, tokens, masked, random_next;       /* the samples: tokens counts [CLS]/[SEP] */
  uint64_t shards;
} vl_pretrain_stats;

/* Reads and tokenizes all the input, then removes the part-NNNNN.shard files of an earlier run
 * from the output directory (so that it never holds a mix of two runs) and writes every shard,
 * each one atomically: a killed run leaves complete shards of its own and no partial one under a
 * final name. Input errors come before anything is removed. Errors: unreadable input or invalid UTF-8 (VL_EIO naming file and line), an input
 * without text, a vocab lacking [CLS] [SEP] [MASK] [PAD] or [UNK], options out of range
 * (VL_EINVAL). *st is written on success only. */
vl_status vl_pretrain_make_shards(const vl_pretrain_opts *o, vl_pretrain_stats *st);

#ifdef __cplusplus
}
#endif
#endif
