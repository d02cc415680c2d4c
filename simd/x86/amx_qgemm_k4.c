/* Q4_K and Q5_K prefill on AMX tiles with the sub-block scales in the
 * integers: the amx level's large-batch entry for these types (struct
 * ft_qgemm.large; compiled with the amx flags, cmake/FtSimd.cmake).
 *
 * A Q4_K/Q5_K super-block of 256 weights has one float d and dmin and
 * eight 6-bit integer scales sc and mins m, one per 32 weights; its Q8_K
 * activations have one float D. So, as ggml's vec_dot does,
 *   dot = D (d sum_s sc_s (q . a)_s - dmin sum_s m_s bsum_s)
 * where everything inside the sums is an integer. amx_qgemm.c's kernel
 * takes the tile unit's sums out per 32 weights and scales them in floats
 * (4 vector operations per token and sub-block), which is where its time
 * goes. Here the integer scales go into the weights instead: with sc = 8 hi
 * + lo (hi, lo in 0..7), q * hi and q * lo are bytes (at most 31 * 7), so
 * two tile products over the whole super-block give
 *   S = 8 (a . q hi) + (a . q lo) = sum_s sc_s (q . a)_s
 * exactly, with the products 64 bytes deep and the sums leaving the tiles
 * once per 256 weights instead of eight times. The mins' term is 4 int16
 * pair dot products (vpdpwssd) per weight row and super-block on the
 * activations' 32-element sums. Then, per super-block, one float
 * expression per weight row: acc += D (d S - dmin M).
 *
 * Orientation: the weights are the tiles' A operand (16 rows of 64 bytes,
 * a row's products in its natural order, so unpacking needs no transpose)
 * and the activations the B operand (16 groups of 4 bytes x 16 tokens,
 * made once per batch). C is then 16 weight rows x 16 tokens, a vector per
 * weight row; the 16 x 16 result is transposed once at the end.
 *
 * Numerics: integer sums exact; the float operations differ from avx512's
 * kernel (which scales per sub-block) in order, so this entry is checked
 * against the reference within the vec_dot tolerance, not bit for bit
 * against avx512 (tests/unit/test_qgemm.c). */
#include "ft/common.h"
#include "simd/fp16.h"
#include "simd/kernels.h"
#include "simd/level.h"
#include "simd/quant_ref.h"
#include "simd/x86/amx_common.h"
#include "simd/x86/k4_sums512.h"
#include "simd/x86/vec512.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

#define TR 16    /* weight rows per tile */
#define TT 16    /* tokens per activation tile */
#define CH 64    /* elements per tile product (bytes of an A row) */
#define NCH (FT_QK_K / CH)

/* Weight tile, per super-block: d[16], dmin[16] (floats), m pairs [16][4]
 * (uint32: m[2p] | m[2p+1] << 16 of each row), then per 64-element chunk
 * the hi and lo products, each 16 rows x 64 bytes. */
#define W_HEAD (2 * TR * 4 + TR * 4 * 4)
#define W_SB (W_HEAD + NCH * 2 * TR * CH)
/* Activation tile, per super-block: per chunk 16 groups x 16 tokens x 4
 * bytes, then D[16] (floats) and the 32-element sums as int16 pairs
 * [4][16] (uint32 per token). */
#define A_Q (NCH * (CH / 4) * TT * 4)
#define A_SB (A_Q + TT * 4 + 4 * TT * 4)

/* Distinct from amx_qgemm.c's ids (16, 32) and amx_float_gemm.c's. */
#define CFG_ID 0x4b

static size_t w_tile_size(int64_t k) { return (size_t)(k / FT_QK_K) * W_SB; }
static size_t a_tile_size(int64_t k) { return (size_t)(k / FT_QK_K) * A_SB; }

/* Every tile is 16 rows of 64 bytes: tmm0 C hi, tmm1 C lo; operand set s
 * (0, 1) is A hi 2 + 3s, A lo 3 + 3s, B 4 + 3s. */
