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
    int64_t num_views, n, num_nodes, cap, first, stop, own, arena_len;
    const int64_t *starts, *lens, *qlen, *ns;
    int64_t *lo, *hi, *base, *creator, *t_node, *t_unit, *t_child, *counts;
    int64_t *q_shared, *q_parent, *e_out, *w_out, *leaf_at;
    int64_t pend_node[MAX_VIEWS], pend_d[MAX_VIEWS], pend_slot[MAX_VIEWS];
    hpa_fault fault;
} trees;

/* The slot of (node, unit) in one view's table, or the empty slot where it would go
 * (linear probing; the whole key is stored, so a lookup never collides); -1 where no slot
 * is empty (a table no feed left so: find_failed says it). */
static inline int64_t find(const int64_t *t_node, const int64_t *t_unit, int64_t cap,
                           int64_t node, int64_t unit) {
    uint64_t h = ((uint64_t)node * 0x9E3779B97F4A7C15ULL) ^ (uint64_t)unit;
    h = (h ^ (h >> 31)) * 0xBF58476D1CE4E5B9ULL;
    int64_t slot = (int64_t)(h >> 33) & (cap - 1);
    for (int64_t probes = 0; probes < cap; probes++) {
        if (t_node[slot] < 0 || (t_node[slot] == node && t_unit[slot] == unit)) return slot;
        slot = (slot + 1) & (cap - 1);
    }
    return -1;
}

#define COLD static __attribute__((cold, noinline))

COLD int64_t find_failed(trees *t, int64_t v) {
    return hpa_fail(&t->fault, "feed: t_node[%lld]: no free slot (%lld slots)", v, t->cap);
}

/* The trees as earlier calls left them are checked edge by edge as a walk takes one (a
 * pass over all of them before every chunk cost more than the walks; check_contents): the
 * child a node in use, its edge going on from the walk's depth d to its end (hi), all of it
 * inside the arena. The walk reads no unit outside it then. These say what is wrong. */
COLD int64_t bad_child(trees *t, int64_t v, int64_t slot, int64_t child) {
    return hpa_fail(&t->fault, "feed: t_child[%lld, %lld] = %lld: not a node in use (%lld "
                    "nodes in use)", v, slot, child, t->counts[v]);
}

COLD int64_t bad_edge(trees *t, int64_t v, int64_t child, int64_t h, int64_t b, int64_t d) {
    return hpa_fail(&t->fault, "feed: hi, base[%lld, %lld] = %lld, %lld: not an edge from "
                    "depth %lld inside the arena (%lld units)", v, child, h, b, d,
                    t->arena_len);
}

static inline void put(trees *t, int64_t v, int64_t slot, int64_t node, int64_t unit,
                       int64_t child) {
    int64_t at = v * t->cap + slot;
    t->t_node[at] = node;
    t->t_unit[at] = unit;
    t->t_child[at] = child;
}

/* Make `child` the child of `node` under `unit` (a new key). -> 0, or -1 (a fault). */
static inline int link_child(trees *t, int64_t v, int64_t node, int64_t unit, int64_t child) {
    int64_t row = v * t->cap;
    int64_t slot = find(t->t_node + row, t->t_unit + row, t->cap, node, unit);
    if (slot < 0) return (int)find_failed(t, v);
    put(t, v, slot, node, unit, child);
    return 0;
}

/* Request j down view v's tree: its answers, a split where it branches inside an edge,
 * and where its new leaf goes (pend_*; none when all of it was there). -> depth, or -1
 * (a fault). Written once per unit type (UNIT: int32_t token ids, int64_t hash ids). */
