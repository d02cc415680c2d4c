/* Internal interface shared by the tokenizer files:
 *   utf8.c              strict UTF-8 decoding/encoding
 *   unicode.c           code point classes and case mapping (tables in the
 *                       generated unicode_data.c), GPT-2 byte<->unicode map
 *   tokenizer.c         loading, special tokens, dispatch, detokenization
 *   tokenizer_common.c  vocab and merge lookups, id vector, bigram heap:
 *                       what the algorithms share with tokenizer.c
 *   tokenizer_spm.c     SentencePiece-style bigram merging by score
 *   tokenizer_bpe.c     byte-level BPE: pre-tokenizer splitters + merges by rank
 * tokenizer.c calls the algorithms; they call only tokenizer_common.c,
 * utf8.c and unicode.c.
 * Nothing outside these files includes this header (tests may).
 */
#ifndef FT_TOKENIZER_INTERNAL_H
#define FT_TOKENIZER_INTERNAL_H

#include "ft/common.h"
#include "ft/tokenizer.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- UTF-8 (utf8.c) -------------------------------------------------------
 * Strict: no overlongs, no surrogates, nothing above U+10FFFF. */

/* Decode the sequence at s[0..len). Returns its length (1..4) and sets *cp;
 * returns 0 if the bytes there do not start a complete valid sequence. */
int ft_utf8_decode(const char *s, size_t len, uint32_t *cp);
/* Like ft_utf8_decode, but tells "incomplete" from "invalid": returns n > 0
 * for a complete valid sequence of n bytes, 0 if s[0..len) is a valid but
 * truncated prefix of a sequence (more bytes could complete it), and -n if
 * the first n bytes are an invalid maximal subpart (replace with U+FFFD). */
int ft_utf8_classify(const char *s, size_t len, uint32_t *cp);
/* Encode cp (must be <= U+10FFFF and not a surrogate); returns 1..4 or 0. */
int ft_utf8_encode(uint32_t cp, char out[4]);
/* Offset of the first invalid byte, or len if s is valid. */
size_t ft_utf8_invalid_at(const char *s, size_t len);

/* ---- Unicode classes (unicode.c + generated unicode_data.c) --------------- */
enum {
    FT_U_UNDEFINED = 0x0001,  /* Cn: unassigned */
    FT_U_NUMBER = 0x0002,     /* \p{N} */
    FT_U_LETTER = 0x0004,     /* \p{L} */
    FT_U_SEPARATOR = 0x0008,  /* \p{Z} */
    FT_U_MARK = 0x0010,       /* \p{M} */
    FT_U_PUNCT = 0x0020,      /* \p{P} */
    FT_U_SYMBOL = 0x0040,     /* \p{S} */
    FT_U_CONTROL = 0x0080,    /* \p{C} (Cc, Cf, Co, Cs) */
    FT_U_WHITESPACE = 0x0100, /* \s: the White_Space property */
};

/* Flags of a code point; cp > U+10FFFF is FT_U_UNDEFINED. Never 0. */
uint16_t ft_unicode_flags(uint32_t cp);
/* Simple (1:1) case mappings; cp itself when there is none. */
uint32_t ft_unicode_tolower(uint32_t cp);
uint32_t ft_unicode_toupper(uint32_t cp);

struct ft_ucd_case_run {
    uint32_t first;
    uint16_t count;
    uint8_t stride;
    int32_t delta;
};
extern const char ft_unicode_version[];
extern const uint32_t ft_ucd_n_ranges;
extern const uint32_t ft_ucd_range_start[];
extern const uint16_t ft_ucd_range_flags[];
extern const uint16_t ft_ucd_ascii_flags[128];
extern const uint32_t ft_ucd_n_tolower;
extern const struct ft_ucd_case_run ft_ucd_tolower[];
extern const uint32_t ft_ucd_n_toupper;
extern const struct ft_ucd_case_run ft_ucd_toupper[];

/* GPT-2 byte-level alphabet: every byte maps to a printable code point
 * (printable Latin-1 bytes to themselves, the rest to U+0100..U+0143). */
