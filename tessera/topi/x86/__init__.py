"""x86 schedules and computes: blocked-layout convolutions (conv2d.py, pooling.py, layout.py),
dense/matmul (dense.py, batch_matmul.py), and what the rules ask of the CPU (cpu.py).

Each op registers its x86 schedule next to its other rules (`@op.schedule("x86")` in
`tessera/graph/ops`); the functions here are the computes and schedules those rules call.
"""
