/* The stream state's common case in C: OpenAI-style completion chunks into a StreamState.
 *
 * Why C: per content chunk, StreamState.on_events spent more in its Python loop (attribute
 * reads and writes, the token arithmetic, three appends) than msgspec spent decoding the
 * chunk. feed_chunks does both for the events it understands, in order, and stops at the
 * first one it does not: the Python loop then carries on from there, so every event is read
 * by exactly one of the two, in order, with the same rules.
 *
 * What it understands is deliberately narrow: a (None, bytes) event holding "[DONE]" or a
 * strictly valid JSON object whose "id" is a string or null, whose "choices" is null or a list
 * of at most one object (its "delta" an object or null with a string or null "content" and no
 * reasoning, its "text" and "finish_reason" strings or null, no "token_ids"), whose "usage" is
 * null or an object with non-negative integer or null "prompt_tokens" and "completion_tokens"
 * and no "completion_tokens_details", and with none of "error", "metrics", "timings", "sglext".
 * Anything else (other shapes, escapes it does not decode, a count past the stream's caps) is
 * left to the Python loop, which also raises the errors. tests/wire/test_feed_chunks.py
 * checks that both give the same state on generated streams.
 */
#include "_chunks.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "structmember.h"

/* -- the StreamState slots feed_chunks reads and writes, by offset (bound once) ------------- */
enum {
    S_BYTES_SEEN,
    S_LIMITS,
    S_DONE,
    S_RESPONSE_ID,
    S_USAGE,
    S_USAGE_STALE,
    S_FINISH_REASON,
    S_LAST_CUM,
    S_EXACT_TOKENS,
    S_TIMES,
    S_TOKENS,
    S_TEXT_PARTS,
    S_FIRST_ANSWER_S,
    N_SLOTS
};
static const char *const slot_names[N_SLOTS] = {
    "bytes_seen", "limits", "done", "response_id", "usage", "usage_stale", "finish_reason",
    "last_cum", "exact_tokens", "times", "tokens", "text_parts", "first_answer_s",
};
static PyTypeObject *state_type; /* the class bound by bind_stream_state, or NULL */
static Py_ssize_t slot_offset[N_SLOTS];
static PyObject *str_append, *str_max_output_tokens, *key_prompt, *key_completion, *key_details;
static PyTypeObject *usage_type;  /* the dict subclass of the usage this path keeps (see set_usage) */
static PyTypeObject *array_type;  /* array.array, and its append (called without a lookup) */
static PyObject *array_append;
static PyObject *zero_zero;       /* (0, 0): nothing taken */
/* What feed_chunks did in this process (under the GIL: plain counters), for the manifest. */
static unsigned long long n_taken;  /* events read here */
static unsigned long long n_left;   /* events handed back to the Python loop */

#define SLOT(obj, i) (*(PyObject **)((char *)(obj) + slot_offset[i]))

/* Replace a slot's value (steals ``value``). */
static void set_slot(PyObject *obj, int i, PyObject *value)
{
    PyObject *old = SLOT(obj, i);
    SLOT(obj, i) = value;
    Py_XDECREF(old);
}

/* Set a slot to a new int; -1 (with the exception set) when it cannot be made. */
static int set_int_slot(PyObject *obj, int i, long long value)
{
    PyObject *v = PyLong_FromLongLong(value);
    if (v == NULL)
        return -1;
    set_slot(obj, i, v);
    return 0;
}

/* bind_stream_state(cls, usage_cls): remember where cls's slots are and the dict subclass to
 * keep usage objects in; True when every slot is a plain object slot (else feed_chunks
 * declines every state and the Python loop does all). */
