"""Probe for issue 17: how fast would a compiled scanner decode a chunk ``[ {event}, ... ]`` straight into columns?

Not part of the loader (numba is not a dependency). A numba function reads each event's top-level keys, and for
the kept categories ts/dur (exact integer ns), pid/tid, the name's byte range and five integer args; it skips a
dropped category's event in one loop. It flags what it does not handle (escapes in names, exponents, more than
3 decimals, string pids, args before cat) as 'odd': a real loader would hand such a chunk to msgspec. It prints
its time per rank against the loader's msgspec decode + column building on the same chunks, and checks the event
counts and the GPU and cpu_op times against the loader's.

    python3 -m pip install --target /tmp/nbsite numba
    NUMBA_CACHE_DIR=/tmp/nbcache PYTHONPATH=/tmp/nbsite python3 benchmarks/numba_scan_probe.py RANK.pt.trace.json.gz

Measured on the 2-core machine (real-structure rank, 20 chunks scaled to the rank's 105): scan 1.5-3.4 s,
loader 5.0-7.5 s in the same runs (noisy machine); numba import 0.4 s and cached-JIT load 0.5 s per process,
first compile 5-6 s; 8 odd events of 818,838.

This probe does not validate what it skips, so it would load files the loader rejects. A validating scanner was
built and checked next (same tables, counters and order as the msgspec path on every chunk of the nine shared
traces and the test traces, both keep_python values; 44 of 144 chunks left to msgspec), and measured on 20 chunks
(168 MB) of the same rank, same runs, this machine:

    strict validation inline (escapes, UTF-8, control characters, numbers, literals, nesting)  0.71-1.08 s
    two stages (branch-free byte checks 0.11-0.17 s + quote positions 0.27-0.32 s, then a walk
    that skips each string in one step)                                                       1.18-1.66 s
    the loader's msgspec decode + column building                                              0.91-1.27 s

plus 0.3-0.9 s of Arrow assembly (GPU activities through msgspec). Byte-at-a-time loops run at 2-3 ns per byte
here, as slow as msgspec's whole decode, so exact validation costs what the scanner saves: not adopted.
"""

import gc
import sys
import time

import numba as nb
import numpy as np

KEYS = [b"ph", b"cat", b"name", b"pid", b"tid", b"ts", b"dur", b"args"]
ARGKEYS = [b"correlation", b"External id", b"stream", b"device", b"cbid"]
CATS = [
    b"kernel",
    b"gpu_memcpy",
    b"gpu_memset",
    b"cuda_runtime",
    b"cuda_driver",
    b"cpu_op",
    b"user_annotation",
    b"gpu_user_annotation",
    b"python_function",
    b"ac2g",
]


def table(words):
    data = np.frombuffer(b"".join(words), dtype=np.uint8).copy()
    off = np.zeros(len(words) + 1, dtype=np.int64)
    off[1:] = np.cumsum([len(w) for w in words])
    return data, off


@nb.njit(cache=True, inline="always")
def skip_ws(b, i):
    while b[i] == 32 or b[i] == 10 or b[i] == 13 or b[i] == 9:
        i += 1
    return i


@nb.njit(cache=True, inline="always")
def end_string(b, i):
    """b[i] is the opening quote: index of the closing quote; sets no flag (escapes skipped)."""
    i += 1
    while True:
        c = b[i]
        if c == 34:
            return i
        if c == 92:
            i += 2
        else:
            i += 1


@nb.njit(cache=True)
def close_of(b, i, depth):
    """From b[i], ``depth`` brackets deep: the index after the bracket that closes the outermost one."""
    while True:
        c = b[i]
        if c == 34:
            i = end_string(b, i) + 1
            continue
        if c == 123 or c == 91:
            depth += 1
        elif c == 125 or c == 93:
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1


@nb.njit(cache=True)
def skip_value(b, i):
    c = b[i]
    if c == 34:
        return end_string(b, i) + 1
    if c == 123 or c == 91:
        return close_of(b, i, 0)
    while not (c == 44 or c == 125 or c == 93 or c == 32 or c == 10 or c == 13 or c == 9):
        i += 1
        c = b[i]
    return i


