/* k25trace: one chunk "[ {event}, ... ]" of a Kineto trace, validated and read straight into columns.
 *
 * Plain C, no Python headers: compiled at install time (hatch_build.py, with the ziglang wheel's C compiler or the
 * machine's cc) and called through ctypes by k25trace/ingest/scan.py. It is a fast path, never the only path:
 * whenever it returns -1 ("not handled here") the chunk is decoded by msgspec exactly as without it, so it only
 * has to be right about the chunks it accepts, and it accepts only what it reads exactly as msgspec would:
 *
 *   - every byte is printable ASCII or a newline (no escape, no UTF-8, no control character, no tab);
 *   - the chunk is valid JSON: an array of objects, every value checked (strings, numbers, literals, nesting);
 *   - every event has a "cat" of the tagged union (the caller passes the categories and their tables); the known
 *     fields before it (Kineto writes "ph" first, flow events "id", "pid", "tid", "ts") have the kept types;
 *   - for a kept CPU-side event (launch, annotation, cpu_op): ph "X" or null or absent, ts an int or float that
 *     converts to a double exactly as msgspec + numpy do (integers within int64; decimals with at most 19
 *     significant digits whose value is below 2**53 units of the last digit and at most 22 decimals:
 *     correctly rounded, Clinger's fast path; anything else, exponents included, is not handled), dur the same
 *     or null, pid/tid an int64 or null (a string pid is left to msgspec), name a string or null, args an object
 *     or null whose integer fields are int64 or null; no field twice;
 *   - a GPU activity (kernel, memcpy, memset) is read into the GPU columns under the same rules, its args fields
 *     as msgspec types them (device, stream, correlation, External id, registers, shared memory, cbid: int64
 *     or null; bytes an int64 or null; grid and block [x, y, z] of int32 or null; blocks/warps per SM and
 *     occupancy a number read exactly, an integer up to 2**53, or null). One with anything else there (the
 *     NCCL collective fields, a field twice, a string, a float where an integer goes, a short grid, ...) is
 *     copied out, as "[e1,e2,...]", for msgspec to decode: the caller puts both together in event order.
 *
 * Outputs (arrays sized by the caller; a row of kept event k is rows[k]):
 *   codes[e]            category code of event e (index into the caller's category table)
 *   gpu                 "[" GPU events "," ... "]" text
 *   I[r * NI + j]       int64 columns of kept row r: event index, pid, tid, External id, correlation, cbid,
 *                       end of its name in its table's name buffer, end of its Input Dims in dims
 *   F[r * 2 + j]        ts, dur (µs, as doubles)
 *   N[r * NN + j]       1 where a column is null: dur, pid, tid, External id, correlation, cbid, name
 *   kinds[r]            the row's table (K_LAUNCH, K_OP, K_ANN)
 *   names[t]            per table (0 launch, 1 op, 2 annotation): names, back to back
 *   dims                cpu_ops' Input Dims, raw JSON text, back to back
 *   GI[g * NGI + j]     int64 columns of GPU row g: event index, device (else pid), stream (else tid),
 *                       correlation, External id, grid x y z, block x y z, registers, shared memory, bytes,
 *                       end of its name in gnames
 *   GF[g * NGF + j]     ts, dur (µs; a GPU activity without dur lasts 0), blocks per SM, warps per SM, occupancy
 *   GN[g * NGN + j]     1 where a column is null: device, stream, correlation, External id, grid, block,
 *                       registers, shared memory, blocks per SM, warps per SM, occupancy, bytes
 *   gnames              GPU activities' names, back to back
 *   out                 [0] events, [1] GPU events copied out, [2] rows, [3] gpu bytes, [4..6] name bytes per
 *                       table, [7] dims bytes, [8] the source line that refused the chunk (for tests), [9] its
 *                       byte, [10] GPU rows, [11] gnames bytes
 */
#include <stdint.h>
#include <string.h>
#if defined(__SSE2__) && defined(__x86_64__)
#define K25_SSE2 1
#include <emmintrin.h>
#endif

