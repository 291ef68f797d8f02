/* tessera runtime library: a persistent thread pool for parallel loops, and aligned allocation.
 *
 * Note [the pool]
 * Workers are created once, lazily, by the first parallel call that needs them (and again only
 * when the thread count changes or after fork). A call publishes its job in `pool`, opens it in
 * the atomic `job`, then bumps the atomic `generation`. The caller runs the first chunk, then
 * every thread in the job claims the next chunk left (`claim`) until none is left. A worker
 * joins the job by counting itself in `job` while it is open and leaves when the chunks run out;
 * the caller closes the job once no worker is in it, so job fields are never written while a
 * worker may read them, and a worker that wakes late (preempted on a loaded machine) finds the
 * job closed or done instead of holding the caller up: the caller never waits for a worker that
 * has not started.
 *
 * Note [chunks]
 * Claims are guided: a claim takes 1/(GUIDED_SHARE * threads) of what is left, but no less than
 * 1/(MAX_CHUNKS_PER_THREAD * threads) of the loop. The first chunks are big (few claims, long
 * contiguous runs), the last are small, so when one thread runs slower (it shares its core with
 * another process) the others take over the rest of the loop in fine pieces; a loop makes at most
 * MAX_CHUNKS_PER_THREAD claims per thread. Chunk bounds depend only on the extent and the thread
 * count, not on which thread claims what.
 *
 * Note [waiting]
 * Every wait (a worker for the next job, the caller for workers still in its job) first spins
 * with `pause` for SPIN_NS, so a kernel launched right after another finds its workers awake;
 * then spins calling sched_yield until HOT_NS, so on a machine with more runnable threads than
 * cores a waiting thread hands its core to whoever needs it (often the very thread it waits for)
 * instead of burning it; then blocks on a condition variable, so idle threads cost no CPU.
 * A sleeper announces itself in a counter (or flag) before its final check, and the other side
 * changes the state before reading the counter; both are sequentially consistent, so at least
 * one of them sees the other: no lost wake-ups.
 *
 * Note [backing off]
 * On a machine with more runnable threads than cores, a worker is sometimes preempted inside
 * its chunk and the caller waits for a whole time slice of another thread (milliseconds, for a
 * loop of microseconds): a model of many short loops then runs slower on two threads than on
 * one. When a caller waits PREEMPTED_NS longer than its own part of the loop took, the loops
 * that start in the next `backoff_ns` run on the caller alone (their workers are not woken).
 * The back-off is a time, not a number of loops, because what takes a core away is a time: a
 * neighbour's time slice, or another runtime's threads spinning for a while after their run
 * (ONNX Runtime's spin ~30 ms of CPU). It is MIN_BACKOFF_NS, doubled each time the first loop
 * after a back-off is held up again (at most MAX_BACKOFF_NS), and forgiven by a loop that is
 * not. So a core busy for a while costs about as long again on one thread at most, however
 * many loops that is (a count of loops, as before, carried a back-off of up to 256 loops --
 * several inferences of a small model -- past the end of the disturbance); a core taken for
 * good costs one held-up loop (a time slice) per MAX_BACKOFF_NS, a few percent; an isolated
 * preemption, the common case (1 to 14 per hundred inferences of MobileNetV2 at load 4, next to
 * a process busy 30 ms in 100), costs 1 ms on one thread. The clock is read only while backing
 * off. On a quiet machine no loop is held up and nothing changes.
 */
#define _GNU_SOURCE
#include "tessera_rt.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define TESSERA_MAX_THREADS 512
#define JOB_OPEN ((int_fast64_t)1 << 62)
/* Note [chunks]: a claim takes 1/(GUIDED_SHARE * threads) of the rest, at least
 * 1/(MAX_CHUNKS_PER_THREAD * threads) of the loop. */
#define GUIDED_SHARE 2
#define MAX_CHUNKS_PER_THREAD 8
/* Note [waiting]: pure spinning covers the gap between back-to-back kernels (microseconds);
 * yielding spins keep workers hot between the loops of one inference; past HOT_NS they block. */
