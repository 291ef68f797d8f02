"""Linking a model compiled for another architecture: the target table's `cross_link` step.

    lib = tessera.build(mod, target="llvm -mtriple=aarch64-linux-gnu -mcpu=cortex-a76", ...)
    lib.export_library("model.so")   # linked by aarch64-linux-gnu-gcc, runtime included

The kernels and the generated entry are object code for the target (LLVM emits them as for the
host). What changes is who links them and what the library carries: export_library runs the
target's cross compiler (tessera/cross/toolchain.py), and the runtime's native part
(runtime/native/tessera_rt.c: the thread pool and allocator the kernels call) is compiled into
the library itself, because on the board no Python builds it: the library alone runs a model
from C (tessera/cross/runner.c) or from the runtime. When the runtime library is already loaded
(RTLD_GLOBAL), dynamic linking resolves the kernels' calls to that one, so there is still one pool.
"""

from __future__ import annotations

import functools

from tessera.cross.toolchain import is_foreign, toolchain_for
from tessera.target import Target


def runtime_c_source() -> str:
    """The runtime's native part (thread pool, allocator), as C for the target's compiler."""
    from tessera.runtime import native

    return (native.include_dir() / "tessera_rt.c").read_text()


# Note [SVE length guard]
# Kernels built for a fixed SVE vector length (Note [fixed-length SVE]) compute garbage at any
# other length. A library of such code asks Linux for its length when it is loaded (prctl
# PR_SVE_SET_VL, for the loading thread and the threads it starts later: the thread pool) and
# exports that length and the one the thread got, which runners check before calling anything
# (runner.c: a clear error on a core whose SVE is shorter).
SVE_GUARD_C = """\
#include <stdint.h>
#include <sys/prctl.h>
const int32_t tessera_sve_vector_bits = %d;
int32_t tessera_sve_vector_bits_now(void) {
    int vl = prctl(PR_SVE_GET_VL);
    return vl < 0 ? 0 : (vl & PR_SVE_VL_LEN_MASK) * 8;
}
__attribute__((constructor)) static void tessera_set_sve_length(void) {
    if (tessera_sve_vector_bits_now() != tessera_sve_vector_bits)
        prctl(PR_SVE_SET_VL, tessera_sve_vector_bits / 8);
}
"""


def export_settings(target: Target) -> dict:
    """What a Module of code for `target` needs so that export_library links it for `target`:
    {} for this machine's architecture; else its cross compiler (found, or reported missing,
    when export_library runs: building needs none) and the runtime's C to build in."""
    if not is_foreign(target):
        return {}
    sources = [runtime_c_source()]
    if target.sve_vector_bits is not None:
        sources.append(SVE_GUARD_C % target.sve_vector_bits)
    return {"compiler": functools.partial(cross_compiler, target), "c_sources": sources}


def cross_compiler(target: Target) -> list[str]:
    """The argv of `target`'s cross compiler; a clear error when there is none here."""
    return toolchain_for(target).compiler()


def link_cross(kernels, plan: dict, target: Target):
    """The llvm kind's cross_link: (runtime.Module that exports for `target`, None).

    The module's functions cannot run here (they raise a clear error); `export_library` links
    them with the cross compiler. Building needs no cross compiler (the sources can be read
    without one): a missing one is reported by export_library, with the Debian package."""
    import llvmlite.binding as llvm

    from tessera.codegen.aot import _assembly, emit_entry_llvm
    from tessera.codegen.llvm import build as B
    from tessera.runtime.module import Module

    entry_ll = emit_entry_llvm(plan, target)
    with B._lock:
        entry_obj = bytes(B.target_machine(target).emit_object(llvm.parse_assembly(entry_ll)))
    texts = [k.source for k in kernels] + [entry_ll]
    sources = {"ll": "\n".join(texts), "asm": lambda: _assembly(texts, target)}
    functions = {k.info.name: B._NotRunnable(k.info, target) for k in kernels}
    objects = [k.object for k in kernels] + [entry_obj]
    return Module(functions, sources, objects=objects, **export_settings(target)), None
