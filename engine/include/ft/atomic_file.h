/* Output files that appear whole or not at all.
 *
 * The data goes to an unnamed file in the target's directory (Linux
 * O_TMPFILE), which is linked under the target name only by
 * ft_atomic_file_commit(), after fsync. A process that fails, is killed
 * (even with SIGKILL) or runs out of disk before that leaves nothing behind:
 * the kernel frees an unnamed file when its last descriptor closes. Where the
 * filesystem has no O_TMPFILE, a named "<path>.tmp-XXXXXX" is used instead
 * and removed on every failure the process survives (not on SIGKILL).
 *
 * An existing file at the target path is replaced atomically (rename), so a
 * reader sees either the old file or the new one.
 *
 * Errors: the first failure logs one line (path and reason) and is sticky;
 * later writes do nothing and commit returns it without logging again.
 */
#ifndef FT_ATOMIC_FILE_H
#define FT_ATOMIC_FILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct ft_atomic_file {
    int fd;          /* -1 when closed */
    char *path;      /* target */
    char *tmp_name;  /* named temporary (fallback mode), else NULL */
    uint8_t *buf;    /* write buffer */
    size_t buf_len, buf_cap;
    uint64_t written; /* bytes accepted so far */
    int err;          /* sticky FT_E* */
};

/* Start a file that will become `path`. On failure (logged) nothing exists
 * and *f is safe to pass to ft_atomic_file_abort(). */
int ft_atomic_file_open(struct ft_atomic_file *f, const char *path);
/* Append n bytes (buffered). */
int ft_atomic_file_write(struct ft_atomic_file *f, const void *p, size_t n);
/* Flush, fsync, put the file in place under its name, close. After a
 * failure nothing new exists at the path (an old file there is intact). */
int ft_atomic_file_commit(struct ft_atomic_file *f);
/* Drop the file (no-op after commit, or on a zeroed / failed-open struct). */
void ft_atomic_file_abort(struct ft_atomic_file *f);
/* The whole of data[0..n) as `path`, whole or not at all (open, write,
 * commit; the failure is logged). */
int ft_atomic_file_save(const char *path, const void *data, size_t n);

#endif
