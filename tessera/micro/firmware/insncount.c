/* A QEMU TCG plugin (plugin API v1, QEMU >= 7.2) counting the guest instructions executed
 * between two marker functions: exact and deterministic, unlike time on an emulator.
 * Declares the few API entry points it uses itself (qemu-plugin.h is not packaged by Debian;
 * qemu-system-* exports them). Arguments: begin=ADDR,end=ADDR (entry addresses of
 * tessera_mark_begin/end in the firmware), out=FILE. For each begin..end pair it appends
 * "region K: N" (N: instructions from begin's entry up to, not including, end's entry) and
 * flushes, so the host reads a call's count as soon as the board replies. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef uint64_t qemu_plugin_id_t;
struct qemu_plugin_tb;
struct qemu_plugin_insn;
struct qemu_info_t;
enum qemu_plugin_cb_flags { QEMU_PLUGIN_CB_NO_REGS, QEMU_PLUGIN_CB_R_REGS, QEMU_PLUGIN_CB_RW_REGS };
enum qemu_plugin_op { QEMU_PLUGIN_INLINE_ADD_U64 };
typedef void (*tb_trans_cb_t)(qemu_plugin_id_t, struct qemu_plugin_tb*);
typedef void (*vcpu_udata_cb_t)(unsigned int vcpu_index, void* userdata);
typedef void (*udata_cb_t)(qemu_plugin_id_t id, void* userdata);
extern void qemu_plugin_register_vcpu_tb_trans_cb(qemu_plugin_id_t, tb_trans_cb_t);
extern size_t qemu_plugin_tb_n_insns(const struct qemu_plugin_tb*);
extern struct qemu_plugin_insn* qemu_plugin_tb_get_insn(const struct qemu_plugin_tb*, size_t);
extern uint64_t qemu_plugin_insn_vaddr(const struct qemu_plugin_insn*);
extern void qemu_plugin_register_vcpu_insn_exec_cb(struct qemu_plugin_insn*, vcpu_udata_cb_t,
                                                   enum qemu_plugin_cb_flags, void*);
extern void qemu_plugin_register_vcpu_insn_exec_inline(struct qemu_plugin_insn*,
                                                       enum qemu_plugin_op, void*, uint64_t);
extern void qemu_plugin_register_atexit_cb(qemu_plugin_id_t, udata_cb_t, void*);

__attribute__((visibility("default"))) int qemu_plugin_version = 1;

static uint64_t count, start, begin_addr = ~0ull, end_addr = ~0ull;
static int region, open_region;
static FILE* out;

static void on_begin(unsigned int vcpu, void* u) {
  (void)vcpu;
  (void)u;
  start = count;
  open_region = 1;
}

static void on_end(unsigned int vcpu, void* u) {
  (void)vcpu;
  (void)u;
  if (open_region) {
    fprintf(out, "region %d: %llu\n", region++, (unsigned long long)(count - start));
    fflush(out);
  }
  open_region = 0;
}

static void tb_trans(qemu_plugin_id_t id, struct qemu_plugin_tb* tb) {
  (void)id;
  size_t n = qemu_plugin_tb_n_insns(tb);
  for (size_t i = 0; i < n; i++) {
    struct qemu_plugin_insn* insn = qemu_plugin_tb_get_insn(tb, i);
    uint64_t pc = qemu_plugin_insn_vaddr(insn);
    /* registered before the inline add: the snapshot excludes the marker instruction */
    if (pc == begin_addr) qemu_plugin_register_vcpu_insn_exec_cb(insn, on_begin, QEMU_PLUGIN_CB_NO_REGS, NULL);
    if (pc == end_addr) qemu_plugin_register_vcpu_insn_exec_cb(insn, on_end, QEMU_PLUGIN_CB_NO_REGS, NULL);
    qemu_plugin_register_vcpu_insn_exec_inline(insn, QEMU_PLUGIN_INLINE_ADD_U64, &count, 1);
  }
}

static void at_exit(qemu_plugin_id_t id, void* u) {
  (void)id;
  (void)u;
  fprintf(out, "total: %llu\n", (unsigned long long)count);
  fclose(out);
}

__attribute__((visibility("default"))) int qemu_plugin_install(qemu_plugin_id_t id,
                                                                const struct qemu_info_t* info,
                                                                int argc, char** argv) {
  (void)info;
  out = stderr;
  for (int i = 0; i < argc; i++) {
    if (!strncmp(argv[i], "begin=", 6)) {
      begin_addr = strtoull(argv[i] + 6, NULL, 0) & ~1ull;
    } else if (!strncmp(argv[i], "end=", 4)) {
      end_addr = strtoull(argv[i] + 4, NULL, 0) & ~1ull;
    } else if (!strncmp(argv[i], "out=", 4)) {
      out = fopen(argv[i] + 4, "w");
      if (!out) return -1;
    } else {
      fprintf(stderr, "insncount: unknown argument %s\n", argv[i]);
      return -1;
    }
  }
  qemu_plugin_register_vcpu_tb_trans_cb(id, tb_trans);
  qemu_plugin_register_atexit_cb(id, at_exit, NULL);
  return 0;
}
