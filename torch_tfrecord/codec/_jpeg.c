/* Region-of-interest JPEG decoding through libjpeg-turbo's libjpeg API, a batch per call.
 *
 * For each JPEG: read the header, pick the smallest DCT scale (n/8) that keeps at least the
 * asked pixels, decode only the iMCU columns (jpeg_crop_scanline) and rows (jpeg_skip_scanlines)
 * around the region, with one pixel of margin so chroma upsampling sees the same neighbours as
 * in a full decode, then stop after the region's last row, as TensorFlow's decode_and_crop_jpeg
 * and DALI do (or, asked to verify the whole file, entropy-decode the rest: skip + finish, so
 * corrupt data below the region is an error as in a full decode). The batch is decoded on
 * threads with the GIL released; libjpeg errors and warnings longjmp back into a message for
 * that image (never exit()). Given the batch's output, each thread then resizes the region it
 * decoded straight into the image's planes there (_resize.c: torch's antialiased bilinear, byte
 * for byte), so the call returns the finished batch.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>

#include "_resize.h"

#ifdef TORCH_TFRECORD_STATIC_JPEG
/* libjpeg.a as packaging/build_wheels.sh prepares Debian's (compiled for executables): its
 * jerror.c reaches libc's stderr through this pointer, set when the module loads. */
__attribute__((visibility("hidden"))) FILE *tt_err;
#endif

typedef struct {
    struct jpeg_error_mgr pub;
    jmp_buf jump;
    char message[JMSG_LENGTH_MAX];
} ErrorManager;

static void on_error(j_common_ptr cinfo) {
    ErrorManager *err = (ErrorManager *)cinfo->err;
    (*cinfo->err->format_message)(cinfo, err->message);
    longjmp(err->jump, 1);
}

/* Warnings (corrupt data that libjpeg would paper over) are errors, as simplejpeg's strict mode. */
static void on_message(j_common_ptr cinfo, int level) {
    if (level < 0) on_error(cinfo);
}

enum { DONE = 0, FAILED = 1, UNSUPPORTED = 2 };

typedef struct {
    Py_buffer data;
    long top, left, height, width, need_h, need_w; /* the box in full pixels; the pixels wanted over the image */
    long slot; /* the image's place in the batch's output, when there is one */
    int status;
    char message[JMSG_LENGTH_MAX];
    unsigned char *pixels; /* the region, rows of out_w * channels */
    unsigned char *row;    /* one decoded (cropped) scanline */
    long out_h, out_w;
    int channels;
} Job;

typedef struct {
    Job *jobs;
    Py_ssize_t count, next;
    int grey, fast_dct, tf_crop, verify_full;
    uint8_t *out; /* NULL, or the batch: images of channels planes of out_h x out_w */
    long out_h, out_w, out_channels;
    pthread_mutex_t lock;
} Batch;

static long scaled(long size, int num) { return (size * num + 7) / 8; }

/* Python's round() (half to even), as torch_tfrecord.codec.image_batch.resize rounds edges. */
static long nearest(double value) { return (long)nearbyint(value); }

