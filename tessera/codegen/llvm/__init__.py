"""The LLVM code generator: tir PrimFuncs -> one LLVM module -> JIT / object code.

    from tessera.codegen.llvm import build_llvm
    mod = build_llvm([func], Target("llvm"))      # a runtime.Module

Files: `types.py` (dtypes, constants, casts), `emitter.py` (expressions and statements),
`intrinsics.py` + `vecmath.py` (intrinsic calls, inline vector math), `parallel.py` (outlined
parallel loops), `build.py` (entry functions, O3 pipeline, JIT, the runtime Module).
"""

from tessera.codegen.llvm.build import build_llvm, compile_llvm, target_machine

__all__ = ["build_llvm", "compile_llvm", "target_machine"]
