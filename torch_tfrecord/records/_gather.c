/*
 * Batch reads, the records layer of torch_tfrecord.support._native: file regions into one buffer
 * (read_into, copy_ranges, gather), without the GIL. Python callers: records/gather.py (used by
 * records/shards/files.py) and records/compressed/shard.py (copy_ranges).
 *
 * POSIX only (pread, sigaction, sigsetjmp): Linux and macOS; Windows is not supported.
 */
#include "_gather.h"

#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>


/* read_into(fd, offsets, sizes, out, out_start): reads each (offset, size) region of the file
 * into `out` back to back from out_start, with one pread per run of regions that follow each
 * other in the file, without the GIL. Returns the number of regions read in full. */
static PyObject *py_read_into(PyObject *self, PyObject *args) {
    (void)self;
    int fd;
    PyObject *offsets_obj, *sizes_obj, *out_obj;
    Py_ssize_t out_start;
    if (!PyArg_ParseTuple(args, "iOOOn:read_into", &fd, &offsets_obj, &sizes_obj, &out_obj, &out_start)) return NULL;
    Py_buffer offsets, sizes, out;
    if (!get_int64_array(offsets_obj, &offsets, "offsets")) return NULL;
    if (!get_int64_array(sizes_obj, &sizes, "sizes")) {
        PyBuffer_Release(&offsets);
        return NULL;
    }
    if (PyObject_GetBuffer(out_obj, &out, PyBUF_WRITABLE) < 0) {
        PyBuffer_Release(&offsets);
        PyBuffer_Release(&sizes);
        return NULL;
    }
    PyObject *result = NULL;
    const int64_t *off = (const int64_t *)offsets.buf, *sz = (const int64_t *)sizes.buf;
    Py_ssize_t n = offsets.len / 8;
    if (sizes.len != offsets.len || out_start < 0) {
        PyErr_SetString(PyExc_ValueError, "offsets and sizes differ in length, or out_start < 0");
        goto done;
    }
    int64_t total = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (off[i] < 0 || sz[i] < 0 || sz[i] > INT64_MAX - total) {
            PyErr_SetString(PyExc_ValueError, "negative offset or size");
            goto done;
        }
        total += sz[i];
    }
    if (total > out.len - out_start) {
        PyErr_SetString(PyExc_ValueError, "out is too small for the regions");
        goto done;
    }
    Py_ssize_t complete = 0;
    int saved_errno = 0;
    Py_BEGIN_ALLOW_THREADS
    char *dst = (char *)out.buf + out_start;
    Py_ssize_t i = 0;
    while (i < n) {
        Py_ssize_t j = i + 1;
        int64_t run = sz[i];
        while (j < n && off[j] == off[j - 1] + sz[j - 1]) run += sz[j++];
        int64_t got = 0;
        while (got < run) {
            ssize_t r = pread(fd, dst + got, (size_t)(run - got), (off_t)(off[i] + got));
            if (r < 0) {
                if (errno == EINTR) continue;
                saved_errno = errno;
                break;
            }
            if (r == 0) break;
            got += r;
        }
        if (got < run) { /* count the regions that did arrive whole */
            for (int64_t have = 0; i < j && have + sz[i] <= got; i++) have += sz[i];
            break;
        }
        dst += run;
        i = j;
    }
    complete = i;
    Py_END_ALLOW_THREADS
    if (saved_errno) {
        errno = saved_errno;
        PyErr_SetFromErrno(PyExc_OSError);
        goto done;
    }
    result = PyLong_FromSsize_t(complete);
done:
    PyBuffer_Release(&offsets);
    PyBuffer_Release(&sizes);
    PyBuffer_Release(&out);
    return result;
}

/* copy_ranges(source, starts, sizes, out, targets): copies source[starts[i] : starts[i] + sizes[i]]
 * to out[targets[i] : targets[i] + sizes[i]] for each i, without the GIL (a compressed shard's
 * records out of an inflated segment). Every range must lie inside source and out. */