enum { K_SKIP = 0, K_GPU = 1, K_LAUNCH = 2, K_OP = 3, K_ANN = 4 };
enum { I_EVENT, I_PID, I_TID, I_EXT, I_CORR, I_CBID, I_NAME_END, I_DIMS_END, NI };
enum { N_DUR, N_PID, N_TID, N_EXT, N_CORR, N_CBID, N_NAME, NN };
enum { G_EVENT, G_DEVICE, G_STREAM, G_CORR, G_EXT, G_GRID, G_BLOCK = G_GRID + 3, G_REG = G_BLOCK + 3, G_SHM, G_BYTES,
       G_NAME_END, NGI };
enum { GF_TS, GF_DUR, GF_BPSM, GF_WPSM, GF_OCC, NGF };
enum { GN_DEVICE, GN_STREAM, GN_CORR, GN_EXT, GN_GRID, GN_BLOCK, GN_REG, GN_SHM, GN_BPSM, GN_WPSM, GN_OCC, GN_BYTES,
       NGN };
#define MAX_DEPTH 400 /* deeper nesting is left to msgspec (which goes to ~1,000) */

typedef struct {
    const uint8_t *b;
    int64_t i, n, nl;
    int depth;
} P;

static const double POW10[23] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
                                 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

static inline void ws(P *p) {
    while (p->i < p->n) {
        uint8_t c = p->b[p->i];
        if (c == ' ') {
            p->i++;
        } else if (c == '\n') {
            p->nl++;
            p->i++;
        } else {
            break;
        }
    }
}

/* after a value inside a container: 1 at a ',' (passed, and the whitespace after it), 2 at ``close`` (passed),
 * 0 at anything else (not JSON) */
static inline int after_value(P *p, uint8_t close) {
    ws(p);
    if (p->i >= p->n) return 0;
    if (p->b[p->i] == ',') {
        p->i++;
        ws(p);
        return 1;
    }
    if (p->b[p->i] == close) {
        p->i++;
        return 2;
    }
    return 0;
}

/* b[i] == '"': the index of the closing quote (there is no backslash in the chunk), -1 if none */
static inline int64_t str_end(const P *p) {
    int64_t i = p->i + 1, n = p->n;
#ifdef K25_SSE2
    const __m128i q = _mm_set1_epi8('"');
    while (i + 16 <= n) {
        unsigned m = (unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(_mm_loadu_si128((const __m128i *)(p->b + i)), q));
        if (m) return i + __builtin_ctz(m);
        i += 16;
    }
    for (; i < n; i++)
        if (p->b[i] == '"') return i;
    return -1;
#else
    const uint8_t *q = memchr(p->b + i, '"', (size_t)(n - i));
    return q ? (int64_t)(q - p->b) : -1;
#endif
}

/* an object's key at b[i] == '"', the colon after it and the whitespace around: 1 (*key, *klen: the key's text),
 * 0 when that is not there (not JSON) */
static inline int object_key(P *p, const uint8_t **key, int64_t *klen) {
    if (p->i >= p->n || p->b[p->i] != '"') return 0;
    int64_t e = str_end(p);
    if (e < 0) return 0;
    *key = p->b + p->i + 1;
    *klen = e - p->i - 1;
    p->i = e + 1;
    ws(p);
    if (p->i >= p->n || p->b[p->i] != ':') return 0;
    p->i++;
    ws(p);
    return 1;
}

/* b[i] == '{': past it and the whitespace after it; 0 when the object is empty (then past its '}' too) */
static inline int object_open(P *p) {
    p->i++;
    ws(p);
    if (p->i < p->n && p->b[p->i] == '}') {
        p->i++;
        return 0;
    }
    return 1;
}

/* A JSON number at b[i] (grammar checked). 0: invalid; 1: an integer within int64 (*iv, and *dv exactly as
 * (double)); 2: a decimal read exactly (*dv); 3: valid JSON but not read here (exponent, too many digits). */
