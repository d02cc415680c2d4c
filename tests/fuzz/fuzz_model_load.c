/* libFuzzer target for loading a model: the GGUF reader, then everything
 * ft_model_load does with what it accepts — hyperparameters, the tokenizer,
 * binding every tensor of the architecture (shapes, types, offsets), the
 * thread pool and the weight copy. Model files are hostile input too.
 *
 * The input is the whole file; it is handed over through a memfd, so the
 * loader reads it exactly as it reads a file on disk. Must never crash,
 * leak, hang or trip a sanitizer; refusing is fine. A model that loads must
 * have a vocabulary and the hyperparameters the forward pass relies on.
 *
 * Seeds: tests/fuzz/corpus/model_load (tiny models from `ft gen-model`).
 */
#include "ft/common.h"
#include "ft/model.h"
#include "fuzz_common.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

FUZZ_QUIET_INITIALIZE()

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const int fd = memfd_create("model.gguf", MFD_CLOEXEC);
    if (fd < 0)
        return 0;
    size_t done = 0;
    while (done < size) {
        const ssize_t w = write(fd, data + done, size - done);
        if (w <= 0)
            break;
        done += (size_t)w;
    }
    char path[64];
    snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
    for (int mmap_weights = 0; done == size && mmap_weights < 2; mmap_weights++) {
        const struct ft_model_params p = {.n_threads = 1, .mmap = mmap_weights};
        struct ft_model *m = NULL;
        if (ft_model_load(path, &p, &m) == FT_OK) {
            const struct ft_hparams *hp = ft_model_hparams(m);
            require(hp->n_vocab > 0 && hp->n_embd > 0 && hp->n_layer > 0 && hp->n_head > 0, "empty shape loaded");
            require(hp->n_head_kv > 0 && hp->n_head % hp->n_head_kv == 0, "heads not grouped evenly");
            ft_model_free(m);
        }
    }
    close(fd);
    return 0;
}