static void decode_one(Job *job, const Batch *batch) {
    struct jpeg_decompress_struct cinfo;
    ErrorManager err;
    cinfo.err = jpeg_std_error(&err.pub);
    err.pub.error_exit = on_error;
    err.pub.emit_message = on_message;
    if (setjmp(err.jump)) {
        job->status = FAILED;
        memcpy(job->message, err.message, sizeof(job->message));
        free(job->pixels);
        job->pixels = NULL;
        free(job->row);
        job->row = NULL;
        jpeg_destroy_decompress(&cinfo);
        return;
    }
    jpeg_create_decompress(&cinfo);
    jpeg_mem_src(&cinfo, (const unsigned char *)job->data.buf, (unsigned long)job->data.len);
    jpeg_read_header(&cinfo, TRUE);
    if (cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK) {
        job->status = UNSUPPORTED; /* the Python path converts CMYK as TensorFlow does */
        jpeg_destroy_decompress(&cinfo);
        return;
    }
    long height = cinfo.image_height, width = cinfo.image_width;
    int num = 8;
    for (int n = 1; n <= 8; n++) {
        if (scaled(height, n) >= job->need_h && scaled(width, n) >= job->need_w) {
            num = n;
            break;
        }
    }
    /* Where a larger scale gives the same size (sides under 8 pixels), the larger one: the scale
     * TurboJPEG's API (simplejpeg, PyTurboJPEG) takes for that size, so the same pixels. */
    while (num < 8 && scaled(height, num + 1) == scaled(height, num) && scaled(width, num + 1) == scaled(width, num))
        num++;
    cinfo.scale_num = (unsigned int)num;
    cinfo.scale_denom = 8;
    cinfo.dct_method = batch->fast_dct ? JDCT_IFAST : JDCT_ISLOW;
    cinfo.do_fancy_upsampling = TRUE;
    cinfo.out_color_space = batch->grey ? JCS_GRAYSCALE : JCS_RGB;
    jpeg_start_decompress(&cinfo);
    long full_h = cinfo.output_height, full_w = cinfo.output_width;
    int channels = cinfo.output_components;
    long y0, y1, x0, x1; /* the region: rows of the scaled image, columns of the scaled image */
    JDIMENSION crop_x, crop_w;
    if (batch->tf_crop) {
        /* TensorFlow's decode_and_crop_jpeg (tf_jpeg.decode_jpeg_crop_fast): decoded from the box's
         * iMCU column to its right edge, both upsampled as image edges; the box cut from that as
         * image_batch.resize cuts it. */
        long mcu_w = cinfo.num_components == 1 ? 8 : 8 * cinfo.max_h_samp_factor;
        long mcu_h = cinfo.num_components == 1 ? 8 : 8 * cinfo.max_v_samp_factor;
        long cut_x = job->left / mcu_w * mcu_w, cut_y = (job->top / mcu_h - 1) * mcu_h;
        long cut_end = ((job->top + job->height + mcu_h - 1) / mcu_h + 1) * mcu_h;
        cut_y = cut_y > 0 ? cut_y : 0;
        cut_end = cut_end < height ? cut_end : height;
        long cut_h = scaled(cut_end - cut_y, num), cut_w = scaled(job->left + job->width - cut_x, num);
        double scale = num / 8.0;
        double top = (double)(job->top - cut_y) * scale, left = (double)(job->left - cut_x) * scale;
        double h = job->height * scale, w = job->width * scale;
        long ry0 = nearest(top) > 0 ? nearest(top) : 0, rx0 = nearest(left) > 0 ? nearest(left) : 0;
        long ry1 = nearest(top + h) > ry0 + 1 ? nearest(top + h) : ry0 + 1;
        long rx1 = nearest(left + w) > rx0 + 1 ? nearest(left + w) : rx0 + 1;
        ry1 = ry1 < cut_h ? ry1 : cut_h;
        rx1 = rx1 < cut_w ? rx1 : cut_w;
        ry0 = ry0 < ry1 ? ry0 : ry1 - 1;
        rx0 = rx0 < rx1 ? rx0 : rx1 - 1;
        long sx = cut_x * num / 8, sy = cut_y * num / 8;
        y0 = sy + ry0, y1 = sy + ry1, x0 = sx + rx0, x1 = sx + rx1;
        crop_x = (JDIMENSION)sx;
        crop_w = (JDIMENSION)(sx + cut_w < full_w ? cut_w : full_w - sx);
    } else {
        /* The region exactly as image_batch.resize cuts it from a whole decode at this scale. */
        double fy = (double)full_h / (double)height, fx = (double)full_w / (double)width;
        double top = job->top * fy, left = job->left * fx, h = job->height * fy, w = job->width * fx;
        y0 = nearest(top) > 0 ? nearest(top) : 0, x0 = nearest(left) > 0 ? nearest(left) : 0;
        y1 = nearest(top + h) > y0 + 1 ? nearest(top + h) : y0 + 1;
        x1 = nearest(left + w) > x0 + 1 ? nearest(left + w) : x0 + 1;
        y1 = y1 < full_h ? y1 : full_h;
        x1 = x1 < full_w ? x1 : full_w;
        /* A sliver at the far edge that rounds away entirely keeps its last pixel (resize() would fail). */
        y0 = y0 < y1 ? y0 : y1 - 1;
        x0 = x0 < x1 ? x0 : x1 - 1;
        /* One column of margin each side: the crop's own edges upsample chroma as the image's do. */
        crop_x = (JDIMENSION)(x0 > 0 ? x0 - 1 : 0);
        crop_w = (JDIMENSION)(x1 < full_w ? x1 + 1 : full_w) - crop_x;
    }
    if (crop_x > 0 || crop_w < (JDIMENSION)full_w) jpeg_crop_scanline(&cinfo, &crop_x, &crop_w);
    long region_w = x1 - x0, skip_x = x0 - (long)crop_x;
    job->out_h = y1 - y0;
    job->out_w = region_w;
    job->channels = channels;
    job->pixels = malloc((size_t)(job->out_h * region_w * channels));
    /* Rows are read a group at a time (libjpeg's own rows per call), straight into the region
     * when it is the whole width decoded, else into a scratch group and cut. */
    int direct = skip_x == 0 && (long)crop_w == region_w;
    long group = 16; /* jpeg_read_scanlines gives what it has, up to this */
    size_t row_bytes = (size_t)crop_w * (size_t)channels;
    if (!direct) job->row = malloc(row_bytes * (size_t)group);
    if (job->pixels == NULL || (!direct && job->row == NULL)) {
        snprintf(err.message, sizeof(err.message), "out of memory for a %ldx%ld region", job->out_h, region_w);
        longjmp(err.jump, 1);
    }
    if (y0 > 0) jpeg_skip_scanlines(&cinfo, (JDIMENSION)y0);
    JSAMPROW rows[16];
    for (long y = y0; y < y1;) {
        long want = y1 - y < group ? y1 - y : group;
        for (long r = 0; r < want; r++)
            rows[r] = direct ? job->pixels + (size_t)(y - y0 + r) * row_bytes : job->row + (size_t)r * row_bytes;
        long got = (long)jpeg_read_scanlines(&cinfo, rows, (JDIMENSION)want);
        if (got <= 0) {
            snprintf(err.message, sizeof(err.message), "no scanline %ld", y);
            longjmp(err.jump, 1);
        }
        for (long r = 0; !direct && r < got; r++)
            memcpy(job->pixels + (size_t)(y - y0 + r) * (size_t)(region_w * channels), rows[r] + skip_x * channels,
                   (size_t)(region_w * channels));
        y += got;
    }
    if (!batch->verify_full && cinfo.output_scanline < cinfo.output_height) {
        /* Stopped after the region's last row, as decode_and_crop_jpeg stops (its skip to the end
         * reads nothing): the rows below are not entropy-decoded, so damage there goes unseen. A
         * progressive JPEG's scans were all read by jpeg_start_decompress: there nothing is saved. */
        jpeg_abort_decompress(&cinfo);
    } else {
        /* The rest is entropy-decoded (skipped rows) up to the last row, which is decoded: a skip
         * to the very end would read nothing, and damage below the region must fail as in a full
         * decode. A region that reaches the last row is read to the end marker either way. */
        if (cinfo.output_scanline + 1 < cinfo.output_height)
            jpeg_skip_scanlines(&cinfo, cinfo.output_height - 1 - cinfo.output_scanline);
        if (cinfo.output_scanline < cinfo.output_height) {
            if (job->row == NULL) job->row = malloc(row_bytes);
            JSAMPROW last = job->row;
            if (last == NULL || jpeg_read_scanlines(&cinfo, &last, 1) != 1) {
                snprintf(err.message, sizeof(err.message), "no last scanline");
                longjmp(err.jump, 1);
            }
        }
        jpeg_finish_decompress(&cinfo);
    }
    free(job->row);
    job->row = NULL;
    jpeg_destroy_decompress(&cinfo);
    job->status = DONE;
}

