"""What the generator writes, as data: the kernel names of a Kimi-K2.5 TP-N decode/prefill step, the category
of each (the project's classification categories), and each kernel's launch geometry; plus the model sizes
the durations are derived from.

The names are written as vLLM traces spell them (demangled, with their template arguments), so the rules in
``queries/kernel_rules.csv`` classify them as they would a real capture's.
"""

from __future__ import annotations

CATEGORIES = (
    "allreduce",
    "comm_other",
    "marlin_gemm",
    "gemm",
    "attention",
    "norm",
    "rotary",
    "activation",
    "moe_routing",
    "sampling",
    "memcpy",
    "memset",
    "elementwise",
)

# model sizes (Kimi-K2.5 / DeepSeek-V3 shape)
HIDDEN = 7168
VOCAB = 163840
N_EXPERTS = 384
TOPK = 8
MOE_INTER = 2048
DENSE_INTER = 18432

K_EMB = (
    "void at::native::(anonymous namespace)::indexSelectLargeIndex<c10::BFloat16, long, unsigned int, 2, 2, -2, "
    "true>(at::cuda::detail::TensorInfo<c10::BFloat16, unsigned int>, at::cuda::detail::TensorInfo<c10::BFloat16, "
    "unsigned int>, at::cuda::detail::TensorInfo<long, unsigned int>, int, int, unsigned int, unsigned int, long)"
)
K_NCCL_AR = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
K_CUSTOM_AR1 = (
    "void vllm::cross_device_reduce_1stage<__nv_bfloat16, 8>(vllm::RankData*, vllm::RankSignals, "
    "vllm::Signal*, __nv_bfloat16*, int, int)"
)
K_CUSTOM_AR2 = (
    "void vllm::cross_device_reduce_2stage<__nv_bfloat16, 8>(vllm::RankData*, vllm::RankSignals, "
    "vllm::Signal*, __nv_bfloat16*, int, int)"
)
K_NCCL_AG = "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
K_RMS = (
    "void vllm::rms_norm_kernel<c10::BFloat16, 8, 4>(c10::BFloat16*, c10::BFloat16 const*, long, "
    "c10::BFloat16 const*, float, int, int)"
)
K_FUSED_ADD_RMS = (
    "std::enable_if<(8>0)&&vllm::_typeConvert<c10::BFloat16>::exists, void>::type "
    "vllm::fused_add_rms_norm_kernel<c10::BFloat16, 8>(c10::BFloat16*, long, c10::BFloat16*, "
    "c10::BFloat16 const*, float, int, int)"
)
K_FUSED_A = (
    "void fused_a_gemm_kernel<__nv_bfloat16, 128, 16, 2112, 7168>(__nv_bfloat16*, __nv_bfloat16 const*, "
    "__nv_bfloat16 const*, int)"
)
K_QA_NVJET = "nvjet_tst_128x64_64x6_2x1_v_bz_TNT"
K_QB = "nvjet_tst_64x8_64x16_4x1_v_bz_splitK_TNT"
K_UK = "nvjet_tst_64x32_64x16_2x1_v_bz_TNN"
K_UV = "nvjet_tst_64x32_64x16_2x1_v_bz_NNN"
K_OPROJ = (
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize64x64x64_warpgroupsize1x1x1_execute_segment_k_off_"
    "kernel__5x_cublas"
)
K_ROTARY = (
    "void vllm::rotary_embedding_kernel<c10::BFloat16, false>(long const*, c10::BFloat16*, c10::BFloat16*, "
    "c10::BFloat16 const*, int, long, long, long, int, int, int)"
)
K_CACHE = (
    "void vllm::concat_and_cache_mla_kernel<__nv_bfloat16, __nv_bfloat16, (vllm::Fp8KVCacheDataType)0>("
    "__nv_bfloat16 const*, __nv_bfloat16 const*, __nv_bfloat16*, long const*, int, int, int, int, int, int, "
    "float const*)"
)
K_FMLA = (
    "void sm90::flash_fwd_splitkv_mla_kernel<sm90::Traits<cutlass::bfloat16_t>, false>(DecodingParams, "
    "sm90::TmaParams<cute::tuple<int, int, int> >)"
)
K_FMLA_COMBINE = "void flash_fwd_mla_combine_kernel<cutlass::bfloat16_t, 512, 8, 128, 256>(DecodingParams)"
K_MLA_META = "get_mla_metadata_kernel(Mla_metadata_params)"
K_ROUTER = "nvjet_tss_64x8_64x16_4x1_v_bz_splitK_TNT"
K_TOPK = (
    "void vllm::moe::grouped_topk_fused_kernel<float, __nv_bfloat16>(float*, int*, float const*, "
    "float const*, int, int, int, int, int, bool, double)"
)
K_ALIGN = (
    "void vllm::moe::moe_align_block_size_kernel<int>(int const*, int*, int*, int*, int, int, int, int, "
    "unsigned long, int*)"
)
_MARLIN_ARGS = (
    "(int4 const*, int4 const*, int4*, int4*, int4 const*, int4 const*, int4 const*, int const*, "
    "int const*, int const*, int const*, float const*, int, bool, bool, int, int, int, int, int, bool, "
    "bool, int, int*, bool, bool)"
)
K_MARLIN_W13 = (
    "void marlin_moe_wna16::Marlin<__nv_bfloat16, 1125899906843648l, 256, 1, 8, 8, false, 4, 8, true, "
    "8, false>" + _MARLIN_ARGS
)
K_MARLIN_W2 = (
    "void marlin_moe_wna16::Marlin<__nv_bfloat16, 1125899906843648l, 256, 1, 8, 4, false, 4, 8, true, "
    "8, false>" + _MARLIN_ARGS
)
K_ACT = (
    "void vllm::act_and_mul_kernel<c10::BFloat16, &(c10::BFloat16 vllm::silu_kernel<c10::BFloat16>("
    "c10::BFloat16 const&)), true>(c10::BFloat16*, c10::BFloat16 const*, int)"
)
K_MOESUM = "void vllm::moe::moe_sum_kernel<c10::BFloat16, 8>(c10::BFloat16*, c10::BFloat16 const*, int)"
K_SH_GU = "nvjet_tst_64x8_64x16_4x1_v_bz_TNN"
K_SH_DOWN = "nvjet_tst_64x8_64x16_2x1_v_bz_splitK_TNN"
K_DENSE_GU = "nvjet_tst_128x16_64x8_2x1_v_bz_TNN"
K_DENSE_DOWN = "nvjet_tst_128x16_64x8_1x1_v_bz_splitK_TNN"
K_ADD = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, "
    "std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, std::array<char*, 3ul>)"
)
K_LMHEAD = "nvjet_tst_256x128_64x4_2x1_v_bz_TNT"
K_KVB = "nvjet_tst_256x128_64x4_1x2_h_bz_TNN"
K_FA3 = (
    "void cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<"
    "flash::CollectiveMainloopFwdSm90<2, cute::tuple<cute::C<1>, cute::C<1>, cute::C<1> >, "
    "cute::tuple<cute::C<128>, cute::C<112>, cute::C<192> >, "
    "128, cutlass::bfloat16_t, float, cutlass::arch::Sm90, true, false, false, true, false, false, true, true, "
    "false, true, false, false>, flash::CollectiveEpilogueFwd<cute::tuple<cute::C<128>, cute::C<128>, "
    "cute::C<128> >, cute::tuple<cute::C<1>, cute::C<1>, cute::C<1> >, cutlass::bfloat16_t, cutlass::arch::Sm90, "
    "256, true, true, false, false>, flash::VarlenDynamicPersistentTileScheduler<128, 256, 128, false, true, "
    "true> > > >(flash::FlashAttnFwdSm90<flash::CollectiveMainloopFwdSm90<2, cute::tuple<cute::C<1>, cute::C<1>, "
    "cute::C<1> >, cute::tuple<cute::C<128>, cute::C<112>, cute::C<192> >, 128, cutlass::bfloat16_t, float, "
    "cutlass::arch::Sm90, true, false, false, true, false, false, true, true, false, true, false, false>, "
    "flash::CollectiveEpilogueFwd<cute::tuple<cute::C<128>, cute::C<128>, cute::C<128> >, cute::tuple<cute::C<1>, "
    "cute::C<1>, cute::C<1> >, cutlass::bfloat16_t, cutlass::arch::Sm90, 256, true, true, false, false>, "
    "flash::VarlenDynamicPersistentTileScheduler<128, 256, 128, false, true, true> >::Params)"
)
K_PREP_VARLEN = (
    "void flash::prepare_varlen_num_blocks_kernel<1, true>(int, int, int, int const*, int const*, "
    "int const*, int const*, int const*, int const*, int, int, int, int, int, cutlass::FastDivmod, "
    "cutlass::FastDivmod, int*, int*, int*, bool)"
)
K_SOFTMAX = (
    "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, "
    "at::native::(anonymous namespace)::SoftMaxForwardEpilogue>(float*, float const*, int)"
)
K_TOPK_SAMPLE = (
    "void at::native::sbtopk::gatherTopK<float, unsigned int, 2, false>("
    "at::cuda::detail::TensorInfo<float, unsigned int>, unsigned int, unsigned int, bool, unsigned int, "
    "unsigned int, "
    "at::cuda::detail::TensorInfo<float, unsigned int>, unsigned int, at::cuda::detail::TensorInfo<long, "
    "unsigned int>, unsigned int, float*)"
)
K_EXPONENTIAL = (
    "void at::native::(anonymous namespace)::distribution_elementwise_grid_stride_kernel<float, 4, "
    "at::native::templates::cuda::exponential_kernel<at::CUDAGeneratorImpl*>(at::TensorIteratorBase&, "
    "double, at::CUDAGeneratorImpl*)::{lambda()#1}::operator()() const::{lambda()#2}::operator()() "
    "const::{lambda(curandStatePhilox4_32_10*)#2}>(long, at::PhiloxCudaState, "
    "at::native::templates::cuda::exponential_kernel<at::CUDAGeneratorImpl*>(at::TensorIteratorBase&, "
    "double, at::CUDAGeneratorImpl*)::{lambda()#1}::operator()() const::{lambda()#2}::operator()() "
    "const::{lambda(curandStatePhilox4_32_10*)#2})"
)
K_ARGMAX = (
    "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::ArgMaxOps<float>, "
    "unsigned int, long, 4> >(at::native::ReduceOp<float, at::native::ArgMaxOps<float>, unsigned int, "
    "long, 4>)"
)
M_H2D = "Memcpy HtoD (Pinned -> Device)"
M_D2H = "Memcpy DtoH (Device -> Pinned)"
M_SET = "Memset (Device)"