static inline void configure(void) {
    if (ft_amx_cfg_id == CFG_ID)
        return;
    struct ft_amx_cfg c;
    memset(&c, 0, sizeof(c));
    c.palette = 1;
    for (int t = 0; t < 8; t++) {
        c.rows[t] = 16;
        c.colsb[t] = 64;
    }
    ft_amx_load(&c, CFG_ID);
}

/* ---- packing ------------------------------------------------------------------------- */

/* q * s for q in 0..15, per s in 0..7: one vpshufb table each. */
#define MUL_ROW(s) {0, s, 2 * s, 3 * s, 4 * s, 5 * s, 6 * s, 7 * s, 8 * s, 9 * s, 10 * s, 11 * s, 12 * s, 13 * s, 14 * s, 15 * s}
static const uint8_t k_mul[8][16] __attribute__((aligned(16))) = {MUL_ROW(0), MUL_ROW(1), MUL_ROW(2), MUL_ROW(3),
                                                                  MUL_ROW(4), MUL_ROW(5), MUL_ROW(6), MUL_ROW(7)};
#undef MUL_ROW

/* 32 quants (bytes 0..31, in q4; with bit 4 where h5 has 0xff) times s. */
static inline __m256i times(__m256i q4, __m256i h5, int s) {
    const __m256i tab = _mm256_broadcastsi128_si256(_mm_load_si128((const __m128i *)k_mul[s]));
    const __m256i p = _mm256_shuffle_epi8(tab, q4);
    return _mm256_add_epi8(p, _mm256_and_si256(h5, _mm256_set1_epi8((char)(16 * s))));
}

/* Row r of a weight tile from one Q4_K (qh NULL) or Q5_K super-block. */
static void pack_sb_row(uint8_t *sb, int r, uint16_t dh, uint16_t dminh, const uint8_t *scales, const uint8_t *qs,
                        const uint8_t *qh) {
    int sc[8], mn[8];
    for (int j = 0; j < 8; j++) {
        if (j < 4) {
            sc[j] = scales[j] & 63;
            mn[j] = scales[j + 4] & 63;
        } else {
            sc[j] = (scales[j + 4] & 0x0f) | ((scales[j - 4] >> 6) << 4);
            mn[j] = (scales[j + 4] >> 4) | ((scales[j] >> 6) << 4);
        }
    }
    float *d = (float *)(void *)sb, *dmin = d + TR;
    uint32_t *mp = (uint32_t *)(void *)(sb + 2 * TR * 4) + r * 4;
    d[r] = ft_half_to_float(dh);
    dmin[r] = ft_half_to_float(dminh);
    for (int p = 0; p < 4; p++)
        mp[p] = (uint32_t)mn[2 * p] | (uint32_t)mn[2 * p + 1] << 16;
    const __m256i low = _mm256_set1_epi8(0x0f);
    const __m256i hbits = qh ? _mm256_loadu_si256((const __m256i *)qh) : _mm256_setzero_si256();
    for (int c = 0; c < NCH; c++) {
        const __m256i x = _mm256_loadu_si256((const __m256i *)(qs + 32 * c));
        const __m256i q0 = _mm256_and_si256(x, low), q1 = _mm256_and_si256(_mm256_srli_epi16(x, 4), low);
        /* bit 2c of qh[l] is bit 4 of element 64c + l, bit 2c + 1 of 64c + 32 + l */
        const __m256i b0 = _mm256_set1_epi8((char)(1 << (2 * c))), b1 = _mm256_set1_epi8((char)(2 << (2 * c)));
        const __m256i h0 = _mm256_cmpeq_epi8(_mm256_and_si256(hbits, b0), b0);
        const __m256i h1 = _mm256_cmpeq_epi8(_mm256_and_si256(hbits, b1), b1);
        const int s0 = sc[2 * c], s1 = sc[2 * c + 1];
        uint8_t *hi = sb + W_HEAD + (size_t)c * 2 * TR * CH + (size_t)r * CH, *lo = hi + TR * CH;
        _mm256_storeu_si256((__m256i *)hi, times(q0, h0, s0 >> 3));
        _mm256_storeu_si256((__m256i *)(hi + 32), times(q1, h1, s1 >> 3));
        _mm256_storeu_si256((__m256i *)lo, times(q0, h0, s0 & 7));
        _mm256_storeu_si256((__m256i *)(lo + 32), times(q1, h1, s1 & 7));
    }
}

