"""Read x86 assembly (AT&T syntax, `lib.get_source("asm")`) back: the innermost FMA loops.

    loops = [loop_summary(body) for body in fma_loops(asm)]   # [{"fma": 24, "stores": 0, ...}]

Tests and benchmarks use it to check that a micro-kernel's k loop is vectorized FMAs with its
accumulators in registers (no stores, no stack accesses = no spills).
"""

from __future__ import annotations


def fma_loops(asm: str, mnemonic: str = "fmadd") -> list[list[str]]:
    """The instructions of each innermost loop that does FMAs (or `mnemonic`: "vpmaddwd")."""
    lines = [ln.split("#")[0].strip() for ln in asm.splitlines()]
    labels = {ln[:-1]: n for n, ln in enumerate(lines) if ln.endswith(":")}
    loops = []  # (first, last) line of each loop: a label and a jump back to it
    for n, ln in enumerate(lines):
        parts = ln.split()
        if len(parts) == 2 and parts[0].startswith("j") and labels.get(parts[1], n) < n:
            loops.append((labels[parts[1]], n))
    innermost = [
        (a, b) for a, b in loops if not any(a <= c < d <= b and (c, d) != (a, b) for c, d in loops)
    ]
    bodies = [[x for x in lines[a + 1 : b + 1] if x and not x.endswith(":")] for a, b in innermost]
    return [body for body in bodies if any(mnemonic in x for x in body)]


def loop_summary(body: list[str]) -> dict[str, int]:
    """FMAs, memory stores and stack accesses (spills) among a loop's instructions."""
    stores = [
        x for x in body if "," in x and "(" in x.rsplit(",", 1)[1] and not x.startswith("cmp")
    ]
    # %rbp is the frame pointer only where nothing in the loop writes it: LLVM omits the frame
    # pointer and may give %rbp a weight panel's address, advanced by the loop (`addq $256, %rbp`)
    frame = ("(%rsp)",) if any(_writes(x, "%rbp") for x in body) else ("(%rsp)", "(%rbp)")
    return {
        "fma": sum("fmadd" in x for x in body),
        "stores": len(stores),
        "stack": sum(any(f in x for f in frame) for x in body),
    }


def _writes(instruction: str, register: str) -> bool:
    """Whether an AT&T instruction's destination (its last operand) is `register`."""
    parts = instruction.split(None, 1)
    return len(parts) == 2 and parts[1].rsplit(",", 1)[-1].strip() == register


def describe_fma_loops(asm: str) -> str:
    loops = [loop_summary(body) for body in fma_loops(asm)]
    if not loops:
        return "no FMA loop found (not x86, or no FMA)"
    counts = " + ".join(str(x["fma"]) for x in loops)
    stores, stack = sum(x["stores"] for x in loops), sum(x["stack"] for x in loops)
    return (
        f"{len(loops)} innermost loops with {counts} FMAs, {stores} stores, {stack} stack accesses"
    )
