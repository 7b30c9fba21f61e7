/* The radix trees of analyzer/prefixes/radix.py, compiled: walk then insert requests
 * [first, stop) into every view's tree. radix.py's module doc defines the trees, the
 * arena and the answers (L, p, e, w per view); RadixMatch holds the arrays and calls
 * `feed` with them. Built with the package (setup.py); without it, the vectorised
 * matcher gives the same answers. Runs without the GIL. */
#include "native.h"

#define MAX_VIEWS 8

/* One call's arrays: per view v, its nodes' rows (lo, hi, base, creator: num_nodes wide),
 * its child table's rows (cap wide, a power of two) and its answers' rows (n wide). */
typedef struct {
    int64_t num_views, n, num_nodes, cap, first, stop, own;
    const int64_t *starts, *lens, *qlen, *ns;
    int64_t *lo, *hi, *base, *creator, *t_node, *t_unit, *t_child, *counts;
    int64_t *q_shared, *q_parent, *e_out, *w_out, *leaf_at;
    int64_t pend_node[MAX_VIEWS], pend_d[MAX_VIEWS], pend_slot[MAX_VIEWS];
} trees;

/* The slot of (node, unit) in one view's table, or the empty slot where it would go
 * (linear probing; the whole key is stored, so a lookup never collides). */
static inline int64_t find(const int64_t *t_node, const int64_t *t_unit, int64_t cap,
                           int64_t node, int64_t unit) {
    uint64_t h = ((uint64_t)node * 0x9E3779B97F4A7C15ULL) ^ (uint64_t)unit;
    h = (h ^ (h >> 31)) * 0xBF58476D1CE4E5B9ULL;
    int64_t slot = (int64_t)(h >> 33) & (cap - 1);
    while (t_node[slot] >= 0 && (t_node[slot] != node || t_unit[slot] != unit))
        slot = (slot + 1) & (cap - 1);
    return slot;
}

static inline void put(trees *t, int64_t v, int64_t slot, int64_t node, int64_t unit,
                       int64_t child) {
    int64_t at = v * t->cap + slot;
    t->t_node[at] = node;
    t->t_unit[at] = unit;
    t->t_child[at] = child;
}

/* Make `child` the child of `node` under `unit` (a new key). */
static inline void link_child(trees *t, int64_t v, int64_t node, int64_t unit, int64_t child) {
    int64_t row = v * t->cap;
    put(t, v, find(t->t_node + row, t->t_unit + row, t->cap, node, unit), node, unit, child);
}

/* Request j down view v's tree: its answers, a split where it branches inside an edge,
 * and where its new leaf goes (pend_*; none when all of it was there). -> depth.
 * Written once per unit type (UNIT: int32_t token ids, int64_t hash ids). */