static void pack_w_Q4_K(const void *w, size_t w_row, int n_rows, int64_t k, void *tile) {
    const int64_t nb = k / FT_QK_K;
    if (n_rows < TR) /* the missing rows */
        memset(tile, 0, w_tile_size(k));
    for (int r = 0; r < n_rows; r++) {
        const ft_block_q4_K *x = (const ft_block_q4_K *)(const void *)((const uint8_t *)w + (size_t)r * w_row);
        for (int64_t b = 0; b < nb; b++)
            pack_sb_row((uint8_t *)tile + (size_t)b * W_SB, r, x[b].d, x[b].dmin, x[b].scales, x[b].qs, NULL);
    }
}

static void pack_w_Q5_K(const void *w, size_t w_row, int n_rows, int64_t k, void *tile) {
    const int64_t nb = k / FT_QK_K;
    if (n_rows < TR) /* the missing rows */
        memset(tile, 0, w_tile_size(k));
    for (int r = 0; r < n_rows; r++) {
        const ft_block_q5_K *x = (const ft_block_q5_K *)(const void *)((const uint8_t *)w + (size_t)r * w_row);
        for (int64_t b = 0; b < nb; b++)
            pack_sb_row((uint8_t *)tile + (size_t)b * W_SB, r, x[b].d, x[b].dmin, x[b].scales, x[b].qs, x[b].qh);
    }
}

/* n_tok Q8_K rows into an activation tile; the missing tokens are zero. */
static void pack_a(const void *a, size_t a_row, int n_tok, int64_t k, void *tile) {
    const int64_t nb = k / FT_QK_K;
    memset(tile, 0, a_tile_size(k));
    for (int t = 0; t < n_tok; t++) {
        const ft_block_q8_K *y = (const ft_block_q8_K *)(const void *)((const uint8_t *)a + (size_t)t * a_row);
        for (int64_t b = 0; b < nb; b++) {
            uint8_t *sb = (uint8_t *)tile + (size_t)b * A_SB;
            for (int c = 0; c < NCH; c++)
                for (int g = 0; g < CH / 4; g++)
                    memcpy(sb + ((size_t)(c * (CH / 4) + g) * TT + (size_t)t) * 4, y[b].qs + c * CH + 4 * g, 4);
            memcpy(sb + A_Q + 4 * t, &y[b].d, 4);
            uint32_t *bp = (uint32_t *)(void *)(sb + A_Q + TT * 4);
            for (int p = 0; p < 4; p++) {
                const int s0 = y[b].bsums[4 * p] + y[b].bsums[4 * p + 1];
                const int s1 = y[b].bsums[4 * p + 2] + y[b].bsums[4 * p + 3];
                bp[p * TT + t] = (uint32_t)(uint16_t)(int16_t)s0 | (uint32_t)(uint16_t)(int16_t)s1 << 16;
            }
        }
    }
}

/* ---- kernel --------------------------------------------------------------------------- */

static inline void load_set(int set, const uint8_t *w, const uint8_t *a) {
    if (set == 0) {
        _tile_loadd(2, w, CH);
        _tile_loadd(3, w + TR * CH, CH);
        _tile_loadd(4, a, 64);
    } else {
        _tile_loadd(5, w, CH);
        _tile_loadd(6, w + TR * CH, CH);
        _tile_loadd(7, a, 64);
    }
}

static inline void multiply(int set) {
    if (set == 0) {
        _tile_dpbusd(0, 2, 4);
        _tile_dpbusd(1, 3, 4);
    } else {
        _tile_dpbusd(0, 5, 7);
        _tile_dpbusd(1, 6, 7);
    }
}

