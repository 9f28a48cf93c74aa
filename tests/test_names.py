"""Tests for k25trace.names.short_name on reference and real kernel names."""

from __future__ import annotations

from pathlib import Path

import pytest

from k25trace.names import MAX_LEN, short_name

REAL_NAMES = Path(__file__).parent / "data" / "kernel_names" / "real_names.tsv"


def real_names() -> list[str]:
    lines = REAL_NAMES.read_text(encoding="utf-8").splitlines()[2:]
    return [line.split("\t")[4] for line in lines]


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        # return type, template arguments and argument list dropped
        (
            "void vllm::rms_norm_kernel<c10::BFloat16, 8, 2>(c10::BFloat16*, c10::BFloat16 const*, "
            "long, long, long, long, long, c10::BFloat16 const*, float, int, int)",
            "vllm::rms_norm_kernel",
        ),
        (
            "void vllm::reshape_and_cache_flash_kernel<__nv_bfloat16, unsigned char, "
            "(vllm::Fp8KVCacheDataType)1>(__nv_bfloat16 const*, __nv_bfloat16 const*, unsigned char*, unsigned char*, "
            "long const*, long, long, long, long, long, int, int, int, float const*, float const*)",
            "vllm::reshape_and_cache_flash_kernel",
        ),
        (
            "void marlin_moe_wna16::Marlin<__nv_bfloat16, 1125899906843648l, 1125899906909960l, "
            "256, 1, 8, 4, false, 4, 8, false>(int4 const*, int4 const*, int4*)",
            "marlin_moe_wna16::Marlin",
        ),
        ("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "ncclDevKernel_AllGather_RING_LL"),
        (
            "legacy::smxx::decode::get_mla_metadata_kernel(GetDecodeSchedMetaParams)",
            "legacy::smxx::decode::get_mla_metadata_kernel",
        ),
        # a return type that is itself a template: the function's own template group counts
        (
            "std::enable_if<(((8)>(0)))&&vllm::_typeConvert<c10::BFloat16>::exists, "
            "void>::type vllm::fused_add_rms_norm_kernel<c10::BFloat16, 8>(c10::BFloat16*, "
            "long, c10::BFloat16*, c10::BFloat16 const*, float, int, int)",
            "vllm::fused_add_rms_norm_kernel",
        ),
        (
            "std::enable_if<!(false), void>::type internal::gemvx::kernel<int, int, float, float, float, "
            "float, false, true, true, false, 7, cublasGemvParams<cublasGemvTensorStridedBatched<float const>, "
            "cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float>, "
            "float> >(cublasGemvParams<cublasGemvTensorStridedBatched<float const>, "
            "cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float>, float>)",
            "internal::gemvx::kernel",
        ),
        # (anonymous namespace) dropped
        (
            "void (anonymous namespace)::multimem_all_reduce_kernel<c10::BFloat16, "
            "16>(c10::BFloat16*, unsigned long, unsigned int**, unsigned long, unsigned long)",
            "multimem_all_reduce_kernel",
        ),
        (
            "void at::native::(anonymous namespace)::CatArrayBatchedCopy<float, unsigned int, 1, 128, 1>(float*, "
            "at::native::(anonymous namespace)::CatArrInputTensorMetadata<float, unsigned int, 128, 1>, "
            "at::native::(anonymous namespace)::TensorSizeStride<unsigned int, 4u>, int, unsigned int)",
            "at::native::CatArrayBatchedCopy",
        ),
        # generic launchers keep their first template argument, shortened the same way
        (
            "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_64x64_16x6_nn_align4>("
            "cutlass_80_tensorop_s1688gemm_64x64_16x6_nn_align4::Params)",
            "cutlass::Kernel<cutlass_80_tensorop_s1688gemm_64x64_16x6_nn_align4>",
        ),
        (
            "void cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_16x16_128x2_tn_align8>("
            "cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_16x16_128x2_tn_align8::Params)",
            "cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_16x16_128x2_tn_align8>",
        ),
        (
            "void cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<"
            "flash::CollectiveMainloopFwdSm90<2, cute::tuple<cute::C<1>>>>>>(flash::FlashAttnFwdSm90<…>::Params)",
            "cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnFwdSm90>>",
        ),
        (
            "void cutlass_cudnn_train::Kernel<cutlass_cudnn_train::reduction::kernel::ReduceSplitK<"
            "cutlass_cudnn_train::MatrixShape<4, 128>, int> >(int)",
            "cutlass_cudnn_train::Kernel<cutlass_cudnn_train::reduction::kernel::ReduceSplitK>",
        ),
        # PyTorch launchers keep the functor that names the operation
        (
            "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
            "at::detail::Array<char*, 1> >(int, at::native::FillFunctor<float>, at::detail::Array<char*, 1>)",
            "at::native::vectorized_elementwise_kernel<FillFunctor>",
        ),
        (
            "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::ArgMaxOps<float>, "
            "unsigned int, long, 4, 4> >(at::native::ReduceOp<float, "
            "at::native::ArgMaxOps<float>, unsigned int, long, 4, 4>)",
            "at::native::reduce_kernel<ArgMaxOps>",
        ),
        (
            "void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl<at::native::BinaryFunctor<float, "
            "float, float, at::native::binary_internal::MulFunctor<float> > >(at::TensorIteratorBase&, "
            "at::native::BinaryFunctor<float, float, float, at::native::binary_internal::MulFunctor<float> > "
            "const&)::{lambda(int)#1}>(int, at::native::gpu_kernel_impl<at::native::BinaryFunctor<float, float, float, "
            "at::native::binary_internal::MulFunctor<float> > >(at::TensorIteratorBase&, at::native::BinaryFunctor<float, "
            "float, float, at::native::binary_internal::MulFunctor<float> > const&)::{lambda(int)#1})",
            "at::native::elementwise_kernel<MulFunctor>",
        ),
        # still-mangled ROCm names
        (
            "_ZN5aiter24add_rmsnorm_quant_kernelIDF16bDF16bLi256ELi16ELb0ELb0ELb1ELi1EEEvPT0_PT_PfS4_S4_S4_diiiiiiib",
            "aiter::add_rmsnorm_quant_kernel",
        ),
        (
            "_ZN7sgl_hip10activation18act_and_mul_kernelI14__hip_bfloat16TnPFT_RKS3_EXadL_Z4siluIS2_ES3_S5_EEEEvPS3_PS4_i",
            "sgl_hip::activation::act_and_mul_kernel",
        ),
        (
            "_ZN7ck_tile6kentryILi1ENS_12Rmsnorm2dFwdINS_27Rmsnorm2dFwdPipelineOnePassIiEEEEEEvT0_",
            "ck_tile::kentry<Rmsnorm2dFwd>",
        ),
        # bare names, Tensile names, memcpy / memset kept
        ("nvjet_tst_64x64_64x16_2x1_2cta_v_bz_bias_TNT", "nvjet_tst_64x64_64x16_2x1_2cta_v_bz_bias_TNT"),
        ("triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_0", "triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_0"),
        (
            "Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT256x48x64_MI16x16x1_SN_LDSB1_AFC1_AFEM1_AFEM1_ASEM1_"
            "CLR1_CADS0_DTLA0_DTLB0_DTVA0_DTVB0_EPS0_FDSI0_GRPM1_GRVWA8_GRVWB4_GSUAMBSK_GLS0_ISA942_IU1_K1",
            "Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT256x48x64_MI16x16x1",
        ),
        ("Memcpy HtoD (Pinned -> Device)", "Memcpy HtoD (Pinned -> Device)"),
        ("Memcpy DtoD (Device -> Device)", "Memcpy DtoD (Device -> Device)"),
        ("Memset (Device)", "Memset (Device)"),
        ("cute_dsl_kernel_object_at_0x7f00_tensorptr_abc", "cute_dsl_kernel"),
    ],
    ids=lambda v: v[:50] if isinstance(v, str) else None,
)
def test_short_name(name, expected):
    assert short_name(name) == expected


