/* ft compare's chart: one SVG that reads on its own -- quality loss (mean
 * KL divergence from the base, log scale) against decode speed, or against
 * bits per weight when no speeds were measured; marker area proportional to
 * the file size; every point labelled; axes with units; a caption naming
 * the model, the text, the machine and the thread count. Plain SVG 1.1
 * with no scripts or external fonts, so browsers, GitHub and rsvg all draw
 * it the same. */
#include "cmd_compare.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define W 960
#define H 640
#define PL 96  /* plot area: left, right, top, bottom */
#define PR 48
#define PT 84
#define PB 168

static const char *const k_colors[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e",
                                       "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"};

/* XML text: escape the five special characters, drop control bytes. */
static void xml(FILE *f, const char *s) {
    for (; *s; s++) {
        switch (*s) {
        case '&': fputs("&amp;", f); break;
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '"': fputs("&quot;", f); break;
        case '\'': fputs("&apos;", f); break;
        default:
            if ((unsigned char)*s >= 0x20)
                fputc(*s, f);
        }
    }
}

static const char *base_name(const char *p) {
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

/* A round step for about n ticks over [lo, hi]. */
static double nice_step(double lo, double hi, int n) {
    double raw = (hi - lo) / n;
    if (!(raw > 0))
        return 1;
    double mag = pow(10, floor(log10(raw))), f = raw / mag;
    return (f < 1.5 ? 1 : f < 3 ? 2 : f < 7 ? 5 : 10) * mag;
}

/* "3.5 MiB", "253 MiB", "4.37 GiB" */
static void fmt_size(char *buf, size_t cap, uint64_t bytes) {
    double mib = (double)bytes / 1048576.0;
    if (mib >= 1024)
        snprintf(buf, cap, "%.2f GiB", mib / 1024);
    else
        snprintf(buf, cap, mib >= 100 ? "%.0f MiB" : "%.1f MiB", mib);
}

struct placed {
    double x0, y0, x1, y1;
};

static bool overlaps(const struct placed *a, const struct placed *b) {
    return a->x0 < b->x1 && b->x0 < a->x1 && a->y0 < b->y1 && b->y0 < a->y1;
}

void ft_compare_write_svg(const struct cmp_report *r, FILE *f) {
    bool speed = true;
    for (int i = 0; i < r->n_rows; i++)
        if (!r->rows[i].has_speed)
            speed = false;

    /* Ranges: x linear (decode tok/s or bpw), y log10(KLD). */
    double xmin = INFINITY, xmax = -INFINITY, kmin = INFINITY, kmax = -INFINITY, smax = 0;
    for (int i = 0; i < r->n_rows; i++) {
        const struct cmp_row *w = &r->rows[i];
        double x = speed ? w->tg_ts : w->bpw;
        xmin = fmin(xmin, x);
        xmax = fmax(xmax, x);
        smax = fmax(smax, (double)w->file_bytes);
        if (w->has_kld && w->kld > 0 && !w->same_as_base) {
            kmin = fmin(kmin, fmax(w->kld - w->kld_err, w->kld * 0.5));
            kmax = fmax(kmax, w->kld + w->kld_err);
        }
    }
    if (!isfinite(kmin)) {
        kmin = 1e-4;
        kmax = 1e-1;
    }
    double ylo = floor(log10(kmin)), yhi = ceil(log10(kmax));
    if (yhi - ylo < 2)
        ylo = yhi - 2;
    double span = xmax - xmin;
    if (!(span > 0))
        span = fmax(fabs(xmax) * 0.2, 1);
    double step = nice_step(xmin - 0.1 * span, xmax + 0.1 * span, 6);
    double xlo = floor((xmin - 0.12 * span) / step) * step, xhi = ceil((xmax + 0.12 * span) / step) * step;
    if (xlo < 0 && xmin >= 0)
        xlo = 0;
    const double pw = W - PL - PR, ph = H - PT - PB;
#define SX(x) (PL + ((x) - xlo) / (xhi - xlo) * pw)
#define SY(ly) (PT + (yhi - (ly)) / (yhi - ylo) * ph)

    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
               "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
               "font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\">\n",
            W, H, W, H);
    fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
    fprintf(f, "<text x=\"%d\" y=\"32\" font-size=\"20\" font-weight=\"bold\" fill=\"#222\">Quantization formats of ", PL);
    xml(f, r->model_name);
    fprintf(f, ": quality loss vs %s</text>\n", speed ? "decode speed" : "size");
    fprintf(f, "<text x=\"%d\" y=\"56\" font-size=\"13\" fill=\"#444\">Lower is closer to the base model, ", PL);
    xml(f, r->base_ftype[0] ? r->base_ftype : "?");
    fprintf(f, "%s. Marker area is proportional to the file size.</text>\n",
            speed ? "; right is faster" : "; left is smaller");

    /* Grid and axes. */
    fprintf(f, "<g stroke=\"#e6e6e6\" stroke-width=\"1\">\n");
    for (double d = ylo; d <= yhi + 1e-9; d += 1)
        for (int k = 2; k <= 9 && d < yhi - 1e-9; k++)
            fprintf(f, "<line x1=\"%d\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#f3f3f3\"/>\n", PL, W - PR,
                    SY(d + log10(k)), SY(d + log10(k)));
    for (double d = ylo; d <= yhi + 1e-9; d += 1)
        fprintf(f, "<line x1=\"%d\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\"/>\n", PL, W - PR, SY(d), SY(d));
    for (double x = xlo; x <= xhi + 1e-9 * step; x += step)
        fprintf(f, "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%d\" y2=\"%d\"/>\n", SX(x), SX(x), PT, H - PB);
    fprintf(f, "</g>\n");
    fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%.0f\" height=\"%.0f\" fill=\"none\" stroke=\"#555\"/>\n", PL, PT, pw, ph);
    fprintf(f, "<g font-size=\"12\" fill=\"#333\">\n");
    for (double d = ylo; d <= yhi + 1e-9; d += 1) {
        int e = (int)lround(d);
        char lab[32];
        if (e >= -4 && e <= 4)
            snprintf(lab, sizeof(lab), "%g", pow(10, e));
        else
            snprintf(lab, sizeof(lab), "1e%d", e);
        fprintf(f, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n", PL - 8, SY(d) + 4, lab);
    }
    for (double x = xlo; x <= xhi + 1e-9 * step; x += step)
        fprintf(f, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%g</text>\n", SX(x), H - PB + 18, x);
    fprintf(f, "</g>\n");
    fprintf(f, "<text x=\"%.1f\" y=\"%d\" font-size=\"14\" text-anchor=\"middle\" fill=\"#222\">%s</text>\n",
            PL + pw / 2, H - PB + 42,
            speed ? "decode speed (tokens/s, ft bench tg, higher is better)" : "size (bits per weight)");
    fprintf(f, "<text transform=\"translate(24 %.1f) rotate(-90)\" font-size=\"14\" text-anchor=\"middle\" "
               "fill=\"#222\">mean KL divergence from the base (nats, log scale)</text>\n",
            PT + ph / 2);

    /* The base: a dashed vertical line at its x. */
    const struct cmp_row *b = &r->rows[0];
    double bx = SX(speed ? b->tg_ts : b->bpw);
    fprintf(f, "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%d\" y2=\"%d\" stroke=\"#888\" stroke-dasharray=\"6 4\"/>\n", bx,
            bx, PT, H - PB);
    fprintf(f, "<text x=\"%.1f\" y=\"%d\" font-size=\"12\" fill=\"#666\" text-anchor=\"middle\">", bx, PT - 6);
    xml(f, b->label);
    if (speed)
        fprintf(f, ": %.1f tok/s</text>\n", b->tg_ts);
    else
        fprintf(f, ": %.2f bpw</text>\n", b->bpw);

    /* Points, largest first so small markers stay visible. A format
     * identical to the base (KLD 0, off a log scale) gets a small hollow
     * marker on the bottom edge. */
    int *idx = malloc(sizeof(int) * (size_t)r->n_rows);
    double *px = calloc((size_t)r->n_rows, sizeof(double)), *py = calloc((size_t)r->n_rows, sizeof(double));
    double *pr = calloc((size_t)r->n_rows, sizeof(double));
    struct placed *pl = calloc((size_t)(2 * r->n_rows + 1), sizeof(*pl));
    int n_pl = 0;
    for (int i = 0; i < r->n_rows; i++)
        idx[i] = i;
    for (int i = 1; i < r->n_rows; i++)
        for (int j = i; j > 1 && r->rows[idx[j]].file_bytes > r->rows[idx[j - 1]].file_bytes; j--) {
            int t = idx[j];
            idx[j] = idx[j - 1];
            idx[j - 1] = t;
        }
    for (int k = 1; k < r->n_rows; k++) {
        const int i = idx[k];
        const struct cmp_row *w = &r->rows[i];
        const char *col = k_colors[(i - 1) % (int)(sizeof(k_colors) / sizeof(k_colors[0]))];
        bool zero = !w->has_kld || w->same_as_base || !(w->kld > 0);
        px[i] = SX(speed ? w->tg_ts : w->bpw);
        pr[i] = zero ? 7.0 : fmax(4.0, 26.0 * sqrt((double)w->file_bytes / smax));
        py[i] = zero ? PT + ph - pr[i] - 3 : SY(log10(w->kld));
        if (!zero && w->kld_err > 0) {
            double y0 = SY(log10(w->kld + w->kld_err)), y1 = SY(log10(fmax(w->kld - w->kld_err, pow(10, ylo))));
            fprintf(f, "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"1.5\"/>\n",
                    px[i], px[i], y0, y1, col);
        }
        fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"%.1f\" fill=\"%s\" fill-opacity=\"%s\" stroke=\"%s\" "
                   "stroke-width=\"1.5\"/>\n",
                px[i], py[i], pr[i], zero ? "white" : col, zero ? "1" : "0.45", col);
        pl[n_pl++] = (struct placed){px[i] - pr[i], py[i] - pr[i], px[i] + pr[i], py[i] + pr[i]};
    }
    /* Labels: the first of several spots beside the marker that stays in
     * the plot and overlaps no marker and no other label. */
    for (int k = 1; k < r->n_rows; k++) {
        const int i = idx[k];
        const struct cmp_row *w = &r->rows[i];
        const char *col = k_colors[(i - 1) % (int)(sizeof(k_colors) / sizeof(k_colors[0]))];
        char label[160], size[32];
        fmt_size(size, sizeof(size), w->file_bytes);
        snprintf(label, sizeof(label), "%s  %s%s", w->label, size, w->same_as_base ? " (= base, KLD 0)" : "");
        const double tw = 7.0 * (double)strlen(label), th = 14, x = px[i], y = py[i], rad = pr[i];
        const double spots[][2] = {
            {x + rad + 6, y - th / 2},      {x - rad - 6 - tw, y - th / 2}, {x - tw / 2, y - rad - 4 - th},
            {x - tw / 2, y + rad + 4},      {x + rad * 0.7, y - rad - th},  {x + rad * 0.7, y + rad},
            {x - rad * 0.7 - tw, y - rad - th}, {x - rad * 0.7 - tw, y + rad},
        };
        struct placed p = {spots[0][0], spots[0][1], spots[0][0] + tw, spots[0][1] + th};
        bool found = false;
        for (int dy = 0; dy < 6 && !found; dy++) {
            for (size_t c = 0; c < sizeof(spots) / sizeof(spots[0]) && !found; c++) {
                struct placed q = {spots[c][0], spots[c][1] + (dy % 2 ? 1 : -1) * 16.0 * ((dy + 1) / 2), 0, 0};
                q.x1 = q.x0 + tw;
                q.y1 = q.y0 + th;
                bool ok = q.x0 >= PL + 2 && q.x1 <= W - PR - 2 && q.y0 >= PT + 2 && q.y1 <= PT + ph - 2;
                for (int j = 0; ok && j < n_pl; j++)
                    if (overlaps(&q, &pl[j]) && !(j == k - 1 && c >= 2)) /* spots 2+ clear their own circle */
                        ok = false;
                if (ok) {
                    p = q;
                    found = true;
                }
            }
        }
        pl[n_pl++] = p;
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"13\" font-weight=\"bold\" fill=\"%s\">", p.x0, p.y1 - 3, col);
        xml(f, label);
        fprintf(f, "</text>\n");
    }
    free(idx);
    free(px);
    free(py);
    free(pr);
    free(pl);

    /* Caption. */
    char bsize[32];
    fmt_size(bsize, sizeof(bsize), b->file_bytes);
    int cy = H - PB + 70;
    fprintf(f, "<g font-size=\"12\" fill=\"#444\">\n<text x=\"%d\" y=\"%d\">Model: ", PL, cy);
    xml(f, base_name(r->base_path));
    fprintf(f, " (%s, %s, %.2f bits/weight)", r->base_ftype[0] ? r->base_ftype : "?", bsize, b->bpw);
    if (r->base_quantized)
        fprintf(f, ", itself quantized: the others are requantizations of it");
    fprintf(f, ".</text>\n<text x=\"%d\" y=\"%d\">Quality: mean KL divergence from the base over %lld tokens of ",
            PL, cy + 17, (long long)r->n_scored);
    xml(f, base_name(r->text_path));
    fprintf(f, " (%d windows of %d tokens,</text>\n", r->n_chunk, r->n_ctx);
    fprintf(f, "<text x=\"%d\" y=\"%d\">second halves scored, as llama-perplexity); error bars: one standard "
               "error. Hollow markers at the bottom: identical to the base.</text>\n",
            PL, cy + 34);
    fprintf(f, "<text x=\"%d\" y=\"%d\">Machine: ", PL, cy + 51);
    xml(f, r->cpu);
    fprintf(f, ", %d threads.", r->threads);
    if (speed)
        fprintf(f, " Speed: ft bench -p %d -n %d -r %d (decode = tg%d).", r->bench_p, r->bench_n, r->bench_r,
                r->bench_n);
    else
        fprintf(f, " No speeds measured (--no-bench).");
    fprintf(f, " %s, ft compare.</text>\n</g>\n</svg>\n", r->date);
#undef SX
#undef SY
}
