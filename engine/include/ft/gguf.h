/* GGUF v2/v3 reader (memory-mapped) and writer.
 *
 * The reader treats the file as hostile: every count, length, offset, shape
 * and type is validated with overflow checks during ft_gguf_open(); after a
 * successful open, every accessor is safe and every tensor's data lies inside
 * the mapping. A bad file yields one error line naming the file, the key or
 * tensor, and what is wrong, and FT_EFORMAT.
 *
 * Ownership: the returned pointers (strings, arrays, tensor data) live as
 * long as the struct ft_gguf. Strings are NOT NUL-terminated in the file;
 * accessors return (pointer, length) pairs via struct ft_str.
 */
#ifndef FT_GGUF_H
#define FT_GGUF_H

#include "ft/types.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define FT_GGUF_MAX_DIMS 4
#define FT_GGUF_DEFAULT_ALIGNMENT 32

enum ft_gguf_vtype {
    FT_GGUF_UINT8 = 0,
    FT_GGUF_INT8 = 1,
    FT_GGUF_UINT16 = 2,
    FT_GGUF_INT16 = 3,
    FT_GGUF_UINT32 = 4,
    FT_GGUF_INT32 = 5,
    FT_GGUF_FLOAT32 = 6,
    FT_GGUF_BOOL = 7,
    FT_GGUF_STRING = 8,
    FT_GGUF_ARRAY = 9,
    FT_GGUF_UINT64 = 10,
    FT_GGUF_INT64 = 11,
    FT_GGUF_FLOAT64 = 12,
    FT_GGUF_VTYPE_COUNT,
};

struct ft_str {
    const char *s; /* not NUL-terminated */
    size_t len;
};

struct ft_gguf_tensor {
    struct ft_str name;
    enum ft_type type;
    int n_dims;
    int64_t ne[FT_GGUF_MAX_DIMS]; /* ne[0] is the row length; unused dims are 1 */
    uint64_t offset;              /* from the start of the data section */
    size_t size;                  /* bytes */
    const void *data;             /* inside the mapping (or buffer) */
};

struct ft_gguf;

/* Open and validate a file (mmap, read-only). */
int ft_gguf_open(const char *path, struct ft_gguf **out);
/* Parse a caller-owned buffer that must outlive the result; `name` is used in
 * error messages. Used by tests and the fuzz target. */
int ft_gguf_open_buffer(const void *data, size_t size, const char *name, struct ft_gguf **out);
void ft_gguf_close(struct ft_gguf *g); /* accepts NULL */

const char *ft_gguf_path(const struct ft_gguf *g);
uint32_t ft_gguf_version(const struct ft_gguf *g);
size_t ft_gguf_file_size(const struct ft_gguf *g);
size_t ft_gguf_alignment(const struct ft_gguf *g);
size_t ft_gguf_data_offset(const struct ft_gguf *g); /* start of tensor data */

/* ---- metadata ---- */
int64_t ft_gguf_n_kv(const struct ft_gguf *g);
int64_t ft_gguf_find_key(const struct ft_gguf *g, const char *key); /* -1 if absent */
struct ft_str ft_gguf_kv_key(const struct ft_gguf *g, int64_t i);
enum ft_gguf_vtype ft_gguf_kv_type(const struct ft_gguf *g, int64_t i);
/* For arrays: element type and count (nested arrays report FT_GGUF_ARRAY). */
enum ft_gguf_vtype ft_gguf_kv_arr_type(const struct ft_gguf *g, int64_t i);
uint64_t ft_gguf_kv_arr_n(const struct ft_gguf *g, int64_t i);
/* Raw bytes of the value as stored in the file (after the type tag); for
 * tools that print or copy values generically, including nested arrays. */
const void *ft_gguf_kv_raw(const struct ft_gguf *g, int64_t i, size_t *size);

/* Typed getters by key. Return FT_ENOENT if the key is absent, FT_EFORMAT
 * (with a log line naming the key) if it has an incompatible type or a value
 * that does not fit. Integer getters accept any integer type whose value fits;
 * ft_gguf_get_f32 accepts FLOAT32 and FLOAT64. */
int ft_gguf_get_u32(const struct ft_gguf *g, const char *key, uint32_t *out);
int ft_gguf_get_i32(const struct ft_gguf *g, const char *key, int32_t *out);
int ft_gguf_get_u64(const struct ft_gguf *g, const char *key, uint64_t *out);
int ft_gguf_get_f32(const struct ft_gguf *g, const char *key, float *out);
int ft_gguf_get_bool(const struct ft_gguf *g, const char *key, bool *out);
int ft_gguf_get_str(const struct ft_gguf *g, const char *key, struct ft_str *out);

/* Arrays by key. Numeric arrays are returned as an aligned copy made at
 * open time (element type in *type; `data` holds n elements of that type).
 * String arrays are returned as an array of n struct ft_str. */
