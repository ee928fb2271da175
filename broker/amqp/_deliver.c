/* A 0-9-1 delivery's frames in one call (broker/amqp/framing.py's deliver_frames).
 *
 * deliver_frames(channel, consumer_tag, delivery_tag, redelivered, exchange_and_key,
 * properties_raw, body, frame_max) returns the bytes of a basic.deliver method frame, its
 * content header frame and as many body frames as frame_max needs (none for an empty
 * body), exactly what framing.py's Python encoder makes of the same values: consumer_tag
 * and exchange_and_key are short strings as encoded on the wire (the caller keeps them per
 * consumer and per message), properties_raw the content header's property flags and list.
 * The Python encoder stays the reference (tests/amqp/test_framing.py compares them)
 * and the fallback where this is not built. A value out of range (a channel over 65535, a
 * tag over 2**64 - 1, a frame_max that leaves no room for a body) raises OverflowError or
 * ValueError here (struct.error or ValueError there), a value of the wrong type TypeError.
 *
 * No state; called with the GIL held.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <string.h>

#define FRAME_METHOD 1
#define FRAME_HEADER 2
#define FRAME_BODY 3
#define FRAME_END 0xCE
#define FRAME_OVERHEAD 8 /* type (1), channel (2), size (4), end octet (1) */
#define BASIC_CLASS 60

static unsigned char *put_u16(unsigned char *p, uint32_t v) {
    p[0] = (unsigned char)(v >> 8);
    p[1] = (unsigned char)v;
    return p + 2;
}

static unsigned char *put_u32(unsigned char *p, uint32_t v) {
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
    return p + 4;
}

static unsigned char *put_u64(unsigned char *p, uint64_t v) {
    return put_u32(put_u32(p, (uint32_t)(v >> 32)), (uint32_t)v);
}

/* A frame's head: type, channel, payload size. */
static unsigned char *put_head(unsigned char *p, unsigned char type, uint32_t channel,
                               uint32_t size) {
    *p++ = type;
    return put_u32(put_u16(p, channel), size);
}

static int take_u64(PyObject *value, uint64_t *out) {
    if (!PyLong_Check(value)) {
        PyErr_SetString(PyExc_TypeError, "an int is required");
        return -1;
    }
    unsigned long long v = PyLong_AsUnsignedLongLong(value);
    if (v == (unsigned long long)-1 && PyErr_Occurred()) return -1;
    *out = (uint64_t)v;
    return 0;
}

static PyObject *deliver_frames(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 8) {
        PyErr_SetString(PyExc_TypeError, "deliver_frames takes 8 arguments");
        return NULL;
    }
    uint64_t channel, delivery_tag, frame_max;
    if (take_u64(args[0], &channel) < 0 || take_u64(args[2], &delivery_tag) < 0 ||
        take_u64(args[7], &frame_max) < 0)
        return NULL;
    if (channel > 0xFFFF) {
        PyErr_SetString(PyExc_OverflowError, "channel out of range");
        return NULL;
    }
    int redelivered = PyObject_IsTrue(args[3]);
    if (redelivered < 0) return NULL;
    if (frame_max <= FRAME_OVERHEAD || frame_max > UINT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "frame_max leaves no room for a body");
        return NULL;
    }
    Py_buffer tag, route, properties, body;
    if (PyObject_GetBuffer(args[1], &tag, PyBUF_SIMPLE) < 0) return NULL;
    if (PyObject_GetBuffer(args[4], &route, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(&tag);
        return NULL;
    }
    if (PyObject_GetBuffer(args[5], &properties, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(&tag);
        PyBuffer_Release(&route);
        return NULL;
    }
    if (PyObject_GetBuffer(args[6], &body, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(&tag);
        PyBuffer_Release(&route);
        PyBuffer_Release(&properties);
        return NULL;
    }
    PyObject *result = NULL;
    size_t chunk = (size_t)frame_max - FRAME_OVERHEAD;
    size_t size = (size_t)body.len;
    size_t frames = (size + chunk - 1) / chunk; /* body frames: none for an empty body */
    /* method: class and method ids (4), consumer tag, delivery tag (8), redelivered (1),
     * exchange and routing key */
    size_t method = 4 + (size_t)tag.len + 9 + (size_t)route.len;
    size_t header = 12 + (size_t)properties.len; /* class, weight, body size, properties */
    if ((uint64_t)method > UINT32_MAX || (uint64_t)header > UINT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "frame too large");
        goto done;
    }
    size_t total = FRAME_OVERHEAD + method + FRAME_OVERHEAD + header + frames * FRAME_OVERHEAD +
                   size;
    result = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)total);
    if (result == NULL) goto done;
    unsigned char *p = (unsigned char *)PyBytes_AS_STRING(result);
    p = put_head(p, FRAME_METHOD, (uint32_t)channel, (uint32_t)method);
    p = put_u16(put_u16(p, BASIC_CLASS), 60); /* basic.deliver */
    memcpy(p, tag.buf, (size_t)tag.len);
    p += tag.len;
    p = put_u64(p, delivery_tag);
    *p++ = redelivered ? 1 : 0;
    memcpy(p, route.buf, (size_t)route.len);
    p += route.len;
    *p++ = FRAME_END;
    p = put_head(p, FRAME_HEADER, (uint32_t)channel, (uint32_t)header);
    p = put_u64(put_u16(put_u16(p, BASIC_CLASS), 0), (uint64_t)size);
    memcpy(p, properties.buf, (size_t)properties.len);
    p += properties.len;
    *p++ = FRAME_END;
    const unsigned char *from = (const unsigned char *)body.buf;
    for (size_t start = 0; start < size; start += chunk) {
        size_t piece = size - start < chunk ? size - start : chunk;
        p = put_head(p, FRAME_BODY, (uint32_t)channel, (uint32_t)piece);
        memcpy(p, from + start, piece);
        p += piece;
        *p++ = FRAME_END;
    }
done:
    PyBuffer_Release(&tag);
    PyBuffer_Release(&route);
    PyBuffer_Release(&properties);
    PyBuffer_Release(&body);
    return result;
}

static PyMethodDef methods[] = {
    {"deliver_frames", (PyCFunction)(void (*)(void))deliver_frames, METH_FASTCALL,
     "deliver_frames(channel, consumer_tag, delivery_tag, redelivered, exchange_and_key, "
     "properties_raw, body, frame_max): a delivery's frames, as framing.py encodes them."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "broker.amqp._deliver",
    "A 0-9-1 delivery's frames, encoded natively.", -1, methods,
};

PyMODINIT_FUNC PyInit__deliver(void) { return PyModule_Create(&module_def); }