KERNEL_CATEGORY = {
    K_EMB: "elementwise",
    K_NCCL_AR: "allreduce",
    K_CUSTOM_AR1: "allreduce",
    K_CUSTOM_AR2: "allreduce",
    K_NCCL_AG: "comm_other",
    K_RMS: "norm",
    K_FUSED_ADD_RMS: "norm",
    K_FUSED_A: "gemm",
    K_QA_NVJET: "gemm",
    K_QB: "gemm",
    K_UK: "gemm",
    K_UV: "gemm",
    K_OPROJ: "gemm",
    K_ROTARY: "rotary",
    K_CACHE: "attention",
    K_FMLA: "attention",
    K_FMLA_COMBINE: "attention",
    K_MLA_META: "attention",
    K_ROUTER: "gemm",
    K_TOPK: "moe_routing",
    K_ALIGN: "moe_routing",
    K_MARLIN_W13: "marlin_gemm",
    K_MARLIN_W2: "marlin_gemm",
    K_ACT: "activation",
    K_MOESUM: "moe_routing",
    K_SH_GU: "gemm",
    K_SH_DOWN: "gemm",
    K_DENSE_GU: "gemm",
    K_DENSE_DOWN: "gemm",
    K_ADD: "elementwise",
    K_LMHEAD: "gemm",
    K_KVB: "gemm",
    K_FA3: "attention",
    K_PREP_VARLEN: "attention",
    K_SOFTMAX: "sampling",
    K_TOPK_SAMPLE: "sampling",
    K_EXPONENTIAL: "sampling",
    K_ARGMAX: "sampling",
    M_H2D: "memcpy",
    M_D2H: "memcpy",
    M_SET: "memset",
}