uint32_t ft_bpe_byte_to_cp(uint8_t b);
int ft_bpe_cp_to_byte(uint32_t cp); /* -1 if cp is not in the alphabet */

/* ---- the tokenizer --------------------------------------------------------- */
enum ft_tok_kind {
    FT_TOK_SPM, /* "llama" */
    FT_TOK_BPE, /* "gpt2" */
};

/* Pre-tokenizers for byte-level BPE (the regex list llama.cpp uses for each
 * tokenizer.ggml.pre, implemented as hand-written splitters). */
enum ft_tok_pre {
    FT_PRE_NONE,      /* SPM: no pre-tokenizer */
    FT_PRE_DEFAULT,   /* "default" / missing: 4 regexes (punct, gpt2, \p{N}+, [0-9]{3}) */
    FT_PRE_GPT2,      /* 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S) */
    FT_PRE_LLAMA3,    /* (?i:'s|...)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+ */
    FT_PRE_QWEN2,     /* as LLAMA3 with \p{N} (one digit per word) */
    FT_PRE_STARCODER, /* \p{N} isolated, then GPT2 */
};

/* Token attributes (bits). GGUF token_type: 1 normal, 2 unknown, 3 control,
 * 4 user-defined, 5 unused, 6 byte; 0 or anything else is "undefined". */
enum {
    FT_ATTR_NORMAL = 0x01,
    FT_ATTR_UNKNOWN = 0x02,
    FT_ATTR_CONTROL = 0x04,
    FT_ATTR_USER_DEFINED = 0x08,
    FT_ATTR_UNUSED = 0x10,
    FT_ATTR_BYTE = 0x20,
    FT_ATTR_LSTRIP = 0x40, /* special token eats whitespace before it */
    FT_ATTR_RSTRIP = 0x80, /* special token eats whitespace after it */
};
#define FT_ATTR_SPECIAL (FT_ATTR_UNKNOWN | FT_ATTR_CONTROL | FT_ATTR_USER_DEFINED)

/* One BPE merge "left right" with rank = its index; the text is stored as
 * left and right concatenated (no space) at merge_text + off. */
struct ft_tok_merge {
    uint32_t off;
    uint16_t left_len;
    uint16_t right_len;
};

/* Trie of special-token strings, for the leftmost-longest split of text on
 * special tokens. Children of a node form a sibling list; the root's
 * children are indexed by their first byte. */
struct ft_trie_node {
    int32_t child;
    int32_t sibling;
    int32_t token; /* -1 if no token ends here */
    uint8_t byte;
};

struct ft_tokenizer {
    enum ft_tok_kind kind;
    enum ft_tok_pre pre;
    int32_t n_vocab;

    char *text;         /* all raw token strings, concatenated */
    uint32_t *text_off; /* (n_vocab + 1) offsets into text */
    char *piece;        /* decoded pieces (special tokens rendered) */
    uint32_t *piece_off;
    float *score;  /* (n_vocab) */
    uint8_t *attr; /* (n_vocab) FT_ATTR_* */
    uint32_t max_token_len;
    uint32_t max_piece_len;

    /* text -> id: open addressing, slot holds id + 1 (0 = empty) */
    uint32_t *vhash;
    uint32_t vhash_mask;

    int32_t byte_to_id[256]; /* SPM: <0xXX>; BPE: the byte's alphabet symbol */

    /* BPE merges, (left, right) -> rank */
    char *merge_text;
    struct ft_tok_merge *merges;
    uint32_t n_merges;
    uint32_t *mhash; /* slot: rank + 1 */
    uint32_t mhash_mask;
    uint32_t max_merge_len;

    /* special tokens: control, user-defined, unknown */
    struct ft_trie_node *trie;
    int32_t n_trie;
    int32_t trie_root[256];

    int32_t bos, eos, unk, eot, eom, pad;
    bool add_bos, add_eos, add_space_prefix, ignore_merges;