/* Super-block sums (hi then lo, 16 rows x 16 tokens each) into acc. */
static inline void scale_sb(const int32_t *sums, const uint8_t *wsb, const uint8_t *asb, __m512 acc[TR]) {
    const float *d = (const float *)(const void *)wsb, *dmin = d + TR;
    const uint32_t *mp = (const uint32_t *)(const void *)(wsb + 2 * TR * 4);
    const __m512 D = _mm512_loadu_ps(asb + A_Q);
    const uint32_t *bp = (const uint32_t *)(const void *)(asb + A_Q + TT * 4);
    const __m512i b0 = _mm512_loadu_si512(bp), b1 = _mm512_loadu_si512(bp + TT), b2 = _mm512_loadu_si512(bp + 2 * TT),
                  b3 = _mm512_loadu_si512(bp + 3 * TT);
    for (int r = 0; r < TR; r++) {
        const __m512i hi = _mm512_load_si512(sums + r * TT), lo = _mm512_load_si512(sums + TR * TT + r * TT);
        const __m512i s = _mm512_add_epi32(_mm512_slli_epi32(hi, 3), lo);
        __m512i m = _mm512_dpwssd_epi32(_mm512_setzero_si512(), _mm512_set1_epi32((int)mp[4 * r]), b0);
        m = _mm512_dpwssd_epi32(m, _mm512_set1_epi32((int)mp[4 * r + 1]), b1);
        m = _mm512_dpwssd_epi32(m, _mm512_set1_epi32((int)mp[4 * r + 2]), b2);
        m = _mm512_dpwssd_epi32(m, _mm512_set1_epi32((int)mp[4 * r + 3]), b3);
        const __m512 f = _mm512_fmsub_ps(_mm512_set1_ps(d[r]), _mm512_cvtepi32_ps(s),
                                         _mm512_mul_ps(_mm512_set1_ps(dmin[r]), _mm512_cvtepi32_ps(m)));
        acc[r] = _mm512_fmadd_ps(f, D, acc[r]);
    }
}

/* A software pipeline: the next chunk's tiles load while the tile unit
 * multiplies this one; a super-block's sums are stored after its last
 * chunk and scaled after the next super-block's first products are
 * issued, so the vector units work while the tile unit does. */
static void kernel(const void *w_tile, const void *a_tile, int64_t k, int n_rows, int n_tok, float *out, int64_t ld) {
    configure();
    const uint8_t *w = w_tile, *a = a_tile;
    const int64_t nb = k / FT_QK_K, nch = nb * NCH;
    int32_t sums[2][2 * TR * TT] __attribute__((aligned(64)));
    __m512 acc[TR];
    for (int r = 0; r < TR; r++)
        acc[r] = _mm512_setzero_ps();
#define WCH(c) (w + (size_t)((c) / NCH) * W_SB + W_HEAD + (size_t)((c) % NCH) * 2 * TR * CH)
#define ACH(c) (a + (size_t)((c) / NCH) * A_SB + (size_t)((c) % NCH) * (CH / 4) * TT * 4)
    load_set(0, WCH(0), ACH(0));
    for (int64_t c = 0; c < nch; c++) {
        const int set = (int)(c & 1);
        const int64_t b = c / NCH;
        if (c % NCH == 0) {
            _tile_zero(0);
            _tile_zero(1);
        }
        multiply(set);
        if (c + 1 < nch)
            load_set(set ^ 1, WCH(c + 1), ACH(c + 1));
        if (c % NCH == 0 && b > 0)
            scale_sb(sums[(b - 1) & 1], w + (size_t)(b - 1) * W_SB, a + (size_t)(b - 1) * A_SB, acc);
        if (c % NCH == NCH - 1) {
            _tile_stored(0, sums[b & 1], 64);
            _tile_stored(1, sums[b & 1] + TR * TT, 64);
        }
    }
#undef WCH
#undef ACH
    scale_sb(sums[(nb - 1) & 1], w + (size_t)(nb - 1) * W_SB, a + (size_t)(nb - 1) * A_SB, acc);
    /* acc[r] holds row r's 16 tokens: transpose to a vector per token */
    ftv_transpose(acc);
    const __mmask16 rows = (__mmask16)((1u << n_rows) - 1u);
    for (int i = 0; i < n_tok; i++)
        _mm512_mask_storeu_ps(out + (int64_t)i * ld, rows, acc[i]);
}

