/* Strict UTF-8: the validator the HTTP layer and the tokenizer use on
 * untrusted text, and the decoder behind the pre-tokenizers and the
 * streaming detokenizer.
 *
 * "Strict" is RFC 3629 / Unicode Table 3-7: no overlong forms, no UTF-16
 * surrogates (U+D800..U+DFFF), nothing above U+10FFFF. The second byte's
 * allowed range depends on the lead byte:
 *   C2..DF  80..BF
 *   E0      A0..BF    (E0 80..9F would be overlong)
 *   E1..EC  80..BF
 *   ED      80..9F    (ED A0..BF would be a surrogate)
 *   EE..EF  80..BF
 *   F0      90..BF    (F0 80..8F would be overlong)
 *   F1..F3  80..BF
 *   F4      80..8F    (F4 90.. would exceed U+10FFFF)
 * and every later byte is 80..BF. C0, C1 and F5..FF never appear.
 */
#include "tokenizer_internal.h"

/* Sequence length from the lead byte (0: not a lead byte), and the allowed
 * range of the second byte. */
static int lead_info(uint8_t b, uint8_t *lo, uint8_t *hi) {
    *lo = 0x80;
    *hi = 0xBF;
    if (b < 0x80)
        return 1;
    if (b < 0xC2)
        return 0;
    if (b < 0xE0)
        return 2;
    if (b < 0xF0) {
        if (b == 0xE0)
            *lo = 0xA0;
        else if (b == 0xED)
            *hi = 0x9F;
        return 3;
    }
    if (b < 0xF5) {
        if (b == 0xF0)
            *lo = 0x90;
        else if (b == 0xF4)
            *hi = 0x8F;
        return 4;
    }
    return 0;
}

int ft_utf8_classify(const char *s, size_t len, uint32_t *cp) {
    if (len == 0)
        return 0;
    const uint8_t *p = (const uint8_t *)s;
    uint8_t lo, hi;
    int n = lead_info(p[0], &lo, &hi);
    if (n == 1) {
        *cp = p[0];
        return 1;
    }
    if (n == 0)
        return -1;
    uint32_t c = p[0] & (0x7F >> n);
    for (int k = 1; k < n; k++) {
        if ((size_t)k >= len)
            return 0; /* valid so far, truncated */
        uint8_t b = p[k];
        if (k == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF))
            return -k; /* the lead and k - 1 good continuations are one bad subpart */
        c = (c << 6) | (b & 0x3F);
    }
    *cp = c;
    return n;
}

int ft_utf8_decode(const char *s, size_t len, uint32_t *cp) {
    int n = ft_utf8_classify(s, len, cp);
    return n > 0 ? n : 0;
}

int ft_utf8_encode(uint32_t cp, char out[4]) {
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        if (cp >= 0xD800 && cp <= 0xDFFF)
            return 0;
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    if (cp <= 0x10FFFF) {
        out[0] = (char)(0xF0 | (cp >> 18));
        out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
        out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[3] = (char)(0x80 | (cp & 0x3F));
        return 4;
    }
    return 0;
}

size_t ft_utf8_invalid_at(const char *s, size_t len) {
    size_t i = 0;
    while (i < len) {
        /* ASCII fast path, 8 bytes at a time */
        while (i + 8 <= len) {
            uint64_t w;
            __builtin_memcpy(&w, s + i, 8);
            if (w & 0x8080808080808080ull)
                break;
            i += 8;
        }
        if (i >= len)
            break;
        if ((uint8_t)s[i] < 0x80) {
            i++;
            continue;
        }
        uint32_t cp;
        int n = ft_utf8_classify(s + i, len - i, &cp);
        if (n <= 0)
            return i;
        i += (size_t)n;
    }
    return len;
}

bool ft_utf8_valid(const char *s, size_t len) {
    if (!s)
        return len == 0;
    return ft_utf8_invalid_at(s, len) == len;
}