static PyObject *py_copy_ranges(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *source_obj, *starts_obj, *sizes_obj, *out_obj, *targets_obj;
    if (!PyArg_ParseTuple(args, "OOOOO:copy_ranges", &source_obj, &starts_obj, &sizes_obj, &out_obj, &targets_obj))
        return NULL;
    Py_buffer source = {0}, starts = {0}, sizes = {0}, targets = {0}, out = {0};
    PyObject *result = NULL;
    if (PyObject_GetBuffer(source_obj, &source, PyBUF_SIMPLE) < 0 || !get_int64_array(starts_obj, &starts, "starts") ||
        !get_int64_array(sizes_obj, &sizes, "sizes") || !get_int64_array(targets_obj, &targets, "targets") ||
        PyObject_GetBuffer(out_obj, &out, PyBUF_WRITABLE) < 0)
        goto done;
    const int64_t *st = (const int64_t *)starts.buf, *sz = (const int64_t *)sizes.buf;
    const int64_t *tg = (const int64_t *)targets.buf;
    Py_ssize_t n = starts.len / 8;
    if (sizes.len != starts.len || targets.len != starts.len) {
        PyErr_SetString(PyExc_ValueError, "starts, sizes and targets differ in length");
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (st[i] < 0 || sz[i] < 0 || tg[i] < 0 || st[i] > (int64_t)source.len - sz[i] ||
            tg[i] > (int64_t)out.len - sz[i]) {
            PyErr_Format(PyExc_ValueError, "range %zd lies outside the source or the output", i);
            goto done;
        }
    }
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) memcpy((char *)out.buf + tg[i], (const char *)source.buf + st[i], (size_t)sz[i]);
    Py_END_ALLOW_THREADS
    Py_INCREF(Py_None);
    result = Py_None;
done:
    release_views((Py_buffer *[]){&source, &starts, &sizes, &targets, &out}, 5);
    return result;
}

/* gather(ids, shard_starts, tables, fds, file_sizes, maps, out, starts_out, sizes_out, gap) -> (status, value):
 * the dataset's batch read in one call. Record ids count through the shards (shard s holds ids
 * shard_starts[s] .. shard_starts[s + 1] - 1, its (offset, framed_size) index table is tables[s],
 * its descriptor fds[s], -1 when not open here, and maps[s] a read-only mapping of the file
 * (an object with the buffer protocol) or None). Locates every record, reads them in id order
 * (which is file order) into `out` back to back, without the GIL, and writes record i's place
 * in `out` and framed size to starts_out[i] and sizes_out[i]. Status (_gather.h): GATHER_DONE
 * (value: the bytes used), GATHER_OPEN (shard `value` must be opened first), GATHER_GROW
 * (`out` must hold `value` bytes), GATHER_FAILED (a record lies past its file's size, or its
 * mapping's, or a read fails or comes short: the caller's per-record path says which and why),
 * GATHER_BAD_ID (an id out of range).
 * A run of records is read with one pread (records at most `gap` bytes apart, the bytes between
 * included: a syscall costs about as much as copying several kilobytes). When the batch makes
 * more than MAPPED_MIN_RUNS such runs, or its runs hold any bytes between records (a shuffled
 * batch, a selection's), each record of a mapped file is copied from the mapping instead, its
 * runs shorter than MAPPED_RUN at least: a copy costs far less than a syscall per record, or
 * than reading the bytes between records (a random half of ~80-byte records in file order:
 * 3.43 -> 3.58 M records/s, a random three quarters 3.51 -> 3.71). A file cut shorter while
 * mapped raises SIGBUS on the copy: a handler turns it into GATHER_FAILED (see bus_guard). */
typedef struct {
    int64_t offset, size, shard, place;
    const char *map; /* the file's mapping, or NULL */
} Region;

#define MAPPED_RUN (64 * 1024)
#define MAPPED_MIN_RUNS 8

