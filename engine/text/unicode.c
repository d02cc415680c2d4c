/* Unicode properties for the pre-tokenizers: the category class of a code
 * point (\p{L}, \p{N}, ... and \s), simple case mappings, and the GPT-2
 * byte-level alphabet. The tables are generated from Python's unicodedata by
 * tools/gen_unicode_data.py into unicode_data.c as runs of code points, so
 * a lookup is a binary search over ~2k runs (ASCII has a direct table).
 * Everything here is constant data: safe from any thread.
 */
#include "tokenizer_internal.h"

static uint16_t flags_search(uint32_t cp) {
    uint32_t lo = 0, hi = ft_ucd_n_ranges; /* find the last run starting <= cp */
    while (hi - lo > 1) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (ft_ucd_range_start[mid] <= cp)
            lo = mid;
        else
            hi = mid;
    }
    return ft_ucd_range_flags[lo];
}

uint16_t ft_unicode_flags(uint32_t cp) {
    if (cp < 128)
        return ft_ucd_ascii_flags[cp];
    if (cp > 0x10FFFF)
        return FT_U_UNDEFINED;
    return flags_search(cp);
}

static uint32_t case_map(const struct ft_ucd_case_run *runs, uint32_t n, uint32_t cp) {
    uint32_t lo = 0, hi = n;
    while (lo < hi) { /* first run with first > cp */
        uint32_t mid = lo + (hi - lo) / 2;
        if (runs[mid].first <= cp)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == 0)
        return cp;
    const struct ft_ucd_case_run *r = &runs[lo - 1];
    uint32_t k = cp - r->first;
    if (k % r->stride || k / r->stride >= r->count)
        return cp;
    return (uint32_t)((int64_t)cp + r->delta);
}

uint32_t ft_unicode_tolower(uint32_t cp) {
    if (cp < 128)
        return (cp >= 'A' && cp <= 'Z') ? cp + 32 : cp;
    return case_map(ft_ucd_tolower, ft_ucd_n_tolower, cp);
}

uint32_t ft_unicode_toupper(uint32_t cp) {
    if (cp < 128)
        return (cp >= 'a' && cp <= 'z') ? cp - 32 : cp;
    return case_map(ft_ucd_toupper, ft_ucd_n_toupper, cp);
}

/* GPT-2 bytes_to_unicode(): bytes '!'..'~', 0xA1..0xAC and 0xAE..0xFF stand
 * for themselves; the other 68 bytes, in order, get U+0100, U+0101, ... */
static bool byte_is_self(unsigned b) {
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
}

uint32_t ft_bpe_byte_to_cp(uint8_t b) {
    if (byte_is_self(b))
        return b;
    if (b <= 0x20)
        return 256 + b; /* 0x00..0x20: 33 bytes */
    if (b <= 0xA0)
        return 256 + 33 + (b - 0x7F); /* 0x7F..0xA0: 34 bytes */
    return 256 + 33 + 34;             /* 0xAD */
}

int ft_bpe_cp_to_byte(uint32_t cp) {
    if (cp < 256)
        return byte_is_self(cp) ? (int)cp : -1;
    if (cp < 256 + 33)
        return (int)(cp - 256);
    if (cp < 256 + 33 + 34)
        return (int)(0x7F + cp - (256 + 33));
    if (cp == 256 + 33 + 34)
        return 0xAD;
    return -1;
}
