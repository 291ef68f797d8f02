/* tessera runtime library: a persistent thread pool for parallel loops, and aligned allocation.
 *
 * Note [the pool]
 * Workers are created once, lazily, by the first parallel call that needs them (and again only
 * when the thread count changes or after fork). A call publishes its job in `pool`, then bumps the
 * atomic `generation`; each worker waits for the generation to move past the last one it saw,
 * runs its chunk (worker k runs chunk k; the caller runs chunk 0) and decrements `pending`. The
 * caller returns once `pending` is 0, so every worker has acknowledged a job before the next
 * one is published: job fields are never written while a worker may read them.
 *
 * Waiting spins briefly (a kernel launched right after another finds its workers awake), then
 * blocks on a condition variable so idle workers cost no CPU. A sleeper announces itself in a
 * counter before its final check, and the waker bumps the generation before reading the counter;
 * both are sequentially consistent, so at least one of them sees the other: no lost wake-ups.
 */
#define _GNU_SOURCE
#include "tessera_rt.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#define TESSERA_MAX_THREADS 512
#define TESSERA_SPIN_ITERS 4096

#if defined(__x86_64__) || defined(__i386__)
#define cpu_relax() __builtin_ia32_pause()
#elif defined(__aarch64__)
#define cpu_relax() __asm__ __volatile__("yield")
#else
#define cpu_relax() ((void)0)
#endif

struct pool {
  pthread_mutex_t call_lock;  /* held by the one thread whose job the workers run */
  pthread_mutex_t sleep_lock; /* guards the two condition variables below */
  pthread_cond_t wake_cond;   /* idle workers sleep here */
  pthread_cond_t done_cond;   /* the caller sleeps here while workers finish */
  atomic_uint_fast64_t generation;
  atomic_int sleeping_workers;
  atomic_int caller_sleeping;
  atomic_int pending; /* workers that have not yet acknowledged the current job */
  atomic_int stop;    /* set (with a generation bump) to make every worker exit */
  atomic_int result;  /* first nonzero return code of the current job */
  /* The current job: written by the caller under call_lock before the generation bump. */
  int64_t extent;
  int64_t nchunks;
  tessera_parallel_body body;
  void* closure;
  int nworkers;
  pthread_t threads[TESSERA_MAX_THREADS];
};

static struct pool pool = {
    .call_lock = PTHREAD_MUTEX_INITIALIZER,
    .sleep_lock = PTHREAD_MUTEX_INITIALIZER,
    .wake_cond = PTHREAD_COND_INITIALIZER,
    .done_cond = PTHREAD_COND_INITIALIZER,
};
static atomic_int desired_threads; /* 0: not set yet, use the available cores */
static _Thread_local int in_parallel; /* set in workers and in a caller running its chunk */
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

static int available_cores(void) {
#ifdef __linux__
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
#endif
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (int)n : 1;
}

static int clamp_threads(int64_t n) {
  if (n < 1) return 1;
  return n > TESSERA_MAX_THREADS ? TESSERA_MAX_THREADS : (int)n;
}

int32_t tessera_get_num_threads(void) {
  int n = atomic_load(&desired_threads);
  return n > 0 ? n : clamp_threads(available_cores());
}

/* Run chunk `i` of the current job: contiguous, sizes differ by at most one. */
static void run_chunk(int64_t i) {
  int64_t base = pool.extent / pool.nchunks, rem = pool.extent % pool.nchunks;
  int64_t begin = i * base + (i < rem ? i : rem);
  int64_t end = begin + base + (i < rem ? 1 : 0);
  int32_t rc = pool.body(begin, end, pool.closure);
  if (rc != 0) {
    int expected = 0;
    atomic_compare_exchange_strong(&pool.result, &expected, rc);
  }
}

static uint64_t wait_for_generation(uint64_t seen) {
  uint64_t g;
  for (int i = 0; i < TESSERA_SPIN_ITERS; i++) {
    g = atomic_load_explicit(&pool.generation, memory_order_acquire);
    if (g != seen) return g;
    cpu_relax();
  }
  pthread_mutex_lock(&pool.sleep_lock);
  atomic_fetch_add(&pool.sleeping_workers, 1);
  while ((g = atomic_load(&pool.generation)) == seen) {
    pthread_cond_wait(&pool.wake_cond, &pool.sleep_lock);
  }
  atomic_fetch_sub(&pool.sleeping_workers, 1);
  pthread_mutex_unlock(&pool.sleep_lock);
  return g;
}

static void wake_workers(void) {
  atomic_fetch_add(&pool.generation, 1);
  if (atomic_load(&pool.sleeping_workers) > 0) {
    pthread_mutex_lock(&pool.sleep_lock);
    pthread_cond_broadcast(&pool.wake_cond);
    pthread_mutex_unlock(&pool.sleep_lock);
  }
}

