/* Width-generic math over the names of simd/x86/vec256.h / vec512.h:
 * include after one of them. What is here computes the same value in
 * every lane whatever the width. */
#ifndef FT_SIMD_X86_VEC_MATH_H
#define FT_SIMD_X86_VEC_MATH_H

#ifndef FTV_N
#error "include simd/x86/vec256.h or vec512.h before vec_math.h"
#endif

/* e^x, within 2 ulp of expf on [-87.3, 88.7] (Cephes' polynomial after
 * x = n ln2 + r, |r| <= ln2/2). Inputs below the range give a tiny
 * positive value instead of a denormal or 0 -- callers that need an exact
 * 0 (masked attention scores) mask it -- and above it +inf; NaN stays NaN. */
static inline ftv ftv_exp(ftv x) {
    const ftv hi = ftv_set1(88.72283935546875f), lo = ftv_set1(-87.33654022216797f);
    const ftv x0 = x;
    const ftvm over = ftv_gt(x, hi);
    const ftvm nan = ftv_isnan(x);
    x = ftv_max(ftv_min(x, hi), lo);
    const ftv n = ftv_round(ftv_mul(x, ftv_set1(1.44269504088896341f)));
    ftv r = ftv_fnmadd(n, ftv_set1(0.693359375f), x);
    r = ftv_fnmadd(n, ftv_set1(-2.12194440e-4f), r);
    ftv p = ftv_set1(1.9875691500e-4f);
    p = ftv_fmadd(p, r, ftv_set1(1.3981999507e-3f));
    p = ftv_fmadd(p, r, ftv_set1(8.3334519073e-3f));
    p = ftv_fmadd(p, r, ftv_set1(4.1665795894e-2f));
    p = ftv_fmadd(p, r, ftv_set1(1.6666665459e-1f));
    p = ftv_fmadd(p, r, ftv_set1(5.0000001201e-1f));
    p = ftv_fmadd(ftv_mul(p, r), r, ftv_add(r, ftv_set1(1.0f)));
    const ftv y = ftv_mul_pow2(p, n);
    return ftv_blend(ftv_blend(y, ftv_set1(__builtin_inff()), over), x0, nan);
}

/* roundf() for conversion to int: nearest, ties away from zero (no
 * rounding mode does it). The fraction v - trunc(v) is exact, so comparing
 * it with 0.5 is too. A zero may come out as -0 or +0. */
static inline ftv ftv_round_away(ftv v) {
    const ftv t = ftv_trunc(v);
    const ftv frac = ftv_abs(ftv_sub(v, t));
    const ftv one = ftvi_as_ps(ftvi_or(ftv_bits(ftv_set1(1.0f)), ftvi_and(ftv_bits(v), ftvi_set1(INT32_MIN))));
    return ftv_add_m(t, ftv_ge(frac, ftv_set1(0.5f)), one);
}

/* bf16 bits of v (in the low 16 bits of each lane) rounded to nearest even
 * in integer arithmetic, as ft_float_to_bfloat (vcvtneps2bf16 would flush
 * subnormals); NaN lanes are not handled. */
static inline ftvi ftv_bf16_bits(ftv v) {
    const ftvi u = ftv_bits(v);
    const ftvi lsb = ftvi_and(ftvi_srli(u, 16), ftvi_set1(1));
    return ftvi_srli(ftvi_add(u, ftvi_add(lsb, ftvi_set1(0x7fff))), 16);
}

#endif
