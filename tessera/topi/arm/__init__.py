"""ARM (aarch64 NEON, SVE cores, armv7 NEON) strategies: the strategy key "arm".

- strategy.py: the register-tile rule of a load-store machine (Note [arm register tile]) and
  the strategies of conv2d, dense, matmul and batch_matmul built on it, with the schedule rules
  under "arm" that take those defaults. The kernels (computes and schedules) are the CPU ones of
  `topi/x86` (their rules are over the vector width and register file); what differs on ARM is
  how many registers a tile takes, so the defaults differ, not the code. Also the "arm"
  strategy of qnn.dense: "mmla" on cores with I8MM, else "panels" (the cpu int8 kernel).
- int8_mmla.py: qnn.dense_mmla, the int8 dense on I8MM's usmmla (Note [i8mm matrix step]):
  its weight packing, compute, schedule and graph op.

`tessera.target.load_strategies` imports strategy.py when an ARM target (by its triple, the
target table's `cpu_strategy_keys`) asks; ops without an "arm" strategy take the "cpu" ones.
"""
