"""GPU schedules (OpenCL and CUDA targets): one dispatch point, `schedule_group`.

    s = schedule_group(get_op("nn.dense"), outs, target, config)   # the op's GPU schedule

The ops with a GPU schedule of their own have a strategy per GPU strategy key ("cuda",
"opencl": `topi/gpu/strategy.py`, loaded by `target.load_strategies`) whose schedule rule
(`op.schedule(key)`) takes the config the strategy chose (the graph build's `group_config`: a
config given to the build, else the default); every other op gets
`schedule.schedule_default` (one thread per output element, element-wise producers inlined).
"""

from __future__ import annotations

from tessera.topi.gpu.schedule import schedule_default


def schedule_group(op, outs, target, config=None):
    """The schedule of a group anchored by `op` (a graph Op) for a GPU target: the op's rule
    for the target's most specific GPU strategy key, taking `config`, else the default."""
    from tessera.target import load_strategies

    keys = [k for k in target.kind_info.keys(target) if k != "generic"]
    load_strategies(keys)
    for key in keys:
        rule = op.rules.get(f"schedule:{key}")
        if rule is not None:
            return rule(list(outs), target, config=config)
    return schedule_default(list(outs), target)


__all__ = ["schedule_default", "schedule_group"]
