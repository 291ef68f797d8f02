"""x86 (and, under the strategy key "cpu", any CPU's) kernels and strategies.

- strategy.py: the strategies (implementations, knobs, default rules, layout/packing hooks) of
  conv2d, dense/matmul/batch_matmul, pools and row reductions;
- ops.py: the graph ops only these kernels take (blocked convs and pools, packed dense), and the
  x86 schedules of the core ops;
- conv2d.py, winograd.py, pooling.py, dense.py, batch_matmul.py, softmax.py, norm.py: computes
  and schedules (each schedule takes the strategy's config, None: the hand rules); reduce.py:
  the schedule of the plain reductions (sum, mean, max, min, prod);
- cpu.py: what the rules ask of the CPU (vector registers, cache sizes).

`tessera.target.load_strategies` imports strategy.py when a target with the key asks.
"""
