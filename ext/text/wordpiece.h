/* ext/text/wordpiece.h: the BERT WordPiece tokenizer, compatible with Hugging Face's
 * BertTokenizerFast (the `tokenizers` library's BertNormalizer + BertPreTokenizer + WordPiece)
 * for a given vocab.txt.
 *
 * The text goes through, in HF's order: cleanup (NUL, U+FFFD and the "other" categories Cc, Cf,
 * Co, Cs dropped except tab/CR/LF; White_Space characters become ' '), spaces around CJK
 * ideographs, accent stripping (NFD, then Mn marks dropped; on when lower-casing unless told
 * otherwise), lower-casing (full Unicode lower case), splitting on white space and around every
 * punctuation character (ASCII punctuation and the Unicode P* categories), then greedy
 * longest-match-first word pieces with the "##" continuation prefix; a word with no split, or
 * longer than max_chars characters, becomes [UNK]. Special tokens of the vocab ([CLS], [SEP],
 * [PAD], [MASK], [UNK]) written in the text as they are (case-sensitive) stay one token, as HF's
 * added tokens do. Input that is not valid UTF-8 is an error (HF's tokenizers take only str, so
 * there is no HF behaviour to follow; dropping bytes silently would change the text).
 * Unicode categories, NFD and case come from utf8proc (libutf8proc-dev). */
#ifndef VL_WORDPIECE_H
#define VL_WORDPIECE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct vl_wordpiece vl_wordpiece;

typedef struct vl_wordpiece_opts {
  bool lower;        /* lower-case (HF's do_lower_case) */
  int strip_accents; /* -1: follow `lower` (HF's strip_accents=None), 0: no, 1: yes */
  int max_chars;     /* HF's max_input_chars_per_word (100); a longer word is [UNK] */
} vl_wordpiece_opts;

/* HF's defaults: lower-casing, accents following it, 100 characters. */
vl_wordpiece_opts vl_wordpiece_default_opts(void);

/* Reads vocab.txt (one token a line, the line number from 0 is its id; a repeated token takes
 * the later id, as HF's dict does). Fails (VL_EIO) when the file cannot be read, and (VL_EINVAL)
 * when it has no [UNK] line or the options are out of range. */
vl_status vl_wordpiece_load(const char *vocab_path, const vl_wordpiece_opts *opts, vl_wordpiece **out);
void vl_wordpiece_free(vl_wordpiece *tok);

int64_t vl_wordpiece_vocab_size(const vl_wordpiece *tok);
/* The id of a token (exact bytes), or -1 when the vocab has none. */
int64_t vl_wordpiece_token_to_id(const vl_wordpiece *tok, const char *s, size_t len);
/* The token of an id (NUL-terminated, owned by tok), or NULL when id is out of range. */
const char *vl_wordpiece_id_to_token(const vl_wordpiece *tok, int64_t id);

/* The basic tokenization alone, as HF's trainers see the text (BertNormalizer, then
 * BertPreTokenizer: no special tokens kept whole, no word pieces): fn gets the UTF-8 bytes of each
 * word in order; a status other than VL_OK from fn stops the walk and is returned. Invalid UTF-8
 * is VL_EINVAL, with its byte offset in *bad_offset when that is not NULL. opts NULL: defaults
 * (max_chars plays no part). */
typedef vl_status (*vl_wordpiece_word_fn)(void *ctx, const char *word, size_t len);
vl_status vl_wordpiece_basic_words(const vl_wordpiece_opts *opts, const char *text, size_t len,
                                   vl_wordpiece_word_fn fn, void *ctx, size_t *bad_offset);

/* The word-piece ids of text (no special tokens added). *ids is malloc'ed (free() it), *n its
 * length; both untouched on failure (invalid UTF-8: VL_EINVAL naming the byte offset). */
vl_status vl_wordpiece_tokenize(const vl_wordpiece *tok, const char *text, size_t len, int64_t **ids, size_t *n);

typedef struct vl_wordpiece_encode_opts {
  int64_t max_length; /* 0: none */
  bool truncation;    /* cut to max_length (longest_first for pairs, as HF's fast tokenizer) */
  bool pad;           /* pad with [PAD] to max_length (needs max_length) */
  bool add_special;   /* [CLS] a [SEP] (b [SEP]) */
} vl_wordpiece_encode_opts;

typedef struct vl_wordpiece_encoding {
  int64_t *ids, *type_ids, *mask; /* one malloc'ed block each, n long */
  size_t n;
} vl_wordpiece_encoding;

/* Encodes text a, or the pair (a, b) when b is not NULL, as HF's tokenizer(a, b, ...) does. */
vl_status vl_wordpiece_encode(const vl_wordpiece *tok, const char *a, size_t alen, const char *b, size_t blen,
                              const vl_wordpiece_encode_opts *opts, vl_wordpiece_encoding *out);
void vl_wordpiece_encoding_free(vl_wordpiece_encoding *e);

/* HF's decode(ids): tokens joined by ' ' with each "##" continuation glued to the piece before it,
 * and the WordPiece decoder's cleanup (no space before . ? ! , and the like, per token);
 * special tokens ([UNK] included, as HF's skip_special_tokens) left out when skip_special.
 * *text is malloc'ed and NUL-terminated. An id out of range is VL_EINVAL. */
vl_status vl_wordpiece_decode(const vl_wordpiece *tok, const int64_t *ids, size_t n, bool skip_special, char **text);

#ifdef __cplusplus
}
#endif
#endif
