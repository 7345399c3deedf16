/* runtime/core/context.c: the process-wide context (devices, pools, streams, RNG, flags). */
#include "runtime/core/context.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "runtime/core/cuda.h"

#define VL_DEFAULT_SEED 67280421310721ULL

/* Statically initialised so that the RNG and flags have their defaults before vl_init. */
static vl_context g_ctx = {.seed = VL_DEFAULT_SEED};

vl_context *vl_ctx(void) { return &g_ctx; }

/* Host tensors are fresh aligned_alloc blocks, and glibc's defaults hand every block of 128 KiB
 * or more to mmap and return it at free: each op's output then page-faults anew (4-5 ms per
 * 8 MiB, half the system time of a CPU BERT step). Blocks under 32 MiB stay in the heap and freed
 * memory is kept up to 1 GiB, so a step's outputs reuse the last step's pages. A user's own
 * GLIBC_TUNABLES malloc settings win. */
static void host_malloc_tuning(void) {
#if defined(__GLIBC__)
  const char *t = getenv("GLIBC_TUNABLES");
  if (t && strstr(t, "glibc.malloc.")) return;
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
#endif
}

vl_status vl_init(void) {
  if (g_ctx.initialized) return VL_OK;
  host_malloc_tuning();
  int n = vl_cuda_device_count();
  if (n < 0) n = 0;
  if (n > VL_MAX_DEVICES) n = VL_MAX_DEVICES;
  g_ctx.ndevices = n;
  g_ctx.initialized = true;
  return VL_OK;
}

void vl_shutdown(void) {
  /* Kernel state first: workspaces may be pool blocks. */
  if (g_ctx.hooks.backend_shutdown) g_ctx.hooks.backend_shutdown();
#ifdef VL_HAVE_CUDA
  vl_cuda_teardown();
#endif
  /* The RNG state, flags and the reclaim hook survive a shutdown/init cycle; device state not. */
  g_ctx.initialized = false;
  g_ctx.ndevices = 0;
  memset(g_ctx.pool, 0, sizeof g_ctx.pool);
  g_ctx.host_pool = NULL;
  memset(g_ctx.default_stream, 0, sizeof g_ctx.default_stream);
  memset(g_ctx.current_stream, 0, sizeof g_ctx.current_stream);
  memset(g_ctx.kernel_state, 0, sizeof g_ctx.kernel_state);
}

void vl_set_backend_hooks(void (*shutdown)(void), vl_status (*cuda_check_async)(int device)) {
  g_ctx.hooks.backend_shutdown = shutdown;
  g_ctx.hooks.cuda_check_async = cuda_check_async;
}

void vl_set_reclaim_hook(int (*reclaim)(void *ud), void *ud) {
  g_ctx.reclaim = reclaim;
  g_ctx.reclaim_ud = ud;
  for (int i = 0; i < VL_MAX_DEVICES; i++)
    if (g_ctx.pool[i]) vl_alloc_set_reclaim(g_ctx.pool[i], reclaim, ud);
  if (g_ctx.host_pool) vl_alloc_set_reclaim(g_ctx.host_pool, reclaim, ud);
}

void vl_set_cudnn_benchmark(bool on) { g_ctx.cudnn_benchmark = on; }
bool vl_cudnn_benchmark(void) { return g_ctx.cudnn_benchmark; }
void vl_set_deterministic(bool on) { g_ctx.deterministic = on; }

static int env_int(const char *name) {
  const char *v = getenv(name);
  if (!v || !*v) return 0;
  char *end;
  long x = strtol(v, &end, 10);
  return *end == '\0' && x > 0 && x < 100000 ? (int)x : 0;
}

/* Leading decimal digits of $name (Slurm writes "4(x2)"), or 0. */
static int env_lead_int(const char *name) {
  const char *v = getenv(name);
  if (!v) return 0;
  long x = 0;
  for (; *v >= '0' && *v <= '9' && x < 100000; v++) x = 10 * x + (*v - '0');
  return x > 0 && x < 100000 ? (int)x : 0;
}

int vl_cores_per_rank(void) {
  static int n;
  if (n == 0) {
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int local = env_int("OMPI_COMM_WORLD_LOCAL_SIZE");
    if (local == 0) local = env_int("MPI_LOCALNRANKS");
    if (local == 0) local = env_lead_int("SLURM_NTASKS_PER_NODE");
    if (local > 1) cores /= local;
    n = cores < 1 ? 1 : (int)cores;
  }
  return n;
}

int vl_num_threads(void) {
  if (g_ctx.cpu_threads > 0) return g_ctx.cpu_threads;
  static int dflt; /* read once: every parallel kernel asks */
  if (dflt == 0) {
    int n = env_int("V100LUA_NUM_THREADS");
    dflt = n > 0 ? n : vl_cores_per_rank();
  }
  return dflt;
}

void vl_set_num_threads(int n) { g_ctx.cpu_threads = n > 0 ? n : 0; }
vl_status vl_set_cuda_device(int index) {
  VL_TRY(vl_init());
  if (index < 0 || index >= g_ctx.ndevices)
    return vl_fail(VL_EDEVICE, "set_device: no CUDA device %d (%d visible; CUDA_VISIBLE_DEVICES selects them)", index,
                   g_ctx.ndevices);
  g_ctx.cuda_device = index;
  return VL_OK;
}
int vl_cuda_default_index(void) { return g_ctx.cuda_device; }
bool vl_deterministic(void) { return g_ctx.deterministic; }