static inline int number(P *p, int64_t *iv, double *dv) {
    const uint8_t *b = p->b;
    int64_t i = p->i, n = p->n;
    int neg = 0, big = 0, frac = 0, isfloat = 0;
    uint64_t m = 0;
    if (i < n && b[i] == '-') {
        neg = 1;
        i++;
    }
    if (i >= n) return 0;
    if (b[i] == '0') {
        i++;
        if (i < n && b[i] >= '0' && b[i] <= '9') return 0; /* a leading zero */
    } else if (b[i] >= '1' && b[i] <= '9') {
        for (; i < n && b[i] >= '0' && b[i] <= '9'; i++) {
            if (m > 1844674407370955160ULL) big = 1; else m = m * 10 + (uint64_t)(b[i] - '0');
        }
    } else {
        return 0;
    }
    if (i < n && b[i] == '.') {
        isfloat = 1;
        i++;
        if (i >= n || b[i] < '0' || b[i] > '9') return 0;
        for (; i < n && b[i] >= '0' && b[i] <= '9'; i++, frac++) {
            if (m > 1844674407370955160ULL) big = 1; else m = m * 10 + (uint64_t)(b[i] - '0');
        }
    }
    if (i < n && (b[i] == 'e' || b[i] == 'E')) {
        big = 1;
        i++;
        if (i < n && (b[i] == '+' || b[i] == '-')) i++;
        if (i >= n || b[i] < '0' || b[i] > '9') return 0;
        while (i < n && b[i] >= '0' && b[i] <= '9') i++;
    }
    p->i = i;
    if (big) return 3;
    if (!isfloat) {
        if (m > (uint64_t)INT64_MAX) return 3;
        *iv = neg ? -(int64_t)m : (int64_t)m;
        *dv = (double)*iv;
        return 1;
    }
    if (m > (1ULL << 53) || frac > 22) return 3;
    double d = (double)m / POW10[frac]; /* both exact: the quotient is correctly rounded */
    *dv = neg ? -d : d;
    return 2;
}

static int skip_value(P *p);

/* b[i] is '{' or '[': skip the container, every value in it checked */
static int skip_container(P *p, uint8_t close) {
    if (++p->depth > MAX_DEPTH) return 0;
    p->i++;
    ws(p);
    if (p->i < p->n && p->b[p->i] == close) {
        p->i++;
        p->depth--;
        return 1;
    }
    for (;;) {
        const uint8_t *key;
        int64_t klen;
        if (close == '}' && !object_key(p, &key, &klen)) return 0;
        if (!skip_value(p)) return 0;
        int next = after_value(p, close);
        if (next == 1) continue;
        if (next == 2) p->depth--;
        return next == 2;
    }
}

static inline int literal(P *p, const char *word, int64_t len) {
    if (p->n - p->i >= len && !memcmp(p->b + p->i, word, (size_t)len)) {
        p->i += len;
        return 1;
    }
    return 0;
}

static int skip_value(P *p) {
    if (p->i >= p->n) return 0;
    uint8_t c = p->b[p->i];
    if (c == '"') {
        int64_t e = str_end(p);
        if (e < 0) return 0;
        p->i = e + 1;
        return 1;
    }
    if (c == '{') return skip_container(p, '}');
    if (c == '[') return skip_container(p, ']');
    if (c == 't') return literal(p, "true", 4);
    if (c == 'f') return literal(p, "false", 5);
    if (c == 'n') return literal(p, "null", 4);
    int64_t iv;
    double dv;
    return number(p, &iv, &dv) != 0;
}

/* an integer field: an int64 or null; 0: not handled */
static inline int int_field(P *p, int64_t *v, uint8_t *nul) {
    if (literal(p, "null", 4)) {
        *nul = 1;
        *v = 0;
        return 1;
    }
    double d;
    if (number(p, v, &d) != 1) return 0;
    *nul = 0;
    return 1;
}

/* a string or null at b[i]: its span (start -1: null); 0: anything else */
static inline int str_or_null(P *p, int64_t *start, int64_t *len) {
    if (literal(p, "null", 4)) {
        *start = -1;
        *len = 0;
        return 1;
    }
    if (p->i >= p->n || p->b[p->i] != '"') return 0;
    int64_t e = str_end(p);
    if (e < 0) return 0;
    *start = p->i + 1;
    *len = e - p->i - 1;
    p->i = e + 1;
    return 1;
}

