"""Neural-network tensor operators: the te code behind the `nn.*` graph ops.

    from tessera.topi import nn
    y = nn.conv(x, w, strides=(1, 1), padding=(1, 1, 1, 1), dilation=(1, 1))   # te.Tensor
    s = nn.schedule_conv([y], target)

Each family lives in its own module (conv, pooling, dense, norm, softmax, activation); every
function takes te tensors and the op's attributes and returns te tensors, so te programs can use
them directly. `schedule` holds the generic schedules of the anchor ops.
"""

# ruff: noqa: F401 - this module re-exports the families
from tessera.topi.nn.activation import ACTIVATIONS, prelu
from tessera.topi.nn.conv import conv, conv_transpose
from tessera.topi.nn.dense import batch_matmul, dense, matmul
from tessera.topi.nn.norm import batch_norm, instance_norm, layer_norm, lrn
from tessera.topi.nn.pooling import global_pool, pool
from tessera.topi.nn.schedule import (
    schedule_conv,
    schedule_dense,
    schedule_lrn,
    schedule_pool,
    schedule_row_reduce,
)
from tessera.topi.nn.softmax import log_softmax, softmax
