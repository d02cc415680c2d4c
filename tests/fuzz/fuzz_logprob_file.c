/* libFuzzer target for the reader of llama.cpp's log-probability files
 * (engine/eval/perplexity_logits.c), which ft perplexity --kld reads from disk.
 *
 * Any input: ft_logprob_file_open_buffer() must fail cleanly or accept a
 * file whose every row can then be read (ASan checks every read lies inside
 * the input) and either decodes into finite log-probabilities or is refused
 * with FT_EFORMAT; every token id it hands out is inside the vocabulary.
 *
 * Seeds: tests/fuzz/corpus/logprob_file (tools/gen_logprob_seeds.py). */
#include "ft/common.h"
#include "ft/perplexity.h"
#include "fuzz_common.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

FUZZ_QUIET_INITIALIZE()

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    struct ft_logprob_file *f = NULL;
    if (ft_logprob_file_open_buffer(data, size, "fuzz", &f) != 0) {
        REQUIRE(f == NULL);
        return 0;
    }
    const int32_t n_ctx = ft_logprob_file_n_ctx(f), n_vocab = ft_logprob_file_n_vocab(f);
    const int32_t n_chunk = ft_logprob_file_n_chunk(f), n_score = n_ctx - 1 - n_ctx / 2;
    REQUIRE(n_ctx >= 4 && n_vocab >= 2 && n_chunk >= 1);
    const int32_t *tok = ft_logprob_file_tokens(f);
    for (size_t i = 0; i < (size_t)n_chunk * (size_t)n_ctx; i++)
        REQUIRE(tok[i] >= 0 && tok[i] < n_vocab);
    uint16_t *row = malloc(sizeof(uint16_t) * ft_logprob_row_len(n_vocab));
    float *logp = malloc(sizeof(float) * (size_t)n_vocab);
    for (int32_t c = 0; c < n_chunk && row && logp; c++) {
        for (int32_t k = 0; k < n_score; k++) {
            int rc = ft_logprob_file_read(f, c, k, row, logp);
            REQUIRE(rc == 0 || rc == FT_EFORMAT);
            for (int32_t i = 0; rc == 0 && i < n_vocab; i++)
                REQUIRE(isfinite(logp[i]) && logp[i] < 20.0f);
        }
    }
    REQUIRE(ft_logprob_file_read(f, n_chunk, 0, row, logp) == FT_EINVAL);
    REQUIRE(ft_logprob_file_read(f, 0, n_score, row, logp) == FT_EINVAL);
    free(row);
    free(logp);
    ft_logprob_file_close(f);
    return 0;
}
