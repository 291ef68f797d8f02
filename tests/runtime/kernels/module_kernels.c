/* Test kernels with tessera's calling convention: int32_t f(void** buffers, int64_t* vars). */
#include <stdint.h>
#include <string.h>

#include "tessera_rt.h"

/* myadd(A: float32[n], B: float32[n], C: float32[n]); vars: n */
int32_t myadd(void** buffers, int64_t* vars) {
  const float* A = buffers[0];
  const float* B = buffers[1];
  float* C = buffers[2];
  for (int64_t i = 0; i < vars[0]; i++) C[i] = A[i] + B[i];
  return 0;
}

/* scale(X: float32[n, 4], alpha: float32, k: int32, Y: float32[n, 4]); vars: alpha, k, n */
int32_t scale(void** buffers, int64_t* vars) {
  const float* X = buffers[0];
  float* Y = buffers[1];
  double alpha;
  memcpy(&alpha, &vars[0], sizeof alpha); /* floats travel as the bits of a float64 */
  for (int64_t i = 0; i < vars[2] * 4; i++) Y[i] = (float)(alpha * X[i] + (double)vars[1]);
  return 0;
}

/* always_fails(X: int32[3]) */
int32_t always_fails(void** buffers, int64_t* vars) {
  (void)buffers;
  (void)vars;
  return 42;
}

struct par_closure {
  const float* A;
  float* B;
};

static int32_t par_body(int64_t begin, int64_t end, void* closure) {
  struct par_closure* c = closure;
  for (int64_t i = begin; i < end; i++) c->B[i] = 2.0f * c->A[i];
  return 0;
}

/* par_double(A: float32[m], B: float32[m]); vars: m -- a parallel loop through the runtime */
int32_t par_double(void** buffers, int64_t* vars) {
  struct par_closure c = {buffers[0], buffers[1]};
  return tessera_parallel_for(vars[0], par_body, &c);
}

/* bf16_copy(A: bfloat16[8], B: bfloat16[8]) */
int32_t bf16_copy(void** buffers, int64_t* vars) {
  (void)vars;
  memcpy(buffers[1], buffers[0], 8 * sizeof(uint16_t));
  return 0;
}