@nb.njit(cache=True, inline="always")
def match(b, s, e, data, off):
    """Index of the word equal to b[s:e], or -1."""
    n = e - s
    for k in range(len(off) - 1):
        if off[k + 1] - off[k] != n:
            continue
        ok = True
        for j in range(n):
            if b[s + j] != data[off[k] + j]:
                ok = False
                break
        if ok:
            return k
    return -1


@nb.njit(cache=True, inline="always")
def parse_digits(b, i):
    """An optional minus sign and decimal digits at b[i] -> (negative, value, digit count, next index)."""
    neg = b[i] == 45
    if neg:
        i += 1
    v = 0
    digits = 0
    while 48 <= b[i] <= 57:
        v = v * 10 + (b[i] - 48)
        i += 1
        digits += 1
    return neg, v, digits, i


@nb.njit(cache=True, inline="always")
def parse_ns(b, i):
    """A JSON number of µs at b[i] -> (ns, next index, ok). ok False: exponent, > 3 decimals, or no number."""
    neg, whole, digits, i = parse_digits(b, i)
    ok = digits > 0 and digits < 16
    frac = 0
    nf = 0
    if b[i] == 46:
        i += 1
        while 48 <= b[i] <= 57:
            if nf < 3:
                frac = frac * 10 + (b[i] - 48)
            elif b[i] != 48:
                ok = False
            nf += 1
            i += 1
    if b[i] == 101 or b[i] == 69:
        ok = False
        i = skip_value(b, i)
    while nf < 3:
        frac *= 10
        nf += 1
    ns = whole * 1000 + frac
    return (-ns if neg else ns), i, ok


@nb.njit(cache=True, inline="always")
def parse_int(b, i):
    neg, v, digits, i = parse_digits(b, i)
    ok = 0 < digits < 19 and not (b[i] == 46 or b[i] == 101 or b[i] == 69)
    return (-v if neg else v), i, ok


@nb.njit(cache=True)
def scan(b, kd, ko, ad, ao, cd, co, cat, name_s, name_e, ts, dur, pid, tid, argv, odd):
    """Events of ``[ {...}, ... ]`` -> per event: category code (-1 unknown), name offsets, ts/dur ns, pid/tid,
    args (correlation, External id, stream, device, cbid; -1 absent) and an 'odd' flag (fallback needed).
    Returns the number of events."""
    i = skip_ws(b, 1)  # after '['
    n = 0
    NO = -(1 << 62)
    while b[i] == 123:  # '{'
        cat[n] = -1
        name_s[n] = -1
        name_e[n] = -1
        ts[n] = NO
        dur[n] = NO
        pid[n] = NO
        tid[n] = NO
        for a in range(5):
            argv[n, a] = NO
        odd[n] = False
        i = skip_ws(b, i + 1)
        while b[i] != 125:
            ks = i + 1
            ke = end_string(b, i)
            k = match(b, ks, ke, kd, ko)
            i = skip_ws(b, ke + 1)  # ':'
            i = skip_ws(b, i + 1)
            if k == 1:  # cat
                e = end_string(b, i)
                cat[n] = match(b, i + 1, e, cd, co)
                i = e + 1
                if cat[n] >= 8:  # a dropped category: skip to the end of the event in one loop
                    i = close_of(b, i, 1) - 1  # at its closing brace
                    continue
            elif k == 2:  # name
                e = end_string(b, i)
                name_s[n] = i + 1
                name_e[n] = e
                for j in range(i + 1, e):
                    if b[j] == 92:
                        odd[n] = True
                        break
                i = e + 1
            elif k == 5 or k == 6:
                v, i, ok = parse_ns(b, i)
                if not ok:
                    odd[n] = True
                if k == 5:
                    ts[n] = v
                else:
                    dur[n] = v
            elif k == 3 or k == 4:
                if b[i] == 34:
                    odd[n] = True
                    i = skip_value(b, i)
                else:
                    v, i, ok = parse_int(b, i)
                    if not ok:
                        odd[n] = True
                    if k == 3:
                        pid[n] = v
                    else:
                        tid[n] = v
            elif k == 7 and cat[n] >= 0 and cat[n] <= 7 and b[i] == 123:  # args of a kept category
                i = skip_ws(b, i + 1)
                while b[i] != 125:
                    ks = i + 1
                    ke = end_string(b, i)
                    a = match(b, ks, ke, ad, ao)
                    i = skip_ws(b, ke + 1)
                    i = skip_ws(b, i + 1)
                    if a >= 0 and b[i] != 34 and b[i] != 110:
                        v, i, ok = parse_int(b, i)
                        if not ok:
                            odd[n] = True
                        argv[n, a] = v
                    else:
                        i = skip_value(b, i)
                    i = skip_ws(b, i)
                    if b[i] == 44:
                        i = skip_ws(b, i + 1)
                i += 1
            elif k == 7 and cat[n] < 0:
                odd[n] = True  # args before cat, or an unknown category: the prototype does not handle it
                i = skip_value(b, i)
            else:
                i = skip_value(b, i)
            i = skip_ws(b, i)
            if b[i] == 44:
                i = skip_ws(b, i + 1)
        n += 1
        i = skip_ws(b, i + 1)
        if b[i] == 44:
            i = skip_ws(b, i + 1)
    return n