/* SIGBUS while copying from a mapping (the file was truncated, or an I/O error behind the
 * page): the copying thread jumps back to gather, which answers GATHER_FAILED. The handler is
 * installed (with the GIL held) when gather is about to copy from a mapping, and again whenever
 * another took its place (faulthandler.enable, signal.signal). Any other fault goes to the
 * handler installed before: restored, it meets the fault again as the faulting access repeats.
 * A SIGBUS sent by kill or raise gets the default action (the handler before may be one that
 * passes it back here: faulthandler enabled after this one). The jump slot is per thread, in
 * static TLS (initial-exec: reading it in the handler allocates nothing), and volatile (only
 * the handler reads it). */
static _Thread_local sigjmp_buf *volatile bus_jump __attribute__((tls_model("initial-exec"))) = NULL;
static struct sigaction bus_previous;

static void on_bus(int sig, siginfo_t *info, void *context) {
    (void)context;
    if (info->si_code > 0) { /* a fault */
        sigjmp_buf *jump = bus_jump;
        if (jump) {
            bus_jump = NULL;
            siglongjmp(*jump, 1);
        }
        sigaction(SIGBUS, &bus_previous, NULL);
        return;
    }
    struct sigaction fallback;
    memset(&fallback, 0, sizeof(fallback));
    fallback.sa_handler = SIG_DFL;
    sigemptyset(&fallback.sa_mask);
    sigaction(SIGBUS, &fallback, NULL);
    raise(sig);
}

/* Whether on_bus is SIGBUS's handler now (asked without the GIL: it changes nothing). */
static int bus_guarded(void) {
    struct sigaction current;
    return sigaction(SIGBUS, NULL, &current) == 0 && (current.sa_flags & SA_SIGINFO) &&
           current.sa_sigaction == on_bus;
}

static int bus_guard(void) {
    if (bus_guarded()) return 1;
    struct sigaction mine;
    memset(&mine, 0, sizeof(mine));
    mine.sa_sigaction = on_bus;
    mine.sa_flags = SA_SIGINFO | SA_NODEFER | SA_ONSTACK;
    sigemptyset(&mine.sa_mask);
    return sigaction(SIGBUS, &mine, &bus_previous) == 0;
}

/* A record id and its place in the batch, sorted by id then place (ids repeat in padding). */
typedef struct {
    int64_t id, place;
} IdPlace;

static inline int id_place_less(IdPlace a, IdPlace b) {
    return a.id < b.id || (a.id == b.id && a.place < b.place);
}

/* Quicksort (median of three, the smaller side recursed) ending in insertion sort. */
static void sort_id_places(IdPlace *a, Py_ssize_t n) {
    while (n > 16) {
        Py_ssize_t mid = n / 2, last = n - 1;
        if (id_place_less(a[mid], a[0])) { IdPlace t = a[mid]; a[mid] = a[0]; a[0] = t; }
        if (id_place_less(a[last], a[0])) { IdPlace t = a[last]; a[last] = a[0]; a[0] = t; }
        if (id_place_less(a[last], a[mid])) { IdPlace t = a[last]; a[last] = a[mid]; a[mid] = t; }
        IdPlace pivot = a[mid];
        Py_ssize_t i = 0, j = last;
        for (;;) {
            while (id_place_less(a[i], pivot)) i++;
            while (id_place_less(pivot, a[j])) j--;
            if (i >= j) break;
            IdPlace t = a[i]; a[i] = a[j]; a[j] = t;
            i++;
            j--;
        }
        /* a[0..j] <= pivot <= a[j+1..n-1] */
        if (j + 1 < n - j - 1) {
            sort_id_places(a, j + 1);
            a += j + 1;
            n -= j + 1;
        } else {
            sort_id_places(a + j + 1, n - j - 1);
            n = j + 1;
        }
    }
    for (Py_ssize_t i = 1; i < n; i++) {
        IdPlace x = a[i];
        Py_ssize_t j = i;
        for (; j > 0 && id_place_less(x, a[j - 1]); j--) a[j] = a[j - 1];
        a[j] = x;
    }
}

