"""Expert-parallel communication and quantization kernels (issue 29, item 7): MoE all-to-all (DeepEP, pplx, MORI,
TRT-LLM/FlashInfer, NCCL all_to_all) is `all2all`, activation quantize/cast kernels are `quantize`, embedding tables
`embedding`; `other` is under 2 % of kernel time on the real EP trace whose names and per-name totals are in
tests/data/kernel_names/deepseek_profile_train.tsv (read from the raw JSON by extract_names.py, not by k25trace),
and all2all kernels are paired across ranks like the other collectives."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from k25trace import db, pipeline
from k25trace.classify import classify_names

DATA = Path(__file__).parent / "data"
DEEPSEEK = DATA / "kernel_names" / "deepseek_profile_train.tsv"
TP2 = DATA / "h200x2-decode-loop"


def deepseek_rows() -> list[dict]:
    lines = DEEPSEEK.read_text(encoding="utf-8").splitlines()
    assert lines[0].startswith("# ")
    assert "deepseek-ai/profile-data @ 449602428a1b023acb8a505d4f34fef536535db6" in lines[0]
    header = lines[1].split("\t")
    assert header == ["source", "kind", "collective_name", "category", "calls", "dur_ns", "name"]
    return [dict(zip(header, line.split("\t"), strict=True)) for line in lines[2:]]


def test_deepseek_ep_trace_names_get_their_categories_and_other_is_gone() -> None:
    """DeepSeek's EP64 training trace (one H800 rank): before these rules 56.6 % of its kernel time was `other`
    (the DeepEP dispatch/combine/notify kernels and the FP8 casts); now nothing is."""
    rows = deepseek_rows()
    assert len(rows) == 91
    got = classify_names([(r["name"], r["kind"], r["collective_name"] or None) for r in rows])
    assert [g["category"] for g in got] == [r["category"] for r in rows]
    total = sum(int(r["dur_ns"]) for r in rows)
    share = {}
    for r, g in zip(rows, got, strict=True):
        share[g["category"]] = share.get(g["category"], 0) + int(r["dur_ns"])
    assert share.get("other", 0) / total < 0.02 and "other" not in share
    # the truth by name, independent of the rules: DeepEP's communication kernels (dpsk::ep::internode:: except the
    # local get_dispatch_layout) and the FP8 casts (per_token_cast_to_fp8…, per_channel_cast_and_transpose, the cast
    # back), those fused with SwiGLU aside
    ep = sum(int(r["dur_ns"]) for r in rows if "dpsk::ep::internode::" in r["name"])
    casts = sum(
        int(r["dur_ns"])
        for r in rows
        if re.search(r"per_token_cast|per_channel_cast|cast_back", r["name"]) and "swiglu" not in r["name"]
    )
    assert share["all2all"] == ep and share["quantize"] == casts
    assert round(100 * ep / total, 2) == 46.31 and round(100 * casts / total, 2) == 5.78
    old = (
        ep
        + casts
        + sum(
            int(r["dur_ns"])
            for r in rows
            if re.search(
                r"cuda::(swiglu|reduce_fused|expand_to_fused|batched_transpose|get_fused_mapping|clean_and_count|topk_sum|"
                r"aux_fi|unique_group)|^_copy_tensor_kernel$|get_dispatch_layout",
                r["name"],
            )
        )
    )
    assert round(100 * old / total, 2) == 56.62  # what was `other` before (measured with the previous rules)


@pytest.mark.parametrize(
    ("collective", "category"),
    [
        ("all_to_all", "all2all"),
        ("all_to_allv", "all2all"),
        ("alltoall_base", "all2all"),
        ("send", "comm_other"),
        (None, "comm_other"),
    ],
)
def test_nccl_sendrecv_is_all2all_only_when_its_collective_says_so(collective: str | None, category: str) -> None:
    name = "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)"
    assert classify_names([(name, "kernel", collective)])[0]["category"] == category


def test_all2all_collectives_pair_across_ranks_like_allreduce(tmp_path: Path) -> None:
    """The real 2×H200 eager pair with its NCCL all-reduces classified all2all (a user rule): collectives.sql pairs
    them exactly as it pairs them as all-reduces (same events, ordinals, transfer, wait, late rank)."""
    con = db.connect(tmp_path / "tp2.duckdb")
    pipeline.load_paths(con, [TP2 / "eager"])
    columns = (
        "run_id, step_index, ordinal, trace_id, rank, event_id, start_ns, end_ns, transfer_ns, wait_ns, "
        "is_late, skew_ns, lateness_ns, caused_wait_ns, wait_kind"
    )
    query = f"select {columns} from collectives where category = $category order by all"
    as_allreduce = con.execute(query, {"category": "allreduce"}).fetchall()
    assert len(as_allreduce) > 100
    rules = tmp_path / "rules.csv"
    rules.write_text(
        "category,kind,name_pattern,collective_pattern,note\n"
        "all2all,kernel,ncclDevKernel_AllReduce,,test: the all-reduces as all-to-all\n",
        encoding="utf-8",
    )
    pipeline.reclassify(con, rules)
    pipeline.rebuild(con)
    assert con.execute("select count(*) from collectives where category = 'allreduce'").fetchone()[0] == 0
    as_all2all = con.execute(query, {"category": "all2all"}).fetchall()
    assert as_all2all == as_allreduce
    con.close()
