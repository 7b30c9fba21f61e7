/* The token-array scanner of analyzer/traces/token_scan.py, compiled: one pass over a
 * batch of JSON Lines reading the integer arrays of the top-level token keys out and
 * leaving `[]` in their place. token_scan.py's module doc says what it vouches for; any
 * doubt returns -1 and the JSON parser reads the batch instead. Built with the package
 * (setup.py); without it every batch goes to the parser. Runs without the GIL. */
#include "native.h"

#define INT64_LIMIT INT64_MAX

typedef struct {
    const uint8_t *buf;
    int64_t n;
    const uint8_t *keys;
    const int64_t *key_starts;
    int64_t num_keys, num_id_keys, most, num_lines;
    uint8_t *out;
    int32_t *ids;    /* num_id_keys rows of `most` */
    int64_t *hashes; /* `most` */
    int64_t *num_values;
    int64_t *count; /* num_keys rows of num_lines: values per line, -1 where none */
} scan;

static inline int64_t blanks(const scan *s, int64_t i) {
    while (i < s->n && (s->buf[i] == ' ' || s->buf[i] == '\t' || s->buf[i] == '\r')) i++;
    return i;
}

/* The token key buf[a:b] spells, or -1. */
static int64_t which_key(const scan *s, int64_t a, int64_t b) {
    for (int64_t k = 0; k < s->num_keys; k++) {
        int64_t start = s->key_starts[k], size = s->key_starts[k + 1] - start;
        if (size == b - a && memcmp(s->buf + a, s->keys + start, (size_t)size) == 0) return k;
    }
    return -1;
}

/* Parse integers and commas up to the closing bracket, from just after '[', into
 * values[*nv...]: the index after ']', or -1 when it is not a plain integer array of
 * magnitudes up to `limit`. The batch ends in a newline (scan_batch checks), which stops
 * every loop here: no index is compared with its size. */
static int64_t int_array(const scan *s, int64_t i, int64_t *nv, int32_t *ids32,
                         int64_t *ids64, int64_t limit) {
    const uint8_t *buf = s->buf;
    i = blanks(s, i);
    if (buf[i] == ']') return i + 1;
    for (;;) {
        uint8_t c = buf[i];
        int negative = c == '-';
        if (negative) c = buf[++i];
        if (c < '0' || c > '9') return -1;
        int64_t value = c - '0';
        c = buf[++i];
        if (value == 0 && c >= '0' && c <= '9') return -1; /* a leading zero is not JSON */
        int digits = 1;
        while (c >= '0' && c <= '9') {
            int64_t digit = c - '0';
            /* 18 digits always fit; only longer numbers need the (slow) overflow test */
            if (digits >= 18 && value > (INT64_LIMIT - digit) / 10) return -1;
            value = value * 10 + digit;
            digits++;
            c = buf[++i];
        }
        if (value > limit) return -1; /* past the column's width */
        if (ids32)
            ids32[(*nv)++] = (int32_t)(negative ? -value : value);
        else
            ids64[(*nv)++] = negative ? -value : value;
        if (c == ',') { /* the usual case: a comma right after the number */
            i++;
            if (buf[i] == ' ' || buf[i] == '\t' || buf[i] == '\r') i = blanks(s, i);
            continue;
        }
        if (c == ']') return i + 1;
        i = blanks(s, i);
        if (buf[i] == ']') return i + 1;
        if (buf[i] != ',') return -1; /* a fraction, an exponent or a stray byte */
        i = blanks(s, i + 1);
    }
}

/* A token key's value at buf[i] (after the key's closing quote): its array read out and
 * `[]` written in its place. -> where the scan goes on (the pending run starts there, in
 * *mark), or -1 to abort. A key not followed by `: [` is left to the parser. */
