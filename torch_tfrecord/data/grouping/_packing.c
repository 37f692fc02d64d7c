/*
 * Token sequences packed into rows (data layer of torch_tfrecord.support._native): pack_rows, the
 * loops of data/grouping/packing.py, row for row the same as its numpy twin.
 */
#include "_packing.h"

#include <stdlib.h>

/* data/grouping/packing.py's loops, row for row the same as its numpy twin. lengths: m items x k
 * keys (row-major), none empty, each within its key's capacity but for concat. First-fit (best = 0) and
 * best-fit (best = 1) keep up to `window` open rows in the order they opened: an item goes into
 * the first open row where every key fits (best-fit: the fitting row with the most tokens, the
 * oldest of equals), else into a new row, the oldest open row closing first when `window` are
 * open; a row closes as soon as a key is full, and the open ones close in order at the end.
 * Rows are written in the order they close: offsets (rows + 1), items (pieces), starts / stops
 * (pieces x k: a whole item here). */
typedef struct {
    const int64_t *length, *capacity;
    int64_t *offsets, *items, *starts, *stops;
    int k;
    Py_ssize_t rows, pieces;
} Packing;

static void pack_piece(Packing *p, Py_ssize_t item, const int64_t *start, const int64_t *stop) {
    p->items[p->pieces] = item;
    memcpy(p->starts + p->pieces * p->k, start, (size_t)p->k * sizeof(int64_t));
    memcpy(p->stops + p->pieces * p->k, stop, (size_t)p->k * sizeof(int64_t));
    p->pieces++;
}

static void pack_row_end(Packing *p) { p->offsets[++p->rows] = p->pieces; }

static int pack_fit(Packing *p, Py_ssize_t m, int best, Py_ssize_t window) {
    const int k = p->k;
    int64_t *used = calloc((size_t)window * (size_t)k, sizeof(int64_t));
    int64_t *zero = calloc((size_t)k, sizeof(int64_t));
    Py_ssize_t *open = malloc((size_t)window * sizeof(Py_ssize_t));
    Py_ssize_t *head = malloc((size_t)window * sizeof(Py_ssize_t));
    Py_ssize_t *tail = malloc((size_t)window * sizeof(Py_ssize_t));
    Py_ssize_t *spare = malloc((size_t)window * sizeof(Py_ssize_t));
    Py_ssize_t *next = malloc((size_t)(m ? m : 1) * sizeof(Py_ssize_t));
    int ok = used && zero && open && head && tail && spare && next;
    if (ok) {
        Py_ssize_t n_open = 0, n_spare = window;
        for (Py_ssize_t s = 0; s < window; s++) spare[s] = window - 1 - s;
#define PACK_CLOSE(at)                                                                      \
    do {                                                                                    \
        Py_ssize_t slot_ = open[(at)];                                                      \
        memmove(open + (at), open + (at) + 1, (size_t)(n_open - (at) - 1) * sizeof(Py_ssize_t)); \
        n_open--;                                                                           \
        for (Py_ssize_t i_ = head[slot_]; i_ >= 0; i_ = next[i_])                           \
            pack_piece(p, i_, zero, p->length + i_ * k);                                    \
        pack_row_end(p);                                                                    \
        memset(used + slot_ * k, 0, (size_t)k * sizeof(int64_t));                           \
        spare[n_spare++] = slot_;                                                           \
    } while (0)
        for (Py_ssize_t i = 0; i < m; i++) {
            const int64_t *need = p->length + i * k;
            Py_ssize_t placed = -1;
            int64_t top = -1;
            for (Py_ssize_t j = 0; j < n_open; j++) {
                const int64_t *u = used + open[j] * k;
                int fits = 1;
                for (int c = 0; c < k && fits; c++) fits = u[c] + need[c] <= p->capacity[c];
                if (!fits) continue;
                if (!best) {
                    placed = j;
                    break;
                }
                int64_t score = 0;
                for (int c = 0; c < k; c++) score += u[c];
                if (score > top) {
                    top = score;
                    placed = j;
                }
            }
            if (placed < 0) {
                if (n_open == window) PACK_CLOSE(0);
                Py_ssize_t slot = spare[--n_spare];
                head[slot] = -1;
                open[n_open] = slot;
                placed = n_open++;
            }
            Py_ssize_t slot = open[placed];
            int64_t *u = used + slot * k;
            int full = 0;
            for (int c = 0; c < k; c++) {
                u[c] += need[c];
                full |= u[c] >= p->capacity[c];
            }
            next[i] = -1;
            if (head[slot] < 0) head[slot] = i;
            else next[tail[slot]] = i;
            tail[slot] = i;
            if (full) PACK_CLOSE(placed);
        }
        while (n_open) PACK_CLOSE(0);
#undef PACK_CLOSE
    }
    free(used);
    free(zero);
    free(open);
    free(head);
    free(tail);
    free(spare);
    free(next);
    return ok;
}

