"""repro.kernel_profile: kernel names (as an H100 profile records them) land in the right category,
sums per category, and no silent empty breakdown (CPU device, no device events)."""

from __future__ import annotations

import pytest
import torch

import repro.kernel_profile as kp
from repro.kernel_profile import CATEGORIES, ORDER, REST, by_category, categorize, kernel_times

# names recorded on an H100 (torch 2.11, cuSPARSELt 0.8; results/tuning/h100_probe_kernel_profile.txt)
H100_KERNELS = {
    "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_bias_TNT": "GEMMs",
    "sm90_xmma_sparse_gemm_bf16bf16_bf16f32_f32_tn_t_tilesize128x256x64_cgasize2x1x1_warpgroupsize2x1x1_"
    "execute_segment_k_off_kernel_5x_cusparselt": "GEMMs",
    "_act_bwd_mvue_pack_kernel": "activation bwd + MVUE pack (fused)",
    "_gated_bwd_mvue_pack_kernel": "activation bwd + MVUE pack (fused)",
    "_mvue_pack_kernel": "MVUE pack",
    "_repack_pair_values_kernel": "weight refresh (prune + pack)",
    "_pack_kernel": "weight refresh (prune + pack)",
    "_decay_cast_pruned_kernel": "masked decay + grad cast",
    "void at::native::vectorized_elementwise_kernel<8, at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&, "
    "at::native::GeluType)::{lambda()#1}::operato": "activation",
    "void at::native::vectorized_elementwise_kernel<8, at::native::GeluBackwardCUDAKernelImpl(at::TensorIteratorBase&,"
    " at::native::GeluType)::{lambda()#1}:": "activation",
    "_bwd_flat_kernel": "activation",
    "void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::"
    "{lambda()#3}::operator()() const::{lambda()": "casts",
    "void at::native::vectorized_elementwise_kernel<8, at::native::bfloat16_copy_kernel_cuda(at::TensorIteratorBase&)"
    "::{lambda(float)#1}, std::array<char*,": "casts",
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, std::array<char*, 3ul> >("
    "int, at::native::CUDAFunctor_add<float>": REST,
    "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<c10::BFloat16, at::native::func_wrapper_t<float, "
    "at::native::sum_functor<c10::BFloat16, fl": REST,
    "Memset (Device)": REST,
}


@pytest.mark.parametrize("name", list(H100_KERNELS))
def test_recorded_kernel_names_land_in_their_category(name):
    assert categorize(name) == H100_KERNELS[name]


def test_order_lists_every_category_once():
    assert sorted(ORDER) == sorted([c for c, _ in CATEGORIES] + [REST])
    assert len(set(ORDER)) == len(ORDER)


def test_by_category_sums_and_lists_every_category():
    out = by_category([("_mvue_pack_kernel", 0.25), ("_mvue_pack_kernel", 0.5), ("Memset (Device)", 0.125)])
    assert list(out) == list(ORDER)
    assert out["MVUE pack"] == 0.75 and out[REST] == 0.125 and out["GEMMs"] == 0.0


def test_kernel_times_refuses_a_cpu_device():
    with pytest.raises(ValueError, match="CUDA"):
        kernel_times(lambda: None, torch.device("cpu"))


def test_kernel_times_refuses_an_empty_profile(monkeypatch):
    """No device events recorded (no CUPTI): an error, never an empty breakdown."""
    monkeypatch.setattr(kp, "_device_events", lambda prof: [])
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    with pytest.raises(RuntimeError, match="no device kernels"):
        kernel_times(lambda: None, torch.device("cuda"), warmup=1)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_gpu_kernel_times_sees_a_gemm():
    a = torch.randn(1024, 1024, device="cuda", dtype=torch.bfloat16)
    cats = by_category(kernel_times(lambda: a @ a, torch.device("cuda")))
    assert cats["GEMMs"] > 0
