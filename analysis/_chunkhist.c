/* One pass over a row group's chunk lists: the fast path of analysis.chunkhist.ChunkAccumulator.
 *
 * accumulate(offsets f64[N], n_chunks i64[R], tokens i32[N], gid i32[R], exact u8[R], width,
 *            cells i64[G * (width + 2) * NKEYS], itl_cells i64[G * TOKENS_CAP * NKEYS], itl_big i64[G * NKEYS],
 *            gap_sum f64[G], itl_sum f64[G], gap_lo f64[G], gap_hi f64[G], itl_lo f64[G], itl_hi f64[G],
 *            gaps i64[G], a f32, b f32, clamp f32) -> largest delivery token count below TOKENS_CAP
 *
 * For every request r with gid[r] >= 0 and every chunk i >= 1 of it: gap = (float)(off[i] - off[i-1]);
 * its bucket offset is trunc(log(max(gap, clamp)) * a + b) capped at NKEYS - 1 (the same float32
 * arithmetic as chunkhist._positions).
 *   Inter-chunk (every chunk): cells[g, slot, pos] += 1 with slot = tokens (0..width-1) for exact
 *   counts, width for unknown counts, width + 1 for >= TOKENS_CAP tokens; gap sums, minima, maxima.
 *   Per-token ITL (every *delivery*, the chunks of equal offset, in the same walk): a delivery of
 *   t > 0 tokens (a chunk without an exact count is 1) after the previous delivery's last chunk by
 *   `lead` gives itl_cells[g, t, pos(lead)] += 1, or itl_big[g, pos(lead / t)] += t when
 *   t >= TOKENS_CAP; a request's first delivery has no predecessor and gives none. ITL sums,
 *   minima and maxima likewise.
 * No allocation, no Python objects per chunk, each chunk read once: a few ns per chunk.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#define NKEYS 2402
#define TOKENS_CAP 32

static int get(PyObject *o, Py_buffer *b, Py_ssize_t itemsize, int writable, const char *name) {
    if (PyObject_GetBuffer(o, b, PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0)) < 0) return -1;
    if (b->itemsize != itemsize) {
        PyErr_Format(PyExc_TypeError, "%s: item size %zd, expected %zd", name, b->itemsize, itemsize);
        PyBuffer_Release(b);
        return -1;
    }
    return 0;
}

static inline int position(float v, float a, float b, float clamp) {
    float lg = v > clamp ? v : clamp;
    int pos = (int)(logf(lg) * a + b);
    return pos < NKEYS - 1 ? pos : NKEYS - 1;
}

/* position() without a logf per value: positive floats are cut into cells by their top 18 bits
 * (exponent + 10 mantissa bits, 0.1 % wide, narrower than a 1 % bucket, so a cell holds at most
 * one bucket edge); a cell stores its first value's position and the smallest value of the next
 * one, found once by bisection with position() itself, so both give the same answer. */
#define CELL_SHIFT 13
#define N_CELLS (1u << (31 - CELL_SHIFT))
static int16_t *cell_base;
static float *cell_edge;
static float cell_params[3];