/* ---- the one-row dot in the kernel's order ------------------------------------------------ */

/* One super-block of one weight row and one token, added to acc as the
 * kernel adds it: S and M are the same integers however they are summed
 * (here maddubs pairs times the scales as words, and the mins times the
 * 16-element sums), and the two float operations are scale_sb's,
 *   acc = (d S - dmin M) D + acc,
 * each fused as there. qh is NULL for Q4_K. */
static inline float sb_dot(const uint8_t *scales, uint16_t dh, uint16_t dminh, const uint8_t *qs, const uint8_t *qh,
                           const ft_block_q8_K *y, float acc) {
    __m512i sumi;
    __m256i mins;
    ft_k4_sums512(scales, qs, qh, y, &sumi, &mins);
    const int S = _mm512_reduce_add_epi32(sumi);
    const __m128i m4 = _mm_add_epi32(_mm256_castsi256_si128(mins), _mm256_extracti128_si256(mins, 1));
    const __m128i m2 = _mm_add_epi32(m4, _mm_unpackhi_epi64(m4, m4));
    const int M = _mm_cvtsi128_si32(_mm_add_epi32(m2, _mm_shuffle_epi32(m2, 1)));
    const float f = fmaf(ft_half_to_float(dh), (float)S, -(ft_half_to_float(dminh) * (float)M));
    return fmaf(f, y->d, acc);
}

/* Four super-blocks at a time: their S and M reduced together (a quarter
 * of the horizontal sums per block), the inner step 4-wide, then the four
 * adds into acc in order: the floats of sb_dot four times.
 *
 * s[j]: block j's S in the sum of its 8 lanes; m[j]: its M in the sum of
 * its 4 lanes. Returns [S0 S1 S2 S3] in *S and [M0 M1 M2 M3] in *M. */
static inline void reduce4(const __m256i s[4], const __m128i m[4], __m128i *S, __m128i *M) {
    /* per 128-bit lane [S0 S1 S2 S3], each a half */
    const __m256i hs = _mm256_hadd_epi32(_mm256_hadd_epi32(s[0], s[1]), _mm256_hadd_epi32(s[2], s[3]));
    *S = _mm_add_epi32(_mm256_castsi256_si128(hs), _mm256_extracti128_si256(hs, 1));
    *M = _mm_hadd_epi32(_mm_hadd_epi32(m[0], m[1]), _mm_hadd_epi32(m[2], m[3]));
}

/* acc after four super-blocks with f16 scales d[j], dmin[j], sums S, M
 * (reduce4) and activations y[0..3]. */
static inline float finish4(const uint16_t d[4], const uint16_t dmin[4], __m128i S, __m128i M,
                                  const ft_block_q8_K *y, float acc) {
    const __m128 dv = _mm_cvtph_ps(_mm_loadl_epi64((const __m128i *)(const void *)d));
    const __m128 mv = _mm_cvtph_ps(_mm_loadl_epi64((const __m128i *)(const void *)dmin));
    float f[4];
    /* fmaf(d, S, -(dmin M)) */
    _mm_storeu_ps(f, _mm_fmsub_ps(dv, _mm_cvtepi32_ps(S), _mm_mul_ps(mv, _mm_cvtepi32_ps(M))));
    for (int j = 0; j < 4; j++)
        acc = fmaf(f[j], y[j].d, acc);
    return acc;
}

/* A row: four super-blocks at a time, the rest one by one (Q4_K, one
 * thread: 38.9 against 30.3 GMAC/s one by one; avx512's dot 35.4). */