# launch geometry per kernel: grid, block, registers per thread, shared memory (bytes)
GEOMETRY = {
    K_EMB: ((64, 1, 1), (128, 1, 1), 32, 0),
    K_NCCL_AR: ((16, 1, 1), (640, 1, 1), 96, 103808),
    K_CUSTOM_AR1: ((36, 1, 1), (512, 1, 1), 40, 0),
    K_CUSTOM_AR2: ((132, 1, 1), (512, 1, 1), 40, 0),
    K_NCCL_AG: ((11, 1, 1), (512, 1, 1), 96, 103808),
    K_RMS: ((1, 1, 1), (1024, 1, 1), 28, 0),
    K_FUSED_ADD_RMS: ((1, 1, 1), (1024, 1, 1), 32, 0),
    K_FUSED_A: ((132, 1, 1), (128, 1, 1), 168, 81920),
    K_QA_NVJET: ((33, 1, 1), (384, 1, 1), 168, 215040),
    K_QB: ((24, 1, 4), (128, 1, 1), 168, 164864),
    K_UK: ((8, 1, 8), (128, 1, 1), 154, 147456),
    K_UV: ((8, 1, 8), (128, 1, 1), 154, 147456),
    K_OPROJ: ((112, 1, 2), (128, 1, 1), 168, 99328),
    K_ROTARY: ((1, 1, 1), (512, 1, 1), 30, 0),
    K_CACHE: ((1, 1, 1), (576, 1, 1), 24, 0),
    K_FMLA: ((1, 8, 66), (256, 1, 1), 168, 230400),
    K_FMLA_COMBINE: ((1, 1, 8), (128, 1, 1), 72, 4096),
    K_MLA_META: ((1, 1, 1), (32, 1, 1), 40, 0),
    K_ROUTER: ((48, 1, 2), (128, 1, 1), 168, 164864),
    K_TOPK: ((1, 1, 1), (256, 1, 1), 64, 8192),
    K_ALIGN: ((2, 1, 1), (1024, 1, 1), 32, 3104),
    K_MARLIN_W13: ((132, 1, 1), (256, 1, 1), 167, 197632),
    K_MARLIN_W2: ((132, 1, 1), (256, 1, 1), 167, 197632),
    K_ACT: ((8, 1, 1), (256, 1, 1), 20, 0),
    K_MOESUM: ((1, 1, 1), (1024, 1, 1), 26, 0),
    K_SH_GU: ((8, 1, 4), (128, 1, 1), 168, 164864),
    K_SH_DOWN: ((56, 1, 2), (128, 1, 1), 168, 164864),
    K_DENSE_GU: ((36, 1, 1), (256, 1, 1), 168, 215040),
    K_DENSE_DOWN: ((56, 1, 2), (256, 1, 1), 168, 215040),
    K_ADD: ((7, 1, 1), (128, 1, 1), 24, 0),
    K_LMHEAD: ((80, 1, 1), (384, 1, 1), 168, 215040),
    K_KVB: ((128, 1, 1), (384, 1, 1), 168, 215040),
    K_FA3: ((132, 1, 1), (384, 1, 1), 128, 215040),
    K_PREP_VARLEN: ((1, 1, 1), (1024, 1, 1), 32, 0),
    K_SOFTMAX: ((1, 1, 1), (1024, 1, 1), 38, 0),
    K_TOPK_SAMPLE: ((1, 1, 1), (1024, 1, 1), 40, 0),
    K_EXPONENTIAL: ((132, 1, 1), (256, 1, 1), 30, 0),
    K_ARGMAX: ((1, 1, 1), (512, 1, 1), 32, 0),
}
SMS = 132  # streaming multiprocessors of an H200

__all__ = [name for name in list(globals()) if name.isupper()]  # every constant above (re-exported by the package)