static void wait_for_workers(void) {
  for (int i = 0; i < TESSERA_SPIN_ITERS; i++) {
    if (atomic_load_explicit(&pool.pending, memory_order_acquire) == 0) return;
    cpu_relax();
  }
  pthread_mutex_lock(&pool.sleep_lock);
  atomic_store(&pool.caller_sleeping, 1);
  while (atomic_load(&pool.pending) != 0) pthread_cond_wait(&pool.done_cond, &pool.sleep_lock);
  atomic_store(&pool.caller_sleeping, 0);
  pthread_mutex_unlock(&pool.sleep_lock);
}

static void acknowledge_job(void) {
  if (atomic_fetch_sub(&pool.pending, 1) == 1 && atomic_load(&pool.caller_sleeping)) {
    pthread_mutex_lock(&pool.sleep_lock);
    pthread_cond_signal(&pool.done_cond);
    pthread_mutex_unlock(&pool.sleep_lock);
  }
}

struct worker_start {
  int64_t chunk;
  uint64_t generation; /* the generation current when the worker was created */
};

static void* worker_main(void* arg) {
  struct worker_start start = *(struct worker_start*)arg;
  free(arg);
  in_parallel = 1; /* a parallel_for from inside a body runs inline */
  uint64_t seen = start.generation;
  for (;;) {
    seen = wait_for_generation(seen);
    if (atomic_load(&pool.stop)) {
      acknowledge_job();
      return NULL;
    }
    if (start.chunk < pool.nchunks) run_chunk(start.chunk);
    acknowledge_job();
  }
}

/* Called with call_lock held: make every worker exit and join them. */
static void stop_workers(void) {
  if (pool.nworkers == 0) return;
  atomic_store(&pool.stop, 1);
  atomic_store(&pool.pending, pool.nworkers);
  wake_workers();
  for (int i = 0; i < pool.nworkers; i++) pthread_join(pool.threads[i], NULL);
  atomic_store(&pool.stop, 0);
  pool.nworkers = 0;
}

/* After fork only the forking thread exists in the child: forget the parent's workers. */
static void reset_after_fork(void) {
  pthread_mutex_init(&pool.call_lock, NULL);
  pthread_mutex_init(&pool.sleep_lock, NULL);
  pthread_cond_init(&pool.wake_cond, NULL);
  pthread_cond_init(&pool.done_cond, NULL);
  atomic_store(&pool.sleeping_workers, 0);
  atomic_store(&pool.caller_sleeping, 0);
  atomic_store(&pool.pending, 0);
  atomic_store(&pool.stop, 0);
  pool.nworkers = 0;
  in_parallel = 0;
}

static void register_atfork(void) { pthread_atfork(NULL, NULL, reset_after_fork); }

/* Called with call_lock held: have exactly `want` workers (fewer if the system refuses). */
static void ensure_workers(int want) {
  if (pool.nworkers == want) return;
  pthread_once(&atfork_once, register_atfork);
  stop_workers();
  uint64_t generation = atomic_load(&pool.generation);
  for (int i = 0; i < want; i++) {
    struct worker_start* start = malloc(sizeof *start);
    if (start == NULL) break;
    start->chunk = i + 1;
    start->generation = generation;
    if (pthread_create(&pool.threads[i], NULL, worker_main, start) != 0) {
      free(start);
      break;
    }
    pool.nworkers = i + 1;
  }
}

/* Retire the workers now (after a running loop ends) if their number is wrong; the next
 * parallel call creates the right number. From inside a loop body, only record the number. */
void tessera_set_num_threads(int32_t n) {
  int want = clamp_threads(n);
  atomic_store(&desired_threads, want);
  if (in_parallel) return;
  pthread_mutex_lock(&pool.call_lock);
  if (pool.nworkers != want - 1) stop_workers();
  pthread_mutex_unlock(&pool.call_lock);
}

int32_t tessera_parallel_for(int64_t extent, tessera_parallel_body body, void* closure) {
  if (extent <= 0) return 0;
  int nthreads = tessera_get_num_threads();
  if (in_parallel || extent == 1 || nthreads == 1) return body(0, extent, closure);
  /* Another thread owns the pool: rather than wait for it, do the work on this thread. */
  if (pthread_mutex_trylock(&pool.call_lock) != 0) return body(0, extent, closure);
  ensure_workers(nthreads - 1);
  int64_t total = (int64_t)pool.nworkers + 1;
  pool.extent = extent;
  pool.nchunks = extent < total ? extent : total;
  pool.body = body;
  pool.closure = closure;
  atomic_store(&pool.result, 0);
  atomic_store(&pool.pending, pool.nworkers);
  wake_workers();
  in_parallel = 1;
  run_chunk(0);
  in_parallel = 0;
  wait_for_workers();
  int32_t rc = atomic_load(&pool.result);
  pthread_mutex_unlock(&pool.call_lock);
  return rc;
}

void* tessera_alloc(int64_t nbytes) {
  void* ptr = NULL;
  size_t size = nbytes > 0 ? (size_t)nbytes : 1; /* a zero-byte buffer still gets a pointer */
  if (posix_memalign(&ptr, 64, size) != 0) return NULL;
  return ptr;
}

void tessera_free(void* ptr) { free(ptr); }