#define DOT(T, QH)                                                                                        \
    static void vec_dot_##T(int64_t n, float *restrict s, const void *restrict vx, const void *restrict vy) { \
        const ft_block_##T *x = vx;                                                                           \
        const ft_block_q8_K *y = vy;                                                                          \
        const int64_t nb = n / FT_QK_K;                                                                       \
        float acc = 0.0f;                                                                                     \
        int64_t i = 0;                                                                                        \
        for (; i + 4 <= nb; i += 4) {                                                                         \
            __m256i s8[4];                                                                                    \
            __m128i m4[4];                                                                                    \
            uint16_t d[4], dmin[4];                                                                           \
            FT_UNROLL(4)                                                                                      \
            for (int j = 0; j < 4; j++) {                                                                     \
                for (int o = 0; o < (int)sizeof(x[i]); o += 64)                                               \
                    _mm_prefetch((const char *)&x[i + j] + FT_PREFETCH_DIST + o, _MM_HINT_T0);               \
                __m512i sumi;                                                                                 \
                __m256i mins;                                                                                 \
                ft_k4_sums512(x[i + j].scales, x[i + j].qs, QH(i + j), &y[i + j], &sumi, &mins);              \
                s8[j] = _mm256_add_epi32(_mm512_castsi512_si256(sumi), _mm512_extracti64x4_epi64(sumi, 1));   \
                m4[j] = _mm_add_epi32(_mm256_castsi256_si128(mins), _mm256_extracti128_si256(mins, 1));      \
                d[j] = x[i + j].d;                                                                            \
                dmin[j] = x[i + j].dmin;                                                                      \
            }                                                                                                 \
            __m128i S, M;                                                                                     \
            reduce4(s8, m4, &S, &M);                                                                          \
            acc = finish4(d, dmin, S, M, &y[i], acc);                                                         \
        }                                                                                                     \
        for (; i < nb; i++)                                                                                   \
            acc = sb_dot(x[i].scales, x[i].d, x[i].dmin, x[i].qs, QH(i), &y[i], acc);                         \
        *s = acc;                                                                                             \
    }
#define QH_NONE(i) NULL
#define QH_Q5(i) x[i].qh
DOT(q4_K, QH_NONE)
DOT(q5_K, QH_Q5)
#undef QH_NONE
#undef QH_Q5
#undef DOT

/* ---- entries -------------------------------------------------------------------------- */

#define ENTRY(T)                                                                                              \
    static const struct ft_qgemm g_##T = {                                                                    \
        .type = FT_TYPE_##T,                                                                                  \
        .act_type = FT_TYPE_Q8_K,                                                                             \
        .tile_rows = TR,                                                                                      \
        .tile_tokens = TT,                                                                                    \
        .min_tokens = FT_AMX_K4_TILE_TOKENS,                                                                  \
        .w_tile_size = w_tile_size,                                                                           \
        .a_tile_size = a_tile_size,                                                                           \
        .pack_w = pack_w_##T,                                                                                 \
        .pack_a = pack_a,                                                                                     \
        .kernel = kernel,                                                                                     \
    };
ENTRY(Q4_K)
ENTRY(Q5_K)
#undef ENTRY

const struct ft_qgemm *ft_amx_qgemm_k4(enum ft_type t) {
    return t == FT_TYPE_Q4_K ? &g_Q4_K : t == FT_TYPE_Q5_K ? &g_Q5_K : NULL;
}

/* The VNNI entry with the tile entry as its large one (struct ft_qgemm:
 * each has weight tiles of its own, which matmul.c allows). */
static struct ft_qgemm g_small[2];

void ft_amx_k4_fill(struct ft_level *l) {
    if (!ft_k4_int_scales())
        return;
    const enum ft_type ts[2] = {FT_TYPE_Q4_K, FT_TYPE_Q5_K};
    for (int i = 0; i < 2; i++) {
        g_small[i] = *ft_amx_qgemm_k4_vnni(ts[i]);
        g_small[i].large = ft_amx_qgemm_k4(ts[i]);
        g_small[i].large_min_tokens = FT_AMX_K4_TILE_TOKENS;
        l->qgemm[ts[i]] = &g_small[i];
    }
    l->types[FT_TYPE_Q4_K].vec_dot = vec_dot_q4_K;
    l->types[FT_TYPE_Q5_K].vec_dot = vec_dot_q5_K;
}