#define KEY(s) (klen == (int64_t)sizeof(s) - 1 && !memcmp(key, s, sizeof(s) - 1))
#define ONCE(bit)                   \
    do {                            \
        if (seen & (bit)) return 0; \
        seen |= (bit);              \
    } while (0)

/* the args object of a kept CPU-side event, at b[i] == '{' */
static int args_obj(P *p, int kind, int64_t *I, uint8_t *N, uint8_t *dims, int64_t *dims_used) {
    unsigned seen = 0;
    if (!object_open(p)) return 1;
    for (;;) {
        const uint8_t *key;
        int64_t klen;
        if (!object_key(p, &key, &klen)) return 0;
        if (KEY("External id")) {
            ONCE(1);
            if (!int_field(p, &I[I_EXT], &N[N_EXT])) return 0;
        } else if (kind != K_OP && KEY("correlation")) {
            ONCE(2);
            if (!int_field(p, &I[I_CORR], &N[N_CORR])) return 0;
        } else if (kind != K_OP && KEY("cbid")) {
            ONCE(4);
            if (!int_field(p, &I[I_CBID], &N[N_CBID])) return 0;
        } else if (kind == K_OP && KEY("Input Dims")) {
            ONCE(8);
            int64_t s = p->i;
            if (!skip_value(p)) return 0;
            memcpy(dims + *dims_used, p->b + s, (size_t)(p->i - s));
            *dims_used += p->i - s;
        } else if (!skip_value(p)) {
            return 0;
        }
        int next = after_value(p, '}');
        if (next != 1) return next == 2;
    }
}

/* a float field of GPU args at b[i]: null, a decimal read exactly, or an integer up to 2**53 (msgspec's float
 * of it is then exact too); 0: anything else */
static inline int float_field(P *p, double *v, uint8_t *nul) {
    if (literal(p, "null", 4)) {
        *nul = 1;
        *v = 0;
        return 1;
    }
    int64_t iv;
    int k = number(p, &iv, v);
    if (k == 2 || (k == 1 && iv <= (1LL << 53) && iv >= -(1LL << 53))) {
        *nul = 0;
        return 1;
    }
    return 0;
}

/* grid or block at b[i]: null, or exactly three integers within int32; 0: anything else */
static inline int dims3(P *p, int64_t *v, uint8_t *nul) {
    if (literal(p, "null", 4)) {
        *nul = 1;
        v[0] = v[1] = v[2] = 0;
        return 1;
    }
    if (p->i >= p->n || p->b[p->i] != '[') return 0;
    p->i++;
    ws(p);
    for (int k = 0; k < 3; k++) {
        double d;
        if (number(p, &v[k], &d) != 1 || v[k] < INT32_MIN || v[k] > INT32_MAX) return 0;
        if (after_value(p, ']') != (k < 2 ? 1 : 2)) return 0;
    }
    *nul = 0;
    return 1;
}

/* The args object of a GPU activity, at b[i] == '{', into its GPU row. 0: not JSON; 1: read; 2: valid JSON with
 * something msgspec reads differently or that is not read here (the event is then copied out for msgspec). */