static inline float from_bits(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static inline uint32_t to_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

static int build_cells(float a, float b, float clamp) {
    if (cell_base && cell_params[0] == a && cell_params[1] == b && cell_params[2] == clamp) return 0;
    if (!cell_base) {
        cell_base = PyMem_RawMalloc(N_CELLS * sizeof(int16_t));
        cell_edge = PyMem_RawMalloc(N_CELLS * sizeof(float));
        if (!cell_base || !cell_edge) return -1;
    }
    for (uint32_t c = 0; c < N_CELLS; c++) {
        uint32_t lo = c << CELL_SHIFT, hi = lo + (1u << CELL_SHIFT) - 1;
        int base = position(from_bits(lo), a, b, clamp);
        cell_base[c] = (int16_t)base;
        if (position(from_bits(hi), a, b, clamp) == base || isnan(from_bits(hi))) {
            cell_edge[c] = INFINITY;
            continue;
        }
        while (lo < hi) { /* first bit pattern whose position exceeds base */
            uint32_t mid = lo + (hi - lo) / 2;
            if (position(from_bits(mid), a, b, clamp) > base) hi = mid; else lo = mid + 1;
        }
        cell_edge[c] = from_bits(lo);
    }
    cell_params[0] = a; cell_params[1] = b; cell_params[2] = clamp;
    return 0;
}

static inline int position_fast(float v, int clamp_pos, float clamp) {
    if (!(v > clamp)) return clamp_pos; /* also NaN */
    uint32_t c = to_bits(v) >> CELL_SHIFT;
    if (c >= N_CELLS) return NKEYS - 1; /* +inf */
    return cell_base[c] + (v >= cell_edge[c]);
}

/* A request's deliveries so far: the open one's lead gap and tokens, and whether it is the first. */
typedef struct {
    float lead;
    int lead_pos; /* bucket offset of lead, from the chunk loop (one lookup per chunk, not two) */
    int64_t tokens;
    int first;
} delivery;

/* Per-group outputs of the ITL half of the pass (per delivery). */
typedef struct {
    int64_t *cells;   /* [G][TOKENS_CAP][NKEYS]: deliveries by (tokens, lead-gap bucket) */
    int64_t *big;     /* [G][NKEYS]: deliveries of >= TOKENS_CAP tokens, by ITL bucket, weighted by tokens */
    int max_tokens;   /* largest token count below TOKENS_CAP seen (the caller folds slots 0..max_tokens) */
} itl_out;

/* Closes a request's open delivery: it counts only after a predecessor (its lead gap) and with
 * tokens, and stands for `tokens` ITL samples of lead / tokens. */
static inline void close_delivery(const delivery *d, itl_out *out, Py_ssize_t g, int clamp_pos, float clamp,
                                  double *is, double *ilo, double *ihi) {
    if (d->first || d->tokens <= 0) return;
    const int64_t t = d->tokens;
    const float itl = d->lead / (float)t;
    if (t < TOKENS_CAP) {
        out->cells[(g * TOKENS_CAP + t) * NKEYS + d->lead_pos]++;
        if (t > out->max_tokens) out->max_tokens = (int)t;
    } else {  /* rare: bucketed by its ITL value, which stays within the precision of lead / t */
        out->big[g * NKEYS + position_fast(itl, clamp_pos, clamp)] += t;
    }
    *is += d->lead;
    if (itl < *ilo) *ilo = itl;
    if (itl > *ihi) *ihi = itl;
}

static PyObject *accumulate(PyObject *Py_UNUSED(self), PyObject *args) {
    enum { N_BUF = 15 };
    PyObject *o[N_BUF];
    int width;
    float a, b, clamp;
    if (!PyArg_ParseTuple(args, "OOOOOiOOOOOOOOOOfff", &o[0], &o[1], &o[2], &o[3], &o[4], &width, &o[5], &o[6],
                          &o[7], &o[8], &o[9], &o[10], &o[11], &o[12], &o[13], &o[14], &a, &b, &clamp))
        return NULL;
    static const char *names[] = {"offsets", "n_chunks", "tokens", "gid", "exact", "cells", "itl_cells", "itl_big",
                                  "gap_sum", "itl_sum", "gap_lo", "gap_hi", "itl_lo", "itl_hi", "gaps"};
    static const Py_ssize_t sizes[] = {8, 8, 4, 4, 1, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8};
    Py_buffer buf[N_BUF];
    int got = 0;
    PyObject *result = NULL;
    for (; got < N_BUF; got++)
        if (get(o[got], &buf[got], sizes[got], got >= 5, names[got]) < 0) goto done;
    const double *off = buf[0].buf;
    const int64_t *nch = buf[1].buf;
    const int32_t *tok = buf[2].buf;
    const int32_t *gid = buf[3].buf;
    const uint8_t *exact = buf[4].buf;
    int64_t *cells = buf[5].buf, *gaps = buf[14].buf;
    itl_out out = {buf[6].buf, buf[7].buf, 0};
    double *gap_sum = buf[8].buf, *itl_sum = buf[9].buf, *gap_lo = buf[10].buf, *gap_hi = buf[11].buf;
    double *itl_lo = buf[12].buf, *itl_hi = buf[13].buf;
    Py_ssize_t n_off = buf[0].len / 8, n_req = buf[1].len / 8, n_groups = buf[8].len / 8;
    const Py_ssize_t slots = width + 2;
    if (width < 1 || width > TOKENS_CAP || buf[2].len / 4 != n_off || buf[3].len / 4 != n_req || buf[4].len != n_req
        || buf[5].len / 8 != n_groups * slots * NKEYS || buf[6].len / 8 != n_groups * TOKENS_CAP * NKEYS
        || buf[7].len / 8 != n_groups * NKEYS) {
        PyErr_SetString(PyExc_ValueError, "accumulate: array sizes do not match");
        goto done;
    }
    if (build_cells(a, b, clamp) < 0) {
        PyErr_NoMemory();
        goto done;
    }
    const int clamp_pos = position(clamp, a, b, clamp);
    Py_BEGIN_ALLOW_THREADS
    Py_ssize_t start = 0;
    for (Py_ssize_t r = 0; r < n_req; start += nch[r], r++) {
        const int32_t g = gid[r];
        const Py_ssize_t n = nch[r];
        if (g < 0 || n < 2 || g >= n_groups || start + n > n_off) continue;
        int64_t *cg = cells + (Py_ssize_t)g * slots * NKEYS;
        double gs = 0.0, is = 0.0, glo = gap_lo[g], ghi = gap_hi[g], ilo = itl_lo[g], ihi = itl_hi[g];
        const int ex = exact[r] != 0;
        /* a chunk without an exact count is one token, for ITL as for the exact path */
        delivery d = {0.0f, 0, ex ? tok[start] : 1, 1};
        for (Py_ssize_t i = start + 1; i < start + n; i++) {
            const float gap = (float)(off[i] - off[i - 1]);
            const int t = ex ? tok[i] : 1;
            /* inter-chunk and tokens per chunk: every chunk */
            const int tc = t < 0 ? 0 : t;
            const int slot = !ex ? width : (tc >= TOKENS_CAP ? width + 1 : (tc < width ? tc : width - 1));
            const int pos = position_fast(gap, clamp_pos, clamp);
            cg[slot * NKEYS + pos]++;
            gs += gap;
            if (gap < glo) glo = gap;
            if (gap > ghi) ghi = gap;
            /* per-token ITL: chunks of equal offset (read together) are one delivery */
            if (off[i] != off[i - 1]) {
                close_delivery(&d, &out, g, clamp_pos, clamp, &is, &ilo, &ihi);
                d.lead = gap;
                d.lead_pos = pos;
                d.tokens = t;
                d.first = 0;
            } else {
                d.tokens += t;
            }
        }
        close_delivery(&d, &out, g, clamp_pos, clamp, &is, &ilo, &ihi);
        gap_sum[g] += gs;
        itl_sum[g] += is;
        gaps[g] += n - 1;
        gap_lo[g] = glo; gap_hi[g] = ghi; itl_lo[g] = ilo; itl_hi[g] = ihi;
    }
    Py_END_ALLOW_THREADS
    result = PyLong_FromLong(out.max_tokens);
done:
    for (int i = 0; i < got; i++) PyBuffer_Release(&buf[i]);
    return result;
}

static PyMethodDef methods[] = {
    {"accumulate", accumulate, METH_VARARGS, "Add one row group's chunk gaps to the histogram cells (see module source)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_chunkhist", "Fast path of analysis.chunkhist.", -1, methods,
                                     NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__chunkhist(void) { return PyModule_Create(&module); }
