"""The graph ops, grouped by family. Importing this package registers all of them."""

from tessera.graph.ops import fused, image, layout, nn, reduce, tensor, transform  # noqa: F401