static int gpu_args(P *p, int64_t *G, double *F, uint8_t *N) {
    unsigned seen = 0;
    int plain = 1;
    if (!object_open(p)) return 1;
    for (;;) {
        const uint8_t *key;
        int64_t klen;
        if (!object_key(p, &key, &klen)) return 0;
        int64_t s = p->i, cbid;
        unsigned bit = 0;
        int ok = 1;
        uint8_t dummy;
        if (KEY("device")) {
            bit = 1;
            ok = int_field(p, &G[G_DEVICE], &N[GN_DEVICE]);
        } else if (KEY("stream")) {
            bit = 2;
            ok = int_field(p, &G[G_STREAM], &N[GN_STREAM]);
        } else if (KEY("correlation")) {
            bit = 4;
            ok = int_field(p, &G[G_CORR], &N[GN_CORR]);
        } else if (KEY("External id")) {
            bit = 8;
            ok = int_field(p, &G[G_EXT], &N[GN_EXT]);
        } else if (KEY("grid")) {
            bit = 16;
            ok = dims3(p, &G[G_GRID], &N[GN_GRID]);
        } else if (KEY("block")) {
            bit = 32;
            ok = dims3(p, &G[G_BLOCK], &N[GN_BLOCK]);
        } else if (KEY("registers per thread")) {
            bit = 64;
            ok = int_field(p, &G[G_REG], &N[GN_REG]);
        } else if (KEY("shared memory")) {
            bit = 128;
            ok = int_field(p, &G[G_SHM], &N[GN_SHM]);
        } else if (KEY("blocks per SM")) {
            bit = 256;
            ok = float_field(p, &F[GF_BPSM], &N[GN_BPSM]);
        } else if (KEY("warps per SM")) {
            bit = 512;
            ok = float_field(p, &F[GF_WPSM], &N[GN_WPSM]);
        } else if (KEY("est. achieved occupancy %")) {
            bit = 1024;
            ok = float_field(p, &F[GF_OCC], &N[GN_OCC]);
        } else if (KEY("bytes")) {
            bit = 2048;
            ok = int_field(p, &G[G_BYTES], &N[GN_BYTES]);
        } else if (KEY("cbid")) { /* not stored for a GPU activity, but msgspec checks it is an integer */
            bit = 4096;
            ok = int_field(p, &cbid, &dummy);
        } else if (KEY("Collective name") || KEY("In msg nelems") || KEY("Out msg nelems") || KEY("Group size") ||
                   KEY("dtype") || KEY("Process Group Name") || KEY("Process Group Ranks")) {
            ok = 0; /* the collective columns are built from msgspec's values */
        } else if (!skip_value(p)) {
            return 0;
        }
        if (bit) {
            if (seen & bit) ok = 0;
            seen |= bit;
        }
        if (!ok) { /* not read here: skip the value (checked) and leave the event to msgspec */
            plain = 0;
            p->i = s;
            if (!skip_value(p)) return 0;
        }
        int next = after_value(p, '}');
        if (next != 1) return next == 2 ? (plain ? 1 : 2) : 0;
    }
}

/* every byte printable ASCII (0x20-0x7E) or a newline, and no backslash: 1 (newlines counted in *nl), else 0 */
static int precheck(const uint8_t *b, int64_t n, int64_t *nl) {
    int64_t k = 0, count = 0;
    uint8_t bad = 0;
#ifdef K25_SSE2
    const __m128i sp = _mm_set1_epi8(0x20), lf = _mm_set1_epi8('\n'), del = _mm_set1_epi8(0x7F),
                  bs = _mm_set1_epi8('\\'), zero = _mm_setzero_si128();
    __m128i badv = zero;
    while (k + 16 <= n) {
        __m128i acc = zero; /* newlines per byte lane, at most 255 rounds before they are summed */
        int64_t stop = k + 16 * 255 <= n ? k + 16 * 255 : n - (n - k) % 16;
        for (; k < stop; k += 16) {
            __m128i v = _mm_loadu_si128((const __m128i *)(b + k));
            __m128i isnl = _mm_cmpeq_epi8(v, lf);
            /* signed compare: "below 0x20" is 0x00-0x1F and every byte from 0x80 */
            badv = _mm_or_si128(badv, _mm_andnot_si128(isnl, _mm_cmplt_epi8(v, sp)));
            badv = _mm_or_si128(badv, _mm_or_si128(_mm_cmpeq_epi8(v, del), _mm_cmpeq_epi8(v, bs)));
            acc = _mm_sub_epi8(acc, isnl);
        }
        __m128i s = _mm_sad_epu8(acc, zero);
        count += _mm_cvtsi128_si64(s) + _mm_cvtsi128_si64(_mm_unpackhi_epi64(s, s));
    }
    bad = (uint8_t)(_mm_movemask_epi8(badv) != 0);
#endif
    for (; k < n; k++) {
        uint8_t c = b[k];
        count += (c == '\n');
        bad |= (uint8_t)((((uint8_t)(c - 0x20) > 0x5E) & (c != '\n')) | (c == '\\'));
    }
    *nl = count;
    return !bad;
}

