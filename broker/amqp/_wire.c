/* The 0-9-1 wire's busiest frames natively (broker/amqp/framing.py): a delivery's frames
 * encoded, a publish's frames checked and split.
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
 * scan_publish(data, pos, max_payload, decoded) looks at the frames of a read from pos: a
 * basic.publish method frame on a channel other than 0, its basic content header and one
 * body frame of as many bytes as the header says (not none), each frame whole in data, no
 * payload over max_payload, each ended by 0xCE, and the publish's arguments a key of
 * decoded (framing.py's dict of the publish payloads it decoded before). Then it returns
 * (channel, end of the method frame, end of the body frame, the decoded arguments,
 * the raw properties, the body); else None, and connection.py's parser takes the frames
 * one at a time as it does without this module (the same outcome: tests/amqp/
 * test_publish_scan.py), which also raises every error. It never raises for what data holds.
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


static uint32_t get_u32(const unsigned char *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

/* The frame whose head is at data[at], of frame type `type` on `channel` (0: any but 0),
 * whole in data[:end_of_data] with its end octet: its payload's size (>= min_size), or -1. */
static Py_ssize_t whole_frame(const unsigned char *data, Py_ssize_t at, Py_ssize_t end_of_data,
                              unsigned type, uint32_t *channel, Py_ssize_t max_payload,
                              Py_ssize_t min_size) {
    if (end_of_data - at < 7 || data[at] != type) return -1;
    uint32_t number = ((uint32_t)data[at + 1] << 8) | data[at + 2];
    if (number == 0 || (*channel != 0 && number != *channel)) return -1;
    Py_ssize_t size = (Py_ssize_t)get_u32(data + at + 3);
    if (size > max_payload || size < min_size) return -1;
    Py_ssize_t end = at + 7 + size;
    if (end >= end_of_data || data[end] != FRAME_END) return -1;
    *channel = number;
    return size;
}

static PyObject *scan_publish(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 4 || !PyBytes_Check(args[0]) || !PyDict_Check(args[3])) {
        PyErr_SetString(PyExc_TypeError,
                        "scan_publish(data: bytes, pos: int, max_payload: int, decoded: dict)");
        return NULL;
    }
    Py_ssize_t pos = PyLong_AsSsize_t(args[1]);
    if (pos == -1 && PyErr_Occurred()) return NULL;
    Py_ssize_t max_payload = PyLong_AsSsize_t(args[2]);
    if (max_payload == -1 && PyErr_Occurred()) return NULL;
    const unsigned char *data = (const unsigned char *)PyBytes_AS_STRING(args[0]);
    Py_ssize_t end_of_data = PyBytes_GET_SIZE(args[0]);
    if (pos < 0 || pos > end_of_data) Py_RETURN_NONE;
    uint32_t channel = 0;
    /* basic.publish: class and method ids (4) and at least its arguments' lengths */
    Py_ssize_t method_size =
        whole_frame(data, pos, end_of_data, FRAME_METHOD, &channel, max_payload, 4);
    if (method_size < 0 || get_u32(data + pos + 7) != ((uint32_t)BASIC_CLASS << 16 | 40))
        Py_RETURN_NONE;
    Py_ssize_t head = pos + 8 + method_size;
    /* content header: class (2), weight (2), body size (8), then the properties */
    Py_ssize_t header_size =
        whole_frame(data, head, end_of_data, FRAME_HEADER, &channel, max_payload, 12);
    if (header_size < 0) Py_RETURN_NONE;
    const unsigned char *h = data + head + 7;
    if ((((uint32_t)h[0] << 8) | h[1]) != BASIC_CLASS || h[2] != 0 || h[3] != 0)
        Py_RETURN_NONE;
    uint64_t body_size = ((uint64_t)get_u32(h + 4) << 32) | get_u32(h + 8);
    Py_ssize_t body = head + 8 + header_size;
    Py_ssize_t size = whole_frame(data, body, end_of_data, FRAME_BODY, &channel, max_payload, 1);
    if (size < 0 || body_size != (uint64_t)size) Py_RETURN_NONE;
    PyObject *key = PyBytes_FromStringAndSize((const char *)data + pos + 7, method_size);
    if (key == NULL) return NULL;
    PyObject *arguments = PyDict_GetItemWithError(args[3], key); /* borrowed */
    Py_DECREF(key);
    if (arguments == NULL) {
        if (PyErr_Occurred()) return NULL;
        Py_RETURN_NONE; /* not decoded before: framing.py decodes it (and remembers it) */
    }
    PyObject *result = PyTuple_New(6);
    if (result == NULL) return NULL;
    PyObject *items[6] = {
        PyLong_FromUnsignedLong(channel),
        PyLong_FromSsize_t(head),
        PyLong_FromSsize_t(body + 8 + size),
        Py_NewRef(arguments),
        PyBytes_FromStringAndSize((const char *)h + 12, header_size - 12),
        PyBytes_FromStringAndSize((const char *)data + body + 7, size),
    };
    int failed = 0;
    for (int i = 0; i < 6; i++) {
        if (items[i] == NULL) failed = 1;
        PyTuple_SET_ITEM(result, i, items[i]); /* NULL items are skipped by the dealloc */
    }
    if (failed) {
        Py_DECREF(result);
        return NULL;
    }
    return result;
}

static PyMethodDef methods[] = {
    {"deliver_frames", (PyCFunction)(void (*)(void))deliver_frames, METH_FASTCALL,
     "deliver_frames(channel, consumer_tag, delivery_tag, redelivered, exchange_and_key, "
     "properties_raw, body, frame_max): a delivery's frames, as framing.py encodes them."},
    {"scan_publish", (PyCFunction)(void (*)(void))scan_publish, METH_FASTCALL,
     "scan_publish(data, pos, max_payload, decoded): (channel, method end, body end, "
     "arguments, raw properties, body) of a whole publish at pos, or None."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "broker.amqp._wire",
    "The 0-9-1 wire's busiest frames natively: deliveries encoded, publishes split.", -1,
    methods,
};

PyMODINIT_FUNC PyInit__wire(void) { return PyModule_Create(&module_def); }