static int64_t key_value(scan *s, int64_t i, int64_t k, int64_t line, int64_t *o,
                         int64_t *mark, uint8_t *prev) {
    const uint8_t *buf = s->buf;
    i = blanks(s, i);
    if (i >= s->n || buf[i] != ':') return i; /* not JSON the parser will accept */
    *prev = ':';
    i = blanks(s, i + 1);
    if (i >= s->n || buf[i] != '[') return i; /* null or another value: the parser reads it */
    int64_t *count = s->count + k * s->num_lines;
    if (count[line] >= 0) return -1; /* twice (line < num_lines: check_contents) */
    int64_t nv = s->num_values[k], start = nv, after;
    if (k < s->num_id_keys)
        after = int_array(s, i + 1, &nv, s->ids + k * s->most, NULL, INT32_MAX);
    else
        after = int_array(s, i + 1, &nv, NULL, s->hashes, INT64_LIMIT);
    if (after < 0) return -1;
    s->num_values[k] = nv;
    count[line] = nv - start;
    memcpy(s->out + *o, buf + *mark, (size_t)(i + 1 - *mark)); /* up to and with the '[' */
    *o += i + 1 - *mark;
    s->out[(*o)++] = ']';
    *mark = after;
    *prev = ']';
    return after;
}

/* Bytes written to `out`, or -1: abort. Bytes between token arrays are copied a run at a
 * time (`mark`: where the pending run starts). */
static int64_t scan_batch(scan *s) {
    const uint8_t *buf = s->buf;
    int64_t n = s->n, o = 0, line = 0, mark = 0, depth = 0, i = 0;
    if (n == 0 || buf[n - 1] != '\n') return -1; /* not whole lines: int_array needs it */
    uint8_t prev = '\n';
    int top_object = 0;
    while (i < n) {
        uint8_t c = buf[i];
        if (c == '\n') { /* end of a line: a new JSON value starts */
            i++, line++, depth = 0, prev = '\n', top_object = 0;
            continue;
        }
        if (c == ' ' || c == '\t' || c == '\r') {
            i++;
            continue;
        }
        if (prev == '\n') top_object = c == '{';
        if (c != '"') {
            if (c == '{' || c == '[') depth++;
            else if (c == '}' || c == ']') depth--;
            i++;
            prev = c;
            continue;
        }
        int64_t j = i + 1; /* a string: find its closing quote */
        int escaped = 0;
        while (j < n && buf[j] != '"') {
            if (buf[j] == '\\') escaped = 1, j++; /* the escaped byte: a raw newline too */
            if (j < n && buf[j] == '\n') return -1;  /* a line ends inside the string */
            j++;
        }
        if (j >= n) return -1;
        int is_key = depth == 1 && top_object && (prev == '{' || prev == ',');
        int64_t k = -1;
        if (is_key) {
            if (escaped) return -1; /* an escaped key might spell a token key */
            k = which_key(s, i + 1, j);
        }
        i = j + 1;
        prev = '"';
        if (k >= 0 && (i = key_value(s, i, k, line, &o, &mark, &prev)) < 0) return -1;
    }
    memcpy(s->out + o, buf + mark, (size_t)(n - mark));
    return o + n - mark;
}

enum { BUF, KEYS, KEY_STARTS, OUT, IDS, HASHES, NUM_VALUES, COUNT, NUM_ARRAYS };

/* Every array the scan writes must hold what a batch of this size can give: `out` its
 * bytes, each id row and `hashes` n / 2 + 1 values (a value takes two bytes at least).
 * A ValueError otherwise. */
static int check_sizes(const Py_buffer *b, const scan *s) {
    int ok = s->num_keys >= s->num_id_keys && hpa_cols(&b[OUT]) >= s->n &&
             s->most >= s->n / 2 + 1 && hpa_cols(&b[HASHES]) >= s->n / 2 + 1 &&
             hpa_cols(&b[NUM_VALUES]) == s->num_keys && hpa_rows(&b[COUNT]) == s->num_keys;
    if (!ok) PyErr_SetString(PyExc_ValueError, "strip: arrays too small for the batch");
    return ok ? 0 : -1;
}

/* What the scan will index, proven before it runs: the keys' spans inside `keys`, in
 * order; no value read yet (each key's values then fit its row); a count column per line
 * of the batch (the scan counts lines, so it never indexes past them; a last line without
 * its newline counts, and the scan then gives -1). -> 0, or -1 with
 * the first fault. */
