/* The device side of a host-driven session (tessera/micro/session.py): a small request/reply
 * protocol over two host FIFOs opened through semihosting (SYS_OPEN/READ/WRITE), no printf.
 *
 * request  (host -> board): u32 command, u32 index, u32 nbytes, then nbytes of payload
 * reply    (board -> host): u32 magic "TSRB", u32 status, u32 nbytes, then nbytes of payload
 *
 * commands: 'H' hello (payload: u32 inputs, outputs, calls, then each input's and output's
 *           bytes), 'I' set input `index` (payload: its bytes), 'R' run every call, 'C' run
 *           call `index` alone, 'O' read output `index`, 'Q' quit.
 * status:   0 ok, 1 unknown command, 2 index out of range, 3 wrong payload size,
 *           4 a kernel returned nonzero (payload: u32 call, i32 code), 5 the core faulted
 *           (payload: u32 exception number, u32 call or -1, u32 pc).
 * Every call of the model runs between tessera_mark_begin() and tessera_mark_end(), whose
 * entry addresses the instruction-counting QEMU plugin (insncount.c) watches. */
#include <stdint.h>
#include <string.h>

#include "semihost.h"
#include "tessera_model.h"

#define MAGIC 0x42525354u /* "TSRB" little-endian */
enum { OK = 0, BAD_COMMAND = 1, BAD_INDEX = 2, BAD_SIZE = 3, KERNEL_FAILED = 4, FAULT = 5 };

__attribute__((noreturn)) void tessera_exit(int code) {
  tessera_sh_exit(code);
  for (;;) {
  }
}

static int32_t to_host = -1, from_host = -1;
static volatile int32_t current_call = -1;

static void write_all(const void* data, uint32_t n) {
  const uint8_t* p = (const uint8_t*)data;
  while (n > 0) {
    uint32_t left = tessera_sh_write(to_host, p, n);
    if (left >= n) tessera_exit(90); /* the host went away */
    p += n - left;
    n = left;
  }
}

static void read_all(void* data, uint32_t n) {
  uint8_t* p = (uint8_t*)data;
  while (n > 0) {
    uint32_t left = tessera_sh_read(from_host, p, n);
    if (left >= n) tessera_exit(91); /* end of file: the host closed the session */
    p += n - left;
    n = left;
  }
}

static void reply(uint32_t status, const void* payload, uint32_t n) {
  uint32_t head[3] = {MAGIC, status, n};
  write_all(head, sizeof head);
  if (n) write_all(payload, n);
}

/* the inputs and outputs, each 16-byte aligned, in one static block */
static uint8_t io[TESSERA_MODEL_IO_BYTES] __attribute__((aligned(16)));
static void* inputs[TESSERA_MODEL_NUM_INPUTS + 1];
static void* outputs[TESSERA_MODEL_NUM_OUTPUTS + 1];

__attribute__((noinline, used)) void tessera_mark_begin(void) { __asm__ volatile(""); }
__attribute__((noinline, used)) void tessera_mark_end(void) { __asm__ volatile(""); }

static int32_t run_call(int32_t k) {
  current_call = k;
  tessera_mark_begin();
  int32_t code = tessera_model_call(k, inputs, outputs);
  tessera_mark_end();
  current_call = -1;
  return code;
}

static void command_run(int32_t first, int32_t last) {
  for (int32_t k = first; k < last; ++k) {
    int32_t code = run_call(k);
    if (code != 0) {
      int32_t failed[2] = {k, code};
      reply(KERNEL_FAILED, failed, sizeof failed);
      return;
    }
  }
  if (first == 0 && last == TESSERA_MODEL_NUM_CALLS) {
    tessera_model_copy_outputs(inputs, outputs); /* as tessera_model_run_static does */
  }
  reply(OK, 0, 0);
}

static uint8_t payload_sink[64];

static void discard(uint32_t n) {
  while (n > 0) {
    uint32_t chunk = n < sizeof payload_sink ? n : sizeof payload_sink;
    read_all(payload_sink, chunk);
    n -= chunk;
  }
}

static void hello(void) {
  uint32_t info[3 + TESSERA_MODEL_NUM_INPUTS + TESSERA_MODEL_NUM_OUTPUTS];
  info[0] = TESSERA_MODEL_NUM_INPUTS;
  info[1] = TESSERA_MODEL_NUM_OUTPUTS;
  info[2] = TESSERA_MODEL_NUM_CALLS;
  for (uint32_t i = 0; i < TESSERA_MODEL_NUM_INPUTS; ++i) info[3 + i] = tessera_model_input_bytes[i];
  for (uint32_t i = 0; i < TESSERA_MODEL_NUM_OUTPUTS; ++i)
    info[3 + TESSERA_MODEL_NUM_INPUTS + i] = tessera_model_output_bytes[i];
  reply(OK, info, sizeof info);
}

int main(void) {
  from_host = tessera_sh_open("to_board", 1 /* "rb" */);
  to_host = tessera_sh_open("from_board", 5 /* "wb" */);
  if (from_host < 0 || to_host < 0) return 92;
  uint8_t* p = io;
  for (uint32_t i = 0; i < TESSERA_MODEL_NUM_INPUTS; ++i) {
    inputs[i] = p;
    p += (tessera_model_input_bytes[i] + 15u) & ~15u;
  }
  for (uint32_t i = 0; i < TESSERA_MODEL_NUM_OUTPUTS; ++i) {
    outputs[i] = p;
    p += (tessera_model_output_bytes[i] + 15u) & ~15u;
  }
  for (;;) {
    uint32_t head[3];
    read_all(head, sizeof head);
    uint32_t command = head[0], index = head[1], n = head[2];
    if (command == 'I') {
      if (index >= TESSERA_MODEL_NUM_INPUTS) {
        discard(n);
        reply(BAD_INDEX, 0, 0);
      } else if (n != tessera_model_input_bytes[index]) {
        discard(n);
        reply(BAD_SIZE, 0, 0);
      } else {
        read_all(inputs[index], n);
        reply(OK, 0, 0);
      }
      continue;
    }
    discard(n);
    if (command == 'H') {
      hello();
    } else if (command == 'R') {
      command_run(0, TESSERA_MODEL_NUM_CALLS);
    } else if (command == 'C') {
      if (index >= TESSERA_MODEL_NUM_CALLS) {
        reply(BAD_INDEX, 0, 0);
      } else {
        command_run((int32_t)index, (int32_t)index + 1);
      }
    } else if (command == 'O') {
      if (index >= TESSERA_MODEL_NUM_OUTPUTS) {
        reply(BAD_INDEX, 0, 0);
      } else {
        reply(OK, outputs[index], tessera_model_output_bytes[index]);
      }
    } else if (command == 'Q') {
      reply(OK, 0, 0);
      return 0;
    } else {
      reply(BAD_COMMAND, 0, 0);
    }
  }
}

/* Called by the fault vector (startup.c) with the stacked exception frame. */
void tessera_fault(uint32_t ipsr, const uint32_t* frame) {
  uint32_t info[3] = {ipsr & 0x1FFu, (uint32_t)current_call, frame ? frame[6] : 0u};
  if (to_host >= 0) reply(FAULT, info, sizeof info);
  tessera_exit(93);
}