PyObject *chunks_bind(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *cls, *ucls;
    if (!PyArg_ParseTuple(args, "O!O!", &PyType_Type, &cls, &PyType_Type, &ucls))
        return NULL;
    if (!PyType_IsSubtype((PyTypeObject *)ucls, &PyDict_Type))
        return PyErr_Format(PyExc_TypeError, "bind_stream_state: usage_cls must be a dict subclass");
    Py_ssize_t offsets[N_SLOTS];
    for (int i = 0; i < N_SLOTS; i++) {
        PyObject *d = PyObject_GetAttrString(cls, slot_names[i]);
        if (d == NULL) {
            PyErr_Clear();
            Py_RETURN_FALSE;
        }
        int ok = Py_IS_TYPE(d, &PyMemberDescr_Type) &&
                 ((PyMemberDescrObject *)d)->d_member->type == T_OBJECT_EX;
        if (ok)
            offsets[i] = ((PyMemberDescrObject *)d)->d_member->offset;
        Py_DECREF(d);
        if (!ok)
            Py_RETURN_FALSE;
    }
    if (str_append == NULL) {
        str_append = PyUnicode_InternFromString("append");
        str_max_output_tokens = PyUnicode_InternFromString("max_output_tokens");
        key_prompt = PyUnicode_InternFromString("prompt_tokens");
        key_completion = PyUnicode_InternFromString("completion_tokens");
        key_details = PyUnicode_InternFromString("completion_tokens_details");
        zero_zero = Py_BuildValue("(nn)", (Py_ssize_t)0, (Py_ssize_t)0);
        PyObject *array = PyImport_ImportModule("array");
        PyObject *atype = array ? PyObject_GetAttrString(array, "array") : NULL;
        Py_XDECREF(array);
        array_append = atype ? PyObject_GetAttr(atype, str_append) : NULL;
        array_type = (PyTypeObject *)atype;
        if (!str_append || !str_max_output_tokens || !key_prompt || !key_completion || !key_details || !zero_zero ||
            !array_append)
            return NULL;
    }
    memcpy(slot_offset, offsets, sizeof offsets);
    Py_INCREF(cls);
    Py_XSETREF(state_type, (PyTypeObject *)cls);
    Py_INCREF(ucls);
    Py_XSETREF(usage_type, (PyTypeObject *)ucls);
    Py_RETURN_TRUE;
}

/* -- a strict JSON reader: validates everything, keeps spans of what the chunk needs -------- */
typedef struct {
    const char *p;
    const char *end;
} cursor;

#define MAX_DEPTH 64

static void ws(cursor *c)
{
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r'))
        c->p++;
}

static int hex4(const char *p, unsigned *out)
{
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char h = p[i];
        v <<= 4;
        if (h >= '0' && h <= '9')
            v |= (unsigned)(h - '0');
        else if (h >= 'a' && h <= 'f')
            v |= (unsigned)(h - 'a' + 10);
        else if (h >= 'A' && h <= 'F')
            v |= (unsigned)(h - 'A' + 10);
        else
            return -1;
    }
    *out = v;
    return 0;
}

/* The length of the valid UTF-8 sequence at p (its first byte >= 0x80), or 0 when it is not
 * one Python's strict decoder takes (overlong forms, surrogates, past U+10FFFF, cut short). */
static int utf8_seq(const unsigned char *p, const unsigned char *end)
{
    unsigned char b = p[0];
    int n;
    unsigned char lo = 0x80, hi = 0xBF;
    if (b >= 0xC2 && b <= 0xDF)
        n = 2;
    else if (b >= 0xE0 && b <= 0xEF) {
        n = 3;
        if (b == 0xE0)
            lo = 0xA0;
        else if (b == 0xED)
            hi = 0x9F;
    } else if (b >= 0xF0 && b <= 0xF4) {
        n = 4;
        if (b == 0xF0)
            lo = 0x90;
        else if (b == 0xF4)
            hi = 0x8F;
    } else
        return 0;
    if (end - p < n || p[1] < lo || p[1] > hi)
        return 0;
    for (int i = 2; i < n; i++)
        if (p[i] < 0x80 || p[i] > 0xBF)
            return 0;
    return n;
}

/* 1 for the bytes a string holds as they are: printable ASCII but the quote and backslash. */
static const unsigned char plain[256] = {
#define R4(x) x, x, x, x
#define R16(x) R4(x), R4(x), R4(x), R4(x)
    R16(0), R16(0),                                              /* 0x00-0x1f: control */
    1, 1, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,              /* 0x20-0x2f: '"' at 0x22 */
    R16(1), R16(1),                                              /* 0x30-0x4f */
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1, 1, 1,              /* 0x50-0x5f: '\\' at 0x5c */
    R16(1), R16(1),                                              /* 0x60-0x7f */
    R16(0), R16(0), R16(0), R16(0), R16(0), R16(0), R16(0), R16(0), /* 0x80-0xff: UTF-8, checked */
#undef R16
#undef R4
};

#define ONES 0x0101010101010101ULL
#define HIGHS 0x8080808080808080ULL
/* Nonzero when one of the eight bytes in v is not ``plain``: a control byte, a quote, a
 * backslash or a byte >= 0x80 (the classic has-zero-byte and has-less-than tests). */
static inline uint64_t special8(uint64_t v)
{
    uint64_t quote = v ^ (ONES * '"'), slash = v ^ (ONES * '\\');
    uint64_t control = (v - ONES * 0x20) & ~v;
    uint64_t quotes = (quote - ONES) & ~quote, slashes = (slash - ONES) & ~slash;
    return (control | quotes | slashes | v) & HIGHS;
}

/* A string at c->p (its opening quote): the span inside the quotes; *escaped when it holds a
 * backslash. 0 = ok, -1 = not one both JSON readers take alike (a control character, a bad
 * escape, a lone surrogate escape, invalid UTF-8, no end): the event is left to Python. */
