/* A standalone run of the model on a board, the main of a generated board project
 * (tessera.micro.boards.board_project, `make run`): reads input_<k>.bin through semihosting
 * (zeros when a file is missing), runs every call, writes output_<k>.bin, and exits with 0,
 * 100 + k when call k failed, 93 on a fault. */
#include <stdint.h>

#include "semihost.h"
#include "tessera_model.h"

static uint8_t io[TESSERA_MODEL_IO_BYTES] __attribute__((aligned(16)));

__attribute__((noreturn)) void tessera_exit(int code) {
  tessera_sh_exit(code);
  for (;;) {
  }
}

void tessera_fault(uint32_t ipsr, const uint32_t* frame) {
  (void)ipsr;
  (void)frame;
  tessera_exit(93);
}

static void file_name(char* out, const char* stem, uint32_t k) {
  while (*stem) *out++ = *stem++;
  *out++ = (char)('0' + k / 10 % 10);
  *out++ = (char)('0' + k % 10);
  const char* ext = ".bin";
  while (*ext) *out++ = *ext++;
  *out = 0;
}

int main(void) {
  void* inputs[TESSERA_MODEL_NUM_INPUTS + 1];
  void* outputs[TESSERA_MODEL_NUM_OUTPUTS + 1];
  uint8_t* p = io;
  char name[32];
  for (uint32_t k = 0; k < TESSERA_MODEL_NUM_INPUTS; ++k) {
    inputs[k] = p;
    file_name(name, "input_", k);
    int32_t fd = tessera_sh_open(name, 1);
    if (fd >= 0) {
      tessera_sh_read(fd, p, tessera_model_input_bytes[k]);
      tessera_sh_close(fd);
    }
    p += (tessera_model_input_bytes[k] + 15u) & ~15u;
  }
  for (uint32_t k = 0; k < TESSERA_MODEL_NUM_OUTPUTS; ++k) {
    outputs[k] = p;
    p += (tessera_model_output_bytes[k] + 15u) & ~15u;
  }
  int32_t code = tessera_model_run_static(inputs, outputs);
  if (code != 0) return 100 + code - 1;
  for (uint32_t k = 0; k < TESSERA_MODEL_NUM_OUTPUTS; ++k) {
    file_name(name, "output_", k);
    int32_t fd = tessera_sh_open(name, 5);
    if (fd < 0 || tessera_sh_write(fd, outputs[k], tessera_model_output_bytes[k]) != 0) return 94;
    tessera_sh_close(fd);
  }
  return 0;
}