/* Region b follows region a in the same file, at most `gap` bytes after a's end. */
static inline int near(const Region *a, const Region *b, int64_t gap) {
    int64_t end = a->offset + a->size;
    return a->shard == b->shard && b->offset >= end && b->offset - end <= gap;
}

/* Regions a and b are read as one run: near for a pread, right after it for a copy from the
 * mapping (which takes only the records). */
static inline int joins(const Region *a, const Region *b, int64_t gap) {
    return near(a, b, a->map ? 0 : gap);
}

/* Copies the located regions into `base` back to back, one pread or one copy from the mapping
 * per run; writes each record's place and size. Returns 1 when a read fails or comes short. */
static __attribute__((noinline)) int copy_regions(const Region *regions, Py_ssize_t n, const int64_t *fd,
                                                  char *base, int64_t *place, int64_t *size, int64_t gap,
                                                  const int64_t *dest) {
    if (dest) { /* every record from a mapping, each to its place in batch order */
        for (Py_ssize_t k = 0; k < n; k++) {
            int64_t at = dest[regions[k].place];
            memcpy(base + at, regions[k].map + regions[k].offset, (size_t)regions[k].size);
            place[regions[k].place] = at;
            size[regions[k].place] = regions[k].size;
        }
        return 0;
    }
    int64_t position = 0;
    Py_ssize_t i = 0;
    while (i < n) {
        Py_ssize_t j = i + 1;
        while (j < n && joins(&regions[j - 1], &regions[j], gap)) j++;
        int64_t run = regions[j - 1].offset + regions[j - 1].size - regions[i].offset;
        if (regions[i].map && run < MAPPED_RUN) {
            memcpy(base + position, regions[i].map + regions[i].offset, (size_t)run);
        } else {
            int64_t got = 0;
            while (got < run) {
                ssize_t r = pread((int)fd[regions[i].shard], base + position + got, (size_t)(run - got),
                                  (off_t)(regions[i].offset + got));
                if (r < 0 && errno == EINTR) continue;
                if (r <= 0) break;
                got += r;
            }
            if (got < run) return 1;
        }
        for (int64_t first = regions[i].offset; i < j; i++) {
            place[regions[i].place] = position + regions[i].offset - first;
            size[regions[i].place] = regions[i].size;
        }
        position += run;
    }
    return 0;
}

/* copy_regions, with a SIGBUS on a mapped page (the file shrank, or its storage failed) turned
 * into a failed read. Runs without the GIL. */
static int copy_guarded(const Region *regions, Py_ssize_t n, const int64_t *fd, char *base, int64_t *place,
                        int64_t *size, int64_t gap, const int64_t *dest) {
    sigjmp_buf jump;
    if (sigsetjmp(jump, 0)) return 1;
    bus_jump = &jump;
    int failed = copy_regions(regions, n, fd, base, place, size, gap, dest);
    bus_jump = NULL;
    return failed;
}

/* What gather reads of one shard of the batch: taken from the Python objects with the GIL, used
 * without it. The shard's descriptor is copied too, beside the views (into the array that
 * copy_regions reads): another thread may mark the pool's entry closed, -1, during the read. */
typedef struct {
    const int64_t *table; /* (offset, framed size) of each of the shard's records */
    const char *map;      /* the file's mapping, or NULL */
    int64_t limit;        /* no record may end past this: the file's size, its mapping's, its size now */
} ShardView;

/* The batch's records in id order (file order), each region's shard and its record's place in
 * the shard (in `offset`, until locate_regions), and the shards read, each once, in that order.
 * Without the GIL. 0: an id is out of range. */
