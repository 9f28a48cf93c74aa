"""The column builder's one-pass paths (issue 17) give the same values as the value-by-value paths they fall back
to: a missing GPU dur is 0, a missing CPU dur is NULL, an integer beyond its column is NULL, a string pid keeps
its digits, absent Input Dims are NULL, and a chunk of the forgiving decoder (NaN, None) is read value by value."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa

from k25trace.ingest.columns import _Columns
from k25trace.ingest.events import _decode_chunk

CHUNK = b"""[
{"ph":"X","cat":"kernel","name":"k","pid":0,"tid":7,"ts":1.5,
 "args":{"device":0,"stream":7,"correlation":5,"External id":9}},
{"ph":"X","cat":"kernel","name":"k2","pid":0,"tid":7,"ts":2.001,"dur":0.5,
 "args":{"device":0,"stream":7,"correlation":2147483648,"registers per thread":4294967296,"shared memory":12}},
{"ph":"X","cat":"cpu_op","name":"op","pid":"-5","tid":"Spans","ts":3,"dur":1,
 "args":{"External id":9,"Input Dims":[[1, 2], []]}},
{"ph":"X","cat":"cpu_op","name":"op2","pid":1,"tid":2,"ts":4,"args":{}},
{"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":1,"tid":2,"ts":5,"dur":2,"args":{"correlation":5}},
{"ph":"X","cat":"cuda_runtime","name":"cudaMemcpyAsync","pid":1,"tid":2,"ts":6.000001,"dur":0.001,
 "args":{"correlation":6,"External id":18446744073709551615,"cbid":211}},
{"ph":"X","cat":"python_function","name":"f","pid":1,"tid":2,"ts":7,"dur":1,"args":{"Python id":1}}
]"""


def _tables(data: bytes) -> dict[str, dict[str, list[Any]]]:
    events = _decode_chunk(Path("chunk.json"), data, False, (0, 0, [0]))
    return {key: table.to_pydict() for key, table in _Columns(False).build(events, 0).items()}


def test_one_pass_columns_keep_the_value_by_value_answers() -> None:
    tables = _tables(CHUNK)
    assert sorted(tables) == ["gpu", "launch", "ops"]
    gpu, ops, launch = tables["gpu"], tables["ops"], tables["launch"]
    assert gpu["event_id"] == [0, 1]
    assert gpu["ts_ns"] == [1500, 2001] and gpu["dur_ns"] == [0, 500]  # a GPU activity without dur lasts 0
    assert gpu["correlation"] == [5, 2147483648] and gpu["external_id"] == [9, None]
    assert gpu["registers"] == [None, None]  # beyond int32: NULL, not wrapped
    assert gpu["shared_mem_bytes"] == [None, 12]
    assert ops["pid"] == [5, 1] and ops["tid"] == [None, 2]  # a string pid keeps its digits; no digits: NULL
    assert ops["dur_ns"] == [1000, None]  # a CPU op without dur: NULL (the commit makes it 0)
    assert ops["input_dims"] == ["[[1, 2], []]", None]  # the raw JSON text; absent: NULL
    assert ops["external_id"] == [9, None]
    assert launch["ts_ns"] == [5000, 6000] and launch["dur_ns"] == [2000, 1]
    assert launch["external_id"] == [None, None]  # beyond int64: NULL
    assert launch["cbid"] == [None, 211] and launch["correlation"] == [5, 6]
    assert launch["api"] == ["cuda_runtime", "cuda_runtime"]


def test_a_chunk_of_the_forgiving_decoder_is_read_value_by_value() -> None:
    """NaN is not JSON: the chunk goes to the stdlib decoder, whose NaN must stay 'no time' (dropped, counted), and a
    None dur stays NULL — numpy would read both as NaN on the one-pass path."""
    chunk = (
        b'[{"ph":"X","cat":"cpu_op","name":"a","pid":1,"tid":1,"ts":NaN,"dur":1},'
        b'{"ph":"X","cat":"cpu_op","name":"b","pid":1,"tid":1,"ts":2,"dur":null},'
        b'{"ph":"X","cat":"cpu_op","name":"c","pid":1,"tid":1,"ts":3,"dur":1e300}]'
    )
    events = _decode_chunk(Path("chunk.json"), chunk, False, (0, 0, [0, 60, 120]))
    columns = _Columns(False)
    table = columns.build(events, 10)["ops"]
    assert table.column("event_id").to_pylist() == [11]
    assert table.column("dur_ns").to_pylist() == [None] and table.column("ts_ns").to_pylist() == [2000]
    assert columns.problems["bad_time:ops"] == 2
    assert table.schema.field("dur_ns").type == pa.int64()