/* A decoded region resized into its place in the batch's output (then its pixels are freed). */
static void resize_into(Job *job, const Batch *batch, ResizeScratch *scratch) {
    long image_bytes = batch->out_channels * batch->out_h * batch->out_w;
    uint8_t *target = batch->out + job->slot * image_bytes;
    if (resize_to_planes(job->pixels, job->out_h, job->out_w, job->channels, target, batch->out_h, batch->out_w,
                         scratch) < 0) {
        job->status = FAILED;
        snprintf(job->message, sizeof(job->message), "out of memory resizing a %ldx%ld region", job->out_h,
                 job->out_w);
    }
    free(job->pixels);
    job->pixels = NULL;
}

static void *work(void *arg) {
    Batch *batch = (Batch *)arg;
    ResizeScratch scratch = {0};
    for (;;) {
        pthread_mutex_lock(&batch->lock);
        Py_ssize_t i = batch->next++;
        pthread_mutex_unlock(&batch->lock);
        if (i >= batch->count) break;
        Job *job = &batch->jobs[i];
        decode_one(job, batch);
        if (batch->out != NULL && job->status == DONE) resize_into(job, batch, &scratch);
    }
    resize_scratch_free(&scratch);
    return NULL;
}

static void run_batch(Batch *batch, int threads) {
    pthread_t ids[64];
    int started = 0;
    if (threads > 64) threads = 64;
    if (threads > batch->count) threads = (int)batch->count;
    for (int t = 1; t < threads; t++) {
        if (pthread_create(&ids[started], NULL, work, batch) == 0) started++;
    }
    work(batch); /* this thread works too */
    for (int t = 0; t < started; t++) pthread_join(ids[t], NULL);
}