static int order_regions(const int64_t *id, Py_ssize_t n, const int64_t *bound, Py_ssize_t nshards, IdPlace *keys,
                         Region *regions, Py_ssize_t *used, Py_ssize_t *nused) {
    int sorted = 1;
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t record = id[i]; /* read once: the array is the caller's, and the GIL is let go */
        if (record < 0 || record >= bound[nshards]) return 0;
        if (i && record < keys[i - 1].id) sorted = 0;
        keys[i] = (IdPlace){record, i};
    }
    /* (id, place) pairs sorted in place of qsort over the 40-byte regions through a comparison
     * callback, which took ~14 us of a shuffled batch of 256 */
    if (!sorted) sort_id_places(keys, n);
    Py_ssize_t shard = -1, m = 0;
    for (Py_ssize_t k = 0; k < n; k++) {
        int64_t record = keys[k].id;
        if (shard < 0 || record >= bound[shard + 1]) {
            Py_ssize_t lo = shard < 0 ? 0 : shard, hi = nshards - 1; /* last shard starting <= record */
            while (lo < hi) {
                Py_ssize_t mid = lo + (hi - lo + 1) / 2;
                if (bound[mid] <= record) lo = mid;
                else hi = mid - 1;
            }
            shard = lo;
            used[m++] = shard;
        }
        regions[k] = (Region){record - bound[shard], 0, shard, keys[k].place, NULL};
    }
    *nused = m;
    return 1;
}

/* Each region's file offset, framed size and mapping, from its shard's view (order_regions'
 * order), its shard renumbered as the view's place (the descriptors copy_regions then reads are
 * the views'); the bytes of the preads' layout (gaps of at most `gap` read through), the records'
 * own bytes, and the number of runs. Without the GIL. 0: a record lies past its file's limit. */
static int locate_regions(Region *regions, Py_ssize_t n, const ShardView *views, int64_t gap, int64_t *total,
                          int64_t *needed, Py_ssize_t *runs) {
    Py_ssize_t j = -1; /* the view of regions[k]'s shard */
    int64_t shard = -1;
    *total = *needed = 0;
    *runs = 0;
    for (Py_ssize_t k = 0; k < n; k++) {
        if (regions[k].shard != shard) {
            shard = regions[k].shard;
            j++;
        }
        const ShardView *view = &views[j];
        const int64_t *entry = view->table + 2 * regions[k].offset;
        if (entry[0] < 0 || entry[1] < 0 || entry[1] > view->limit || entry[0] > view->limit - entry[1]) return 0;
        regions[k].offset = entry[0];
        regions[k].size = entry[1];
        regions[k].shard = j;
        regions[k].map = view->map;
        *total += entry[1];
        *needed += entry[1];
        if (k && near(&regions[k - 1], &regions[k], gap)) *total += entry[0] - regions[k - 1].offset - regions[k - 1].size;
        else ++*runs;
    }
    return 1;
}

/* Each record's place in `out` when every record is copied from a mapping, in batch order (the
 * decoder then walks the buffer front to back, ~1/4 faster on a shuffled batch than in file
 * order's layout); returns the bytes used. */
static int64_t batch_order(const Region *regions, Py_ssize_t n, int64_t *dest) {
    for (Py_ssize_t k = 0; k < n; k++) dest[regions[k].place] = regions[k].size;
    int64_t at = 0;
    for (Py_ssize_t p = 0; p < n; p++) {
        int64_t record = dest[p];
        dest[p] = at;
        at += record;
    }
    return at;
}

/* The batch read in two stretches without the GIL (ordering the ids; locating and copying the
 * records) around a short one with it (the shards' tables and mappings): loading threads read
 * their batches at the same time, and a batch of small records is mostly ordering. */