int ft_gguf_get_arr(const struct ft_gguf *g, const char *key, enum ft_gguf_vtype *type,
                    const void **data, uint64_t *n);
int ft_gguf_get_arr_str(const struct ft_gguf *g, const char *key, const struct ft_str **strs,
                        uint64_t *n);

/* ---- tensors ---- */
int64_t ft_gguf_n_tensors(const struct ft_gguf *g);
const struct ft_gguf_tensor *ft_gguf_tensor(const struct ft_gguf *g, int64_t i);
const struct ft_gguf_tensor *ft_gguf_find_tensor(const struct ft_gguf *g, const char *name);

const char *ft_gguf_vtype_name(enum ft_gguf_vtype t);
size_t ft_gguf_vtype_size(enum ft_gguf_vtype t); /* 0 for STRING/ARRAY */

/* ---- writer ----
 * Collects metadata and tensors, then writes a GGUF v3 file atomically
 * (engine/include/ft/atomic_file.h), so a failed or killed write leaves nothing. */
struct ft_gguf_writer;

struct ft_gguf_writer *ft_gguf_writer_new(void);
void ft_gguf_writer_free(struct ft_gguf_writer *w); /* accepts NULL */

/* Setting a key that exists replaces its value. Strings are copied. */
int ft_gguf_writer_set_u32(struct ft_gguf_writer *w, const char *key, uint32_t v);
int ft_gguf_writer_set_i32(struct ft_gguf_writer *w, const char *key, int32_t v);
int ft_gguf_writer_set_u64(struct ft_gguf_writer *w, const char *key, uint64_t v);
int ft_gguf_writer_set_f32(struct ft_gguf_writer *w, const char *key, float v);
int ft_gguf_writer_set_bool(struct ft_gguf_writer *w, const char *key, bool v);
int ft_gguf_writer_set_str(struct ft_gguf_writer *w, const char *key, const char *v);
/* Numeric array of n elements of `type` (copied). */
int ft_gguf_writer_set_arr(struct ft_gguf_writer *w, const char *key, enum ft_gguf_vtype type,
                           const void *data, uint64_t n);
int ft_gguf_writer_set_arr_str(struct ft_gguf_writer *w, const char *key, const struct ft_str *strs,
                               uint64_t n);
/* Copy the i-th key/value of a reader verbatim (any type, nested arrays). */
int ft_gguf_writer_copy_kv(struct ft_gguf_writer *w, const struct ft_gguf *g, int64_t i);
int ft_gguf_writer_remove_key(struct ft_gguf_writer *w, const char *key);

/* Add a tensor; `data` (size = ft_row_size(type, ne[0]) * rows bytes) is
 * NOT copied and must stay valid until ft_gguf_writer_write returns. */
int ft_gguf_writer_add_tensor(struct ft_gguf_writer *w, const char *name, enum ft_type type,
                              int n_dims, const int64_t *ne, const void *data);
/* Add a tensor whose bytes are made while the file is written: fill(ud,
 * dst, size) is called once per write, in tensor order, and must fill all
 * `size` bytes (= ft_row_size(type, ne[0]) * rows) or return a negative
 * FT_E* after logging why (the write then fails and leaves nothing). Only
 * one tensor's bytes are held at a time. */
typedef int (*ft_gguf_fill_fn)(void *ud, void *dst, size_t size);
int ft_gguf_writer_add_tensor_fn(struct ft_gguf_writer *w, const char *name, enum ft_type type,
                                 int n_dims, const int64_t *ne, ft_gguf_fill_fn fill, void *ud);
/* The same, row by row, so a tensor never sits in memory whole (model
 * generators): the writer calls fill_rows(ud, row0, n_rows, dst) in row
 * order, in chunks of at most FT_GGUF_FILL_CHUNK bytes (at least one row;
 * a row is ne[0] elements, ft_row_size(type, ne[0]) bytes); it writes those
 * rows to dst and returns 0, or an FT_E* code (after logging why) to abort
 * the write. */
#define FT_GGUF_FILL_CHUNK ((size_t)4 << 20)
typedef int (*ft_gguf_fill_rows_fn)(void *ud, int64_t row0, int64_t n_rows, void *dst);
int ft_gguf_writer_add_tensor_fill(struct ft_gguf_writer *w, const char *name, enum ft_type type,
                                   int n_dims, const int64_t *ne, ft_gguf_fill_rows_fn fill_rows, void *ud);
void ft_gguf_writer_set_alignment(struct ft_gguf_writer *w, size_t alignment);

int ft_gguf_writer_write(struct ft_gguf_writer *w, const char *path);
/* Serialize into a malloc'd buffer (tests, fuzz seeds). */
int ft_gguf_writer_to_buffer(struct ft_gguf_writer *w, void **out, size_t *size);

#endif
