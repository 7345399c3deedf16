/* ext/text/vocab_train.h: the WordPiece vocabulary trainer, Hugging Face tokenizers'
 * WordPieceTrainer (its BPE trainer with the continuing-subword prefix "##") over the words of
 * our basic tokenization (vl_wordpiece_basic_words: BertNormalizer + BertPreTokenizer).
 *
 * The vocab, in id order: the special tokens (repeats dropped), the alphabet (the limit_alphabet
 * most frequent characters of the words, sorted by codepoint), the "##c" continuation of every
 * alphabet character that occurs inside a word (codepoint order), then the merges: repeatedly the
 * most frequent pair of adjacent symbols over all words (weighted by word count) is merged into
 * a new token (a + b without b's "##"), until vocab_size tokens or no pair is at least
 * min_frequency. Ties go to the pair of smaller ids (first symbol, then second), as HF's queue
 * orders them; pair counts are kept incrementally with a priority queue whose stale entries are
 * refreshed when they come up, as HF's are (so the same merges come out in the same order).
 *
 * Where HF is not deterministic, this is: HF numbers the "##c" tokens in the iteration order of
 * a randomly seeded hash map of the words, and that numbering breaks ties between equally
 * frequent pairs; here they follow the codepoints (or opts.continuation_order). HF drops the
 * rarest characters past limit_alphabet in an unstable sort; here, of equally rare ones, the
 * larger codepoints go first. So the vocab is a function of the multiset of words: the order of
 * files and lines does not matter. */
#ifndef VL_VOCAB_TRAIN_H
#define VL_VOCAB_TRAIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct vl_vocab_train_opts {
  int64_t vocab_size;     /* at most this many tokens (30522) */
  int64_t min_frequency;  /* a merge needs a pair counted at least this often (2; HF's default 0) */
  int64_t limit_alphabet; /* keep the most frequent characters only (1000); 0: all */
  bool lower;             /* lower-case (true), as the tokenizer that will use the vocab */
  int strip_accents;      /* -1: follow lower, 0: no, 1: yes */
  const char *const *special; /* the special tokens, first in the vocab; NULL: [PAD] [UNK] [CLS] [SEP] [MASK] */
  size_t nspecial;
  /* NULL, or UTF-8 characters: their "##c" tokens take the first continuation ids in this order
   * (the others follow in codepoint order). Only to reproduce a vocab of HF's trainer, whose
   * order is that of its hash map (see above); characters that get no "##c" token are skipped. */
  const char *continuation_order;
} vl_vocab_train_opts;

/* vocab_size 30522, min_frequency 2, limit_alphabet 1000, lower, accents following it, BERT's
 * five special tokens. */
vl_vocab_train_opts vl_vocab_train_default_opts(void);

typedef struct vl_vocab_trainer vl_vocab_trainer;

/* Checks opts (VL_EINVAL: vocab_size < 1, min_frequency < 0, limit_alphabet < 0, strip_accents
 * out of range, an empty or non-UTF-8 special token or continuation_order). */
vl_status vl_vocab_trainer_new(const vl_vocab_train_opts *opts, vl_vocab_trainer **out);
void vl_vocab_trainer_free(vl_vocab_trainer *tr);

/* Counts the words of text; name (a file name, or NULL) goes into errors: invalid UTF-8 is
 * VL_EINVAL naming it and the byte offset (plus base, the offset of text in the file). The lines
 * before a bad one have been counted then: after a failed feed, free the trainer. */
vl_status vl_vocab_trainer_feed(vl_vocab_trainer *tr, const char *text, size_t len, const char *name, size_t base);
/* Counts the words of a file (VL_EIO when it cannot be read). */
vl_status vl_vocab_trainer_feed_file(vl_vocab_trainer *tr, const char *path);
/* The number of distinct words counted so far. */
size_t vl_vocab_trainer_nwords(const vl_vocab_trainer *tr);

/* Words of more than this many symbols are merged through a linked list of their symbols and
 * an index of where each pair occurs, in time linear-ish in their length; shorter words through
 * HF's scan of the word (a scan and a shift per merge: quadratic in a word's length, and a
 * single 1M-character word took ~30 s; now ~1 s). Both give the same vocab. The scan is faster
 * and 3-5x leaner for words up to several thousand characters (measured on random letters, 30k
 * merges: 5000 x 1000 characters 5.6 s vs 12.1 s with the index; 1000 x 5000 9.6 s vs 10.2 s;
 * 500 x 10000 14.8 s vs 8.9 s; 100 x 50000 27.7 s vs 7.6 s), hence the threshold. */
#define VL_VOCAB_LONG_WORD 8192
/* For tests: the threshold above (0: every word through the lists, SIZE_MAX: none). */
void vl_vocab_trainer_set_long_word(vl_vocab_trainer *tr, size_t symbols);

/* Trains on the words counted: *tokens (malloc'ed array of malloc'ed NUL-terminated strings, id
 * order) and *n. Fails (VL_EINVAL) when no word was counted or vocab_size is below the specials,
 * the alphabet and the continuations; outputs untouched on failure. May be called once. */
vl_status vl_vocab_trainer_train(vl_vocab_trainer *tr, char ***tokens, size_t *n);
void vl_vocab_tokens_free(char **tokens, size_t n);

/* Writes vocab.txt: the tokens a line each, in id order, replacing path atomically (a failed
 * save leaves the old file). VL_EINVAL for no tokens, or a token that is empty, holds a line
 * break or is not valid UTF-8 (it would not read back as one line); VL_EIO from the write. */
vl_status vl_vocab_save(const char *const *tokens, size_t n, const char *path);

/* The trainer on files in this order (a directory is not expanded here). */
vl_status vl_vocab_train_files(const char *const *files, size_t nfiles, const vl_vocab_train_opts *opts,
                               char ***tokens, size_t *n);

#ifdef __cplusplus
}
#endif
#endif
