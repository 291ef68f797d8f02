"""The blocked layouts' transforms moved to `tessera/topi/layout.py` (they are not x86's own:
every target with NCHW[x]c kernels uses them); this name stays for code that imports it."""

from tessera.topi.layout import (  # noqa: F401
    Layout,
    blocked,
    layout_transform,
    transform_array,
    transform_shape,
)