#define DEFINE_WALK_FEED(SUFFIX, UNIT)                                                      \
    static int64_t walk_##SUFFIX(trees *t, const UNIT *flat, const UNIT *arena,            \
                                 int64_t start, int64_t length, int64_t j, int64_t v) {    \
        int64_t *lo = t->lo + v * t->num_nodes, *hi = t->hi + v * t->num_nodes;             \
        int64_t *base = t->base + v * t->num_nodes;                                         \
        int64_t *creator = t->creator + v * t->num_nodes;                                   \
        const int64_t *t_node = t->t_node + v * t->cap, *t_unit = t->t_unit + v * t->cap;   \
        int64_t *t_child = t->t_child + v * t->cap;                                         \
        int64_t qlen = t->qlen[j], node = t->ns[v * t->n + j], d = 0;                       \
        int64_t holder = -1, q_holder = -1;                                                 \
        while (d < length) {                                                                \
            int64_t unit = (int64_t)flat[start + d];                                        \
            int64_t slot = find(t_node, t_unit, t->cap, node, unit);                        \
            if (t_node[slot] < 0) { /* nothing earlier continues here: a new leaf */        \
                t->pend_node[v] = node, t->pend_d[v] = d, t->pend_slot[v] = slot;           \
                break;                                                                      \
            }                                                                               \
            int64_t child = t_child[slot], b = base[child], m = d + 1;                      \
            int64_t end = hi[child] < length ? hi[child] : length;                          \
            while (m < end && arena[b + m] == flat[start + m]) m++;                         \
            holder = creator[child];                                                        \
            if (d < qlen && qlen <= m) q_holder = holder;                                   \
            if (m == hi[child]) {                                                           \
                node = child, d = m;                                                        \
                continue;                                                                   \
            }                                                                               \
            d = m;                                                                          \
            if (m < length) { /* j branches off inside the edge: split it at m */           \
                int64_t mid = t->counts[v]++;                                               \
                lo[mid] = lo[child], hi[mid] = m, base[mid] = b;                            \
                creator[mid] = creator[child];                                              \
                t_child[slot] = mid;                                                        \
                lo[child] = m;                                                              \
                link_child(t, v, mid, (int64_t)arena[b + m], child);                              \
                t->pend_node[v] = mid, t->pend_d[v] = m, t->pend_slot[v] = -1;              \
            }                                                                               \
            break;                                                                          \
        }                                                                                   \
        int64_t shared = d < qlen ? d : qlen, at = v * t->n + j;                            \
        t->e_out[at] = d, t->q_shared[at] = shared;                                         \
        t->w_out[at] = d > 0 ? holder : -1;                                                 \
        t->q_parent[at] = shared > 0 ? (shared == d ? holder : q_holder) : -1;              \
        return d;                                                                           \
    }                                                                                       \
                                                                                            \
    static void feed_##SUFFIX(trees *t, const UNIT *flat, const UNIT *arena, UNIT *store) { \
        int64_t views = t->num_views;                                                       \
        for (int64_t j = t->first; j < t->stop; j++) {                                      \
            int64_t start = t->starts[j - t->first], length = t->lens[j];                   \
            int64_t rest = length; /* the shallowest depth a view hangs a new leaf at */    \
            for (int64_t v = 0; v < views; v++) {                                           \
                t->pend_node[v] = -1;                                                       \
                if (t->ns[v * t->n + j] < 0) continue;                                      \
                int64_t d = walk_##SUFFIX(t, flat, arena, start, length, j, v);             \
                if (t->pend_node[v] >= 0 && d < rest) rest = d;                             \
            }                                                                               \
            if (rest == length) continue;                                                   \
            int64_t leaf_base = start;                                                      \
            if (t->own) { /* the arena keeps j's units from the shallowest new leaf on */   \
                int64_t used = t->counts[views];                                            \
                memcpy(store + used, flat + start + rest, (length - rest) * sizeof(UNIT));  \
                leaf_base = used - rest;                                                    \
                t->counts[views] = used + length - rest;                                    \
            }                                                                               \
            t->leaf_at[j] = leaf_base; /* unit x >= rest of j is arena[leaf_base + x] */    \
            for (int64_t v = 0; v < views; v++) {                                           \
                int64_t node = t->pend_node[v];                                             \
                if (node < 0) continue;                                                     \
                int64_t d = t->pend_d[v], leaf = t->counts[v]++, at = v * t->num_nodes;     \
                t->lo[at + leaf] = d, t->hi[at + leaf] = length;                            \
                t->base[at + leaf] = leaf_base, t->creator[at + leaf] = j;                  \
                int64_t unit = (int64_t)flat[start + d];                                    \
                if (t->pend_slot[v] >= 0)                                                   \
                    put(t, v, t->pend_slot[v], node, unit, leaf);                           \
                else                                                                        \
                    link_child(t, v, node, unit, leaf);                                           \
            }                                                                               \
        }                                                                                   \
    }

DEFINE_WALK_FEED(i32, int32_t)
DEFINE_WALK_FEED(i64, int64_t)

enum { FLAT, STARTS, LENS, QLEN, NS, LO, HI, BASE, CREATOR, T_NODE, T_UNIT, T_CHILD, COUNTS,
       ARENA, STORE, Q_SHARED, Q_PARENT, E_OUT, W_OUT, LEAF_AT, NUM_ARRAYS };

