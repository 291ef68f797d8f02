/* Test kernels for the thread pool: each calls tessera_parallel_for and records what happened. */
#define _GNU_SOURCE
#include <stdint.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "tessera_rt.h"

static int64_t thread_id(void) { return (int64_t)syscall(SYS_gettid); }

struct record {
  int32_t* counts; /* how many times each index ran */
  int64_t* tids;   /* which thread ran each index */
};

static int32_t record_body(int64_t begin, int64_t end, void* closure) {
  struct record* r = closure;
  int64_t tid = thread_id();
  for (int64_t i = begin; i < end; i++) {
    __atomic_fetch_add(&r->counts[i], 1, __ATOMIC_RELAXED);
    r->tids[i] = tid;
  }
  return 0;
}

int32_t fill(int64_t extent, int32_t* counts, int64_t* tids) {
  struct record r = {counts, tids};
  return tessera_parallel_for(extent, record_body, &r);
}

struct nested {
  int64_t cols;
  int32_t* counts;    /* rows * cols */
  int32_t* inline_ok; /* per row: the inner call ran [0, cols) on the row's own thread */
};

struct inner {
  struct nested* outer;
  int64_t row;
  int64_t tid;
  int32_t calls;
};

static int32_t inner_body(int64_t begin, int64_t end, void* closure) {
  struct inner* in = closure;
  in->calls++;
  if (begin != 0 || end != in->outer->cols || thread_id() != in->tid) in->calls += 1000;
  for (int64_t j = begin; j < end; j++)
    __atomic_fetch_add(&in->outer->counts[in->row * in->outer->cols + j], 1, __ATOMIC_RELAXED);
  return 0;
}

static int32_t outer_body(int64_t begin, int64_t end, void* closure) {
  struct nested* n = closure;
  for (int64_t row = begin; row < end; row++) {
    struct inner in = {n, row, thread_id(), 0};
    int32_t rc = tessera_parallel_for(n->cols, inner_body, &in);
    if (rc != 0) return rc;
    n->inline_ok[row] = (in.calls == 1);
  }
  return 0;
}

int32_t nested(int64_t rows, int64_t cols, int32_t* counts, int32_t* inline_ok) {
  struct nested n = {cols, counts, inline_ok};
  return tessera_parallel_for(rows, outer_body, &n);
}

struct failing {
  int64_t bad_index; /* -1: every chunk fails with code begin + 1 */
  int32_t code;
};

static int32_t failing_body(int64_t begin, int64_t end, void* closure) {
  struct failing* f = closure;
  if (f->bad_index < 0) return (int32_t)(begin + 1);
  return (begin <= f->bad_index && f->bad_index < end) ? f->code : 0;
}

int32_t fail_at(int64_t extent, int64_t bad_index, int32_t code) {
  struct failing f = {bad_index, code};
  return tessera_parallel_for(extent, failing_body, &f);
}

/* Allocate, write every byte, return the address modulo 64 (or -1 if allocation failed). */
int64_t alloc_alignment(int64_t nbytes) {
  unsigned char* p = tessera_alloc(nbytes);
  if (p == 0) return -1;
  for (int64_t i = 0; i < nbytes; i++) p[i] = (unsigned char)i;
  int64_t rem = (int64_t)((uintptr_t)p % 64);
  tessera_free(p);
  return rem;
}

struct chunk_log {
  int64_t* begins; /* per body call, in the order the calls started */
  int64_t* ends;
  int64_t* tids;
  int64_t calls;
};

static int32_t log_body(int64_t begin, int64_t end, void* closure) {
  struct chunk_log* log = closure;
  int64_t k = __atomic_fetch_add(&log->calls, 1, __ATOMIC_RELAXED);
  log->begins[k] = begin;
  log->ends[k] = end;
  log->tids[k] = thread_id();
  return 0;
}

/* Run a loop whose body logs each call (the chunks); returns the number of calls. */
int64_t log_chunks(int64_t extent, int64_t* begins, int64_t* ends, int64_t* tids) {
  struct chunk_log log = {begins, ends, tids, 0};
  if (tessera_parallel_for(extent, log_body, &log) != 0) return -1;
  return log.calls;
}

struct slow_worker {
  int64_t caller;
  int64_t sleep_ns; /* how long a worker sleeps in each chunk it runs */
  int32_t worker_started;
  int32_t* counts;
  int64_t* tids;
};

static void sleep_ns(int64_t ns) {
  struct timespec t = {ns / 1000000000, ns % 1000000000};
  nanosleep(&t, 0);
}

static int32_t slow_worker_body(int64_t begin, int64_t end, void* closure) {
  struct slow_worker* s = closure;
  int64_t tid = thread_id();
  if (tid != s->caller) {
    __atomic_store_n(&s->worker_started, 1, __ATOMIC_SEQ_CST);
    sleep_ns(s->sleep_ns); /* a worker preempted in its chunk */
  } else if (begin == 0) {
    /* The caller's first chunk waits (5 s at most) until a worker is inside a chunk. */
    for (int i = 0; i < 5000 && !__atomic_load_n(&s->worker_started, __ATOMIC_SEQ_CST); i++)
      sleep_ns(1000000);
  }
  for (int64_t i = begin; i < end; i++) {
    __atomic_fetch_add(&s->counts[i], 1, __ATOMIC_RELAXED);
    s->tids[i] = tid;
  }
  return 0;
}

/* A loop whose workers are slow (each of their chunks sleeps `sleep` ns) once one has started. */
int32_t slow_worker(int64_t extent, int64_t sleep, int32_t* counts, int64_t* tids) {
  struct slow_worker s = {thread_id(), sleep, 0, counts, tids};
  return tessera_parallel_for(extent, slow_worker_body, &s);
}