def run(chunk):
    b = np.frombuffer(chunk, dtype=np.uint8)
    cap = len(chunk) // 40 + 16
    out = (
        np.empty(cap, np.int8),
        np.empty(cap, np.int64),
        np.empty(cap, np.int64),
        np.empty(cap, np.int64),
        np.empty(cap, np.int64),
        np.empty(cap, np.int64),
        np.empty(cap, np.int64),
        np.empty((cap, 5), np.int64),
        np.empty(cap, np.bool_),
    )
    n = scan(b, *KT, *AT, *CT, *out)
    return n, out


KT, AT, CT = table(KEYS), table(ARGKEYS), table(CATS)

if __name__ == "__main__":
    from pathlib import Path

    from k25trace.ingest.chunks import _decode_and_build
    from k25trace.ingest.stream import _Reader, _Splitter

    p = Path(sys.argv[1])
    sp = _Splitter(p)
    r = _Reader(p)
    chunks = []
    while len(chunks) < 22:
        c = sp.feed(r.read(8 << 20))
        if c:
            chunks.append(bytes(c))
    chunks = chunks[2:]
    t = time.perf_counter()
    run(chunks[0])
    print("first call (JIT or cache load)", round(time.perf_counter() - t, 2), "s")
    gc.disable()
    scale = 105 / len(chunks)
    for _ in range(3):
        t = time.process_time()
        res = [run(c) for c in chunks]
        a = time.process_time() - t
        t = time.process_time()
        ref = [_decode_and_build(str(p), c, False) for c in chunks]
        m = time.process_time() - t
        print(f"per rank: numba scan {a * scale:.2f} s   msgspec decode+columns {m * scale:.2f} s")
    # check against the loader: event counts, kept GPU rows, GPU and cpu_op times
    tot = odd = 0
    for (n, o), rf in zip(res, ref, strict=True):
        assert n == rf.events, (n, rf.events)
        cat = o[0][:n]
        tot += n
        odd += int(o[8][:n].sum())
        g = np.flatnonzero((cat >= 0) & (cat <= 2))
        assert len(g) == rf.tables["gpu"].num_rows, (len(g), rf.tables["gpu"].num_rows)
        assert (o[3][g] == rf.tables["gpu"].column("ts_ns").to_numpy()).all()
        assert (o[4][g] == rf.tables["gpu"].column("dur_ns").to_numpy()).all()
        ops = np.flatnonzero(cat == 5)
        assert (o[3][ops] == rf.tables["ops"].column("ts_ns").to_numpy()).all()
    print("same events, same GPU and cpu_op times as the loader; odd (fallback) events:", odd, "of", tot)