#undef ONCE
#define REFUSE                  \
    do {                        \
        out[8] = __LINE__;      \
        out[9] = p.i;           \
        return -1;              \
    } while (0)
#define ONCE(bit)                \
    do {                         \
        if (seen & (bit)) REFUSE; \
        seen |= (bit);           \
    } while (0)

/* the interface version: scan.py loads a library only if it says the version it was written for (a stale
 * library left by an older editable install is not called with arguments it does not take) */
int64_t k25_scan_version(void) { return 2; }

int64_t k25_scan(const uint8_t *b, int64_t n, const uint8_t *cat_text, const int64_t *cat_ends, int64_t ncats,
                 const int8_t *cat_kind, int8_t *codes, int64_t cap_events, uint8_t *gpu, int64_t *I, double *F,
                 uint8_t *N, int8_t *kinds, int64_t cap_rows, uint8_t *names0, uint8_t *names1, uint8_t *names2,
                 uint8_t *dims, int64_t *GI, double *GF, uint8_t *GN, uint8_t *gnames, int64_t *out) {
    P p = {b, 0, n, 0, 0};
    int64_t nl_total = 0, ne = 0, ng = 0, nr = 0, gpu_used = 0, dims_used = 0, ngr = 0, gnames_used = 0;
    int64_t names_used[3] = {0, 0, 0};
    uint8_t *names[3] = {names0, names1, names2};
    out[8] = out[9] = 0;
    if (!precheck(b, n, &nl_total)) REFUSE;
    gpu[gpu_used++] = '[';
    ws(&p);
    if (p.i >= n || b[p.i] != '[') REFUSE;
    p.i++;
    ws(&p);
    if (p.i < n && b[p.i] == ']') {
        p.i++;
        goto done;
    }
    for (;;) {
        if (p.i >= n || b[p.i] != '{' || ne >= cap_events || nr >= cap_rows || ngr >= cap_rows) REFUSE;
        int64_t start = p.i;
        int64_t *Ir = I + nr * NI;
        uint8_t *Nr = N + nr * NN;
        double *Fr = F + nr * 2;
        int code = -1, kind = -1, ph_ok = 1, gpu_plain = 1;
        unsigned seen = 0;
        int64_t *G = GI + ngr * NGI; /* this event's GPU row, if it is a GPU activity (at most one per row) */
        double *GFr = GF + ngr * NGF;
        uint8_t *GNr = GN + ngr * NGN;
        int64_t name_start = -1, name_len = 0;
        memset(Ir, 0, sizeof(int64_t) * NI); /* a null or absent value is 0 under its null flag */
        memset(Fr, 0, sizeof(double) * 2);
        memset(Nr, 1, NN);
        Ir[I_EVENT] = ne;
        p.i++;
        ws(&p);
        for (;;) {
            const uint8_t *key;
            int64_t klen;
            if (!object_key(&p, &key, &klen)) REFUSE; /* also an event without any field: no cat */
            if (KEY("cat")) {
                ONCE(1);
                int64_t s, len;
                if (!str_or_null(&p, &s, &len) || s < 0) REFUSE;
                for (int64_t c = 0; c < ncats; c++) {
                    int64_t c0 = c ? cat_ends[c - 1] : 0;
                    if (cat_ends[c] - c0 == len && !memcmp(cat_text + c0, b + s, (size_t)len)) {
                        code = (int)c;
                        break;
                    }
                }
                if (code < 0) REFUSE; /* outside the tagged union: msgspec's generic decoder */
                kind = cat_kind[code];
                if (kind == K_GPU) {
                    memset(G, 0, sizeof(int64_t) * NGI);
                    memset(GFr, 0, sizeof(double) * NGF);
                    memset(GNr, 1, NGN);
                }
            } else if (kind == K_SKIP) {
                if (!skip_value(&p)) REFUSE;
            } else if (KEY("ph")) {
                ONCE(2);
                int64_t s, len;
                if (!str_or_null(&p, &s, &len)) REFUSE;
                ph_ok = s < 0 || (len == 1 && b[s] == 'X');
            } else if (KEY("name")) {
                ONCE(4);
                if (!str_or_null(&p, &name_start, &name_len)) REFUSE;
            } else if (KEY("pid")) {
                ONCE(8);
                if (!int_field(&p, &Ir[I_PID], &Nr[N_PID])) REFUSE;
            } else if (KEY("tid")) {
                ONCE(16);
                if (!int_field(&p, &Ir[I_TID], &Nr[N_TID])) REFUSE;
            } else if (KEY("ts")) {
                ONCE(32);
                int64_t iv;
                int k = number(&p, &iv, &Fr[0]);
                if (k != 1 && k != 2) REFUSE;
            } else if (KEY("dur")) {
                ONCE(64);
                if (!literal(&p, "null", 4)) {
                    int64_t iv;
                    int k = number(&p, &iv, &Fr[1]);
                    if (k != 1 && k != 2) REFUSE;
                    Nr[N_DUR] = 0;
                }
            } else if (KEY("args")) {
                ONCE(128);
                if (literal(&p, "null", 4)) {
                    /* no args */
                } else if (kind < 0 || p.i >= n || b[p.i] != '{') { /* args before cat, or not an object */
                    REFUSE;
                } else if (kind == K_GPU) {
                    int got = gpu_args(&p, G, GFr, GNr);
                    if (!got) REFUSE;
                    gpu_plain = got == 1;
                } else if (!args_obj(&p, kind, Ir, Nr, dims, &dims_used)) {
                    REFUSE;
                }
            } else if (!skip_value(&p)) {
                REFUSE;
            }
            int next = after_value(&p, '}');
            if (next == 2) break;
            if (next != 1) REFUSE;
        }
        if (code < 0) REFUSE;
        codes[ne] = (int8_t)code;
        if (kind != K_SKIP && (!ph_ok || !(seen & 32))) REFUSE; /* not a timed complete event: msgspec's generic
                                                                    decoder */
        if (kind == K_GPU && !gpu_plain) { /* copied out for msgspec */
            if (ng) gpu[gpu_used++] = ',';
            memcpy(gpu + gpu_used, b + start, (size_t)(p.i - start));
            gpu_used += p.i - start;
            ng++;
        } else if (kind == K_GPU) {
            G[G_EVENT] = ne;
            if (GNr[GN_DEVICE]) { /* no device in args: the pid */
                G[G_DEVICE] = Ir[I_PID];
                GNr[GN_DEVICE] = Nr[N_PID];
            }
            if (GNr[GN_STREAM]) { /* no stream: the tid */
                G[G_STREAM] = Ir[I_TID];
                GNr[GN_STREAM] = Nr[N_TID];
            }
            GFr[GF_TS] = Fr[0];
            GFr[GF_DUR] = Fr[1]; /* 0 when null or absent */
            if (name_start >= 0) {
                memcpy(gnames + gnames_used, b + name_start, (size_t)name_len);
                gnames_used += name_len;
            }
            G[G_NAME_END] = gnames_used;
            ngr++;
        } else if (kind != K_SKIP) {
            int t = kind == K_LAUNCH ? 0 : kind == K_OP ? 1 : 2;
            if (name_start >= 0) {
                memcpy(names[t] + names_used[t], b + name_start, (size_t)name_len);
                names_used[t] += name_len;
                Nr[N_NAME] = 0;
            }
            Ir[I_NAME_END] = names_used[t];
            Ir[I_DIMS_END] = dims_used;
            kinds[nr] = (int8_t)kind;
            nr++;
        }
        ne++;
        int next = after_value(&p, ']');
        if (next == 2) break;
        if (next != 1) REFUSE;
    }
done:
    ws(&p);
    if (p.i != n) REFUSE;
    if (p.nl != nl_total) REFUSE; /* a newline inside a string: not JSON */
    gpu[gpu_used++] = ']';
    out[0] = ne;
    out[1] = ng;
    out[2] = nr;
    out[3] = gpu_used;
    out[4] = names_used[0];
    out[5] = names_used[1];
    out[6] = names_used[2];
    out[7] = dims_used;
    out[10] = ngr;
    out[11] = gnames_used;
    return ne;
}
