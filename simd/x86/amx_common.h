/* AMX tile configuration shared by the amx level's files (compiled with
 * -mamx-tile). A thread's configuration stays until it loads another, so
 * each kernel names the one it needs and loads it only when the thread's
 * current one differs. */
#ifndef FT_SIMD_X86_AMX_COMMON_H
#define FT_SIMD_X86_AMX_COMMON_H

#include <stdint.h>
#include <string.h>

/* Palette 1's configuration (Intel SDM, LDTILECFG): per tile, rows and
 * bytes per row. */
struct ft_amx_cfg {
    uint8_t palette;
    uint8_t start_row;
    uint8_t reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
};

/* The configuration this thread has loaded (an id of its kernel's choosing,
 * 0: none yet). */
extern _Thread_local int ft_amx_cfg_id;

static inline void ft_amx_load(const struct ft_amx_cfg *c, int id) {
    if (ft_amx_cfg_id == id)
        return;
    /* not _tile_loadconfig: GCC 12's declares a pointer-sized memory
     * operand, so stores to the rest of the struct can be dropped */
    __asm__ volatile("ldtilecfg %0" : : "m"(*c));
    ft_amx_cfg_id = id;
}

#endif
