/* tessera runtime library: the parallel-for thread pool and aligned allocation.
 *
 * Compiled once by tessera.runtime.native and loaded with RTLD_GLOBAL, so kernels compiled by
 * tessera (JIT code and exported libraries) resolve these symbols at load time.
 * The contract is in docs/architecture.md ("Parallel loops and the runtime library").
 */
#ifndef TESSERA_RT_H_
#define TESSERA_RT_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The body of a parallel loop: run iterations [begin, end); return 0 on success. */
typedef int32_t (*tessera_parallel_body)(int64_t begin, int64_t end, void* closure);

/* Split [0, extent) into contiguous chunks (big ones first, then smaller, at most 8 per thread;
 * the caller runs the first, then each thread claims the next chunk left) and run `body` on each.
 * Returns 0, or the first nonzero code a chunk returned. A call made from inside a body, or while
 * another thread uses the pool, or in the pool's back-off, runs body(0, extent, closure) inline. */
int32_t tessera_parallel_for(int64_t extent, tessera_parallel_body body, void* closure);

/* Threads used by parallel loops (the caller included). Setting it waits for a running loop to
 * end and retires the workers; the next loop starts the new number. Called from inside a loop
 * body, it only takes effect at the next loop. */
void tessera_set_num_threads(int32_t n);
int32_t tessera_get_num_threads(void);

/* The pool's last back-off (Note [backing off] in tessera_rt.c): after a loop held up by a
 * preempted worker, the loops of the next this many ns run on the caller alone (1 ms, doubling
 * while the loop after it is held up again, at most 64 ms); 0 once a loop was not held up. For
 * tests and benchmarks. */
int64_t tessera_backoff_ns(void);

/* 64-byte aligned heap memory; tessera_alloc returns NULL when out of memory. */
void* tessera_alloc(int64_t nbytes);
void tessera_free(void* ptr);

#ifdef __cplusplus
}
#endif

#endif /* TESSERA_RT_H_ */