static int scan_string(cursor *c, const char **s, Py_ssize_t *n, int *escaped)
{
    const char *p = c->p + 1, *end = c->end;
    int esc = 0;
    while (p < end) {
        while (end - p >= 8) { /* the common run of printable ASCII, eight bytes a step */
            uint64_t v;
            memcpy(&v, p, 8);
            if (special8(v))
                break;
            p += 8;
        }
        while (p < end && plain[(unsigned char)*p])
            p++;
        if (p >= end)
            break;
        unsigned char ch = (unsigned char)*p;
        if (ch == '"') {
            *s = c->p + 1;
            *n = p - (c->p + 1);
            *escaped = esc;
            c->p = p + 1;
            return 0;
        }
        if (ch < 0x20)
            return -1;
        if (ch >= 0x80) {
            int k = utf8_seq((const unsigned char *)p, (const unsigned char *)end);
            if (k == 0)
                return -1;
            p += k;
            continue;
        }
        if (ch == '\\') {
            esc = 1;
            if (p + 1 >= end)
                return -1;
            char e = p[1];
            if (e == 'u') {
                unsigned v, lo;
                if (end - p < 6 || hex4(p + 2, &v) < 0 || (v >= 0xDC00 && v <= 0xDFFF))
                    return -1;
                p += 6;
                if (v >= 0xD800 && v <= 0xDBFF) { /* its low half must follow */
                    if (end - p < 6 || p[0] != '\\' || p[1] != 'u' || hex4(p + 2, &lo) < 0 || lo < 0xDC00 ||
                        lo > 0xDFFF)
                        return -1;
                    p += 6;
                }
                continue;
            }
            if (e != '"' && e != '\\' && e != '/' && e != 'b' && e != 'f' && e != 'n' && e != 'r' && e != 't')
                return -1;
            p += 2;
            continue;
        }
        p++;
    }
    return -1;
}

/* The str of a scanned string's span (UTF-8, escapes decoded); NULL with no exception set when
 * it is not what the Python readers would decode the same way (invalid UTF-8, a lone surrogate). */
static PyObject *decode_string(const char *s, Py_ssize_t n, int escaped)
{
    PyObject *out;
    if (!escaped) {
        out = PyUnicode_DecodeUTF8(s, n, NULL);
        if (out == NULL)
            PyErr_Clear();
        return out;
    }
    char small[512];
    char *buf = n <= (Py_ssize_t)sizeof small ? small : PyMem_Malloc((size_t)n);
    if (buf == NULL)
        return NULL;
    Py_ssize_t k = 0;
    const char *p = s, *end = s + n;
    int ok = 1;
    while (p < end && ok) {
        if (*p != '\\') {
            buf[k++] = *p++;
            continue;
        }
        char e = p[1];
        p += 2;
        switch (e) {
        case '"': buf[k++] = '"'; break;
        case '\\': buf[k++] = '\\'; break;
        case '/': buf[k++] = '/'; break;
        case 'b': buf[k++] = '\b'; break;
        case 'f': buf[k++] = '\f'; break;
        case 'n': buf[k++] = '\n'; break;
        case 'r': buf[k++] = '\r'; break;
        case 't': buf[k++] = '\t'; break;
        default: { /* 'u': validated by scan_string */
            unsigned v, lo;
            hex4(p, &v);
            p += 4;
            if (v >= 0xDC00 && v <= 0xDFFF) {
                ok = 0; /* a lone low surrogate */
                break;
            }
            if (v >= 0xD800 && v <= 0xDBFF) {
                if (end - p < 6 || p[0] != '\\' || p[1] != 'u' || hex4(p + 2, &lo) < 0 || lo < 0xDC00 || lo > 0xDFFF) {
                    ok = 0; /* a high surrogate without its low half */
                    break;
                }
                p += 6;
                v = 0x10000 + ((v - 0xD800) << 10) + (lo - 0xDC00);
            }
            /* UTF-8 of v: never longer than the escape it came from (6 or 12 bytes) */
            if (v < 0x80) {
                buf[k++] = (char)v;
            } else if (v < 0x800) {
                buf[k++] = (char)(0xC0 | (v >> 6));
                buf[k++] = (char)(0x80 | (v & 0x3F));
            } else if (v < 0x10000) {
                buf[k++] = (char)(0xE0 | (v >> 12));
                buf[k++] = (char)(0x80 | ((v >> 6) & 0x3F));
                buf[k++] = (char)(0x80 | (v & 0x3F));
            } else {
                buf[k++] = (char)(0xF0 | (v >> 18));
                buf[k++] = (char)(0x80 | ((v >> 12) & 0x3F));
                buf[k++] = (char)(0x80 | ((v >> 6) & 0x3F));
                buf[k++] = (char)(0x80 | (v & 0x3F));
            }
        }
        }
    }
    out = ok ? PyUnicode_DecodeUTF8(buf, k, NULL) : NULL;
    if (out == NULL)
        PyErr_Clear();
    if (buf != small)
        PyMem_Free(buf);
    return out;
}

