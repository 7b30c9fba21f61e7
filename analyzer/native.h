/* Arrays in and out of the compiled kernels (analyzer/prefixes/radix_loop.c,
 * analyzer/traces/token_scan_loop.c): NumPy arrays read through the buffer protocol, so the
 * extensions need neither NumPy's headers nor its C API. A kernel checks, at the boundary,
 * each array's item type, dimensions and contiguity (here), then its shapes and its
 * contents (in the kernel: offsets and lengths inside the arrays they index, counts that
 * match, every index its loop will take), in one pass before the loop runs, and only then
 * trusts its own indices, as the numba loops it replaced did. A wrong array is a
 * TypeError, wrong contents a ValueError naming the argument and its first bad position
 * (`hpa_fault`); never a read or write out of bounds. `make asan` runs the kernels' tests
 * under AddressSanitizer and UBSan (docs/contributing.md, "Compiled kernels"). */
#ifndef HPA_NATIVE_H
#define HPA_NATIVE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* What an array must be: its item ('i' a signed integer, 'u' an unsigned one) of `size`
 * bytes, `ndim` dimensions (C order, contiguous), writable or not. */
typedef struct {
    const char *name;
    char kind;
    Py_ssize_t size;
    int ndim;
    int writable;
} hpa_want;

/* The item kind a struct-module format names, in native byte order: 'i', 'u' or 0. */
static inline char hpa_kind(const char *format) {
    if (format == NULL) return 'u'; /* plain bytes */
    if (*format == '@' || *format == '=' || *format == '<') {
#if PY_LITTLE_ENDIAN
        format++;
#else
        if (*format == '<') return 0;
        format++;
#endif
    }
    if (format[0] == '\0' || format[1] != '\0') return 0;
    if (strchr("bhilqn", format[0])) return 'i';
    if (strchr("BHILQN", format[0])) return 'u';
    return 0;
}

/* Fill `view` with `obj`'s buffer as `want` says, or set a TypeError and return -1. */
static inline int hpa_buffer(PyObject *obj, Py_buffer *view, hpa_want want) {
    int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (want.writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, view, flags) < 0) {
        PyErr_Format(PyExc_TypeError, "%s: a C-contiguous%s array is needed", want.name,
                     want.writable ? ", writable" : "");
        return -1;
    }
    if (hpa_kind(view->format) != want.kind || view->itemsize != want.size ||
        view->ndim != want.ndim) {
        PyErr_Format(PyExc_TypeError, "%s: %zd-byte %s integers in %d dimension(s) needed, "
                     "not format '%s' (%zd bytes) in %d",
                     want.name, want.size, want.kind == 'i' ? "signed" : "unsigned",
                     want.ndim, view->format ? view->format : "B", view->itemsize,
                     view->ndim);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

/* Release the first `n` of `views` (those filled so far). */
static inline void hpa_release(Py_buffer *views, int n) {
    for (int k = 0; k < n; k++) PyBuffer_Release(&views[k]);
}

/* Fill views[k] from objs[k] as wants[k] says, for every k < n; on a failure release
 * those filled and return -1. */
static inline int hpa_buffers(PyObject **objs, Py_buffer *views, const hpa_want *wants,
                              int n) {
    for (int k = 0; k < n; k++) {
        if (hpa_buffer(objs[k], &views[k], wants[k]) < 0) {
            hpa_release(views, k);
            return -1;
        }
    }
    return 0;
}

/* The item size of `obj`'s units where it is a C-contiguous array of int32 or int64 (4 or
 * 8), else -1 with a TypeError naming it `what`: a kernel written once per unit width. */
static inline Py_ssize_t hpa_unit(PyObject *obj, const char *what) {
    Py_buffer probe;
    Py_ssize_t unit = 0;
    if (PyObject_GetBuffer(obj, &probe, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) == 0) {
        unit = probe.itemsize;
        PyBuffer_Release(&probe);
    }
    PyErr_Clear();
    if (unit == 4 || unit == 8) return unit;
    PyErr_Format(PyExc_TypeError, "%s: a C-contiguous array of int32 or int64 units is needed",
                 what);
    return -1;
}

/* Rows and columns of a filled 2-D view (1 row for a 1-D one). */
static inline Py_ssize_t hpa_rows(const Py_buffer *v) { return v->ndim == 2 ? v->shape[0] : 1; }
static inline Py_ssize_t hpa_cols(const Py_buffer *v) {
    return v->ndim == 2 ? v->shape[1] : v->shape[0];
}

/* Wrong contents found by a check that runs without the GIL: a printf-style message
 * (PyErr_Format's: %lld for each value) and up to six values, raised as a ValueError
 * once the GIL is held again. `format` NULL: nothing wrong. */
typedef struct {
    const char *format;
    long long v[6];
} hpa_fault;

/* Record the first fault (later ones are left: the message names the first bad position);
 * -> -1, for `return hpa_fail(f, format, values...)` (one to six values). */
#define hpa_fail(f, format, ...) hpa_fail6(f, format, __VA_ARGS__, 0, 0, 0, 0, 0)
static inline int hpa_fail6(hpa_fault *f, const char *format, long long a, long long b,
                            long long c, long long d, long long e, long long g, ...) {
    if (f->format == NULL) *f = (hpa_fault){format, {a, b, c, d, e, g}};
    return -1;
}

/* The ValueError of a recorded fault; NULL, for `return hpa_raise(...)`. */
static inline PyObject *hpa_raise(const hpa_fault *f) {
    const long long *v = f->v;
    return PyErr_Format(PyExc_ValueError, f->format, v[0], v[1], v[2], v[3], v[4], v[5]);
}

#endif
