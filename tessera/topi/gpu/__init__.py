"""GPU schedules (OpenCL and CUDA targets): one dispatch point, `schedule_group`.

    s = schedule_group("nn.dense", outs, target)    # the op's GPU schedule, else the default

`SCHEDULES` maps an anchor op name to its GPU schedule; ops without one get
`schedule.schedule_default` (one thread per output element, element-wise producers inlined).
This is the one place the graph build asks (Note: the per-target strategy table being built in
parallel can take `SCHEDULES` as the GPU rows as it stands).
"""

from __future__ import annotations

from tessera.topi.gpu.conv2d import schedule_conv2d
from tessera.topi.gpu.dense import schedule_matmul
from tessera.topi.gpu.schedule import schedule_default

SCHEDULES: dict = {
    "nn.dense": schedule_matmul,
    "matmul": schedule_matmul,
    "nn.batch_matmul": schedule_matmul,
    "nn.conv2d": schedule_conv2d,
}


def schedule_group(anchor_op: str, outs, target):
    rule = SCHEDULES.get(anchor_op, schedule_default)
    return rule(list(outs), target)


__all__ = ["SCHEDULES", "schedule_default", "schedule_group"]
