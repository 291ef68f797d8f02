/* Arm semihosting calls (the host's files through the debugger/emulator: QEMU with
 * -semihosting-config enable=on,target=native), shared by tessera's firmware mains. */
#ifndef TESSERA_SEMIHOST_H
#define TESSERA_SEMIHOST_H
#include <stdint.h>
#include <string.h>

static inline uint32_t tessera_semihost(uint32_t op, const void* arg) {
  register uint32_t r0 __asm__("r0") = op;
  register const void* r1 __asm__("r1") = arg;
  __asm__ volatile("bkpt 0xab" : "+r"(r0) : "r"(r1) : "memory");
  return r0;
}

/* SYS_OPEN: mode 1 is "rb", 5 is "wb"; a negative handle when it fails. */
static inline int32_t tessera_sh_open(const char* name, uint32_t mode) {
  uint32_t args[3] = {(uint32_t)(uintptr_t)name, mode, (uint32_t)strlen(name)};
  return (int32_t)tessera_semihost(0x01, args);
}

/* SYS_READ / SYS_WRITE: the number of bytes NOT transferred. */
static inline uint32_t tessera_sh_read(int32_t fd, void* data, uint32_t n) {
  uint32_t args[3] = {(uint32_t)fd, (uint32_t)(uintptr_t)data, n};
  return tessera_semihost(0x06, args);
}

static inline uint32_t tessera_sh_write(int32_t fd, const void* data, uint32_t n) {
  uint32_t args[3] = {(uint32_t)fd, (uint32_t)(uintptr_t)data, n};
  return tessera_semihost(0x05, args);
}

static inline void tessera_sh_close(int32_t fd) {
  uint32_t args[1] = {(uint32_t)fd};
  tessera_semihost(0x02, args);
}

/* SYS_EXIT_EXTENDED: QEMU exits with `code`. */
static inline void tessera_sh_exit(int code) {
  uint32_t block[2] = {0x20026u /* ADP_Stopped_ApplicationExit */, (uint32_t)code};
  tessera_semihost(0x20, block);
}

#endif