/* The shapes every array must agree on; a TypeError (ValueError for sizes) otherwise. */
static int check_shapes(const Py_buffer *b, trees *t) {
    t->num_views = hpa_rows(&b[NS]);
    t->n = hpa_cols(&b[NS]);
    t->num_nodes = hpa_cols(&b[LO]);
    t->cap = hpa_cols(&b[T_NODE]);
    int ok = t->num_views <= MAX_VIEWS && (t->cap & (t->cap - 1)) == 0 && t->cap > 0;
    for (int k = LO; k <= CREATOR; k++)
        ok = ok && hpa_rows(&b[k]) == t->num_views && hpa_cols(&b[k]) == t->num_nodes;
    for (int k = T_NODE; k <= T_CHILD; k++)
        ok = ok && hpa_rows(&b[k]) == t->num_views && hpa_cols(&b[k]) == t->cap;
    for (int k = Q_SHARED; k <= W_OUT; k++)
        ok = ok && hpa_rows(&b[k]) == t->num_views && hpa_cols(&b[k]) == t->n;
    ok = ok && hpa_cols(&b[LENS]) == t->n && hpa_cols(&b[QLEN]) == t->n;
    ok = ok && hpa_cols(&b[LEAF_AT]) == t->n;
    ok = ok && hpa_cols(&b[COUNTS]) == t->num_views + 1;
    ok = ok && 0 <= t->first && t->first <= t->stop && t->stop <= t->n;
    ok = ok && hpa_cols(&b[STARTS]) >= t->stop - t->first;
    if (!ok) PyErr_SetString(PyExc_ValueError, "feed: arrays of inconsistent shapes");
    return ok ? 0 : -1;
}

static PyObject *feed(PyObject *self, PyObject *args) {
    PyObject *o[NUM_ARRAYS];
    trees t;
    int own;
    if (!PyArg_ParseTuple(args, "OOLLOOOOOOOOOOOOOpOOOOO:feed", &o[FLAT], &o[STARTS],
                          &t.first, &t.stop, &o[LENS], &o[QLEN], &o[NS], &o[LO], &o[HI],
                          &o[BASE], &o[CREATOR], &o[T_NODE], &o[T_UNIT], &o[T_CHILD],
                          &o[COUNTS], &o[ARENA], &o[STORE], &own, &o[Q_SHARED], &o[Q_PARENT],
                          &o[E_OUT], &o[W_OUT], &o[LEAF_AT]))
        return NULL;
    Py_ssize_t unit = hpa_unit(o[FLAT], "feed: flat");
    if (unit < 0) return NULL;
    hpa_want w[NUM_ARRAYS];
    for (int k = 0; k < NUM_ARRAYS; k++)
        w[k] = (hpa_want){"feed: an int64 array", 'i', 8, k == STARTS || k == LENS ||
                          k == QLEN || k == COUNTS || k == LEAF_AT ? 1 : 2, k >= LO && k != ARENA};
    w[FLAT] = (hpa_want){"feed: flat", 'i', unit, 1, 0};
    w[ARENA] = (hpa_want){"feed: arena", 'i', unit, 1, 0};
    w[STORE] = (hpa_want){"feed: store", 'i', unit, 1, 1};
    Py_buffer b[NUM_ARRAYS];
    if (hpa_buffers(o, b, w, NUM_ARRAYS) < 0) return NULL;
    if (check_shapes(b, &t) < 0) {
        hpa_release(b, NUM_ARRAYS);
        return NULL;
    }
    t.own = own;
    t.starts = b[STARTS].buf, t.lens = b[LENS].buf, t.qlen = b[QLEN].buf, t.ns = b[NS].buf;
    t.lo = b[LO].buf, t.hi = b[HI].buf, t.base = b[BASE].buf, t.creator = b[CREATOR].buf;
    t.t_node = b[T_NODE].buf, t.t_unit = b[T_UNIT].buf, t.t_child = b[T_CHILD].buf;
    t.counts = b[COUNTS].buf;
    t.q_shared = b[Q_SHARED].buf, t.q_parent = b[Q_PARENT].buf;
    t.e_out = b[E_OUT].buf, t.w_out = b[W_OUT].buf, t.leaf_at = b[LEAF_AT].buf;
    Py_BEGIN_ALLOW_THREADS;
    if (unit == 4)
        feed_i32(&t, b[FLAT].buf, b[ARENA].buf, b[STORE].buf);
    else
        feed_i64(&t, b[FLAT].buf, b[ARENA].buf, b[STORE].buf);
    Py_END_ALLOW_THREADS;
    hpa_release(b, NUM_ARRAYS);
    Py_RETURN_NONE;
}

/* Request o's units [0, hi) into out: the arena holds each request's units from where it
 * left every earlier request (e, against its holder w) on, at leaf_at + depth, so the
 * rest come from w, and so on up the chain. -> 0, or -1 where an index falls outside. */