/* A JSON number at c->p, checked against the grammar; *is_int when it has no fraction or
 * exponent. 0 = ok, -1 = invalid. */
static int scan_number(cursor *c, int *is_int)
{
    const char *p = c->p, *end = c->end;
    if (p < end && *p == '-')
        p++;
    if (p >= end)
        return -1;
    if (*p == '0') {
        p++;
    } else if (*p >= '1' && *p <= '9') {
        while (p < end && *p >= '0' && *p <= '9')
            p++;
    } else {
        return -1;
    }
    int integer = 1;
    if (p < end && *p == '.') {
        integer = 0;
        p++;
        if (p >= end || *p < '0' || *p > '9')
            return -1;
        while (p < end && *p >= '0' && *p <= '9')
            p++;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        integer = 0;
        p++;
        if (p < end && (*p == '+' || *p == '-'))
            p++;
        const char *digits = p;
        if (p >= end || *p < '0' || *p > '9')
            return -1;
        while (p < end && *p >= '0' && *p <= '9')
            p++;
        if (p - digits > 2)
            return -1; /* 1e999 is infinity to orjson (an error), a number to msgspec: left to Python */
    }
    if (p - c->p > 300)
        return -1; /* digits enough to overflow a double, likewise */
    *is_int = integer;
    c->p = p;
    return 0;
}

static int literal(cursor *c, const char *word, size_t n)
{
    if ((size_t)(c->end - c->p) < n || memcmp(c->p, word, n) != 0)
        return -1;
    c->p += n;
    return 0;
}

/* After a member of an array or object: 1 = the container closed with ``close``, 0 = a comma
 * (another member follows), -1 = invalid. */
static int after_member(cursor *c, char close)
{
    ws(c);
    if (c->p >= c->end)
        return -1;
    if (*c->p == close) {
        c->p++;
        return 1;
    }
    return *c->p++ == ',' ? 0 : -1;
}

/* Right after an opening bracket: 1 (consumed) when the container closes at once. */
static int closes_at_once(cursor *c, char close)
{
    ws(c);
    if (c->p < c->end && *c->p == close) {
        c->p++;
        return 1;
    }
    return 0;
}

typedef int (*field_fn)(cursor *c, const char *key, Py_ssize_t n, void *ctx, int depth);

/* Walk an object at c->p; call ``field`` for each key (a key spelled with escapes: -2, the
 * event is left to the Python readers). 0 = ok, -1 = invalid, -2 = not ours. */
static int walk_object(cursor *c, field_fn field, void *ctx, int depth)
{
    ws(c);
    if (c->p >= c->end || *c->p != '{' || depth > MAX_DEPTH)
        return -1;
    c->p++;
    if (closes_at_once(c, '}'))
        return 0;
    for (;;) {
        const char *k;
        Py_ssize_t n;
        int escaped;
        ws(c);
        if (c->p >= c->end || *c->p != '"' || scan_string(c, &k, &n, &escaped) < 0)
            return -1;
        if (escaped)
            return -2;
        ws(c);
        if (c->p >= c->end || *c->p++ != ':')
            return -1;
        int rc = field(c, k, n, ctx, depth + 1);
        if (rc < 0)
            return rc;
        if ((rc = after_member(c, '}')) != 0)
            return rc > 0 ? 0 : -1;
    }
}

static int skip_value(cursor *c, int depth);

static int skip_field(cursor *c, const char *key, Py_ssize_t n, void *ctx, int depth)
{
    (void)key, (void)n, (void)ctx;
    return skip_value(c, depth);
}

/* Skip any JSON value at c->p (after whitespace), validating it. 0 = ok, < 0 = invalid, too
 * deep, or holding a key spelled with escapes. */
static int skip_value(cursor *c, int depth)
{
    ws(c);
    if (c->p >= c->end || depth > MAX_DEPTH)
        return -1;
    const char *s;
    Py_ssize_t n;
    int flag;
    switch (*c->p) {
    case '"':
        return scan_string(c, &s, &n, &flag);
    case 't':
        return literal(c, "true", 4);
    case 'f':
        return literal(c, "false", 5);
    case 'n':
        return literal(c, "null", 4);
    case '[':
        c->p++;
        if (closes_at_once(c, ']'))
            return 0;
        for (;;) {
            if (skip_value(c, depth + 1) < 0)
                return -1;
            int rc = after_member(c, ']');
            if (rc != 0)
                return rc > 0 ? 0 : -1;
        }
    case '{':
        return walk_object(c, skip_field, NULL, depth);
    default:
        return scan_number(c, &flag);
    }
}

