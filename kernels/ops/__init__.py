"""The ops layer: one module per kernel family, each entry point beside its plain-PyTorch
reference (``*_reference``), with the family's Triton twin in a private module next to it
(``flex`` / ``_flex_triton``, ``pivot`` / ``_pivot_triton``, ...), and the helpers the families
share in :mod:`kernels.ops.common`.

Nothing is re-exported here on purpose: the family modules carry the names of their main entry
points (``geglu``, ``nm_mask``), and a function re-exported under a submodule's name would shadow
it. Import from the family module (``from kernels.ops.geglu import geglu``) or from ``kernels``.
"""