#define DEFINE_REBUILD(SUFFIX, UNIT)                                                        \
    static int rebuild_##SUFFIX(int64_t o, int64_t hi, int64_t n, const int64_t *e,         \
                                const int64_t *w, const int64_t *leaf_at,                   \
                                const UNIT *arena, int64_t arena_size, UNIT *out) {          \
        while (hi > 0) {                                                                    \
            if (o < 0 || o >= n || e[o] < 0) return -1;                                     \
            int64_t from = e[o];                                                            \
            if (hi > from) {                                                                \
                int64_t at = leaf_at[o] + from;                                             \
                if (at < 0 || at + hi - from > arena_size) return -1;                       \
                memcpy(out + from, arena + at, (size_t)(hi - from) * sizeof(UNIT));         \
                hi = from;                                                                  \
            }                                                                               \
            if (hi > 0 && w[o] >= o) return -1; /* a holder is an earlier request */        \
            o = w[o];                                                                       \
        }                                                                                   \
        return 0;                                                                           \
    }

DEFINE_REBUILD(i32, int32_t)
DEFINE_REBUILD(i64, int64_t)

enum { R_IDS, R_LENS, R_E, R_W, R_LEAF_AT, R_ARENA, R_OUT, R_OUT_STARTS, R_NUM };

static PyObject *rebuild(PyObject *self, PyObject *args) {
    PyObject *o[R_NUM];
    if (!PyArg_ParseTuple(args, "OOOOOOOO:rebuild", &o[R_IDS], &o[R_LENS], &o[R_E], &o[R_W],
                          &o[R_LEAF_AT], &o[R_ARENA], &o[R_OUT], &o[R_OUT_STARTS]))
        return NULL;
    Py_ssize_t unit = hpa_unit(o[R_ARENA], "rebuild: arena");
    if (unit < 0) return NULL;
    hpa_want w[R_NUM];
    for (int k = 0; k < R_NUM; k++) w[k] = (hpa_want){"rebuild: an int64 array", 'i', 8, 1, 0};
    w[R_ARENA] = (hpa_want){"rebuild: arena", 'i', unit, 1, 0};
    w[R_OUT] = (hpa_want){"rebuild: out", 'i', unit, 1, 1};
    Py_buffer b[R_NUM];
    if (hpa_buffers(o, b, w, R_NUM) < 0) return NULL;
    const int64_t *ids = b[R_IDS].buf, *lens = b[R_LENS].buf, *starts = b[R_OUT_STARTS].buf;
    int64_t m = hpa_cols(&b[R_IDS]), n = hpa_cols(&b[R_LENS]), size = hpa_cols(&b[R_OUT]);
    int ok = hpa_cols(&b[R_E]) == n && hpa_cols(&b[R_W]) == n && hpa_cols(&b[R_LEAF_AT]) == n &&
             hpa_cols(&b[R_OUT_STARTS]) == m;
    Py_BEGIN_ALLOW_THREADS;
    for (int64_t k = 0; ok && k < m; k++) {
        int64_t id = ids[k];
        ok = 0 <= id && id < n && 0 <= starts[k] && starts[k] + lens[id] <= size;
        if (!ok) break;
        if (unit == 4)
            ok = rebuild_i32(id, lens[id], n, b[R_E].buf, b[R_W].buf, b[R_LEAF_AT].buf,
                             b[R_ARENA].buf, hpa_cols(&b[R_ARENA]),
                             (int32_t *)b[R_OUT].buf + starts[k]) == 0;
        else
            ok = rebuild_i64(id, lens[id], n, b[R_E].buf, b[R_W].buf, b[R_LEAF_AT].buf,
                             b[R_ARENA].buf, hpa_cols(&b[R_ARENA]),
                             (int64_t *)b[R_OUT].buf + starts[k]) == 0;
    }
    Py_END_ALLOW_THREADS;
    hpa_release(b, R_NUM);
    if (!ok) {
        PyErr_SetString(PyExc_ValueError, "rebuild: an index outside its array");
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"feed", feed, METH_VARARGS,
     "feed(flat, starts, first, stop, lens, qlen, ns, lo, hi, base, creator, t_node, t_unit, "
     "t_child, counts, arena, store, own, q_shared, q_parent, e_out, w_out, leaf_at): walk then "
     "insert requests [first, stop) into every view's tree (analyzer.prefixes.radix)."},
    {"rebuild", rebuild, METH_VARARGS,
     "rebuild(ids, lens, e, w, leaf_at, arena, out, out_starts): the inserted sequences of "
     "requests `ids` from the trees' arena into out[out_starts[k]:][:lens[ids[k]]]."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "radix_loop",
    .m_doc = "The radix trees' compiled loop.",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit_radix_loop(void) { return PyModule_Create(&module); }
