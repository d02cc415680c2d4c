/* The process's hwloc topology, loaded once, and the hardware report of
 * `ft info --hw` / `ft bench --hw`.
 *
 * hwloc discovers the machine from sysfs (a few milliseconds); every pool
 * and the report share one copy, which is never modified after loading so
 * threads may read it concurrently (hwloc allows that). It is kept until the
 * process exits. */
#include "placement.h"

#include "ft/common.h"
#include "ft/cpu.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static hwloc_topology_t g_topo;
static int g_rc = FT_EIO;

/* Keep only the CPUs the process may run on, so `taskset` and `numactl
 * --cpunodebind` are obeyed: hwloc lists every CPU of the machine (only
 * cgroup limits remove some). Nodes left without CPUs go too. */
static void restrict_to_binding(hwloc_topology_t t) {
    hwloc_bitmap_t mine = hwloc_bitmap_alloc();
    if (mine && hwloc_get_cpubind(t, mine, HWLOC_CPUBIND_PROCESS) == 0 && !hwloc_bitmap_iszero(mine) &&
        !hwloc_bitmap_isincluded(hwloc_topology_get_topology_cpuset(t), mine)) {
        char cpus[128];
        hwloc_bitmap_list_snprintf(cpus, sizeof(cpus), mine);
        if (hwloc_topology_restrict(t, mine, HWLOC_RESTRICT_FLAG_REMOVE_CPULESS) == 0)
            FT_LOG_I("the process may run on CPUs %s only: using those", cpus);
        else
            FT_LOG_W("the process may run on CPUs %s only, but hwloc could not restrict its view to them", cpus);
    }
    hwloc_bitmap_free(mine);
}

static void load_once(void) {
    hwloc_topology_t t;
    if (hwloc_topology_init(&t) != 0) {
        FT_LOG_E("hwloc_topology_init failed");
        return;
    }
    if (hwloc_topology_load(t) != 0) {
        FT_LOG_E("hwloc could not read the machine's topology");
        hwloc_topology_destroy(t);
        return;
    }
    restrict_to_binding(t);
    g_topo = t;
    g_rc = FT_OK;
}

int ft_topology_get(hwloc_topology_t *out) {
    pthread_once(&g_once, load_once);
    *out = g_topo;
    return g_rc;
}

int ft_topology_current_pu(hwloc_topology_t topo) {
    hwloc_bitmap_t set = hwloc_bitmap_alloc();
    int pu = -1;
    if (set && hwloc_get_last_cpu_location(topo, set, HWLOC_CPUBIND_THREAD) == 0)
        pu = hwloc_bitmap_first(set);
    hwloc_bitmap_free(set);
    return pu;
}

/* Cores, or PUs on machines where hwloc sees no core objects. */
static hwloc_obj_type_t core_type(hwloc_topology_t t) {
    return hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_CORE) > 0 ? HWLOC_OBJ_CORE : HWLOC_OBJ_PU;
}

int ft_hw_n_cores(void) {
    hwloc_topology_t t;
    if (ft_topology_get(&t))
        return 1;
    int n = hwloc_get_nbobjs_by_type(t, core_type(t));
    return n > 0 ? n : 1;
}

int ft_hw_n_numa_nodes(void) {
    hwloc_topology_t t;
    if (ft_topology_get(&t))
        return 1;
    int n = hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_NUMANODE);
    return n > 0 ? n : 1;
}

static void format_bytes(unsigned long long b, char *buf, size_t cap) {
    if (b >= (1ull << 30))
        snprintf(buf, cap, "%.1f GiB", (double)b / (double)(1ull << 30));
    else if (b >= (1ull << 20))
        snprintf(buf, cap, "%llu MiB", b >> 20);
    else if (b >= (1ull << 10))
        snprintf(buf, cap, "%llu KiB", b >> 10);
    else
        snprintf(buf, cap, "%llu B", b);
}

/* One cache level: "L2 2 MiB x2" (several sizes on hybrid CPUs: "L2 2 MiB x8, 4 MiB x4"). */
static int report_cache(FILE *f, hwloc_topology_t t, hwloc_obj_type_t type, const char *name) {
    const int n = hwloc_get_nbobjs_by_type(t, type);
    int printed = 0;
    unsigned long long seen[8];
    int n_seen = 0;
    for (int i = 0; i < n; i++) {
        hwloc_obj_t o = hwloc_get_obj_by_type(t, type, (unsigned)i);
        if (o->attr->cache.type == HWLOC_OBJ_CACHE_INSTRUCTION)
            continue;
        unsigned long long size = o->attr->cache.size;
        bool dup = false;
        for (int s = 0; s < n_seen; s++)
            dup |= seen[s] == size;
        if (dup || n_seen == (int)FT_ARRAY_LEN(seen))
            continue;
        seen[n_seen++] = size;
        int count = 0;
        for (int j = 0; j < n; j++) {
            hwloc_obj_t p = hwloc_get_obj_by_type(t, type, (unsigned)j);
            count += p->attr->cache.type != HWLOC_OBJ_CACHE_INSTRUCTION && p->attr->cache.size == size;
        }
        char sz[32];
        format_bytes(size, sz, sizeof(sz));
        fprintf(f, "%s%s %s x%d", printed ? ", " : "  ", printed ? "" : name, sz, count);
        printed++;
    }
    if (printed)
        fputc('\n', f);
    return printed;
}