static PyObject *py_gather(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *ids_obj, *starts_obj, *tables, *fds_obj, *sizes_obj, *maps, *out_obj, *starts_out_obj, *sizes_out_obj;
    long long gap;
    if (!PyArg_ParseTuple(args, "OOOOOOOOOL:gather", &ids_obj, &starts_obj, &tables, &fds_obj, &sizes_obj, &maps,
                          &out_obj, &starts_out_obj, &sizes_out_obj, &gap))
        return NULL;
    Py_buffer ids = {0}, bounds = {0}, fds = {0}, file_sizes = {0}, out = {0}, starts_out = {0}, sizes_out = {0};
    Py_buffer *held = NULL; /* the tables, then the mappings, of the shards this batch reads */
    Py_ssize_t nheld = 0;
    Region *regions = NULL;
    IdPlace *keys = NULL;
    Py_ssize_t *used = NULL; /* the shards read, in order */
    ShardView *views = NULL;
    int64_t *used_fds = NULL; /* their descriptors, as they were when the views were taken */
    int64_t *dest = NULL; /* each record's place in `out` when all are copied from mappings */
    PyObject *result = NULL;
    GatherStatus status = GATHER_DONE;
    int64_t value = 0;
    if (!get_int64_array(ids_obj, &ids, "ids") || !get_int64_array(starts_obj, &bounds, "shard_starts") ||
        !get_int64_array(fds_obj, &fds, "fds") || !get_int64_array(sizes_obj, &file_sizes, "file_sizes") ||
        !get_int64_array(starts_out_obj, &starts_out, "starts_out") ||
        !get_int64_array(sizes_out_obj, &sizes_out, "sizes_out"))
        goto done;
    if (PyObject_GetBuffer(out_obj, &out, PyBUF_WRITABLE) < 0) goto done;
    if (!PyList_Check(tables) || !PyList_Check(maps)) {
        PyErr_SetString(PyExc_TypeError, "tables and maps must be lists");
        goto done;
    }
    Py_ssize_t n = ids.len / 8, nshards = bounds.len / 8 - 1;
    if (nshards < 0 || PyList_GET_SIZE(tables) != nshards || PyList_GET_SIZE(maps) != nshards ||
        fds.len / 8 != nshards || file_sizes.len / 8 != nshards || starts_out.len / 8 < n || sizes_out.len / 8 < n) {
        PyErr_SetString(PyExc_ValueError, "gather: the shard arrays or the outputs do not fit");
        goto done;
    }
    const int64_t *id = ids.buf, *bound = bounds.buf, *fd = fds.buf, *file_size = file_sizes.buf;
    size_t count = n ? (size_t)n : 1;
    regions = malloc(count * sizeof(Region));
    keys = malloc(count * sizeof(IdPlace));
    used = malloc(count * sizeof(Py_ssize_t));
    views = malloc(count * sizeof(ShardView));
    used_fds = malloc(count * sizeof(int64_t));
    held = calloc(2 * count, sizeof(Py_buffer));
    dest = malloc(count * sizeof(int64_t));
    if (!regions || !keys || !used || !views || !used_fds || !held || !dest) {
        PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t nused = 0;
    int ordered;
    Py_BEGIN_ALLOW_THREADS
    ordered = order_regions(id, n, bound, nshards, keys, regions, used, &nused);
    Py_END_ALLOW_THREADS
    if (!ordered) {
        status = GATHER_BAD_ID;
        goto answer;
    }
    int any_mapped = 0;
    for (Py_ssize_t j = 0; j < nused; j++) {
        Py_ssize_t shard = used[j];
        if (fd[shard] < 0) {
            status = GATHER_OPEN;
            value = shard;
            goto answer;
        }
        Py_buffer *table = &held[nheld];
        if (!get_int64_array(PyList_GET_ITEM(tables, shard), table, "tables[i]")) goto done;
        nheld++;
        if (table->len / 16 != bound[shard + 1] - bound[shard]) {
            PyErr_SetString(PyExc_ValueError, "gather: an index table does not match its shard's count");
            goto done;
        }
        views[j] = (ShardView){table->buf, NULL, file_size[shard]};
        used_fds[j] = fd[shard];
        PyObject *mapping = PyList_GET_ITEM(maps, shard);
        if (mapping != Py_None) {
            Py_buffer *map = &held[nheld];
            if (PyObject_GetBuffer(mapping, map, PyBUF_SIMPLE) < 0) goto done;
            nheld++;
            views[j].map = map->buf;
            if (map->len < views[j].limit) views[j].limit = map->len;
            any_mapped = 1;
            /* A file cut shorter: its last page still maps, zeros past the end (no SIGBUS
             * there), so the records past its size now are refused, as a pread would. */
            struct stat now;
            if (fstat((int)fd[shard], &now) == 0 && now.st_size < views[j].limit) views[j].limit = now.st_size;
        }
    }
    int64_t total = 0, needed = 0; /* total: the bytes of the preads' layout, more than copies take */
    Py_ssize_t runs = 0;
    int failed = 0, grow = 0;
    Py_BEGIN_ALLOW_THREADS
    if (!locate_regions(regions, n, views, gap, &total, &needed, &runs)) failed = 1;
    else if (total > out.len) grow = 1;
    else {
        /* A few runs of nothing but records (file order): a pread each, as cheap, and no page
         * of the files mapped here. Many runs, or runs through bytes between the records (a
         * shuffled batch, a selection's): copies from the mappings, which take only the records
         * (reading through gaps of a tenth of the bytes was already slower). Without a SIGBUS
         * handler: preads. */
        int mapped = any_mapped && !(runs <= MAPPED_MIN_RUNS && total == needed);
        if (mapped && !bus_guarded()) { /* installed with the GIL (see bus_guard) */
            Py_BLOCK_THREADS
            mapped = bus_guard();
            Py_UNBLOCK_THREADS
        }
        if (any_mapped && !mapped) {
            for (Py_ssize_t k = 0; k < n; k++) regions[k].map = NULL;
            any_mapped = 0;
        }
        int all_mapped = any_mapped;
        for (Py_ssize_t k = 0; k < n && all_mapped; k++) all_mapped = regions[k].map != NULL;
        if (all_mapped) total = batch_order(regions, n, dest); /* needed <= total, which out holds */
        failed = copy_guarded(regions, n, used_fds, (char *)out.buf, starts_out.buf, sizes_out.buf, gap,
                              all_mapped ? dest : NULL);
    }
    Py_END_ALLOW_THREADS
    status = failed ? GATHER_FAILED : grow ? GATHER_GROW : GATHER_DONE;
    value = failed ? 0 : total;
answer:
    result = Py_BuildValue("(iL)", status, (long long)value);
done:
    free(regions);
    free(keys);
    free(used);
    free(views);
    free(used_fds);
    free(dest);
    for (Py_ssize_t h = 0; h < nheld; h++) PyBuffer_Release(&held[h]);
    free(held);
    release_views((Py_buffer *[]){&ids, &bounds, &fds, &file_sizes, &out, &starts_out, &sizes_out}, 7);
    return result;
}

static PyMethodDef gather_methods[] = {
    {"read_into", py_read_into, METH_VARARGS, "read_into(fd, offsets, sizes, out, out_start) -> regions read"},
    {"copy_ranges", py_copy_ranges, METH_VARARGS, "copy_ranges(source, starts, sizes, out, targets)"},
    {"gather", py_gather, METH_VARARGS,
     "gather(ids, shard_starts, tables, fds, file_sizes, maps, out, starts_out, sizes_out, gap) -> (status, value)"},
    {NULL, NULL, 0, NULL},
};

static const NativeConstant gather_constants[] = {
    {"GATHER_DONE", GATHER_DONE},
    {"GATHER_OPEN", GATHER_OPEN},
    {"GATHER_GROW", GATHER_GROW},
    {"GATHER_FAILED", GATHER_FAILED},
    {"GATHER_BAD_ID", GATHER_BAD_ID},
    {NULL, 0},
};

int gather_init(PyObject *module) {
    if (PyModule_AddFunctions(module, gather_methods) < 0) return -1;
    return add_constants(module, gather_constants);
}
