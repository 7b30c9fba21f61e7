/* The sort matcher's per-unit steps (analyzer/prefixes/sort_match.py), fused: one CUDA
 * module that CuPy compiles once (RawModule) and caches, and the same source built for the
 * host with -DHPA_HOST, where every kernel is a plain loop over its indices: the tests run
 * that build against the plain NumPy steps, so the kernels' arithmetic is checked on
 * machines without a GPU.
 *
 * Every kernel takes its element count and visits each index once (a grid-stride loop on
 * the device). Arithmetic is mod 2^64, so the keys equal prefix_hash.ChunkHash's bit for
 * bit whatever order the terms are summed in. The caller (sort_device.py) checks that
 * every start and length lies inside the units before it launches anything.
 */

typedef unsigned long long u64;
typedef long long i64;

#ifdef HPA_HOST
#define HPA_KERNEL void
#define HPA_DEVICE static inline
#define HPA_FOR(i, n) for (i64 i = 0; i < (n); ++i)
HPA_DEVICE void hpa_add(i64 *at, i64 value) { *at += value; }
#else
#define HPA_KERNEL extern "C" __global__ void
#define HPA_DEVICE __device__ static inline
#define HPA_FOR(i, n)                                                              \
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < (n);              \
         i += (i64)blockDim.x * gridDim.x)
HPA_DEVICE void hpa_add(i64 *at, i64 value) {
    atomicAdd((unsigned long long *)at, (unsigned long long)value);
}
#endif

/* base^exponent mod 2^64 by squaring. */
HPA_DEVICE u64 power_of(u64 base, u64 exponent) {
    u64 out = 1;
    while (exponent) {
        if (exponent & 1) out *= base;
        base *= base;
        exponent >>= 1;
    }
    return out;
}

/* The row owning element k: the last r < rows with offsets[r] <= k (every row has units,
 * so offsets rise strictly and offsets[0] = 0 <= k < offsets[rows]). */
HPA_DEVICE i64 row_of(const i64 *offsets, i64 rows, i64 k) {
    i64 lo = 0, hi = rows;
    while (hi - lo > 1) {
        i64 mid = lo + (hi - lo) / 2;
        if (offsets[mid] <= k) lo = mid; else hi = mid;
    }
    return lo;
}

/* The key of the prefix of depth d of the sequence starting at unit `start`:
 * (seed * B^d + sum_t u_t B^(d-t)) * spread, from the running sum P[g] = sum_{t<=g} u_t B^-t. */
HPA_DEVICE u64 key_of(const u64 *running, i64 start, i64 depth, u64 seed, u64 base, u64 spread,
                      u64 mask) {
    i64 last = start + depth - 1;
    u64 sum = running[last] - (start > 0 ? running[start - 1] : 0);
    u64 h = sum * power_of(base, (u64)last) + seed * power_of(base, (u64)depth);
    return (h * spread) & mask;
}

/* out[g] = u[g] * inverse^g: the terms whose running sum (a scan) gives every prefix key. */
#define HPA_WEIGH(NAME, T)                                                         \
    HPA_KERNEL NAME(const T *units, i64 n, u64 inverse, u64 *out) {               \
        HPA_FOR(g, n) { out[g] = (u64)(i64)units[g] * power_of(inverse, (u64)g); } \
    }
HPA_WEIGH(hpa_weigh_i32, int)
HPA_WEIGH(hpa_weigh_i64, i64)

/* Keys and rows of the view's elements lo .. lo + count - 1. */
HPA_KERNEL hpa_element_keys(const u64 *running, const i64 *starts, const u64 *seeds,
                            const i64 *offsets, i64 rows, i64 lo, i64 count, u64 base,
                            u64 spread, u64 mask, u64 *keys, i64 *row_out) {
    HPA_FOR(k, count) {
        i64 r = row_of(offsets, rows, lo + k);
        i64 depth = lo + k - offsets[r] + 1;
        keys[k] = key_of(running, starts[r], depth, seeds[r], base, spread, mask);
        row_out[k] = r;
    }
}

/* Keys of the prefixes (asked[k], depths[k]). */
HPA_KERNEL hpa_keys_at(const u64 *running, const i64 *starts, const u64 *seeds,
                       const i64 *asked, const i64 *depths, i64 count, u64 base, u64 spread,
                       u64 mask, u64 *keys) {
    HPA_FOR(k, count) {
        i64 r = asked[k];
        keys[k] = key_of(running, starts[r], depths[k], seeds[r], base, spread, mask);
    }
}

/* heads[r] += the runs of equal keys that row r's elements head (keys sorted, stable). */
HPA_KERNEL hpa_count_heads(const u64 *sorted_keys, const i64 *sorted_rows, i64 n, i64 *heads) {
    HPA_FOR(k, n) {
        if (k == 0 || sorted_keys[k] != sorted_keys[k - 1]) hpa_add(&heads[sorted_rows[k]], 1);
    }
}

/* bad[r] = 1 where a unit of row r within its first e[r] differs from row w[r]'s, or within
 * its first l[r] from row p[r]'s (w, p: -1 compares nothing; holders are long enough). */
#define HPA_VERIFY(NAME, T)                                                             \
    HPA_KERNEL NAME(const T *units, const i64 *starts, const i64 *offsets, i64 rows,     \
                    i64 n, const i64 *e, const i64 *w, const i64 *l, const i64 *p,       \
                    unsigned char *bad) {                                                \
        HPA_FOR(k, n) {                                                                  \
            i64 r = row_of(offsets, rows, k);                                            \
            i64 at = k - offsets[r];                                                     \
            T mine = units[starts[r] + at];                                              \
            if (w[r] >= 0 && at < e[r] && units[starts[w[r]] + at] != mine) bad[r] = 1;  \
            if (p[r] >= 0 && at < l[r] && units[starts[p[r]] + at] != mine) bad[r] = 1;  \
        }                                                                                \
    }
HPA_VERIFY(hpa_verify_i32, int)
HPA_VERIFY(hpa_verify_i64, i64)
