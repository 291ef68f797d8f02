"""bench/fma_peak.py's loops measure what they say: the FMA chains and each int8 form of Note
[int8 peak] compile to their instructions, as many as the chains, with nothing spilled. No
timings."""

import collections

import llvmlite.binding as llvm
import pytest
from bench_modules import load_bench


def _load_bench():
    return load_bench("fma_peak")


fma_peak = _load_bench()


def _loop_instructions(ir: str, cpu: str) -> collections.Counter:
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    tm = llvm.Target.from_triple("x86_64-unknown-linux-gnu").create_target_machine(cpu=cpu, opt=3)
    asm = tm.emit_assembly(llvm.parse_assembly(ir))
    body = asm.split(".LBB0_1:")[1].split("\n.LBB0_2")[0]
    assert "rsp" not in body, "the loop touches the stack: a chain spilled"
    lines = [x.split()[0] for x in body.splitlines() if x.strip() and x.strip()[0] not in "#."]
    return collections.Counter(lines)


# (form, bits, cpu, the instructions of one chain step)
CASES = [
    ("pairs", 256, "haswell", {"vpmaddubsw": 1, "vpmaddwd": 1, "vpaddd": 1}),
    ("words", 256, "haswell", {"vpmaddwd": 1, "vpaddd": 1}),
    ("pairs", 512, "skylake-avx512", {"vpmaddubsw": 1, "vpmaddwd": 1, "vpaddd": 1}),
    ("vnni", 512, "cascadelake", {"vpdpbusd": 1}),
    ("vnni", 256, "cascadelake", {"vpdpbusd": 1}),
]


@pytest.mark.parametrize("form,bits,cpu,step", CASES)
def test_int8_forms_compile_to_their_instructions(form, bits, cpu, step):
    chains = 12
    ir, macs = fma_peak._int8_ir(form, bits, chains)
    assert macs == chains * bits // (16 if form == "words" else 8)
    counts = _loop_instructions(ir, cpu)
    for name, n in step.items():
        assert counts[name] == n * chains, counts


def test_fma_loop_compiles_to_fmas():
    counts = _loop_instructions(fma_peak._ir(8, 12), "haswell")
    assert sum(n for name, n in counts.items() if name.startswith("vfmadd")) == 12, counts


def test_forms_the_host_lacks_are_refused():
    missing = [f for f in fma_peak.INT8_FORMS if f not in fma_peak.int8_forms()]
    for form in missing:
        with pytest.raises(ValueError, match="not available"):
            fma_peak.measure_fma_peak(form=form)
    with pytest.raises(ValueError, match=">= 1"):
        fma_peak.measure_fma_peak(threads=0)
