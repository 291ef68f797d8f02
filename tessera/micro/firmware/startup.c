/* Cortex-M startup for tessera's session firmware (M0/M3/M4/M7/M33/M55), built with
 * -nostartfiles: vector table, FPU (and MVE) enabled, .data copied, .bss zeroed, main().
 * Any fault or unexpected interrupt goes to tessera_fault (session.c), which reports it to
 * the host instead of hanging the board. */
#include <stdint.h>

extern uint32_t __etext_data, __data_start__, __data_end__, __bss_start__, __bss_end__;
extern uint32_t __StackTop;
extern int main(void);
extern void tessera_fault(uint32_t ipsr, const uint32_t* frame);
extern void tessera_exit(int code) __attribute__((noreturn));

void Reset_Handler(void);

/* The stacked frame (r0-r3, r12, lr, pc, xpsr) is on MSP or PSP: EXC_RETURN bit 2 says which. */
__attribute__((naked)) void Fault_Handler(void) {
  __asm__ volatile(
      "movs r0, #4\n\t"
      "mov r1, lr\n\t"
      "tst r0, r1\n\t"
      "beq 1f\n\t"
      "mrs r1, psp\n\t"
      "b 2f\n\t"
      "1: mrs r1, msp\n\t"
      "2: mrs r0, ipsr\n\t"
      "ldr r2, =tessera_fault\n\t"
      "bx r2\n\t");
}

__attribute__((section(".vectors"), used)) void (*const tessera_vectors[16])(void) = {
    (void (*)(void))&__StackTop, Reset_Handler,
    Fault_Handler, Fault_Handler, Fault_Handler, Fault_Handler, Fault_Handler, /* NMI..Usage */
    Fault_Handler, 0, 0, 0,                                  /* SecureFault (v8-M), reserved */
    Fault_Handler, Fault_Handler, 0, Fault_Handler, Fault_Handler, /* SVC DebugMon PendSV SysTick */
};

void Reset_Handler(void) {
#if defined(__ARM_FP) || defined(__ARM_FEATURE_MVE)
  /* CPACR (0xE000ED88): full access to CP10/CP11, the FPU (and MVE on the M55) */
  *(volatile uint32_t*)0xE000ED88u |= (0xFu << 20);
  __asm__ volatile("dsb\n\tisb");
#endif
#if defined(__ARM_ARCH_7EM__) || defined(__ARM_ARCH_7M__) || defined(__ARM_ARCH_8M_MAIN__) || \
    defined(__ARM_ARCH_8_1M_MAIN__)
  /* SHCSR (0xE000ED24): MemManage, BusFault and UsageFault get their own vectors, so the
     report names the fault (on the M0 every fault is a HardFault) */
  *(volatile uint32_t*)0xE000ED24u |= (7u << 16);
#endif
  uint32_t *src = &__etext_data, *dst = &__data_start__;
  while (dst < &__data_end__) *dst++ = *src++;
  for (dst = &__bss_start__; dst < &__bss_end__;) *dst++ = 0;
  tessera_exit(main());
}

/* crti/crtn are not linked (-nostartfiles); newlib's exit path references these. */
void _init(void) {}
void _fini(void) {}