static int check_contents(const scan *s, int64_t keys_size, hpa_fault *f) {
    for (int64_t k = 0; k <= s->num_keys; k++) {
        int64_t at = s->key_starts[k], before = k ? s->key_starts[k - 1] : 0;
        if (at < before || at > keys_size)
            return hpa_fail(f, "strip: key_starts[%lld] = %lld: not an offset in keys (%lld "
                            "bytes) from %lld on", k, at, keys_size, before);
    }
    for (int64_t k = 0; k < s->num_keys; k++)
        if (s->num_values[k] != 0)
            return hpa_fail(f, "strip: num_values[%lld] = %lld: 0 needed (no value read yet)",
                            k, s->num_values[k]);
    int64_t lines = s->n > 0 && s->buf[s->n - 1] != '\n'; /* a last line without its end */
    for (const uint8_t *at = s->buf, *end = s->buf + s->n;
         (at = memchr(at, '\n', (size_t)(end - at))) != NULL; at++)
        lines++;
    if (lines != s->num_lines)
        return hpa_fail(f, "strip: count: %lld columns for the batch's %lld lines",
                        s->num_lines, lines);
    return 0;
}

static PyObject *strip(PyObject *self, PyObject *args) {
    PyObject *o[NUM_ARRAYS];
    if (!PyArg_ParseTuple(args, "OOOOOOOO:strip", &o[BUF], &o[KEYS], &o[KEY_STARTS], &o[OUT],
                          &o[IDS], &o[HASHES], &o[NUM_VALUES], &o[COUNT]))
        return NULL;
    static const hpa_want w[NUM_ARRAYS] = {
        {"strip: buf", 'u', 1, 1, 0},        {"strip: keys", 'u', 1, 1, 0},
        {"strip: key_starts", 'i', 8, 1, 0}, {"strip: out", 'u', 1, 1, 1},
        {"strip: ids", 'i', 4, 2, 1},        {"strip: hashes", 'i', 8, 1, 1},
        {"strip: num_values", 'i', 8, 1, 1}, {"strip: count", 'i', 8, 2, 1},
    };
    Py_buffer b[NUM_ARRAYS];
    if (hpa_buffers(o, b, w, NUM_ARRAYS) < 0) return NULL;
    scan s = {
        .buf = b[BUF].buf, .n = hpa_cols(&b[BUF]), .keys = b[KEYS].buf,
        .key_starts = b[KEY_STARTS].buf, .num_keys = hpa_cols(&b[KEY_STARTS]) - 1,
        .num_id_keys = hpa_rows(&b[IDS]), .most = hpa_cols(&b[IDS]),
        .num_lines = hpa_cols(&b[COUNT]), .out = b[OUT].buf, .ids = b[IDS].buf,
        .hashes = b[HASHES].buf, .num_values = b[NUM_VALUES].buf, .count = b[COUNT].buf,
    };
    if (check_sizes(b, &s) < 0) {
        hpa_release(b, NUM_ARRAYS);
        return NULL;
    }
    hpa_fault fault = {NULL, {0}};
    int64_t size = -1;
    Py_BEGIN_ALLOW_THREADS;
    if (check_contents(&s, hpa_cols(&b[KEYS]), &fault) == 0) size = scan_batch(&s);
    Py_END_ALLOW_THREADS;
    hpa_release(b, NUM_ARRAYS);
    if (fault.format) return hpa_raise(&fault);
    return PyLong_FromLongLong(size);
}

static PyMethodDef methods[] = {
    {"strip", strip, METH_VARARGS,
     "strip(buf, keys, key_starts, out, ids, hashes, num_values, count) -> bytes written to "
     "out, or -1 where the parser must read the batch (analyzer.traces.token_scan)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "token_scan_loop",
    .m_doc = "The token-array scanner's compiled loop.",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit_token_scan_loop(void) { return PyModule_Create(&module); }