@pytest.mark.parametrize("name", ["", "   ", "x" * 1000, "void " + "a<" * 300 + ">" * 300 + "(int)"])
def test_short_name_edge_cases_never_empty_or_long(name):
    s = short_name(name)
    assert s and len(s) <= MAX_LEN


def test_long_names_are_clipped_with_an_ellipsis():
    s = short_name("k" * 500)
    assert len(s) == MAX_LEN and s.endswith("…")


def test_real_names_short_and_readable():
    names = real_names()
    assert len(names) > 300
    bad = []
    for name in names:
        s = short_name(name)
        if not s or len(s) > MAX_LEN or s != s.strip():
            bad.append((name[:80], s))
            continue
        if name.startswith(("Memcpy", "Memset")):
            if s != name:
                bad.append((name, s))
            continue
        # no return type, no argument list, no leftover (anonymous namespace)
        if s.startswith(("void ", "std::enable_if")) or "(" in s or ")" in s or "anonymous" in s or " " in s:
            bad.append((name[:80], s))
    assert bad == []


def test_real_names_lose_template_noise():
    # templates only remain as one <Name> for launchers; never the raw type lists
    for name in real_names():
        if name.startswith(("Memcpy", "Memset")):
            continue
        s = short_name(name)
        assert "c10::" not in s and "__nv_bfloat16" not in s and "," not in s, (name[:80], s)
        assert s.count("<") == s.count(">")


def test_short_names_keep_kernels_apart():
    names = real_names()
    shorts = {short_name(n) for n in names}
    # many template instantiations collapse, but families stay distinct
    assert 100 < len(shorts) < len(names)
    assert "at::native::reduce_kernel<ArgMaxOps>" in shorts and "at::native::reduce_kernel<sum_functor>" in shorts