int ft_hw_report(FILE *f) {
    /* ft_cpu_describe(): "<arch> <vendor> <model>: <features> | kernels: ..." */
    char line[768];
    ft_cpu_describe(line, sizeof(line));
    char *cut = strstr(line, " | kernels: ");
    if (cut)
        *cut = '\0';
    char *feats = strrchr(line, ':');
    if (feats)
        *feats++ = '\0';
    fprintf(f, "cpu:       %s\n", line);
    fprintf(f, "isa:       %s kernels in use (best here: %s; FT_ISA=LEVEL forces another)\n",
            ft_isa_name(ft_cpu_isa()), ft_isa_name(ft_cpu_info()->best));
    fprintf(f, "features: %s\n", feats ? feats : " ?");

    hwloc_topology_t t;
    int rc = ft_topology_get(&t);
    if (rc) {
        fprintf(f, "topology:  unavailable (hwloc could not read it)\n");
        return rc;
    }
    const int n_pkg = hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_PACKAGE);
    const int n_core = hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_CORE);
    const int n_pu = hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_PU);
    const int n_node = hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_NUMANODE);
    fprintf(f, "topology:  %d package%s, %d core%s, %d PU%s (hardware threads), %d NUMA node%s%s\n", n_pkg,
            n_pkg == 1 ? "" : "s", n_core, n_core == 1 ? "" : "s", n_pu, n_pu == 1 ? "" : "s", n_node,
            n_node == 1 ? "" : "s",
            hwloc_topology_is_thissystem(t) ? "" : " [not this machine: HWLOC_SYNTHETIC/XML]");
    for (int i = 0; i < n_node; i++) {
        hwloc_obj_t nd = hwloc_get_obj_by_type(t, HWLOC_OBJ_NUMANODE, (unsigned)i);
        char mem[32], pus[128];
        format_bytes(nd->attr->numanode.local_memory, mem, sizeof(mem));
        if (hwloc_bitmap_iszero(nd->cpuset))
            snprintf(pus, sizeof(pus), "none (memory only)");
        else
            hwloc_bitmap_list_snprintf(pus, sizeof(pus), nd->cpuset);
        const int cores_in = hwloc_get_nbobjs_inside_cpuset_by_type(t, nd->cpuset, core_type(t));
        fprintf(f, "numa %d:    %s memory, %d core%s, CPUs %s\n", i, mem, cores_in, cores_in == 1 ? "" : "s", pus);
    }
    fprintf(f, "caches:\n");
    int levels = report_cache(f, t, HWLOC_OBJ_L1CACHE, "L1d");
    levels += report_cache(f, t, HWLOC_OBJ_L2CACHE, "L2 ");
    levels += report_cache(f, t, HWLOC_OBJ_L3CACHE, "L3 ");
    levels += report_cache(f, t, HWLOC_OBJ_L4CACHE, "L4 ");
    if (!levels)
        fprintf(f, "  none reported\n");

    const struct hwloc_topology_support *sup = hwloc_topology_get_support(t);
    const bool pin = sup->cpubind->set_thisthread_cpubind;
    const bool bind = sup->membind->alloc_membind && sup->membind->bind_membind;
    const bool inter = sup->membind->alloc_membind && sup->membind->interleave_membind;
    fprintf(f, "binding:   threads %s, memory bind %s, interleave %s\n", pin ? "yes" : "no",
            bind ? "yes" : "no", inter ? "yes" : "no");
    const int n = ft_hw_n_cores();
    fprintf(f, "default:   %d thread%s (one per physical core), --numa off\n", n, n == 1 ? "" : "s");
    return FT_OK;
}

int ft_hw_report_placement(FILE *f, int n_threads, enum ft_numa_mode mode, int numa_node) {
    hwloc_topology_t t;
    int rc = ft_topology_get(&t);
    if (rc)
        return rc;
    const struct ft_place_params pp = {
        .n_threads = n_threads,
        .mode = mode,
        .numa_node = numa_node,
        .caller_pu = ft_topology_current_pu(t),
    };
    struct ft_placement pl;
    if ((rc = ft_placement_plan(t, &pp, &pl)))
        return rc;
    fprintf(f, "placement: %d thread%s, --numa %s%s\n", pl.n_threads, pl.n_threads == 1 ? "" : "s",
            ft_numa_mode_name(mode),
            pl.oversubscribed ? " (more threads than hardware threads: not pinned to cores)" : "");
    ft_placement_describe(&pl, f);
    ft_placement_free(&pl);
    return FT_OK;
}
