"""Kernels of microcontroller targets (strategy key "micro", `c -device=micro`): the Cortex-M
int8 convolution (int8.py) and its strategy (strategy.py). docs/micro.md."""