/* A value read for one of the chunk's fields. */
enum { V_ABSENT = 0, V_NULL, V_STRING, V_INT, V_OTHER };
typedef struct {
    int kind;
    const char *s; /* V_STRING: the span inside the quotes */
    Py_ssize_t n;
    int escaped;
    long long i; /* V_INT */
} jvalue;

/* Read one value, remembering strings, small non-negative integers and null; anything else is
 * skipped (validated) as V_OTHER. 0 = ok, -1 = invalid. */
static int read_value(cursor *c, jvalue *v, int depth)
{
    ws(c);
    if (c->p >= c->end)
        return -1;
    char ch = *c->p;
    if (ch == '"') {
        v->kind = V_STRING;
        return scan_string(c, &v->s, &v->n, &v->escaped);
    }
    if (ch == 'n') {
        v->kind = V_NULL;
        return literal(c, "null", 4);
    }
    if (ch >= '0' && ch <= '9') {
        const char *start = c->p;
        int is_int;
        if (scan_number(c, &is_int) < 0)
            return -1;
        v->kind = V_OTHER;
        if (is_int && c->p - start <= 18) { /* fits a long long */
            long long x = 0;
            for (const char *q = start; q < c->p; q++)
                x = x * 10 + (*q - '0');
            v->kind = V_INT;
            v->i = x;
        }
        return 0;
    }
    v->kind = V_OTHER;
    return skip_value(c, depth);
}

/* Whether the key span (s, n) is the literal ``word`` (its length known at compile time). */
#define key_is(s, n, word) ((n) == (Py_ssize_t)sizeof(word) - 1 && memcmp((s), (word), sizeof(word) - 1) == 0)

typedef struct {
    unsigned seen; /* bit per field: a repeated key is left to the Python readers */
    jvalue id, content, text, finish, prompt, completion;
    int n_choices; /* -1: "choices" null or absent */
    int has_delta; /* choices[0].delta is an object */
    int has_usage; /* "usage" is an object */
} chunk;

#define ONCE(bit)                \
    do {                         \
        if (ch->seen & (bit))    \
            return -2;           \
        ch->seen |= (bit);       \
    } while (0)

/* Read a kept field's value, or skip (and check) an unkept one (``v`` NULL): 0 when it is null or
 * of ``kind``, -2 when it is of another type (not ours), -1 when it is not valid JSON. */
static int read_kept(cursor *c, jvalue *v, int kind, int depth)
{
    if (v == NULL)
        return skip_value(c, depth);
    if (read_value(c, v, depth) < 0)
        return -1;
    return v->kind == kind || v->kind == V_NULL ? 0 : -2;
}

static int delta_field(cursor *c, const char *k, Py_ssize_t n, void *ctx, int depth)
{
    chunk *ch = ctx;
    if (key_is(k, n, "content")) {
        ONCE(1u << 8);
        return read_kept(c, &ch->content, V_STRING, depth);
    }
    if (key_is(k, n, "reasoning_content") || key_is(k, n, "reasoning")) {
        jvalue v = {0};
        if (read_value(c, &v, depth) < 0)
            return -1;
        return v.kind == V_NULL ? 0 : -2; /* a reasoning stream: the Python loop times it apart */
    }
    return skip_value(c, depth);
}

/* The fields of an object whose values the chunk keeps: (key, bit of chunk.seen, where in the
 * chunk); REFUSED marks a key whose presence leaves the event to the Python readers. */
#define REFUSED ((size_t)-1)
typedef struct {
    const char *key;
    Py_ssize_t len;
    unsigned bit;
    size_t at;
} kept_field;
#define KEPT(key, bit, member) {key, sizeof(key) - 1, bit, offsetof(chunk, member)}
#define REFUSE(key) {key, sizeof(key) - 1, 0, REFUSED}

static const kept_field usage_fields[] = {
    KEPT("prompt_tokens", 1u << 9, prompt), KEPT("completion_tokens", 1u << 10, completion),
    REFUSE("completion_tokens_details"), {NULL, 0, 0, 0}};
static const kept_field choice_fields[] = {
    KEPT("text", 1u << 12, text), KEPT("finish_reason", 1u << 13, finish), REFUSE("token_ids"), {NULL, 0, 0, 0}};

/* One key of an object read through ``fields``: its value kept (once: a repeated key is not
 * ours), refused, or skipped. */