    int32_t *eog; /* sorted ids */
    size_t n_eog;
};

/* ---- shared by tokenizer.c and the algorithms (tokenizer_common.c) ------ */

/* Growable output array of token ids. */
struct ft_tokvec {
    int32_t *v;
    size_t n, cap;
};
int ft_tokvec_push(struct ft_tokvec *tv, int32_t id);

/* Candidate merge of two adjacent symbols, in a binary heap that pops the
 * largest key first and, on equal keys, the leftmost pair (SPM: key = token
 * score; BPE: key = -rank). size = bytes of the pair when it was queued, to
 * detect stale entries. */
struct ft_bigram {
    double key;
    int32_t left, right;
    uint32_t size;
};
struct ft_bigram_heap {
    struct ft_bigram *v;
    size_t n, cap;
};

/* A symbol of the text being merged: bytes [start, start + n), in a list
 * linked by prev/next (-1 ends it); n == 0 once merged into its left
 * neighbour. */
struct ft_tok_sym {
    int32_t prev, next;
    uint32_t start, n;
};

/* The heap key of merging the len bytes at s, whose left symbol is left_n
 * of them, into one symbol; false when they do not merge. */
typedef bool (*ft_tok_pair_key)(const struct ft_tokenizer *t, const char *s, size_t len, size_t left_n,
                                double *key);

/* SentencePiece's and BPE's merging: text[0, n) starts as one symbol per
 * UTF-8 character (a truncated one is one symbol), then the adjacent pair
 * with the largest key is merged (leftmost on ties), repeatedly, until no
 * pair has a key. sym (OUT) has room for a symbol per character and gets
 * *n_sym (OUT) of them; the merged list starts at sym[0]. heap is the caller's scratch, reused
 * across calls. Returns 0 or FT_ENOMEM. */
int ft_tok_merge(const struct ft_tokenizer *t, const char *text, size_t n, ft_tok_pair_key key,
                 struct ft_bigram_heap *heap, struct ft_tok_sym *sym, int32_t *n_sym);

static inline struct ft_str ft_tok_text(const struct ft_tokenizer *t, int32_t id) {
    struct ft_str s = {t->text + t->text_off[id], t->text_off[id + 1] - t->text_off[id]};
    return s;
}

/* Exact lookup of a token by its raw text; -1 if absent. */
int32_t ft_tok_lookup(const struct ft_tokenizer *t, const char *s, size_t len);
/* Rank of the merge (left, right) where left = s[0..left_len) and right =
 * s[left_len..len); -1 if absent. */
int32_t ft_tok_merge_rank(const struct ft_tokenizer *t, const char *s, size_t len, size_t left_len);
uint64_t ft_tok_hash(const char *s, size_t len);
/* The hash of merge (left, right) in the merge table (left = s[0..left_len)). */
uint64_t ft_tok_merge_hash(const char *s, size_t len, size_t left_len);

/* ---- the algorithms (tokenizer_spm.c, tokenizer_bpe.c) ------------------- */

/* Tokenize one fragment of plain text (no special tokens in it), appending
 * ids. SPM: `prefix_space` adds the dummy-prefix space. */
int ft_spm_tokenize(const struct ft_tokenizer *t, const char *text, size_t len, bool prefix_space,
                    struct ft_tokvec *out);
int ft_bpe_tokenize(const struct ft_tokenizer *t, const char *text, size_t len, struct ft_tokvec *out);

/* Map tokenizer.ggml.pre to a pre-tokenizer; returns false if unknown.
 * *ignore_merges / *add_bos are set as llama.cpp does for that family. */
bool ft_bpe_pre_from_name(const char *name, size_t len, enum ft_tok_pre *pre, bool *ignore_merges,
                          bool *add_bos);
/* Split text into pre-tokenizer words. *ends receives malloc'd byte offsets
 * of the end of each word (the first word starts at 0). */
int ft_bpe_pretokenize(enum ft_tok_pre pre, const char *text, size_t len, uint32_t **ends,
                       size_t *n_words);

#endif