/* Concatenate-and-cut: items fill one row after another; an item that does not fit the rest of
 * the row is cut, each key where that key's room ends, and goes on in the next row(s); a row
 * closes as soon as a key is full. */
static int pack_concat(Packing *p, Py_ssize_t m) {
    const int k = p->k;
    int64_t *used = calloc((size_t)k, sizeof(int64_t)), *start = malloc((size_t)k * sizeof(int64_t));
    int64_t *stop = malloc((size_t)k * sizeof(int64_t)), *rest = malloc((size_t)k * sizeof(int64_t));
    int ok = used && start && stop && rest;
    int open = 0;
    for (Py_ssize_t i = 0; ok && i < m; i++) {
        int left = 0;
        for (int c = 0; c < k; c++) {
            start[c] = 0;
            rest[c] = p->length[i * k + c];
        }
        do {
            int full = 0;
            left = 0;
            for (int c = 0; c < k; c++) {
                int64_t room = p->capacity[c] - used[c], take = rest[c] < room ? rest[c] : room;
                stop[c] = start[c] + take;
                used[c] += take;
                rest[c] -= take;
                full |= used[c] >= p->capacity[c];
                left |= rest[c] > 0;
            }
            pack_piece(p, i, start, stop);
            memcpy(start, stop, (size_t)k * sizeof(int64_t));
            open = 1;
            if (full) {
                pack_row_end(p);
                memset(used, 0, (size_t)k * sizeof(int64_t));
                open = 0;
            }
        } while (left);
    }
    if (ok && open) pack_row_end(p);
    free(used);
    free(start);
    free(stop);
    free(rest);
    return ok;
}

static PyObject *py_pack_rows(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *length_obj, *capacity_obj, *offsets_obj, *items_obj, *starts_obj, *stops_obj;
    int method;
    Py_ssize_t window;
    if (!PyArg_ParseTuple(args, "OOinOOOO:pack_rows", &length_obj, &capacity_obj, &method, &window, &offsets_obj,
                          &items_obj, &starts_obj, &stops_obj))
        return NULL;
    Py_buffer length = {0}, capacity = {0}, offsets = {0}, items = {0}, starts = {0}, stops = {0};
    PyObject *result = NULL;
    if (!get_int64_array(length_obj, &length, "lengths") || !get_int64_array(capacity_obj, &capacity, "capacities") ||
        !get_int64_array(offsets_obj, &offsets, "offsets") || !get_int64_array(items_obj, &items, "items") ||
        !get_int64_array(starts_obj, &starts, "starts") || !get_int64_array(stops_obj, &stops, "stops"))
        goto done;
    Py_ssize_t k = capacity.len / 8, m = k ? length.len / 8 / k : 0;
    const int64_t *cap = capacity.buf, *len = length.buf;
    /* What the loops assume, checked: a full row per piece at worst, and room for every output. */
    int bad = k < 1 || k > 64 || length.len != m * k * 8 || method < 0 || method > 2 || window < 1 ||
              offsets.readonly || items.readonly || starts.readonly || stops.readonly;
    int64_t need_rows = 1, need_pieces = m;
    for (Py_ssize_t c = 0; !bad && c < k; c++) {
        int64_t total = 0;
        bad = cap[c] < 1;
        for (Py_ssize_t i = 0; !bad && i < m; i++) {
            bad = len[i * k + c] < 0 || (method != 2 && len[i * k + c] > cap[c]);
            total += bad ? 0 : len[i * k + c];
        }
        need_rows += total / (bad ? 1 : cap[c]);
    }
    if (method == 2) need_pieces += need_rows;
    else need_rows = m;
    if (bad || offsets.len / 8 < need_rows + 1 || items.len / 8 < need_pieces || starts.len / 8 < need_pieces * k ||
        stops.len / 8 < need_pieces * k) {
        PyErr_SetString(PyExc_ValueError, "pack_rows: lengths must be m x k in [0, capacity], capacities >= 1, "
                                          "method 0-2, window >= 1, and the outputs writable and large enough");
        goto done;
    }
    Packing p = {len, cap, offsets.buf, items.buf, starts.buf, stops.buf, (int)k, 0, 0};
    p.offsets[0] = 0;
    int ok;
    Py_BEGIN_ALLOW_THREADS
    ok = method == 2 ? pack_concat(&p, m) : pack_fit(&p, m, method, window);
    Py_END_ALLOW_THREADS
    if (!ok) {
        PyErr_NoMemory();
        goto done;
    }
    result = Py_BuildValue("nn", p.rows, p.pieces);
done:
    release_views((Py_buffer *[]){&length, &capacity, &offsets, &items, &starts, &stops}, 6);
    return result;
}

static PyMethodDef packing_methods[] = {
    {"pack_rows", py_pack_rows, METH_VARARGS,
     "pack_rows(lengths, capacities, method, window, offsets, items, starts, stops) -> (rows, pieces)"},
    {NULL, NULL, 0, NULL},
};

int packing_init(PyObject *module) { return PyModule_AddFunctions(module, packing_methods); }
