"""The graph ops, grouped by family. Importing this package registers all of them."""

from tessera.graph.ops import (  # noqa: F401
    bits,
    control,
    fused,
    image,
    layout,
    nn,
    pool_indices,
    qnn,
    random,
    recurrent,
    reduce,
    sampling,
    scatter,
    sort,
    tensor,
    transform,
    vision,
)
