import os

import pytest

# Triton kernels run on the CPU through the interpreter in tests (CI has no GPU).
os.environ.setdefault("TRITON_INTERPRET", "1")

_COMPILED_SKIP = (
    "TRITON_INTERPRET=0: this process compiles the Triton kernels for the GPU, and the CPU tests run "
    "them on CPU tensors through the interpreter (triton.jit chooses when it decorates, so one process "
    "cannot do both). Run the GPU tests with -m gpu, the rest without TRITON_INTERPRET=0."
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under TRITON_INTERPRET=0 skip, with the reason, every test that is neither a GPU test nor a
    benchmark (before: about 230 of them failed launching GPU-compiled kernels on CPU tensors)."""
    if os.environ["TRITON_INTERPRET"] == "1":
        return
    skip = pytest.mark.skip(reason=_COMPILED_SKIP)
    for item in items:
        if "gpu" not in item.keywords and "benchmarks" not in item.path.parts:
            item.add_marker(skip)


@pytest.fixture
def emulated_cusparselt(monkeypatch):
    """SparseLinear takes its cuSPARSELt path on the CPU: our packing kernels run (through the
    interpreter) and the 2:4 GEMM multiplies the unpacked operand."""
    import kernels.layers.sparse_linear as sl_mod
    import kernels.ops.sparse_gemm as sg_mod
    from kernels.ops.cslt_pack import cslt_unpack_reference

    def mm_packed(packed, a_shape, b, *, transpose_result=False, bias=None):
        y = cslt_unpack_reference(packed, *a_shape).float() @ b.float()
        if bias is not None:
            y = y + bias.float()[:, None]
        y = y.to(b.dtype)
        return y.t().contiguous() if transpose_result else y

    monkeypatch.setattr(sl_mod, "cslt_refusal", lambda *a, **k: None)
    monkeypatch.setattr(sl_mod, "cslt_mm_packed", mm_packed)
    monkeypatch.setattr(sg_mod, "layout_matches", lambda device, dtype: True)
    return True


@pytest.fixture
def plain_torch(monkeypatch):
    """Run the plain-PyTorch paths of the kernels (fast on CPU; the Triton paths are covered by
    the exact tests, which run them through the interpreter). SR-STE's per-forward 2:4 mask too,
    eager and compiled (``nm_mask``): interpreted, it took about 23 s a forward of a 2-layer
    GPT-2, 430 s of one compile test; ``test_sparse_linear_numerics``, ``test_nm_mask`` and
    ``test_sparse_linear_compile``'s opcheck run its Triton path."""
    import kernels.ops.compile_ops as co_mod
    import kernels.ops.masked_decay as md_mod
    import kernels.ops.mvue as mvue_mod
    import kernels.ops.nm_mask as nm_mod
    import kernels.ops.transposable as tr_mod

    for mod in (mvue_mod, md_mod, tr_mod, nm_mod, co_mod):
        monkeypatch.setattr(mod, "use_triton", lambda t: False)
    return True
