/* tessera runtime library: a persistent thread pool for parallel loops, and aligned allocation.
 *
 * Note [the pool]
 * Workers are created once, lazily, by the first parallel call that needs them (and again only
 * when the thread count changes or after fork). A call publishes its job in `pool` (the loop cut
 * into up to JOB_CHUNKS_PER_THREAD contiguous chunks per thread), opens it in the atomic `job`,
 * then bumps the atomic `generation`. The caller runs chunk 0, then every thread in the job
 * claims the next chunk (`next_chunk`) until none is left. A worker joins the job by counting
 * itself in `job` while it is open and leaves when the chunks run out; the caller closes the job
 * once no worker is in it, so job fields are never written while a worker may read them, and a
 * worker that wakes late (preempted on a loaded machine) finds the job closed or done instead of
 * holding the caller up: the caller never waits for a worker that has not started.
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
#define JOB_OPEN ((int_fast64_t)1 << 62)
/* More chunks than threads let the threads that run share the work of those that do not. */
#define JOB_CHUNKS_PER_THREAD 4

#if defined(__x86_64__) || defined(__i386__)
#define cpu_relax() __builtin_ia32_pause()
#elif defined(__aarch64__)
#define cpu_relax() __asm__ __volatile__("yield")
#else
#define cpu_relax() ((void)0)
#endif

struct pool {
  pthread_mutex_t call_lock;  /* held by the one thread whose job the workers run */
  pthread_mutex_t sleep_lock; /* guards the condition variable below */
  pthread_cond_t wake_cond;   /* idle workers sleep here */
  atomic_uint_fast64_t generation;
  atomic_int sleeping_workers;
  atomic_int_fast64_t job;        /* JOB_OPEN while workers may join, + the workers in it */
  atomic_int_fast64_t next_chunk; /* the next chunk of the open job to claim */
  atomic_int stop;                /* set (with a generation bump) to make every worker exit */
  atomic_int result;              /* first nonzero return code of the current job */
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

/* Claim and run chunks of the current job until none is left. */
static void run_chunks(void) {
  int64_t i;
  while ((i = atomic_fetch_add(&pool.next_chunk, 1)) < pool.nchunks) run_chunk(i);
}

/* Join the open job, if any, help finish it and leave (Note [the pool]). */
static void join_job(void) {
  int_fast64_t s = atomic_load(&pool.job);
  do {
    if (!(s & JOB_OPEN)) return;
  } while (!atomic_compare_exchange_weak(&pool.job, &s, s + 1));
  run_chunks();
  atomic_fetch_sub(&pool.job, 1);
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

/* Close the current job once no worker is in it (a worker in it is running a chunk). */
static void close_job(void) {
  int_fast64_t open = JOB_OPEN;
  for (int i = 0; !atomic_compare_exchange_weak(&pool.job, &open, 0); i++) {
    open = JOB_OPEN;
    if (i < TESSERA_SPIN_ITERS) cpu_relax();
    else sched_yield(); /* a worker in the job was preempted: let it run */
  }
}

struct worker_start {
  uint64_t generation; /* the generation current when the worker was created */
};

static void* worker_main(void* arg) {
  struct worker_start start = *(struct worker_start*)arg;
  free(arg);
  in_parallel = 1; /* a parallel_for from inside a body runs inline */
  uint64_t seen = start.generation;
  for (;;) {
    seen = wait_for_generation(seen);
    if (atomic_load(&pool.stop)) return NULL;
    join_job();
  }
}

/* Called with call_lock held: make every worker exit and join them. */
static void stop_workers(void) {
  if (pool.nworkers == 0) return;
  atomic_store(&pool.stop, 1);
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
  atomic_store(&pool.sleeping_workers, 0);
  atomic_store(&pool.job, 0);
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
  int64_t chunks = ((int64_t)pool.nworkers + 1) * JOB_CHUNKS_PER_THREAD;
  pool.extent = extent;
  pool.nchunks = extent < chunks ? extent : chunks;
  pool.body = body;
  pool.closure = closure;
  atomic_store(&pool.result, 0);
  atomic_store(&pool.next_chunk, 1); /* chunk 0 is the caller's */
  atomic_store(&pool.job, JOB_OPEN);
  wake_workers();
  in_parallel = 1;
  run_chunk(0);
  run_chunks();
  in_parallel = 0;
  close_job();
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
