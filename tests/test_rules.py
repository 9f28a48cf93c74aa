"""Tests for the built-in kernel classification rules (queries/kernel_rules.csv) and user rules files."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from k25trace.classify import classify_names, load_rules, read_rules
from k25trace.errors import K25Error

REAL_NAMES = Path(__file__).parent / "data" / "kernel_names" / "real_names.tsv"

CATEGORIES = {
    "allreduce",
    "all2all",
    "comm_other",
    "quantize",
    "embedding",
    "marlin_gemm",
    "quant_gemm",
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
    "other",
}


def category(name: str, kind: str = "kernel", collective: str | None = None, **kw) -> str:
    return classify_names([(name, kind, collective)], **kw)[0]["category"]


def read_real_names() -> list[tuple[str, str, str | None, str, str]]:
    lines = REAL_NAMES.read_text(encoding="utf-8").splitlines()
    assert lines[0].startswith("#") and "TraceLens" in lines[0] and "HolisticTraceAnalysis" in lines[0]
    assert lines[1].split("\t") == ["source", "kind", "collective_name", "category", "name"]
    rows = []
    for line in lines[2:]:
        source, kind, coll, cat, name = line.split("\t")
        rows.append((source, kind, coll or None, cat, name))
    return rows


# --- reference names: the exact (abridged) demangled examples of vllm-profiling.md section 4.2, plus the
# --- names quoted for each category in the task brief and section 4.1.
REFERENCE = [
    ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "allreduce"),
    ("ncclDevKernel_AllReduce_Sum_bf16_NVLS_SIMPLE(ncclDevKernelArgsStorage<4096ul>)", "allreduce"),
    ("ncclKernel_AllReduce_RING_LL_Sum_bfloat16(ncclDevComm*, unsigned long, ncclWork*)", "allreduce"),
    (
        "void vllm::cross_device_reduce_1stage<__nv_bfloat16, 8>(vllm::RankData*, "
        "vllm::RankSignals, vllm::Signal*, __nv_bfloat16*, int, int)",
        "allreduce",
    ),
    (
        "void vllm::cross_device_reduce_2stage<__nv_bfloat16, 8>(vllm::RankData*, "
        "vllm::RankSignals, vllm::Signal*, __nv_bfloat16*, int, int)",
        "allreduce",
    ),
    (
        "void (anonymous namespace)::multimem_all_reduce_kernel<c10::BFloat16, 16>(c10::BFloat16*, "
        "unsigned long, unsigned int**, unsigned long, unsigned long)",
        "allreduce",
    ),
    (
        "void (anonymous namespace)::one_shot_all_reduce_kernel<c10::BFloat16, 16>(c10::BFloat16**, unsigned long)",
        "allreduce",
    ),
    (
        "void (anonymous namespace)::two_shot_all_reduce_kernel<c10::BFloat16, 16>(c10::BFloat16**, unsigned long)",
        "allreduce",
    ),
    (
        "void flashinfer::trtllm_allreduce_fusion::allreduce_fusion_kernel_oneshot_lamport<("
        "flashinfer::trtllm_allreduce_fusion::AllReduceFusionPattern)1, __nv_bfloat16, 8, false, "
        "false>(flashinfer::trtllm_allreduce_fusion::AllReduceFusionParams<__nv_bfloat16>)",
        "allreduce",
    ),
    (
        "void flashinfer::trtllm_allreduce_fusion::allreduce_fusion_kernel_twoshot_sync<("
        "flashinfer::trtllm_allreduce_fusion::AllReduceFusionPattern)0, __nv_bfloat16, 8, false>(…)",
        "allreduce",
    ),
    ("void flashinfer::trtllm_mnnvl_allreduce::oneshot_allreduce_kernel<__nv_bfloat16>(…)", "allreduce"),
    ("void quickreduce::allreduce_prototype_twoshot<quickreduce::CodecFP<__hip_bfloat16>>(…)", "allreduce"),
    ("void vllm::cross_device_all_gather<8>(vllm::RankData*, vllm::RankSignals, vllm::Signal*, int)", "comm_other"),
    ("void vllm::cross_device_reduce_scatter<__nv_bfloat16, 8>(vllm::RankData*, vllm::RankSignals)", "comm_other"),
    ("ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "comm_other"),
    ("ncclDevKernel_Broadcast_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "comm_other"),
    ("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)", "comm_other"),
    (
        "void marlin::Marlin<__nv_bfloat16, 1125899906843648l, 1125899906909960l, 128, 1, 4, 8, "
        "false, 4, 2, false>(int4 const*, int4 const*, int4*, int4*, int4 const*)",
        "marlin_gemm",
    ),
    (
        "void marlin::Marlin<1125899906909952l, 1125899906843648l, "
        "1125899906843648l, 128, 1, 4, 8, false>(int4 const*)",
        "marlin_gemm",
    ),
    (
        "void marlin_moe_wna16::Marlin<__nv_bfloat16, 1125899906843648l, 1125899906909960l, "
        "256, 1, 8, 4, false, 4, 8, false>(int4 const*, int4 const*, int4*)",
        "marlin_gemm",
    ),
    (
        "void cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<cute::tuple<int, int, int, int>, "
        "machete::MacheteCollectiveMma<cute::tuple<cutlass::bfloat16_t, "
        "cutlass::vllm_uint4b8_t>>>>(Params)",
        "quant_gemm",
    ),
    (
        "void humming<MmaOpClass, Shape<0, 7168, 2048>, Shape<64, 128, 64>, "
        "LayerConfig, ComputeConfig, TuningConfig>(…)",
        "quant_gemm",
    ),
    ("void moe_wna16_gemm_kernel<__nv_bfloat16, 4, 1>(__nv_bfloat16 const*, __nv_bfloat16*)", "quant_gemm"),
    ("fused_moe_kernel_gptq_awq", "quant_gemm"),
    ("void vllm::gptq::gemm_half_q_half_gptq_4bit_kernel<true, 1>(half const*, unsigned int const*)", "quant_gemm"),
    ("void vllm::gptq::reconstruct_exllama_4bit_kernel(unsigned int const*, int const*)", "quant_gemm"),
    ("void vllm::awq::gemm_forward_4bit_cuda_m16nXk32<128>(int, int, __half*, int*)", "quant_gemm"),
    ("fused_moe_kernel", "gemm"),
    ("nvjet_tst_64x64_64x16_2x1_2cta_v_bz_bias_TNT", "gemm"),
    (
        "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_"
        "warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas",
        "gemm",
    ),
    (
        "void cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_16x16_128x2_tn_align8>("
        "cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_16x16_128x2_tn_align8::Params)",
        "gemm",
    ),
    (
        "void splitKreduce_kernel<32, 16, int, float, __nv_bfloat16, float, "
        "__nv_bfloat16, true, false, false>(cublasSplitKParams<float>)",
        "gemm",
    ),
    (
        "void gemv2T_kernel_val<int, int, __nv_bfloat16, __nv_bfloat16, float, float, 128, 16, 4, 4, false, false>(…)",
        "gemm",
    ),
    ("void fused_a_gemm_kernel<16, 7168, 2112>(__nv_bfloat16*, __nv_bfloat16 const*)", "gemm"),
    ("void deep_gemm::sm90_fp8_gemm_1d2d_impl<128u, 7168u>(float*, int*)", "gemm"),
    ("Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT256x48x64_MI16x16x1_SN_LDSB1", "gemm"),
    (
        "void sm90::flash_fwd_splitkv_mla_kernel<Traits<cutlass::bfloat16_t, "
        "64, 576, 512>, true>(Flash_fwd_mla_params)",
        "attention",
    ),
    ("void flash_fwd_mla_combine_kernel<cutlass::bfloat16_t, 512, 8, 128, 256>(DecodingParams)", "attention"),
    (
        "void legacy::sm90::decode::dense::flash_fwd_splitkv_mla_kernel<Traits<cutlass::bfloat16_t>, "
        "false>(DecodingParams)",
        "attention",
    ),
    (
        "void legacy::smxx::decode::flash_fwd_mla_combine_kernel<cutlass::bfloat16_t, "
        "512, 8, 128, 256>(DecodingParams)",
        "attention",
    ),
    ("legacy::smxx::decode::get_mla_metadata_kernel(GetDecodeSchedMetaParams)", "attention"),
    (
        "void cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<flash::CollectiveMainloopFwdSm90<"
        "2, cute::tuple<cute::C<1>>>>>>(flash::FlashAttnFwdSm90<…>::Params)",
        "attention",
    ),
    ("void flash::prepare_varlen_num_blocks_kernel(int, int, int, int const*)", "attention"),
    (
        "void flash::flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits<128, 64, 128, 4>, false>(Flash_fwd_params)",
        "attention",
    ),
    (
        "void cutlass::device_kernel<cutlass::fmha::kernel::Sm100FmhaMlaKernelTmaWarpspecialized<"
        "cute::tuple<>>>(Params)",
        "attention",
    ),
    ("fmhaSm100fKernel_QkvBfloat16OBfloat16HQk576HV512PagedKvCausalP64", "attention"),
    ("void flashinfer::mla::BatchMLAPagedAttentionKernel<(flashinfer::MaskMode)0, 512u, 64u>(Params)", "attention"),
    ("void flashinfer::BatchPrefillWithPagedKVCacheKernel<KernelTraits>(Params)", "attention"),
    ("_fwd_grouped_kernel_stage1", "attention"),
    ("_fwd_kernel_stage2", "attention"),
    ("kernel_unified_attention_2d", "attention"),
    ("void vllm::merge_attn_states_kernel<__nv_bfloat16, 128u>(__nv_bfloat16*, float*)", "attention"),
    ("merge_attn_states_kernel", "attention"),
    ("void vllm::paged_attention_v2_kernel<__nv_bfloat16, __nv_bfloat16, 128, 16, 128>(float*)", "attention"),
    (
        "void vllm::concat_and_cache_mla_kernel<__nv_bfloat16, __nv_bfloat16, "
        "(vllm::Fp8KVCacheDataType)0>(__nv_bfloat16 const*, __nv_bfloat16 const*, "
        "__nv_bfloat16*, long const*, int, int, int, int, int, float const*)",
        "attention",
    ),
    (
        "void vllm::reshape_and_cache_flash_kernel<__nv_bfloat16, __nv_bfloat16, (vllm::Fp8KVCacheDataType)0>(…)",
        "attention",
    ),
    ("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_3_64x64x128", "attention"),
    ("void vllm::rms_norm_kernel<c10::BFloat16, 8, 2>(c10::BFloat16*, c10::BFloat16 const*, long)", "norm"),
    (
        "std::enable_if<(((8)>(0)))&&vllm::_typeConvert<c10::BFloat16>::exists, "
        "void>::type vllm::fused_add_rms_norm_kernel<c10::BFloat16, 8>(c10::BFloat16*, "
        "long, c10::BFloat16*, c10::BFloat16 const*, float, int, int)",
        "norm",
    ),
    ("void vllm::rms_norm_dynamic_per_token_quant_kernel<c10::BFloat16, c10::Float8_e4m3fn, true>(…)", "norm"),
    ("void vllm::rms_norm_static_fp8_quant_kernel<c10::BFloat16, c10::Float8_e4m3fn>(…)", "norm"),
    ("triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_0", "norm"),
    ("triton_per_fused__to_copy_add_mean_mul_pow_rsqrt_1", "norm"),
    (
        "void vllm::rotary_embedding_kernel<c10::BFloat16, false>(long const*, c10::BFloat16*, "
        "c10::BFloat16*, c10::BFloat16 const*, int, long, long, int, int, int)",
        "rotary",
    ),
    ("void vllm::rotary_embedding_kernel<c10::BFloat16, c10::BFloat16, true>(long const*, c10::BFloat16*)", "rotary"),
    ("void vllm::fused_qk_norm_rope_kernel<__nv_bfloat16>(…)", "rotary"),
    ("void flashinfer::BatchQKApplyRotaryPosIdsCosSinCache<true, 128u>(…)", "rotary"),
    (
        "void vllm::act_and_mul_kernel<c10::BFloat16, __nv_bfloat162, "
        "&(c10::BFloat16 vllm::silu_kernel<c10::BFloat16>(c10::BFloat16 const&)), "
        "&(__nv_bfloat162 vllm::packed_silu_kernel<__nv_bfloat162>(__nv_bfloat162 const&)), "
        "true>(c10::BFloat16*, c10::BFloat16 const*, int)",
        "activation",
    ),
    (
        "void vllm::act_and_mul_kernel<c10::BFloat16, &vllm::silu_kernel<c10::BFloat16>, "
        "true>(c10::BFloat16*, c10::BFloat16 const*, int)",
        "activation",
    ),
    ("triton_poi_fused_mul_silu_slice_0", "activation"),
    ("void vllm::moe::moe_align_block_size_kernel<signed char>(signed char const*, int*)", "moe_routing"),
    ("void vllm::moe::topkGatingSoftmax<4, 128, 4, 16, int>(float const*, bool const*)", "moe_routing"),
    ("void vllm::moe::topkGating<4, 128, 4, 16, 32, int, float, (vllm::moe::ScoringFunc)0>(…)", "moe_routing"),
    ("void vllm::moe::topk_with_k2_kernel<__nv_bfloat16>(…)", "moe_routing"),
    ("void vllm::moe::group_idx_and_topk_idx_kernel<__nv_bfloat16>(…)", "moe_routing"),
    ("void vllm::moe::grouped_topk_fused_kernel<__nv_bfloat16>(…)", "moe_routing"),
    ("void vllm::moe::moe_sum_kernel<c10::BFloat16, 8>(c10::BFloat16*, c10::BFloat16 const*, int)", "moe_routing"),
    ("void fp32_router_gemm_kernel<384, 7168>(float*, __nv_bfloat16 const*)", "moe_routing"),
    ("void tensorrt_llm::kernels::finalizeMoeRoutingKernel<__nv_bfloat16>(…)", "moe_routing"),
    (
        "void flashinfer::sampling::TopKTopPSamplingFromProbKernel<1024u, (cub::BlockScanAlgorithm)1>(float*, int*)",
        "sampling",
    ),
    ("_gumbel_sample_kernel", "sampling"),
    ("_topk_log_softmax_kernel", "sampling"),
    ("void vllm::apply_repetition_penalties_kernel<c10::BFloat16>(…)", "sampling"),
    (
        "void at::native::sbtopk::gatherTopK<float, unsigned int, 2, "
        "false>(at::cuda::detail::TensorInfo<float, unsigned int>)",
        "sampling",
    ),
    ("void at::native::mbtopk::radixFindKthValues<float, unsigned int, unsigned int, 2>(…)", "sampling"),
    (
        "void at::native::bitonicSortKVInPlace<-2, -1, 32, 32, float, long, "
        "at::native::GTOp<float, true>, unsigned int>(…)",
        "sampling",
    ),
    (
        "void at_cuda_detail::cub::DeviceRadixSortOnesweepKernel<at_cuda_detail::cub::DeviceRadixSortPolicy<float, "
        "long, int>::Policy800, true, float, long, int, int>(int*)",
        "sampling",
    ),
    (
        "void at_cuda_detail::cub::DeviceSegmentedRadixSortKernel<at_cuda_detail::cub::DeviceRadixSortPolicy<"
        "c10::BFloat16, long, int>::Policy800, false, true>(…)",
        "sampling",
    ),
    (
        "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, "
        "at::native::(anonymous namespace)::LogSoftMaxForwardEpilogue>(float*, float const*, int)",
        "sampling",
    ),
    (
        "void at::native::(anonymous namespace)::distribution_elementwise_grid_stride_kernel<float, "
        "4, at::native::templates::cuda::exponential_kernel(at::TensorIteratorBase&, double, "
        "at::CUDAGeneratorImpl*)::{lambda()#1}>(long, at::PhiloxCudaState)",
        "sampling",
    ),
    (
        "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::ArgMaxOps<float>, unsigned int, "
        "long, 4, 4> >(at::native::ReduceOp<float, at::native::ArgMaxOps<float>, unsigned int, long, 4, 4>)",
        "sampling",
    ),
    ("Memcpy HtoD (Pinned -> Device)", "memcpy"),
    ("Memset (Device)", "memset"),
    (
        "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, std::array<char*, "
        "1ul> >(int, at::native::FillFunctor<float>, std::array<char*, 1ul>)",
        "elementwise",
    ),
    (
        "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<c10::BFloat16, "
        "at::native::func_wrapper_t<c10::BFloat16, at::native::sum_functor<c10::BFloat16, float, "
        "c10::BFloat16>::operator()(at::TensorIterator&)::{lambda(float, "
        "float)#1}>, unsigned int, c10::BFloat16, 4> >(…)",
        "elementwise",
    ),
    (
        "void at::native::(anonymous namespace)::CatArrayBatchedCopy<at::native::(anonymous namespace)::OpaqueType<2u>, "
        "unsigned int, 2, 128, 1>(…)",
        "elementwise",
    ),
    ("triton_poi_fused_add_0", "elementwise"),
    (
        "void vllm::scaled_fp8_quant_kernel_strided<c10::BFloat16, c10::Float8_e4m3fn>(c10::Float8_e4m3fn*, "
        "c10::BFloat16 const*, float const*, int, long, long)",
        "quantize",
    ),
    # MoE all-to-all (names as their sources declare them, demangled; the DeepEP/DeepSeek ones as real traces show)
    (
        "void deep_ep::internode_ll::dispatch<true, 3, 10, 7168>(void*, float*, int*, long*, int*, void*, int*, void*, "
        "void const*, long const*, int*, int*, int*, int, int, int, int, int, int, int, int)",
        "all2all",
    ),
    (
        "void deep_ep::internode_ll::combine<3, 10, 7168, 9>(void*, void*, int*, void*, void const*, long const*, "
        "float const*, int const*, long const*, int*, int, int*, int, int, int, int, int, int, int, int, bool)",
        "all2all",
    ),
    ("void deep_ep::internode::notify_dispatch<false, 4>(int const*, int*, int, int const*, int*)", "all2all"),
    ("void deep_ep::internode::cached_notify<false>(int, int, int, int, int*, int, int)", "all2all"),
    ("void deep_ep::intranode::cached_notify_combine<8>(void**, int*, int, int, int, int**, int)", "all2all"),
    ("void deep_ep::legacy::intranode::dispatch<8, 768, 6144>(int4*, float*, int*, long*, float*, int*)", "all2all"),
    ("void dpsk::ep::internode::combine<false, 8, __nv_bfloat16, 8, 2, 16, 24>(int4*, float*, bool const*)", "all2all"),
    ("void dpsk::ep::internode::dispatch_ll<true, 3, 10, 7168>(void*, float*, int*, long*, int*, int*)", "all2all"),
    ("void deep_ep::elastic::dispatch_impl<true, false, 8, 4096>(void*, void*)", "all2all"),
    ("void deep_ep::elastic::pp_send_impl<1024>(ncclDevComm, ncclWindow_vidmem*)", "comm_other"),
    ("void (anonymous namespace)::dispatchKernel<10u, true, false>(int*, unsigned long, unsigned char*)", "all2all"),
    ("void combineKernel<__nv_bfloat16, __nv_bfloat16, 16ul, true, true>(__nv_bfloat16*, unsigned long)", "all2all"),
    ("void moe_comm::moeA2ADispatchKernel<8, false, false, false>(int const*, DispatchKernelPointers, int)", "all2all"),
    (
        "void mori::moe::EpDispatchIntraNodeKernel<__hip_bfloat16>(mori::moe::EpDispatchCombineArgs<__hip_bfloat16>)",
        "all2all",
    ),
    (
        "void deep_ep::internode::get_dispatch_layout<256, 32, 8>(long const*, int*, int*, int*, bool*, int, int)",
        "moe_routing",
    ),
    ("_fwd_kernel_ep_scatter_2", "moe_routing"),
    # activation quantize / cast
    (
        "void vllm::dynamic_per_token_scaled_fp8_quant_kernel<c10::BFloat16, c10::Float8_e4m3fn>(c10::Float8_e4m3fn*)",
        "quantize",
    ),
    (
        "void vllm::static_scaled_int8_quant_kernel<c10::BFloat16, float>(c10::BFloat16 const*, signed char*)",
        "quantize",
    ),
    (
        "void vllm::segmented_max_reduction<c10::BFloat16, c10::Float8_e4m3fn>(float*, c10::BFloat16 const*, long)",
        "quantize",
    ),
    (
        "void per_token_group_quant_8bit_kernel<__nv_bfloat16, c10::Float8_e4m3fn, false>(__nv_bfloat16 const*, void*)",
        "quantize",
    ),
    ("_per_token_group_quant_fp8", "quantize"),
    ("void per_tensor_absmax_kernel<__nv_bfloat16>(__nv_bfloat16 const*, float*, long)", "quantize"),
    ("void vllm::cvt_fp16_to_fp4<c10::BFloat16, false>(int, int, c10::BFloat16 const*, float const*)", "quantize"),
    (
        "void cuda::per_token_cast_to_fp8_with_channels<__nv_bfloat16, 128, false, 128, false>(__nv_bfloat16 const*)",
        "quantize",
    ),
    (
        "void cuda::per_channel_cast_and_transpose<256, 128, true, true, true, false, true>(void const*, float const*)",
        "quantize",
    ),
    ("void cuda::cast_back_impl<__nv_fp8x2_e4m3>(void const*, void*, float const*, int, int, int, int)", "quantize"),
    # fused with an activation: activation
    (
        "void cuda::swiglu_forward_with_weight_and_per_token_cast_to_fp8_with_channels_impl<__nv_bfloat16, true, false, "
        "128>(unsigned char*)",
        "activation",
    ),
    ("_silu_and_mul_post_quant_kernel", "activation"),
    # embedding tables
    (
        "void split_embedding_codegen_forward_unweighted_kernel<c10::Half, c10::Half, float, false, long, 2ul, 32ul>(int)",
        "embedding",
    ),
    (
        "void at::native::(anonymous namespace)::EmbeddingBag_updateOutputKernel_sum_mean<float, long>(long const*)",
        "embedding",
    ),
    # the CUDA graph's memcpy node kernel
    ("memcpy32_post", "memcpy"),
    ("_prepare_inputs_kernel", "other"),
    ("some_custom_kernel_nobody_knows<int>(int)", "other"),
]


def test_reference_names_cover_every_category():
    assert {cat for _, cat in REFERENCE} == CATEGORIES


@pytest.mark.parametrize(("name", "expected"), REFERENCE, ids=[n[:60] for n, _ in REFERENCE])
def test_reference_name(name, expected):
    kind = "memcpy" if name.startswith("Memcpy") else "memset" if name.startswith("Memset") else "kernel"
    assert category(name, kind) == expected


def test_all_reference_names_in_one_call_keep_order():
    keys = [
        (n, "memcpy" if n.startswith("Memcpy") else "memset" if n.startswith("Memset") else "kernel", None)
        for n, _ in REFERENCE
    ]
    got = classify_names(keys)
    assert [g["name"] for g in got] == [n for n, _ in REFERENCE]
    assert [g["category"] for g in got] == [c for _, c in REFERENCE]
    assert all((g["rule_id"] is None) == (g["category"] == "other" and "nobody" in g["name"]) for g in got)


# --- real names from public traces


def test_real_names_file_is_complete():
    rows = read_real_names()
    assert len(rows) > 300
    sources = {r[0] for r in rows}
    assert {
        "hta-2rank-sendrecv",
        "hta-a100-nccl-metadata",
        "sglang-mi300x-decode",
        "vllm-b200-tp8-rank0-eager",
        "vllm-mi300x-decode-fullgraph",
        "vllm-mi300x-prefilldecode-piecewise",
    } <= sources
    assert {r[3] for r in rows} <= CATEGORIES
    assert {r[1] for r in rows} == {"kernel", "memcpy", "memset"}


def test_real_names_get_their_expected_category():
    rows = read_real_names()
    got = classify_names([(name, kind, coll) for _, kind, coll, _, name in rows])
    wrong = [(r[3], g["category"], r[4][:120]) for r, g in zip(rows, got, strict=True) if g["category"] != r[3]]
    assert wrong == []


def test_real_kernels_left_in_other_are_only_the_known_ones():
    rows = read_real_names()
    others = {
        name.removeprefix("void ").replace("(anonymous namespace)::", "").split("<")[0].split("(")[0]
        for _, kind, _, cat, name in rows
        if cat == "other"
    }
    assert others == {"clamp_position_kernel", "resolve_future_token_ids_kernel"}, others


# --- traps


def test_trap_match_substring_not_prefix_enable_if_norm():
    name = (
        "std::enable_if<(((8)>(0)))&&vllm::_typeConvert<c10::BFloat16>::exists, "
        "void>::type vllm::fused_add_rms_norm_kernel<c10::BFloat16, 8>(c10::BFloat16*, long)"
    )
    assert not name.startswith("void")
    assert category(name) == "norm"


def test_trap_enable_if_is_not_norm_by_itself():
    name = (
        "std::enable_if<!(false), void>::type internal::gemvx::kernel<int, int, float, float, float, "
        "float, false, true, true, false, 7, cublasGemvParams<cublasGemvTensorStridedBatched<float const>, "
        "cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float>, "
        "float> >(cublasGemvParams<cublasGemvTensorStridedBatched<float const>, "
        "cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float>, float>)"
    )
    assert category(name) == "gemm"


def test_trap_machete_inside_cutlass_gemm_universal():
    name = (
        "void cutlass::device_kernel<vllm::enable_sm90_or_later<cutlass::gemm::kernel::GemmUniversal<"
        "cute::tuple<int, int, int, int>, machete::MacheteCollectiveMma<cute::tuple<cutlass::bfloat16_t>>, "
        "cutlass::epilogue::collective::CollectiveEpilogue<>>>>(Params)"
    )
    assert category(name) == "quant_gemm"
    # the same launcher without Machete is an ordinary CUTLASS GEMM
    assert category(name.replace("machete::MacheteCollectiveMma", "cutlass::gemm::collective::CollectiveMma")) == "gemm"


def test_trap_gptq_awq_moe_before_fused_moe_kernel():
    assert category("fused_moe_kernel_gptq_awq") == "quant_gemm"
    assert category("fused_moe_kernel") == "gemm"


def test_trap_generic_reduce_is_elementwise_unless_argmax():
    sum_ = (
        "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::func_wrapper_t<float, "
        "at::native::sum_functor<float, float, float>::operator()(at::TensorIterator&)::{lambda(float, "
        "float)#1}>, unsigned int, float, 4> >(at::native::ReduceOp<float, "
        "at::native::func_wrapper_t<float, at::native::sum_functor<float, float, "
        "float>::operator()(at::TensorIterator&)::{lambda(float, float)#1}>, unsigned int, float, 4>)"
    )
    max_ = (
        "void at::native::reduce_kernel<128, 4, at::native::ReduceOp<float, at::native::MaxOps<float>, "
        "unsigned int, float, 4> >(at::native::ReduceOp<float, at::native::MaxOps<float>, unsigned int, float, 4>)"
    )
    argmax = max_.replace("MaxOps<float>, unsigned int, float", "ArgMaxOps<float>, unsigned int, long")
    assert category(sum_) == "elementwise"
    assert category(max_) == "elementwise"
    assert category(argmax) == "sampling"


def test_trap_sort_and_scan_primitives():
    # float keys: sorting logits/probs (sampling); integer keys or scans: index bookkeeping (elementwise)
    float_sort = (
        "void at_cuda_detail::cub::DeviceRadixSortOnesweepKernel<at_cuda_detail::cub::DeviceRadixSortPolicy<"
        "float, long, int>::Policy800, false, float, long, int, int>(int*)"
    )
    long_sort = (
        "void cub::DeviceRadixSortOnesweepKernel<cub::DeviceRadixSortPolicy<long, "
        "float, int>::Policy800, false, long, float, int, int>(int*, int*, int*, "
        "int const*, long*, long const*, float*, float const*, int, int, int)"
    )
    scan = (
        "void at_cuda_detail::cub::DeviceScanKernel<at_cuda_detail::cub::AgentScanPolicy<128, "
        "15, long>, long*, long*>(long*)"
    )
    assert category(float_sort) == "sampling"
    assert category(long_sort) == "elementwise"
    assert category(scan) == "elementwise"


def test_trap_softmax_forward_is_sampling_backward_is_not():
    assert (
        category(
            "void (anonymous namespace)::softmax_warp_forward<float, float, float, 10, true, "
            "false>(float*, float const*, int, int, int, bool const*, int, bool)"
        )
        == "sampling"
    )
    assert (
        category(
            "void (anonymous namespace)::softmax_warp_backward<float, float, float, 10, true, "
            "false>(float*, float const*, float const*, int, int, int, bool const*)"
        )
        == "elementwise"
    )


def test_trap_kv_cache_rope_fused_is_attention_not_rotary():
    name = (
        "void vllm::concat_and_cache_mla_rope_fused_kernel<__nv_bfloat16, "
        "__nv_bfloat16, (vllm::Fp8KVCacheDataType)0>(long const*, __nv_bfloat16*)"
    )
    assert category(name) == "attention"
    assert category("void vllm::rotary_embedding_kernel<c10::BFloat16, true>(long const*)") == "rotary"


def test_trap_inductor_names_are_sorted_op_names():
    # Inductor lists the fused aten ops in sorted order: SiluAndMul reads mul..silu, a norm reads ..rsqrt
    assert category("triton_poi_fused_mul_silu_0") == "activation"
    assert category("triton_poi_fused_mul_sigmoid_1") == "activation"
    assert category("triton_poi_fused_add_bitwise_and_bitwise_not_bitwise_or_ge_lt_mul_sub_0") == "elementwise"
    assert category("triton_poi_fused_add_sigmoid_2") == "elementwise"
    assert category("triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_0") == "norm"
    assert category("triton_red_fused_sum_3") == "elementwise"


def test_trap_pytorch_sigmoid_is_not_an_activation():
    name = (
        "void at::native::vectorized_elementwise_kernel<4, "
        "at::native::sigmoid_kernel_cuda(at::TensorIteratorBase&)::{lambda()#2}::operator()() "
        "const::{lambda()#2}::operator()() const::{lambda(float)#1}, at::detail::Array<char*, 2> >(int)"
    )
    assert category(name) == "elementwise"


def test_trap_fbgemm_is_not_a_gemm():
    assert (
        category("void fbgemm_gpu::permute_2D_lengths_kernel<int>(int, int, int const*, int const*, int*)")
        == "elementwise"
    )
    assert category("ampere_sgemm_128x64_nn") == "gemm"


def test_trap_triton_kernels_topk_is_routing_not_sampling():
    assert category("_topk_forward") == "moe_routing"
    assert category("_topk_topp_kernel") == "sampling"


def test_router_gemm_is_routing_not_gemm():
    assert category("void dsv3_router_gemm_kernel<__nv_bfloat16, 8, 256>(float*)") == "moe_routing"


def test_memcpy_memset_go_by_kind_not_name():
    assert category("Memcpy DtoD (Device -> Device)", "memcpy") == "memcpy"
    assert category("whatever", "memset") == "memset"
    # a kernel whose name merely mentions memset is a kernel
    assert category("_combined_routing_memset", "kernel") == "moe_routing"


# --- NCCL Generic kernels: the collective comes from the "Collective name" arg


@pytest.mark.parametrize(
    ("collective", "expected"),
    [
        ("allreduce", "allreduce"),
        ("all_reduce", "allreduce"),
        ("allreduce_coalesced", "allreduce"),
        ("_allgather_base", "comm_other"),
        ("reduce_scatter", "comm_other"),
        ("_reduce_scatter_base", "comm_other"),
        ("broadcast", "comm_other"),
        (None, "comm_other"),
    ],
)
def test_nccl_generic_uses_collective_name(collective, expected):
    assert category("ncclDevKernel_Generic_2(ncclDevKernelArgsStorage<4096ul>)", "kernel", collective) == expected


def test_named_nccl_kernel_ignores_collective_arg():
    assert (
        category("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "kernel", "_allgather_base")
        == "comm_other"
    )
    assert (
        category(
            "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)", "kernel", "allreduce"
        )
        == "allreduce"
    )


def test_same_name_different_collective_classified_separately():
    name = "ncclDevKernel_Generic_1(ncclDevKernelArgsStorage<4096ul>)"
    got = classify_names([(name, "kernel", "allreduce"), (name, "kernel", "broadcast"), (name, "kernel", None)])
    assert [g["category"] for g in got] == ["allreduce", "comm_other", "comm_other"]


# --- the rules file itself


def test_builtin_rules_are_well_formed():
    rules = load_rules()
    assert {r.category for r in rules} <= CATEGORIES
    assert {r.category for r in rules} >= CATEGORIES - {"other"}
    assert all(r.note for r in rules), [r.rule_id for r in rules if not r.note]
    assert [r.rule_id for r in rules] == list(range(1, len(rules) + 1))
    assert rules[0].category == "memcpy" and rules[1].category == "memset"


def test_builtin_rule_order_follows_reference():
    rules = load_rules()
    first = {}
    for r in rules:
        first.setdefault(r.category, r.rule_id)
    order = [
        "allreduce",
        "all2all",
        "comm_other",
        "marlin_gemm",
        "quant_gemm",
        "attention",
        "moe_routing",
        "norm",
        "rotary",
        "activation",
        "sampling",
    ]
    assert [first[c] for c in order] == sorted(first[c] for c in order)
    last_gemm = max(r.rule_id for r in rules if r.category == "gemm")
    assert first["sampling"] < last_gemm < max(r.rule_id for r in rules if r.category == "elementwise")


# --- user rules files


def test_user_rules_override_and_extend(tmp_path):
    user = tmp_path / "my_rules.csv"
    user.write_text(
        "# my rules\n"
        "category,kind,name_pattern,collective_pattern,note\n"
        "recsys,kernel,split_embedding_,,fbgemm TBE\n"
        'sampling,,"reduce_kernel<.*MaxOps<",,"max over logits, here"\n',
        encoding="utf-8",
    )
    tbe = (
        "void split_embedding_codegen_forward_unweighted_kernel<c10::Half, "
        "c10::Half, float, false, long, 2ul, 32ul>(int)"
    )
    max_ = (
        "void at::native::reduce_kernel<128, 4, at::native::ReduceOp<float, "
        "at::native::MaxOps<float>, unsigned int, float, 4> >(int)"
    )
    assert [category(tbe), category(max_)] == ["embedding", "elementwise"]
    got = classify_names([tbe, max_, "nvjet_tst_64x64", ("Memset (Device)", "memset", None)], user)
    assert [g["category"] for g in got] == ["recsys", "sampling", "gemm", "memset"]
    assert got[0]["rule_id"] == 1 and got[1]["rule_id"] == 2 and got[2]["rule_id"] > 2


def test_user_rules_replace(tmp_path):
    user = tmp_path / "only.csv"
    user.write_text("category,kind,name_pattern,collective_pattern,note\nmine,kernel,nvjet,,x\n", encoding="utf-8")
    got = classify_names(
        [
            "nvjet_tst_64x64",
            "void vllm::rms_norm_kernel<c10::BFloat16, 8, 2>(int)",
            ("Memcpy HtoD (Pinned -> Device)", "memcpy", None),
        ],
        user,
        replace=True,
    )
    assert [g["category"] for g in got] == ["mine", "other", "other"]
    assert len(load_rules(user, replace=True)) == 1


def test_patterns_with_quotes_backslashes_and_sql_match_as_the_regex_says(tmp_path):
    """The rules become SQL text (queries/kernel_classes.sql writes them into one CASE): a pattern with quotes,
    backslashes, braces or SQL in it still matches exactly the names a regex search finds, first rule first."""
    user = tmp_path / "quoted.csv"
    rules = [
        ("quote", "", "it's", ""),
        ("backslash", "", r"a\\b", ""),
        ("ends_int", "kernel", r"\(int\)$", ""),
        ("injection", "", r"x'\); drop table kernel_names; --", ""),
        ("digits", "", r"\d{3}x\d+", ""),
        ("nocase", "", "(?i:nvjet)", ""),
        ("coll", "", "ncclDevKernel_Generic", "All'Reduce"),
    ]
    lines = ["category,kind,name_pattern,collective_pattern,note"]
    for category, kind, name_pattern, collective_pattern in rules:
        quoted = '"' + name_pattern.replace('"', '""') + '"'
        lines.append(f"{category},{kind},{quoted},{collective_pattern},n")
    user.write_text("\n".join(lines) + "\n", encoding="utf-8")
    keys = [
        ("it's a kernel(int)", "kernel", None),
        ("a\\b", "kernel", None),
        ("ab", "kernel", None),
        ("gemm(int)", "kernel", None),
        ("gemm(int)", "memcpy", None),
        ("x'); drop table kernel_names; -- here", "kernel", None),
        ("tile_128x64", "kernel", None),
        ("tile_12x64", "kernel", None),
        ("NVJET_tst", "kernel", None),
        ("ncclDevKernel_Generic_1", "kernel", "All'Reduce"),
        ("ncclDevKernel_Generic_1", "kernel", "AllReduce"),
    ]

    def first_match(name, kind, collective):
        for category, rule_kind, name_pattern, collective_pattern in rules:
            if rule_kind and rule_kind != kind:
                continue
            if name_pattern and not re.search(name_pattern, name):
                continue
            if collective_pattern and (collective is None or not re.search(collective_pattern, collective)):
                continue
            return category
        return "other"

    got = classify_names(keys, user, replace=True)
    assert [g["category"] for g in got] == [first_match(*key) for key in keys]
    assert {g["category"] for g in got} == {c for c, *_ in rules} | {"other"}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("category,kind,name_pattern,collective_pattern,note\nx,kernal,foo,,n\n", "kind must be one of"),
        ("gemm,kernel,nvjet,,n\n", "header"),
        ("# only a comment\n", "header"),
        ("category,kind,pattern,note\ngemm,kernel,nvjet,n\n", "unknown rules column"),
        ("category,kind,name_pattern,collective_pattern,note\n,kernel,foo,,n\n", "no category"),
        ("category,kind,name_pattern,collective_pattern,note\neverything,,,,n\n", "matches everything"),
    ],
)
def test_bad_rules_file_names_the_file(tmp_path, text, message):
    path = tmp_path / "bad_rules.csv"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(K25Error) as err:
        read_rules(path)
    assert "bad_rules.csv" in str(err.value)
    assert message in str(err.value)


def test_bad_regex_is_reported_with_the_file(tmp_path):
    path = tmp_path / "bad_regex.csv"
    path.write_text(
        "category,kind,name_pattern,collective_pattern,note\ngemm,kernel,nvjet(,,unbalanced\n", encoding="utf-8"
    )
    with pytest.raises(K25Error) as err:
        classify_names(["nvjet_tst"], path)
    assert "bad_regex.csv" in str(err.value)
    assert "nvjet(" in str(err.value)


def test_missing_rules_file(tmp_path):
    with pytest.raises(K25Error) as err:
        read_rules(tmp_path / "nope.csv")
    assert "nope.csv" in str(err.value)


def test_classify_names_public_api_matches_a_loaded_trace():
    """classify_names (public API): one dict per key in the order given (duplicates kept, bare names are kind
    'kernel'), 'other' with rule_id None when nothing matched, and the same answer as loading a trace gives."""
    from helpers import MI300X_PIECEWISE
    from k25trace import pipeline
    from k25trace.db import query_frame

    con = pipeline.connect(None)
    results, _ = pipeline.load_paths(con, [MI300X_PIECEWISE])
    assert [r.status for r in results] == ["loaded"]
    loaded = query_frame(con, "kernel_rule_matches").rows(named=True)
    con.close()
    keys = [(r["name"], r["kind"], r["collective_name"]) for r in loaded]
    got = classify_names(keys)
    assert [(g["name"], g["kind"], g["collective_name"]) for g in got] == keys
    assert [(g["category"], g["rule_id"]) for g in got] == [(r["category"], r["rule_id"]) for r in loaded]
    nccl = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
    twice = classify_names([nccl, "no_rule_matches_this", nccl])
    assert [g["category"] for g in twice] == ["allreduce", "other", "allreduce"]
    assert twice[0] == {**twice[2]} and twice[0]["kind"] == "kernel" and twice[0]["collective_name"] is None
    assert twice[1]["rule_id"] is None and isinstance(twice[0]["rule_id"], int)