/* A decoded region's pixels, handed to Python without a copy: a writable buffer that frees them. */
typedef struct {
    PyObject_HEAD unsigned char *data;
    Py_ssize_t size;
} Pixels;

static void pixels_dealloc(Pixels *self) {
    free(self->data);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int pixels_getbuffer(Pixels *self, Py_buffer *view, int flags) {
    return PyBuffer_FillInfo(view, (PyObject *)self, self->data, self->size, 0, flags);
}

static PyBufferProcs pixels_buffer = {(getbufferproc)pixels_getbuffer, NULL};

static PyTypeObject PixelsType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "torch_tfrecord.codec._jpeg.Pixels",
    .tp_basicsize = sizeof(Pixels),
    .tp_dealloc = (destructor)pixels_dealloc,
    .tp_as_buffer = &pixels_buffer,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A decoded region's pixels (HWC uint8), as a writable buffer.",
};

static PyObject *result_of(Job *job, int resized) {
    if (job->status == UNSUPPORTED) Py_RETURN_NONE;
    if (job->status == FAILED) return PyUnicode_FromString(job->message);
    if (resized) Py_RETURN_TRUE;
    Pixels *pixels = PyObject_New(Pixels, &PixelsType);
    if (pixels == NULL) return NULL;
    pixels->data = job->pixels; /* now the object's */
    pixels->size = job->out_h * job->out_w * job->channels;
    job->pixels = NULL;
    return Py_BuildValue("(Nlli)", (PyObject *)pixels, job->out_h, job->out_w, job->channels);
}

PyDoc_STRVAR(decode_regions_doc,
             "decode_regions(images, boxes, grey, fast_dct, tf_crop, threads, output=None, slots=None,\n"
             "               verify_full=True)\n\n"
             "Each JPEG's region (top, left, height, width, need_height, need_width) decoded at the smallest\n"
             "DCT scale that keeps need_height x need_width over the whole image, cut as image_batch.resize\n"
             "cuts it (tf_crop: as decode_and_crop_jpeg decodes the box). Returns per image (pixels: a\n"
             "writable HWC buffer, height, width, channels), an error message (str), or None for CMYK/YCCK\n"
             "JPEGs (left to the Python path). Given output (a writable C-contiguous uint8 [B, C, H, W]\n"
             "buffer) and slots (one index into it per image), each region is resized into output[slot]\n"
             "instead (torch's antialiased bilinear) and True stands for its pixels. verify_full: the\n"
             "rows below each region are entropy-decoded too (damage there fails the image); False:\n"
             "the decode stops after the region's last row, as decode_and_crop_jpeg's does.");