#define SPIN_NS 20000
#define HOT_NS 200000
/* Note [backing off]: a caller that waited this much longer than its own share of the loop took
 * was held up by a preempted worker; it then runs loops alone for 1 ms, doubling up to 64 ms. */
#define PREEMPTED_NS 200000
#define MIN_BACKOFF_NS 1000000
#define MAX_BACKOFF_NS 64000000
#define CLOCK_EVERY 16 /* read the clock every this many spins */

#if defined(__x86_64__) || defined(__i386__)
#define cpu_relax() __builtin_ia32_pause()
#elif defined(__aarch64__)
#define cpu_relax() __asm__ __volatile__("yield")
#else
#define cpu_relax() ((void)0)
#endif

struct pool {
  pthread_mutex_t call_lock;  /* held by the one thread whose job the workers run */
  pthread_mutex_t sleep_lock; /* guards the condition variables below */
  pthread_cond_t wake_cond;   /* idle workers sleep here */
  pthread_cond_t done_cond;   /* the caller sleeps here until the workers leave its job */
  atomic_uint_fast64_t generation;
  atomic_int sleeping_workers;
  atomic_int caller_waiting;
  atomic_int_fast64_t job;  /* JOB_OPEN while workers may join, + the workers in it */
  atomic_int_fast64_t next; /* the first index of the open job not claimed yet */
  atomic_int stop;          /* set (with a generation bump) to make every worker exit */
  atomic_int result;        /* first nonzero return code of the current job */
  /* The current job: written by the caller under call_lock before the generation bump. */
  int64_t extent;
  int64_t min_chunk;
  int64_t share; /* a claim takes 1/share of what is left */
  tessera_parallel_body body;
  void* closure;
  int nworkers;
  /* Note [backing off]; under call_lock. */
  int64_t serial_until; /* loops starting before this time (now_ns) run on the caller alone */
  int64_t backoff_ns;   /* the last back-off; 0 once a loop was not held up */
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

static int64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

struct backoff {
  int64_t start_ns;
  uint32_t spins;
};

/* One step of a wait (Note [waiting]): pause, or yield the core once SPIN_NS have passed;
 * returns 0 once HOT_NS have passed: time to block. */
static int backoff_step(struct backoff* b) {
  if (++b->spins % CLOCK_EVERY != 0) {
    cpu_relax();
    return 1;
  }
  int64_t waited = now_ns() - b->start_ns;
  if (waited >= HOT_NS) return 0;
  if (waited >= SPIN_NS) sched_yield();
  else cpu_relax();
  return 1;
}

/* The end of the chunk that starts at `begin` (Note [chunks]). */
static int64_t chunk_end(int64_t begin) {
  int64_t size = (pool.extent - begin) / pool.share;
  if (size < pool.min_chunk) size = pool.min_chunk;
  return size < pool.extent - begin ? begin + size : pool.extent;
}

static void run_chunk(int64_t begin, int64_t end) {
  int32_t rc = pool.body(begin, end, pool.closure);
  if (rc != 0) {
    int expected = 0;
    atomic_compare_exchange_strong(&pool.result, &expected, rc);
  }
}

/* Claim and run chunks of the current job until none is left. */
static void run_chunks(void) {
  int64_t begin = atomic_load_explicit(&pool.next, memory_order_relaxed);
  while (begin < pool.extent) {
    int64_t end = chunk_end(begin);
    if (atomic_compare_exchange_weak(&pool.next, &begin, end)) {
      run_chunk(begin, end);
      begin = end;
    }
  }
}

/* Join the open job, if any, help finish it and leave (Note [the pool]). */
static void join_job(void) {
  int_fast64_t s = atomic_load(&pool.job);
  do {
    if (!(s & JOB_OPEN)) return;
  } while (!atomic_compare_exchange_weak(&pool.job, &s, s + 1));
  run_chunks();
  if (atomic_fetch_sub(&pool.job, 1) == JOB_OPEN + 1 && atomic_load(&pool.caller_waiting)) {
    pthread_mutex_lock(&pool.sleep_lock);
    pthread_cond_broadcast(&pool.done_cond);
    pthread_mutex_unlock(&pool.sleep_lock);
  }
}

static uint64_t wait_for_generation(uint64_t seen) {
  struct backoff b = {now_ns(), 0};
  uint64_t g;
  while ((g = atomic_load_explicit(&pool.generation, memory_order_acquire)) == seen) {
    if (!backoff_step(&b)) break;
  }
  if (g != seen) return g;
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

/* Close the current job once no worker is in it (a worker in it is running a chunk). A worker
 * that stays in it past the hot window was preempted: sleep until the last one leaves. */
static void close_job(void) {
  struct backoff b = {now_ns(), 0};
  int_fast64_t open = JOB_OPEN;
  while (!atomic_compare_exchange_weak(&pool.job, &open, 0)) {
    open = JOB_OPEN;
    if (backoff_step(&b)) continue;
    pthread_mutex_lock(&pool.sleep_lock);
    atomic_store(&pool.caller_waiting, 1);
    while (atomic_load(&pool.job) != JOB_OPEN) {
      pthread_cond_wait(&pool.done_cond, &pool.sleep_lock);
    }
    atomic_store(&pool.caller_waiting, 0);
    pthread_mutex_unlock(&pool.sleep_lock);
    b = (struct backoff){now_ns(), 0}; /* a late worker may join (and leave at once) meanwhile */
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
  pthread_cond_init(&pool.done_cond, NULL);
  atomic_store(&pool.sleeping_workers, 0);
  atomic_store(&pool.caller_waiting, 0);
  atomic_store(&pool.job, 0);
  atomic_store(&pool.stop, 0);
  pool.nworkers = 0;
  pool.serial_until = pool.backoff_ns = 0;
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
  pool.serial_until = pool.backoff_ns = 0; /* a new setting starts afresh */
  if (pool.nworkers != want - 1) stop_workers();
  pthread_mutex_unlock(&pool.call_lock);
}

/* Called with call_lock held after a loop: the caller worked `work` ns, then waited `wait` ns,
 * until `end` (Note [backing off]). */
static void note_wait(int64_t work, int64_t wait, int64_t end) {
  if (wait - work <= PREEMPTED_NS) {
    pool.backoff_ns = 0;
    return;
  }
  int64_t backoff = pool.backoff_ns == 0 ? MIN_BACKOFF_NS : 2 * pool.backoff_ns;
  pool.backoff_ns = backoff < MAX_BACKOFF_NS ? backoff : MAX_BACKOFF_NS;
  pool.serial_until = end + pool.backoff_ns;
}

/* Called with call_lock held: whether this loop runs on the caller alone (Note [backing off]). */
static int backing_off(void) {
  if (pool.serial_until == 0) return 0;
  if (now_ns() < pool.serial_until) return 1;
  pool.serial_until = 0; /* the next loop probes; note_wait doubles or forgives */
  return 0;
}

int64_t tessera_backoff_ns(void) {
  pthread_mutex_lock(&pool.call_lock);
  int64_t backoff = pool.backoff_ns;
  pthread_mutex_unlock(&pool.call_lock);
  return backoff;
}

int32_t tessera_parallel_for(int64_t extent, tessera_parallel_body body, void* closure) {
  if (extent <= 0) return 0;
  int nthreads = tessera_get_num_threads();
  if (in_parallel || extent == 1 || nthreads == 1) return body(0, extent, closure);
  /* Another thread owns the pool: rather than wait for it, do the work on this thread. */
  if (pthread_mutex_trylock(&pool.call_lock) != 0) return body(0, extent, closure);
  if (backing_off()) {
    pthread_mutex_unlock(&pool.call_lock);
    return body(0, extent, closure);
  }
  ensure_workers(nthreads - 1);
  int64_t threads = (int64_t)pool.nworkers + 1, most = threads * MAX_CHUNKS_PER_THREAD;
  pool.extent = extent;
  pool.min_chunk = (extent + most - 1) / most;
  pool.share = threads * GUIDED_SHARE;
  pool.body = body;
  pool.closure = closure;
  int64_t first = chunk_end(0); /* the caller's, claimed before any worker can look */
  atomic_store(&pool.result, 0);
  atomic_store(&pool.next, first);
  atomic_store(&pool.job, JOB_OPEN);
  wake_workers();
  in_parallel = 1;
  int64_t start = now_ns();
  run_chunk(0, first);
  run_chunks();
  in_parallel = 0;
  int64_t done = now_ns();
  close_job();
  int64_t end = now_ns();
  note_wait(done - start, end - done, end);
  int32_t rc = atomic_load(&pool.result);
  pthread_mutex_unlock(&pool.call_lock);
  return rc;
}

/* Note [block cache]
 * A kernel built alone (not in a compiled model, whose scratch lives in the arena) allocates its
 * intermediate buffers on every call. Blocks of a few MiB come from mmap and go back to the OS
 * on free, so each call paid a page fault per 4 KiB (a winograd conv ran 5x slower alone than in
 * a model). Freed blocks of at least CACHE_MIN_BYTES are kept in a few slots (at most
 * CACHE_MAX_BYTES in all) and handed out again for requests they fit with at most 2x to spare.
 * Each block has a 64-byte header holding its size, so the pointer stays 64-byte aligned. */
#define CACHE_SLOTS 16
#define CACHE_MIN_BYTES ((size_t)64 << 10)
#define CACHE_MAX_BYTES ((size_t)256 << 20)
#define HEADER 64

static struct {
  pthread_mutex_t lock;
  void* block[CACHE_SLOTS]; /* the header's address, or NULL */
  size_t size[CACHE_SLOTS];
  size_t bytes;
} cache = {PTHREAD_MUTEX_INITIALIZER, {0}, {0}, 0};

static void* cache_take(size_t size) {
  int best = -1;
  pthread_mutex_lock(&cache.lock);
  for (int i = 0; i < CACHE_SLOTS; i++) {
    if (cache.block[i] && cache.size[i] >= size && cache.size[i] <= 2 * size &&
        (best < 0 || cache.size[i] < cache.size[best]))
      best = i;
  }
  void* block = NULL;
  if (best >= 0) {
    block = cache.block[best];
    cache.block[best] = NULL;
    cache.bytes -= cache.size[best];
  }
  pthread_mutex_unlock(&cache.lock);
  return block;
}

static int cache_keep(void* block, size_t size) {
  int kept = 0;
  pthread_mutex_lock(&cache.lock);
  if (cache.bytes + size <= CACHE_MAX_BYTES) {
    for (int i = 0; i < CACHE_SLOTS && !kept; i++) {
      if (!cache.block[i]) {
        cache.block[i] = block;
        cache.size[i] = size;
        cache.bytes += size;
        kept = 1;
      }
    }
  }
  pthread_mutex_unlock(&cache.lock);
  return kept;
}

void* tessera_alloc(int64_t nbytes) {
  size_t size = nbytes > 0 ? (size_t)nbytes : 1; /* a zero-byte buffer still gets a pointer */
  void* block = size >= CACHE_MIN_BYTES ? cache_take(size) : NULL;
  if (!block) {
    if (posix_memalign(&block, 64, size + HEADER) != 0) return NULL;
    *(size_t*)block = size;
  }
  return (char*)block + HEADER;
}

void tessera_free(void* ptr) {
  if (!ptr) return;
  void* block = (char*)ptr - HEADER;
  size_t size = *(size_t*)block;
  if (size >= CACHE_MIN_BYTES && cache_keep(block, size)) return;
  free(block);
}