static int kept_or_skipped(cursor *c, const char *k, Py_ssize_t n, chunk *ch, const kept_field *fields, int kind,
                           int depth)
{
    for (const kept_field *f = fields; f->key != NULL; f++) {
        if (n != f->len || memcmp(k, f->key, (size_t)n) != 0)
            continue;
        if (f->at == REFUSED || (ch->seen & f->bit))
            return -2;
        ch->seen |= f->bit;
        return read_kept(c, (jvalue *)((char *)ch + f->at), kind, depth);
    }
    return skip_value(c, depth);
}

/* A field that is null (left unset) or an object walked by `field` (*present set). */
static int null_or_object(cursor *c, field_fn field, chunk *ch, int *present, int depth)
{
    ws(c);
    if (c->p < c->end && *c->p == 'n')
        return literal(c, "null", 4);
    *present = 1;
    return walk_object(c, field, ch, depth);
}

static int usage_field(cursor *c, const char *k, Py_ssize_t n, void *ctx, int depth)
{
    return kept_or_skipped(c, k, n, ctx, usage_fields, V_INT, depth);
}

static int choice_field(cursor *c, const char *k, Py_ssize_t n, void *ctx, int depth)
{
    chunk *ch = ctx;
    if (key_is(k, n, "delta")) {
        ONCE(1u << 11);
        return null_or_object(c, delta_field, ch, &ch->has_delta, depth);
    }
    return kept_or_skipped(c, k, n, ch, choice_fields, V_STRING, depth);
}

static int top_field(cursor *c, const char *k, Py_ssize_t n, void *ctx, int depth)
{
    chunk *ch = ctx;
    if (key_is(k, n, "id")) {
        ONCE(1u << 0);
        return read_kept(c, &ch->id, V_STRING, depth);
    }
    if (key_is(k, n, "choices")) {
        ONCE(1u << 1);
        ws(c);
        if (c->p < c->end && *c->p == 'n')
            return literal(c, "null", 4);
        if (c->p >= c->end || *c->p != '[')
            return -2; /* not a list: the typed decoder refuses it, the general path names it */
        c->p++;
        ch->n_choices = 0;
        if (closes_at_once(c, ']'))
            return 0;
        int rc = walk_object(c, choice_field, ch, depth + 1);
        if (rc < 0)
            return rc;
        ch->n_choices = 1;
        return closes_at_once(c, ']') ? 0 : -2; /* more than one choice (or not a list of objects) */
    }
    if (key_is(k, n, "usage")) {
        ONCE(1u << 2);
        return null_or_object(c, usage_field, ch, &ch->has_usage, depth);
    }
    if (key_is(k, n, "error") || key_is(k, n, "metrics") || key_is(k, n, "timings") || key_is(k, n, "sglext"))
        return -2;
    return skip_value(c, depth);
}

/* Parse one payload: 0 = a chunk of the common shape in *ch, else not ours. */
static int parse_chunk(const char *p, Py_ssize_t n, chunk *ch)
{
    memset(ch, 0, sizeof *ch);
    ch->n_choices = -1;
    cursor c = {p, p + n};
    if (walk_object(&c, top_field, ch, 0) < 0)
        return -1;
    ws(&c);
    return c.p == c.end ? 0 : -1;
}

/* The value of an integer-or-null field for the usage dict (new reference). */
static PyObject *int_or_none(const jvalue *v)
{
    if (v->kind == V_INT)
        return PyLong_FromLongLong(v->i);
    Py_RETURN_NONE;
}

static PyObject *str_or_none(const jvalue *v)
{
    if (v->kind == V_STRING)
        return decode_string(v->s, v->n, v->escaped);
    Py_RETURN_NONE;
}

/* The state's usage becomes {prompt_tokens, completion_tokens, completion_tokens_details: None}
 * of ``ch``: the dict it has is updated in place when it is one of ours that nothing else holds
 * (a usage object per chunk, and streams send one with every chunk), else a new one. */
static int set_usage(PyObject *st, const chunk *ch)
{
    PyObject *pt = int_or_none(&ch->prompt);
    PyObject *ct = pt ? int_or_none(&ch->completion) : NULL;
    PyObject *u = SLOT(st, S_USAGE);
    int rc = -1;
    if (ct != NULL) {
        if (u != NULL && Py_IS_TYPE(u, usage_type) && Py_REFCNT(u) == 1) {
            rc = PyDict_SetItem(u, key_prompt, pt) < 0 || PyDict_SetItem(u, key_completion, ct) < 0 ? -1 : 0;
        } else if ((u = PyObject_CallNoArgs((PyObject *)usage_type)) != NULL) {
            rc = PyDict_SetItem(u, key_prompt, pt) < 0 || PyDict_SetItem(u, key_completion, ct) < 0 ||
                 PyDict_SetItem(u, key_details, Py_None) < 0 ? -1 : 0;
            if (rc == 0)
                set_slot(st, S_USAGE, u);
            else
                Py_DECREF(u);
        }
    }
    Py_XDECREF(pt);
    Py_XDECREF(ct);
    return rc;
}