static PyObject *decode_regions(PyObject *self, PyObject *args) {
    PyObject *images, *boxes, *output = Py_None, *slots = Py_None;
    int grey, fast_dct, tf_crop, threads, verify_full = 1;
    (void)self;
    if (!PyArg_ParseTuple(args, "OOpppi|OOp", &images, &boxes, &grey, &fast_dct, &tf_crop, &threads, &output, &slots,
                          &verify_full))
        return NULL;
    PyObject *image_seq = PySequence_Fast(images, "images must be a sequence");
    if (image_seq == NULL) return NULL;
    PyObject *box_seq = PySequence_Fast(boxes, "boxes must be a sequence");
    if (box_seq == NULL) {
        Py_DECREF(image_seq);
        return NULL;
    }
    Py_ssize_t count = PySequence_Fast_GET_SIZE(image_seq), ready = 0;
    PyObject *out = NULL, *slot_seq = NULL;
    Job *jobs = NULL;
    Py_buffer target = {0};
    if (PySequence_Fast_GET_SIZE(box_seq) != count) {
        PyErr_SetString(PyExc_ValueError, "one box per image");
        goto done;
    }
    if (output != Py_None) {
        if (PyObject_GetBuffer(output, &target, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) goto done;
        if (target.ndim != 4 || target.itemsize != 1 || strcmp(target.format, "B") != 0 ||
            target.shape[1] != (grey ? 1 : 3)) {
            PyErr_Format(PyExc_ValueError, "output must be uint8 [batch, %d, height, width]", grey ? 1 : 3);
            goto done;
        }
        slot_seq = PySequence_Fast(slots, "slots must be a sequence");
        if (slot_seq == NULL) goto done;
        if (PySequence_Fast_GET_SIZE(slot_seq) != count) {
            PyErr_SetString(PyExc_ValueError, "one slot per image");
            goto done;
        }
    }
    jobs = calloc((size_t)(count > 0 ? count : 1), sizeof(Job));
    if (jobs == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (; ready < count; ready++) {
        Job *job = &jobs[ready];
        PyObject *box = PySequence_Fast_GET_ITEM(box_seq, ready);
        if (!PyArg_ParseTuple(box, "llllll", &job->top, &job->left, &job->height, &job->width, &job->need_h,
                              &job->need_w))
            goto done;
        if (slot_seq != NULL) {
            job->slot = PyLong_AsLong(PySequence_Fast_GET_ITEM(slot_seq, ready));
            if (job->slot == -1 && PyErr_Occurred()) goto done;
            if (job->slot < 0 || job->slot >= target.shape[0]) {
                PyErr_Format(PyExc_IndexError, "slot %ld of image %zd is outside the output's %zd images", job->slot,
                             ready, target.shape[0]);
                goto done;
            }
        }
        if (PyObject_GetBuffer(PySequence_Fast_GET_ITEM(image_seq, ready), &job->data, PyBUF_SIMPLE) < 0) goto done;
    }
    Batch batch = {.jobs = jobs, .count = count, .next = 0, .grey = grey, .fast_dct = fast_dct,
                   .tf_crop = tf_crop, .verify_full = verify_full, .out = target.buf};
    if (target.buf != NULL) {
        batch.out_channels = target.shape[1];
        batch.out_h = target.shape[2];
        batch.out_w = target.shape[3];
    }
    pthread_mutex_init(&batch.lock, NULL);
    Py_BEGIN_ALLOW_THREADS run_batch(&batch, threads);
    Py_END_ALLOW_THREADS pthread_mutex_destroy(&batch.lock);
    out = PyList_New(count);
    for (Py_ssize_t i = 0; out != NULL && i < count; i++) {
        PyObject *result = result_of(&jobs[i], target.buf != NULL);
        if (result == NULL) Py_CLEAR(out);
        else PyList_SET_ITEM(out, i, result);
    }
done:
    for (Py_ssize_t i = 0; jobs != NULL && i < count; i++) {
        if (i < ready) PyBuffer_Release(&jobs[i].data);
        free(jobs[i].pixels);
    }
    free(jobs);
    if (target.obj != NULL) PyBuffer_Release(&target);
    Py_XDECREF(slot_seq);
    Py_DECREF(image_seq);
    Py_DECREF(box_seq);
    return out;
}

PyDoc_STRVAR(resize_doc,
             "resize(pixels, height, width, output)\n\n"
             "An HWC uint8 image (C = the output's) resized into output, a writable C-contiguous uint8\n"
             "[C, H, W] buffer, as the batch path resizes (torch's antialiased bilinear, byte for byte).");

static PyObject *resize(PyObject *self, PyObject *args) {
    static ResizeScratch scratch; /* the GIL is held throughout: one caller at a time */
    PyObject *pixels, *output;
    long height, width;
    (void)self;
    if (!PyArg_ParseTuple(args, "OllO", &pixels, &height, &width, &output)) return NULL;
    Py_buffer in, out;
    if (PyObject_GetBuffer(pixels, &in, PyBUF_SIMPLE) < 0) return NULL;
    if (PyObject_GetBuffer(output, &out, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
        PyBuffer_Release(&in);
        return NULL;
    }
    int failed = 0;
    if (out.ndim != 3 || out.itemsize != 1 || strcmp(out.format, "B") != 0 || height < 1 || width < 1 ||
        out.shape[1] < 1 || out.shape[2] < 1 || in.len != height * width * out.shape[0]) {
        PyErr_SetString(PyExc_ValueError, "pixels must be height x width x C bytes, output uint8 [C, H, W]");
        failed = 1;
    } else if (resize_to_planes(in.buf, height, width, (int)out.shape[0], out.buf, out.shape[1], out.shape[2],
                                &scratch) < 0) {
        PyErr_NoMemory();
        failed = 1;
    }
    PyBuffer_Release(&in);
    PyBuffer_Release(&out);
    if (failed) return NULL;
    Py_RETURN_NONE;
}

static PyObject *portable(PyObject *self, PyObject *arg) {
    (void)self;
    int only = PyObject_IsTrue(arg);
    if (only < 0) return NULL;
    return PyBool_FromLong(resize_portable(only));
}

static PyObject *simd(PyObject *self, PyObject *unused) {
    (void)self;
    (void)unused;
    return PyBool_FromLong(resize_simd());
}

PyDoc_STRVAR(simd_doc, "simd()\n\nWhether the resize runs its SIMD (AVX2) loops on this CPU.");

PyDoc_STRVAR(portable_doc, "portable(only)\n\nWith True, the resize runs its portable loops (those of CPUs without\n"
                           "AVX2) even where the CPU has AVX2; returns the setting before.");

PyDoc_STRVAR(read_sizes_doc,
             "read_sizes(images)\n\nEach JPEG's (height, width) from its header, or libjpeg's message (str).");

static PyObject *read_sizes(PyObject *self, PyObject *images) {
    (void)self;
    PyObject *seq = PySequence_Fast(images, "images must be a sequence");
    if (seq == NULL) return NULL;
    Py_ssize_t count = PySequence_Fast_GET_SIZE(seq);
    PyObject *out = PyList_New(count);
    for (Py_ssize_t i = 0; out != NULL && i < count; i++) {
        Py_buffer data;
        if (PyObject_GetBuffer(PySequence_Fast_GET_ITEM(seq, i), &data, PyBUF_SIMPLE) < 0) {
            Py_CLEAR(out);
            break;
        }
        struct jpeg_decompress_struct cinfo;
        ErrorManager err;
        PyObject *result;
        cinfo.err = jpeg_std_error(&err.pub);
        err.pub.error_exit = on_error;
        err.pub.emit_message = on_message;
        if (setjmp(err.jump)) {
            result = PyUnicode_FromString(err.message);
        } else {
            jpeg_create_decompress(&cinfo);
            jpeg_mem_src(&cinfo, (const unsigned char *)data.buf, (unsigned long)data.len);
            jpeg_read_header(&cinfo, TRUE);
            result = Py_BuildValue("(II)", cinfo.image_height, cinfo.image_width);
        }
        jpeg_destroy_decompress(&cinfo);
        PyBuffer_Release(&data);
        if (result == NULL) Py_CLEAR(out);
        else PyList_SET_ITEM(out, i, result);
    }
    Py_DECREF(seq);
    return out;
}

static PyMethodDef methods[] = {
    {"decode_regions", decode_regions, METH_VARARGS, decode_regions_doc},
    {"read_sizes", read_sizes, METH_O, read_sizes_doc},
    {"resize", resize, METH_VARARGS, resize_doc},
    {"portable", portable, METH_O, portable_doc},
    {"simd", simd, METH_NOARGS, simd_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_jpeg", "Region-of-interest JPEG decoding with libjpeg-turbo, a batch per call.",
    -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__jpeg(void) {
#ifdef TORCH_TFRECORD_STATIC_JPEG
    tt_err = stderr;
#endif
    if (PyType_Ready(&PixelsType) < 0) return NULL;
    return PyModule_Create(&module);
}