#define DEFINE_WALK_FEED(SUFFIX, UNIT)                                                      \
    static int64_t walk_##SUFFIX(trees *t, const UNIT *flat, const UNIT *arena,            \
                                 int64_t start, int64_t length, int64_t j, int64_t v) {    \
        int64_t *lo = t->lo + v * t->num_nodes, *hi = t->hi + v * t->num_nodes;             \
        int64_t *base = t->base + v * t->num_nodes;                                         \
        int64_t *creator = t->creator + v * t->num_nodes;                                   \
        const int64_t *t_node = t->t_node + v * t->cap, *t_unit = t->t_unit + v * t->cap;   \
        int64_t *t_child = t->t_child + v * t->cap;                                         \
        int64_t cap = t->cap, in_use = t->counts[v], arena_len = t->arena_len;              \
        int64_t qlen = t->qlen[j], node = t->ns[v * t->n + j], d = 0;                       \
        int64_t holder = -1, q_holder = -1;                                                 \
        while (d < length) {                                                                \
            int64_t unit = (int64_t)flat[start + d];                                        \
            int64_t slot = find(t_node, t_unit, cap, node, unit);                           \
            if (slot < 0) return find_failed(t, v);                                         \
            if (t_node[slot] < 0) { /* nothing earlier continues here: a new leaf */        \
                t->pend_node[v] = node, t->pend_d[v] = d, t->pend_slot[v] = slot;           \
                break;                                                                      \
            }                                                                               \
            int64_t child = t_child[slot];                                                  \
            if ((uint64_t)child >= (uint64_t)in_use) return bad_child(t, v, slot, child);   \
            int64_t b = base[child], h = hi[child], m = d + 1;                              \
            if (h <= d || b < -d || b > arena_len - h)                                      \
                return bad_edge(t, v, child, h, b, d);                                      \
            int64_t end = h < length ? h : length;                                          \
            while (m < end && arena[b + m] == flat[start + m]) m++;                         \
            holder = creator[child];                                                        \
            if (d < qlen && qlen <= m) q_holder = holder;                                   \
            if (m == h) {                                                                   \
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
                if (link_child(t, v, mid, (int64_t)arena[b + m], child) < 0) return -1;     \
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
    static int feed_##SUFFIX(trees *t, const UNIT *flat, const UNIT *arena, UNIT *store) {  \
        int64_t views = t->num_views;                                                       \
        for (int64_t j = t->first; j < t->stop; j++) {                                      \
            int64_t start = t->starts[j - t->first], length = t->lens[j];                   \
            int64_t rest = length; /* the shallowest depth a view hangs a new leaf at */    \
            for (int64_t v = 0; v < views; v++) {                                           \
                t->pend_node[v] = -1;                                                       \
                if (t->ns[v * t->n + j] < 0) continue;                                      \
                int64_t d = walk_##SUFFIX(t, flat, arena, start, length, j, v);             \
                if (d < 0) return -1;                                                       \
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
                else if (link_child(t, v, node, unit, leaf) < 0)                            \
                    return -1;                                                              \
            }                                                                               \
        }                                                                                   \
        return 0;                                                                           \
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

/* The units the trees' edges point into: `arena`, which is `store` (written) when the
 * trees own it, else the held `flat` itself. A ValueError otherwise. */
static int check_arena(const Py_buffer *b, int own) {
    const Py_buffer *same = own ? &b[STORE] : &b[FLAT];
    if (same->buf == b[ARENA].buf && hpa_cols(same) == hpa_cols(&b[ARENA])) return 0;
    PyErr_SetString(PyExc_ValueError, own ? "feed: store: the arena itself is needed (own)"
                                          : "feed: arena: flat itself is needed (not own)");
    return -1;
}

/* What the loop will index, proven before it runs, in one pass over the batch (so the
 * loop checks nothing per unit). Requests [first, stop): each sequence inside flat, its
 * query length inside it, its root a node in use at depth 0. Counts: room for the nodes
 * (a split and a leaf a request a view) and, when the trees own their arena, for the
 * units. The trees that earlier calls left (feed is called chunk after chunk) are checked
 * edge by edge as the walks take them (bad_child, bad_edge), and a table's probes end
 * after every slot (find). -> 0, or -1 with the first fault. */
static int check_contents(const trees *t, int64_t flat_len, int64_t arena_len, hpa_fault *f) {
    int64_t batch = t->stop - t->first, need = 0;
    int64_t units = t->own ? t->counts[t->num_views] : 0;
    if (t->own && (units < 0 || units > arena_len))
        return hpa_fail(f, "feed: counts[%lld] = %lld: not a count of arena units in use "
                        "(%lld units)", t->num_views, units, arena_len);
    for (int64_t v = 0; v < t->num_views; v++) {
        int64_t used = t->counts[v];
        if (used < 0 || used > t->num_nodes - 2 * batch)
            return hpa_fail(f, "feed: counts[%lld] = %lld: not a count of nodes in use "
                            "that leaves the 2 each of %lld request(s) may add (%lld nodes)",
                            v, used, batch, t->num_nodes);
    }
    for (int64_t j = t->first; j < t->stop; j++) {
        int64_t start = t->starts[j - t->first], length = t->lens[j], q = t->qlen[j];
        if (length < 0) return hpa_fail(f, "feed: lens[%lld] = %lld: negative", j, length);
        if (start < 0 || start > flat_len - length) /* so length <= flat_len */
            return hpa_fail(f, "feed: starts[%lld] = %lld: request %lld's %lld units from "
                            "there run outside flat (%lld units)", j - t->first, start, j,
                            length, flat_len);
        if (q < 0 || q > length)
            return hpa_fail(f, "feed: qlen[%lld] = %lld: not a length inside the request's "
                            "%lld units", j, q, length);
        need += t->own ? length : 0; /* <= arena_len + flat_len: never overflows */
        if (need > arena_len - units)
            return hpa_fail(f, "feed: lens[%lld] = %lld: past the %lld units the arena has "
                            "left for requests %lld on", j, length, arena_len - units,
                            t->first);
        for (int64_t v = 0; v < t->num_views; v++) {
            int64_t root = t->ns[v * t->n + j];
            if (root >= t->counts[v] || (root >= 0 && t->hi[v * t->num_nodes + root] != 0))
                return hpa_fail(f, "feed: ns[%lld, %lld] = %lld: not a root in use (%lld "
                                "nodes in use)", v, j, root, t->counts[v]);
        }
    }
    return 0;
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
    if (check_shapes(b, &t) < 0 || check_arena(b, own) < 0) {
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
    t.arena_len = hpa_cols(&b[ARENA]);
    t.fault = (hpa_fault){NULL, {0}};
    Py_BEGIN_ALLOW_THREADS;
    if (check_contents(&t, hpa_cols(&b[FLAT]), t.arena_len, &t.fault) == 0) {
        if (unit == 4)
            feed_i32(&t, b[FLAT].buf, b[ARENA].buf, b[STORE].buf);
        else
            feed_i64(&t, b[FLAT].buf, b[ARENA].buf, b[STORE].buf);
    }
    Py_END_ALLOW_THREADS;
    hpa_release(b, NUM_ARRAYS);
    if (t.fault.format) return hpa_raise(&t.fault);
    Py_RETURN_NONE;
}

/* Request o's units [0, hi) into out: the arena holds each request's units from where it
 * left every earlier request (e, against its holder w) on, at leaf_at + depth, so the
 * rest come from w, and so on up the chain. -> 0, or -1 with the fault: a chain is data,
 * so each link is checked as it is followed (a link, never a unit). */
#define DEFINE_REBUILD(SUFFIX, UNIT)                                                        \
    static int rebuild_##SUFFIX(int64_t o, int64_t hi, const int64_t *e,                  \
                                const int64_t *w, const int64_t *leaf_at,                   \
                                const UNIT *arena, int64_t arena_size, UNIT *out,           \
                                hpa_fault *f) {                                             \
        while (hi > 0) {                                                                    \
            int64_t from = e[o];                                                            \
            if (from < 0)                                                                   \
                return hpa_fail(f, "rebuild: e[%lld] = %lld: not a depth (%lld units of "   \
                                "the request left)", o, from, hi);                          \
            if (hi > from) {                                                                \
                int64_t at = leaf_at[o];                                                    \
                if (at < -from || at > arena_size - hi)                                     \
                    return hpa_fail(f, "rebuild: leaf_at[%lld] = %lld: units [%lld, %lld) "  \
                                    "of the request outside the arena", o, at, from, hi);   \
                memcpy(out + from, arena + at + from, (size_t)(hi - from) * sizeof(UNIT));  \
                hi = from;                                                                  \
            }                                                                               \
            if (hi > 0 && (w[o] < 0 || w[o] >= o))                                          \
                return hpa_fail(f, "rebuild: w[%lld] = %lld: not an earlier request, and "   \
                                "%lld units are left", o, w[o], hi);                        \
            o = w[o];                                                                       \
        }                                                                                   \
        return 0;                                                                           \
    }

DEFINE_REBUILD(i32, int32_t)
DEFINE_REBUILD(i64, int64_t)

enum { R_IDS, R_LENS, R_E, R_W, R_LEAF_AT, R_ARENA, R_OUT, R_OUT_STARTS, R_NUM };

/* Every request asked for, and its place in out, proven before the copies start. */
static int check_rebuild(const Py_buffer *b, hpa_fault *f) {
    const int64_t *ids = b[R_IDS].buf, *lens = b[R_LENS].buf, *starts = b[R_OUT_STARTS].buf;
    int64_t m = hpa_cols(&b[R_IDS]), n = hpa_cols(&b[R_LENS]), size = hpa_cols(&b[R_OUT]);
    for (int64_t k = 0; k < m; k++) {
        int64_t id = ids[k];
        if (id < 0 || id >= n)
            return hpa_fail(f, "rebuild: ids[%lld] = %lld: not a request (%lld)", k, id, n);
        if (lens[id] < 0 || lens[id] > size)
            return hpa_fail(f, "rebuild: lens[%lld] = %lld: not a length inside out (%lld "
                            "units)", id, lens[id], size);
        if (starts[k] < 0 || starts[k] > size - lens[id])
            return hpa_fail(f, "rebuild: out_starts[%lld] = %lld: request %lld's %lld units "
                            "from there run outside out (%lld units)", k, starts[k], id,
                            lens[id], size);
    }
    return 0;
}

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
    int64_t m = hpa_cols(&b[R_IDS]), n = hpa_cols(&b[R_LENS]);
    if (hpa_cols(&b[R_E]) != n || hpa_cols(&b[R_W]) != n || hpa_cols(&b[R_LEAF_AT]) != n ||
        hpa_cols(&b[R_OUT_STARTS]) != m) {
        hpa_release(b, R_NUM);
        PyErr_SetString(PyExc_ValueError, "rebuild: arrays of inconsistent shapes");
        return NULL;
    }
    hpa_fault fault = {NULL, {0}};
    Py_BEGIN_ALLOW_THREADS;
    int ok = check_rebuild(b, &fault) == 0;
    for (int64_t k = 0; ok && k < m; k++) {
        int64_t id = ids[k];
        if (unit == 4)
            ok = rebuild_i32(id, lens[id], b[R_E].buf, b[R_W].buf, b[R_LEAF_AT].buf,
                             b[R_ARENA].buf, hpa_cols(&b[R_ARENA]),
                             (int32_t *)b[R_OUT].buf + starts[k], &fault) == 0;
        else
            ok = rebuild_i64(id, lens[id], b[R_E].buf, b[R_W].buf, b[R_LEAF_AT].buf,
                             b[R_ARENA].buf, hpa_cols(&b[R_ARENA]),
                             (int64_t *)b[R_OUT].buf + starts[k], &fault) == 0;
    }
    Py_END_ALLOW_THREADS;
    hpa_release(b, R_NUM);
    if (fault.format) return hpa_raise(&fault);
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
