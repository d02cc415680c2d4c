/* Output files that appear whole or not at all (engine/include/ft/atomic_file.h).
 *
 * Why O_TMPFILE and not just "write a temporary name, then rename": a named
 * temporary survives a SIGKILL, an OOM kill or a power cut, and users then
 * find "model.gguf.tmp-Ab12Cd" files of several GiB next to their models.
 * An unnamed file cannot outlive the process. */
#include "ft/atomic_file.h"
#include "ft/common.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define AF_BUF_CAP (1u << 20)

static int af_fail(struct ft_atomic_file *f, const char *func, const char *what, int e) {
    if (f->err)
        return f->err;
    char eb[128];
    ft_log(FT_LOG_ERROR, func, "%s: %s: %s", f->path ? f->path : "(null)", what, strerror_r(e, eb, sizeof(eb)));
    f->err = FT_EIO;
    return f->err;
}

/* The directory part of path ("." when it has none). */
static char *af_dirname(const char *path) {
    const char *slash = strrchr(path, '/');
    if (!slash)
        return strdup(".");
    if (slash == path)
        return strdup("/");
    return strndup(path, (size_t)(slash - path));
}

int ft_atomic_file_open(struct ft_atomic_file *f, const char *path) {
    memset(f, 0, sizeof(*f));
    f->fd = -1;
    if (!path || !*path) {
        FT_LOG_E("empty output path");
        f->err = FT_EINVAL;
        return f->err;
    }
    f->path = strdup(path);
    f->buf = malloc(AF_BUF_CAP);
    char *dir = af_dirname(path);
    if (!f->path || !f->buf || !dir) {
        free(dir);
        FT_LOG_E("out of memory");
        f->err = FT_ENOMEM;
        return f->err;
    }
    f->buf_cap = AF_BUF_CAP;
#ifdef O_TMPFILE
    f->fd = open(dir, O_TMPFILE | O_WRONLY | O_CLOEXEC, 0644);
    int e = errno;
    if (f->fd < 0 && e != EISDIR && e != EOPNOTSUPP && e != EINVAL) {
        /* A real error (missing directory, no permission): report it. */
        free(dir);
        return af_fail(f, __func__, "cannot create the output file", e);
    }
#endif
    free(dir);
    if (f->fd < 0) {
        /* No O_TMPFILE here: a named temporary beside the target. */
        size_t n = strlen(path) + sizeof(".tmp-XXXXXX");
        f->tmp_name = malloc(n);
        if (!f->tmp_name) {
            FT_LOG_E("out of memory");
            f->err = FT_ENOMEM;
            return f->err;
        }
        snprintf(f->tmp_name, n, "%s.tmp-XXXXXX", path);
        f->fd = mkostemp(f->tmp_name, O_CLOEXEC);
        if (f->fd < 0) {
            int e2 = errno;
            free(f->tmp_name);
            f->tmp_name = NULL;
            return af_fail(f, __func__, "cannot create a temporary file next to it", e2);
        }
        (void)fchmod(f->fd, 0644); /* mkstemp makes 0600; a model file is not a secret */
    }
    return 0;
}

static int af_write_all(struct ft_atomic_file *f, const uint8_t *p, size_t n) {
    while (n) {
        ssize_t w = write(f->fd, p, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return af_fail(f, "ft_atomic_file_write", "write failed", errno);
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static int af_flush(struct ft_atomic_file *f) {
    if (f->err || f->buf_len == 0)
        return f->err;
    int rc = af_write_all(f, f->buf, f->buf_len);
    f->buf_len = 0;
    return rc;
}

int ft_atomic_file_write(struct ft_atomic_file *f, const void *p, size_t n) {
    if (f->err)
        return f->err;
    if (f->fd < 0) {
        FT_LOG_E("write to a closed file");
        f->err = FT_EINVAL;
        return f->err;
    }
    f->written += n;
    if (n >= f->buf_cap) {
        if (af_flush(f))
            return f->err;
        return af_write_all(f, p, n);
    }
    if (f->buf_cap - f->buf_len < n && af_flush(f))
        return f->err;
    memcpy(f->buf + f->buf_len, p, n);
    f->buf_len += n;
    return 0;
}

/* Give the unnamed file a name: `name` must not exist. */
static int af_link(int fd, const char *name) {
    char proc[64];
    snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
    if (linkat(AT_FDCWD, proc, AT_FDCWD, name, AT_SYMLINK_FOLLOW) == 0)
        return 0;
    if (errno == EEXIST)
        return -1;
#ifdef AT_EMPTY_PATH
    if (linkat(fd, "", AT_FDCWD, name, AT_EMPTY_PATH) == 0) /* no /proc: needs CAP_DAC_READ_SEARCH */
        return 0;
#endif
    return -1;
}

static int af_place(struct ft_atomic_file *f) {
    if (f->tmp_name) {
        if (rename(f->tmp_name, f->path) != 0)
            return af_fail(f, "ft_atomic_file_commit", "cannot rename the temporary file into place", errno);
        free(f->tmp_name);
        f->tmp_name = NULL;
        return 0;
    }
    if (af_link(f->fd, f->path) == 0)
        return 0;
    if (errno != EEXIST)
        return af_fail(f, "ft_atomic_file_commit", "cannot link the output file", errno);
    /* The target exists: link under a fresh temporary name, then rename
     * over it, so the old file is replaced in one step. */
    size_t n = strlen(f->path) + 32;
    char *tmp = malloc(n);
    if (!tmp) {
        FT_LOG_E("out of memory");
        f->err = FT_ENOMEM;
        return f->err;
    }
    for (unsigned i = 0; i < 1000; i++) {
        snprintf(tmp, n, "%s.tmp-%ld-%u", f->path, (long)getpid(), i);
        if (af_link(f->fd, tmp) == 0) {
            if (rename(tmp, f->path) != 0) {
                int e = errno;
                unlink(tmp);
                free(tmp);
                return af_fail(f, "ft_atomic_file_commit", "cannot rename the output file into place", e);
            }
            free(tmp);
            return 0;
        }
        if (errno != EEXIST)
            break;
    }
    int e = errno;
    free(tmp);
    return af_fail(f, "ft_atomic_file_commit", "cannot link the output file", e);
}

int ft_atomic_file_commit(struct ft_atomic_file *f) {
    if (!f->err && f->fd < 0) {
        FT_LOG_E("commit of a closed file");
        f->err = FT_EINVAL;
    }
    if (!f->err)
        af_flush(f);
    if (!f->err && fsync(f->fd) != 0)
        af_fail(f, __func__, "fsync failed", errno);
    if (!f->err)
        af_place(f);
    int rc = f->err;
    ft_atomic_file_abort(f); /* closes; removes a named temporary on failure */
    f->err = rc;
    return rc;
}

void ft_atomic_file_abort(struct ft_atomic_file *f) {
    if (!f)
        return;
    if (f->fd >= 0)
        close(f->fd);
    f->fd = -1;
    if (f->tmp_name)
        unlink(f->tmp_name);
    free(f->tmp_name);
    f->tmp_name = NULL;
    free(f->path);
    f->path = NULL;
    free(f->buf);
    f->buf = NULL;
    f->buf_len = f->buf_cap = 0;
}

int ft_atomic_file_save(const char *path, const void *data, size_t n) {
    struct ft_atomic_file f;
    int rc = ft_atomic_file_open(&f, path);
    if (!rc)
        rc = ft_atomic_file_write(&f, data, n);
    if (!rc)
        rc = ft_atomic_file_commit(&f);
    ft_atomic_file_abort(&f);
    return rc;
}