/* feed_chunks(state, now_s, events) -> (taken, added): the first ``taken`` events read into
 * ``state`` as StreamState.on_events's loop would (``added`` of them content chunks). */
PyObject *chunks_feed(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 3)
        return PyErr_Format(PyExc_TypeError, "feed_chunks(state, now_s, events)");
    PyObject *st = args[0], *events = args[2];
    double now = PyFloat_AsDouble(args[1]);
    if (now == -1.0 && PyErr_Occurred())
        return NULL;
    if (state_type == NULL || !Py_IS_TYPE(st, state_type) || !PyList_CheckExact(events))
        return Py_NewRef(zero_zero);
    for (int i = 0; i < N_SLOTS; i++)
        if (SLOT(st, i) == NULL)
            return Py_NewRef(zero_zero);

    /* The state's values this call works on, written back once at the end. */
    long long nbytes = PyLong_AsLongLong(SLOT(st, S_BYTES_SEEN));
    PyObject *cap_obj = PyObject_GetAttr(SLOT(st, S_LIMITS), str_max_output_tokens);
    if (cap_obj == NULL)
        return NULL;
    long long cap = PyLong_AsLongLong(cap_obj);
    Py_DECREF(cap_obj);
    if ((nbytes == -1 || cap == -1) && PyErr_Occurred()) {
        PyErr_Clear();
        return Py_NewRef(zero_zero);
    }
    PyObject *last_cum_obj = SLOT(st, S_LAST_CUM);
    int have_last = last_cum_obj != Py_None;
    long long last_cum = 0;
    if (have_last) {
        last_cum = PyLong_CheckExact(last_cum_obj) ? PyLong_AsLongLong(last_cum_obj) : -1;
        if (last_cum < 0) {
            PyErr_Clear();
            return Py_NewRef(zero_zero);
        }
    }
    PyObject *times = SLOT(st, S_TIMES), *tokens = SLOT(st, S_TOKENS), *parts = SLOT(st, S_TEXT_PARTS);
    if (!PyList_CheckExact(parts) || !Py_IS_TYPE(times, array_type) || !Py_IS_TYPE(tokens, array_type))
        return Py_NewRef(zero_zero);
    Py_ssize_t n_times = PyObject_Length(times);
    if (n_times < 0)
        return NULL;
    int done = 0, exact_false = 0, usage_stale = -1, first_answer = SLOT(st, S_FIRST_ANSWER_S) == Py_None;
    int need_id = SLOT(st, S_RESPONSE_ID) == Py_None;
    PyObject *response_id = NULL, *finish = NULL, *now_obj = NULL;
    chunk latest_usage; /* the last usage object of the call: the state keeps only that one */
    int have_usage = 0;
    Py_ssize_t taken = 0, added = 0, count = PyList_GET_SIZE(events);
    PyObject *result = NULL;

    for (; taken < count; taken++) {
        PyObject *ev = PyList_GET_ITEM(events, taken);
        if (!PyTuple_CheckExact(ev) || PyTuple_GET_SIZE(ev) != 2 || PyTuple_GET_ITEM(ev, 0) != Py_None ||
            !PyBytes_CheckExact(PyTuple_GET_ITEM(ev, 1)))
            break;
        PyObject *data = PyTuple_GET_ITEM(ev, 1);
        const char *p = PyBytes_AS_STRING(data);
        Py_ssize_t len = PyBytes_GET_SIZE(data);
        if (len == 6 && memcmp(p, "[DONE]", 6) == 0) {
            nbytes += len;
            done = 1;
            continue;
        }
        chunk ch;
        if (parse_chunk(p, len, &ch) < 0)
            break;
        /* The token arithmetic first: a count past the caps is the Python loop's to raise. */
        long long n = -1; /* -1: no exact count */
        int text_nonempty = ch.has_delta ? (ch.content.kind == V_STRING && ch.content.n > 0)
                                         : (ch.text.kind == V_STRING && ch.text.n > 0);
        int is_content = ch.n_choices == 1;
        long long next_last = last_cum;
        int next_have = have_last;
        if (is_content && ch.has_usage && ch.completion.kind == V_INT) {
            long long cum = ch.completion.i;
            n = (!have_last && n_times > 0 && !text_nonempty) ? 0 : cum - (have_last ? last_cum : 0);
            if (n < 0 || cum > cap)
                break;
            next_last = cum;
            next_have = 1;
        }
        PyObject *text = NULL;
        if (is_content && text_nonempty) {
            text = ch.has_delta ? decode_string(ch.content.s, ch.content.n, ch.content.escaped)
                                : decode_string(ch.text.s, ch.text.n, ch.text.escaped);
            if (text == NULL)
                break; /* not decoded here: the Python loop reads this event */
        }
        PyObject *new_finish = NULL;
        if (is_content && ch.finish.kind == V_STRING && ch.finish.n > 0) {
            new_finish = decode_string(ch.finish.s, ch.finish.n, ch.finish.escaped);
            if (new_finish == NULL) {
                Py_XDECREF(text);
                break;
            }
        }
        if (need_id) {
            PyObject *id = str_or_none(&ch.id);
            if (id == NULL) {
                Py_XDECREF(text);
                Py_XDECREF(new_finish);
                break;
            }
            if (id != Py_None)
                need_id = 0;
            Py_XSETREF(response_id, id);
        }
        /* From here on the event is this function's. */
        nbytes += len;
        if (ch.has_usage) {
            latest_usage = ch;
            have_usage = 1;
            usage_stale = 0;
        }
        if (!is_content) {
            Py_XDECREF(text);
            continue; /* usage-only trailer or keep-alive object */
        }
        if (new_finish != NULL)
            Py_XSETREF(finish, new_finish);
        last_cum = next_last;
        have_last = next_have;
        if (n < 0) {
            exact_false = 1;
            if (text == NULL)
                continue;
            n = 0;
        } else if (n == 0 && text == NULL) {
            continue; /* role-only first chunk, finish chunk: no generated tokens */
        }
        if (now_obj == NULL && (now_obj = PyFloat_FromDouble(now)) == NULL) {
            Py_XDECREF(text);
            goto fail;
        }
        PyObject *n_obj = PyLong_FromLongLong(n);
        if (n_obj == NULL) {
            Py_XDECREF(text);
            goto fail;
        }
        PyObject *targs1[2] = {times, now_obj}, *targs2[2] = {tokens, n_obj};
        PyObject *r1 = PyObject_Vectorcall(array_append, targs1, 2, NULL);
        PyObject *r2 = r1 == NULL ? NULL : PyObject_Vectorcall(array_append, targs2, 2, NULL);
        Py_DECREF(n_obj);
        Py_XDECREF(r1);
        Py_XDECREF(r2);
        if (r2 == NULL) {
            Py_XDECREF(text);
            goto fail;
        }
        n_times++;
        if (text != NULL) {
            int rc = PyList_Append(parts, text);
            Py_DECREF(text);
            if (rc < 0)
                goto fail;
            if (first_answer) {
                Py_INCREF(now_obj);
                set_slot(st, S_FIRST_ANSWER_S, now_obj);
                first_answer = 0;
            }
        }
        if (!ch.has_usage)
            usage_stale = 1;
        added++;
    }

    /* Write back what changed. */
    {
        if (set_int_slot(st, S_BYTES_SEEN, nbytes) < 0)
            goto fail;
        if (done) {
            Py_INCREF(Py_True);
            set_slot(st, S_DONE, Py_True);
        }
        if (response_id != NULL) {
            set_slot(st, S_RESPONSE_ID, response_id);
            response_id = NULL;
        }
        if (finish != NULL) {
            set_slot(st, S_FINISH_REASON, finish);
            finish = NULL;
        }
        if (have_usage && set_usage(st, &latest_usage) < 0)
            goto fail;
        if (usage_stale >= 0) {
            PyObject *b = usage_stale ? Py_True : Py_False;
            Py_INCREF(b);
            set_slot(st, S_USAGE_STALE, b);
        }
        if (have_last && set_int_slot(st, S_LAST_CUM, last_cum) < 0)
            goto fail;
        if (exact_false) {
            Py_INCREF(Py_False);
            set_slot(st, S_EXACT_TOKENS, Py_False);
        }
    }
    n_taken += (unsigned long long)taken;
    n_left += (unsigned long long)(count - taken);
    {
        PyObject *t = PyLong_FromSsize_t(taken), *a = t ? PyLong_FromSsize_t(added) : NULL;
        result = a ? PyTuple_Pack(2, t, a) : NULL;
        Py_XDECREF(t);
        Py_XDECREF(a);
    }
fail:
    Py_XDECREF(response_id);
    Py_XDECREF(finish);
    Py_XDECREF(now_obj);
    return result;
}

/* chunk_stats() -> {"taken", "left"}: events feed_chunks read, and handed back, in this process */
PyObject *chunks_stats(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    return Py_BuildValue("{s:K,s:K}", "taken", n_taken, "left", n_left);
}
