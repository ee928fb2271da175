/* The store's records of the publish path, encoded in one call (broker/store/records.py).
 *
 * encode_message_with_enqueue(message_id, route, properties, body, queue_id, position,
 * expires_at_ms) returns the bytes of a MESSAGE record followed by its first ENQUEUE record,
 * exactly what records.py's Python encoder makes of the same values (``route``: the exchange
 * and routing key as two short strings, which the caller keeps per pair); encode_dequeue(
 * queue_id, message_id) a DEQUEUE record. A record is its header (payload length: u32, CRC-32C
 * of the kind byte and the payload: u32, kind: u8, big-endian) and its payload (docs/store.md).
 * The Python encoders stay the reference (tests/store/test_native_records.py compares them)
 * and the fallback where this is not built; a value out of range raises OverflowError here
 * (struct.error there), a value of the wrong type TypeError.
 *
 * No state but the CRC tables; called with the GIL held.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <structmember.h>

#include "_crc32c.h"

#define MESSAGE_KIND 7 /* records.py's Kind */
#define ENQUEUE_KIND 8
#define DEQUEUE_KIND 9
#define HEADER_SIZE 9

static void put_u32(unsigned char *p, uint32_t v) {
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

static void put_u64(unsigned char *p, uint64_t v) {
    put_u32(p, (uint32_t)(v >> 32));
    put_u32(p + 4, (uint32_t)v);
}

/* A u64 argument; -1 with OverflowError (or TypeError) set when it is not one. */
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

/* A record's header: its payload's size, its CRC (of the kind byte and the payload), kind. */
static void put_header(unsigned char *p, uint32_t size, uint32_t crc, unsigned char kind) {
    put_u32(p, size);
    put_u32(p + 4, crc);
    p[8] = kind;
}

/* A MESSAGE record and its first ENQUEUE at ``out`` (HEADER_SIZE + payload + HEADER_SIZE + 32
 * bytes), its message id and route already written and ending at ``p``: the properties'
 * length, the properties, the body, the MESSAGE header, then the ENQUEUE record. */
static void finish_message_with_enqueue(unsigned char *out, unsigned char *p,
                                        const Py_buffer *properties, const Py_buffer *body,
                                        uint64_t message_id, uint64_t queue_id,
                                        uint64_t position, uint64_t expires_at_ms) {
    put_u32(p, (uint32_t)properties->len);
    p += 4;
    memcpy(p, properties->buf, (size_t)properties->len);
    p += properties->len;
    memcpy(p, body->buf, (size_t)body->len);
    p += body->len;
    size_t payload = (size_t)(p - out) - HEADER_SIZE;
    unsigned char kind = MESSAGE_KIND;
    uint32_t crc = crc32c(crc32c(0, &kind, 1), out + HEADER_SIZE, payload);
    put_header(out, (uint32_t)payload, crc, MESSAGE_KIND);
    unsigned char *enqueue = p + HEADER_SIZE;
    put_u64(enqueue, queue_id);
    put_u64(enqueue + 8, message_id);
    put_u64(enqueue + 16, position);
    put_u64(enqueue + 24, expires_at_ms);
    kind = ENQUEUE_KIND;
    put_header(p, 32, crc32c(crc32c(0, &kind, 1), enqueue, 32), ENQUEUE_KIND);
}

static PyObject *encode_message_with_enqueue(PyObject *module, PyObject *const *args,
                                             Py_ssize_t nargs) {
    (void)module;
    if (nargs != 7) {
        PyErr_SetString(PyExc_TypeError, "encode_message_with_enqueue takes 7 arguments");
        return NULL;
    }
    uint64_t message_id, queue_id, position, expires_at_ms;
    if (take_u64(args[0], &message_id) < 0 || take_u64(args[4], &queue_id) < 0 ||
        take_u64(args[5], &position) < 0 || take_u64(args[6], &expires_at_ms) < 0)
        return NULL;
    Py_buffer route, properties, body;
    if (PyObject_GetBuffer(args[1], &route, PyBUF_SIMPLE) < 0) return NULL;
    if (PyObject_GetBuffer(args[2], &properties, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(&route);
        return NULL;
    }
    if (PyObject_GetBuffer(args[3], &body, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(&route);
        PyBuffer_Release(&properties);
        return NULL;
    }
    PyObject *result = NULL;
    /* payload: message id, route, properties length, properties, body */
    size_t head = 8 + (size_t)route.len + 4 + (size_t)properties.len;
    size_t payload = head + (size_t)body.len;
    if ((uint64_t)properties.len > UINT32_MAX || (uint64_t)payload > UINT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "record too large");
        goto done;
    }
    size_t total = HEADER_SIZE + payload + HEADER_SIZE + 32;
    result = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)total);
    if (result == NULL) goto done;
    unsigned char *out = (unsigned char *)PyBytes_AS_STRING(result);
    unsigned char *p = out + HEADER_SIZE;
    put_u64(p, message_id);
    p += 8;
    memcpy(p, route.buf, (size_t)route.len);
    p += route.len;
    finish_message_with_enqueue(out, p, &properties, &body, message_id, queue_id, position,
                                expires_at_ms);
done:
    PyBuffer_Release(&route);
    PyBuffer_Release(&properties);
    PyBuffer_Release(&body);
    return result;
}

static PyObject *encode_dequeue(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "encode_dequeue takes 2 arguments");
        return NULL;
    }
    uint64_t queue_id, message_id;
    if (take_u64(args[0], &queue_id) < 0 || take_u64(args[1], &message_id) < 0) return NULL;
    PyObject *result = PyBytes_FromStringAndSize(NULL, HEADER_SIZE + 16);
    if (result == NULL) return NULL;
    unsigned char *out = (unsigned char *)PyBytes_AS_STRING(result);
    put_u64(out + HEADER_SIZE, queue_id);
    put_u64(out + HEADER_SIZE + 8, message_id);
    unsigned char kind = DEQUEUE_KIND;
    put_header(out, 16, crc32c(crc32c(0, &kind, 1), out + HEADER_SIZE, 16), DEQUEUE_KIND);
    return result;
}

/* -- the journal's tail (broker/store/tail.py) -------------------------------------------- */

typedef struct {
    PyObject_HEAD
    PyObject *pending; /* [(segment, bytearray)], in order */
    Py_ssize_t current, size, unflushed, appended, limit;
    PyObject *use;   /* the current segment's SegmentUse */
    PyObject *group; /* a transaction's records, or None */
} Tail;

static int Tail_init(Tail *self, PyObject *args, PyObject *kwargs) {
    Py_ssize_t limit;
    static char *keywords[] = {"limit", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "n", keywords, &limit)) return -1;
    PyObject *pending = PyList_New(0);
    if (pending == NULL) return -1;
    Py_XSETREF(self->pending, pending);
    Py_XSETREF(self->use, Py_NewRef(Py_None));
    Py_XSETREF(self->group, Py_NewRef(Py_None));
    self->current = self->size = self->unflushed = self->appended = 0;
    self->limit = limit;
    return 0;
}

static int Tail_traverse(Tail *self, visitproc visit, void *arg) {
    Py_VISIT(self->pending);
    Py_VISIT(self->use);
    Py_VISIT(self->group);
    return 0;
}

static int Tail_clear(Tail *self) {
    Py_CLEAR(self->pending);
    Py_CLEAR(self->use);
    Py_CLEAR(self->group);
    return 0;
}

static void Tail_dealloc(Tail *self) {
    PyObject_GC_UnTrack(self);
    Tail_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMemberDef Tail_members[] = {
    {"pending", T_OBJECT, offsetof(Tail, pending), 0, "[(segment, bytearray)] to hand over"},
    {"current", T_PYSSIZET, offsetof(Tail, current), 0, "the segment appends go to"},
    {"size", T_PYSSIZET, offsetof(Tail, size), 0, "the current segment's bytes so far"},
    {"unflushed", T_PYSSIZET, offsetof(Tail, unflushed), 0, "bytes since the last hand-over"},
    {"appended", T_PYSSIZET, offsetof(Tail, appended), 0, "records appended in all"},
    {"limit", T_PYSSIZET, offsetof(Tail, limit), 0, "the segment size"},
    {"use", T_OBJECT, offsetof(Tail, use), 0, "the current segment's SegmentUse"},
    {"group", T_OBJECT, offsetof(Tail, group), 0, "a transaction's records, or None"},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject TailType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "broker.store._records.Tail",
    .tp_basicsize = sizeof(Tail),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "The journal's tail (broker/store/tail.py's Tail, natively).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Tail_init,
    .tp_traverse = (traverseproc)Tail_traverse,
    .tp_clear = (inquiry)Tail_clear,
    .tp_dealloc = (destructor)Tail_dealloc,
    .tp_members = Tail_members,
};

static PyObject *records_name; /* "records" (SegmentUse's) */

/* Where ``n`` more bytes go now: the current segment's buffer, grown by ``n`` (the caller
 * writes them at its old end, ``*at``). NULL without an error when the journal has to act
 * first (tail.py's rules: a transaction, nothing pending, the last buffer another segment's,
 * past the limit); NULL with one when the growth failed. */
static PyObject *room(Tail *tail, Py_ssize_t n, Py_ssize_t *at) {
    if (tail->group != Py_None || tail->pending == NULL || !PyList_CheckExact(tail->pending))
        return NULL;
    Py_ssize_t k = PyList_GET_SIZE(tail->pending);
    if (k == 0) return NULL;
    PyObject *last = PyList_GET_ITEM(tail->pending, k - 1);
    if (!PyTuple_CheckExact(last) || PyTuple_GET_SIZE(last) != 2) return NULL;
    PyObject *segment = PyTuple_GET_ITEM(last, 0);
    PyObject *buffer = PyTuple_GET_ITEM(last, 1);
    if (!PyLong_CheckExact(segment) || !PyByteArray_CheckExact(buffer)) return NULL;
    int overflow = 0;
    long long number = PyLong_AsLongLongAndOverflow(segment, &overflow);
    if (overflow || number != (long long)tail->current) return NULL;
    if (n > tail->limit - tail->size) return NULL;
    Py_ssize_t old = PyByteArray_GET_SIZE(buffer);
    if (PyByteArray_Resize(buffer, old + n) < 0) return NULL;
    *at = old;
    return buffer;
}

/* Count ``n`` bytes of ``records`` records appended (the buffer grown by room()); on a failure
 * the buffer is cut back to ``at`` and nothing is counted. Returns the segment or NULL. */
static PyObject *counted(Tail *tail, PyObject *buffer, Py_ssize_t at, Py_ssize_t n,
                         Py_ssize_t records) {
    PyObject *before = PyObject_GetAttr(tail->use, records_name);
    PyObject *after = NULL;
    if (before != NULL) {
        PyObject *delta = PyLong_FromSsize_t(records);
        if (delta != NULL) {
            after = PyNumber_Add(before, delta);
            Py_DECREF(delta);
        }
        Py_DECREF(before);
    }
    if (after == NULL || PyObject_SetAttr(tail->use, records_name, after) < 0) {
        Py_XDECREF(after);
        PyObject *type, *value, *traceback;
        PyErr_Fetch(&type, &value, &traceback);
        PyByteArray_Resize(buffer, at);
        PyErr_Restore(type, value, traceback);
        return NULL;
    }
    Py_DECREF(after);
    tail->size += n;
    tail->unflushed += n;
    tail->appended += records;
    return PyLong_FromSsize_t(tail->current);
}

static int take_tail(PyObject *value) {
    if (!PyObject_TypeCheck(value, &TailType)) {
        PyErr_SetString(PyExc_TypeError, "a Tail is required");
        return -1;
    }
    return 0;
}

static PyObject *append(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "append takes 3 arguments");
        return NULL;
    }
    if (take_tail(args[0]) < 0) return NULL;
    Tail *tail = (Tail *)args[0];
    Py_ssize_t count = PyLong_AsSsize_t(args[2]);
    if (count == -1 && PyErr_Occurred()) return NULL;
    Py_buffer record;
    if (PyObject_GetBuffer(args[1], &record, PyBUF_SIMPLE) < 0) return NULL;
    Py_ssize_t at;
    PyObject *result = NULL;
    PyObject *buffer = room(tail, record.len, &at);
    if (buffer != NULL) {
        memcpy(PyByteArray_AS_STRING(buffer) + at, record.buf, (size_t)record.len);
        result = counted(tail, buffer, at, record.len, count);
    } else if (!PyErr_Occurred()) {
        result = Py_NewRef(Py_None);
    }
    PyBuffer_Release(&record);
    return result;
}

/* A name as a short string's bytes (UTF-8, at most 255); -1 without an error when it is not
 * one (the Python encoder then says why), -1 with one on a failure of its own. */
static int short_string(PyObject *text, const char **bytes, Py_ssize_t *len) {
    if (!PyUnicode_CheckExact(text)) return -1;
    *bytes = PyUnicode_AsUTF8AndSize(text, len);
    if (*bytes == NULL) {
        if (PyErr_ExceptionMatches(PyExc_UnicodeEncodeError)) PyErr_Clear();
        return -1;
    }
    return *len > 255 ? -1 : 0;
}

static PyObject *append_message_with_enqueue(PyObject *module, PyObject *const *args,
                                             Py_ssize_t nargs) {
    (void)module;
    if (nargs != 9) {
        PyErr_SetString(PyExc_TypeError, "append_message_with_enqueue takes 9 arguments");
        return NULL;
    }
    if (take_tail(args[0]) < 0) return NULL;
    Tail *tail = (Tail *)args[0];
    const char *exchange, *routing_key;
    Py_ssize_t exchange_len, routing_key_len;
    if (short_string(args[2], &exchange, &exchange_len) < 0 ||
        short_string(args[3], &routing_key, &routing_key_len) < 0) {
        if (PyErr_Occurred()) return NULL;
        Py_RETURN_NONE; /* the Python encoder names the problem (it looks at them first) */
    }
    uint64_t message_id, queue_id, position, expires_at_ms;
    if (take_u64(args[1], &message_id) < 0 || take_u64(args[6], &queue_id) < 0 ||
        take_u64(args[7], &position) < 0 || take_u64(args[8], &expires_at_ms) < 0)
        return NULL;
    Py_buffer properties, body;
    if (PyObject_GetBuffer(args[4], &properties, PyBUF_SIMPLE) < 0) return NULL;
    if (PyObject_GetBuffer(args[5], &body, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(&properties);
        return NULL;
    }
    PyObject *result = NULL;
    /* payload: message id, route, properties length, properties, body */
    size_t payload = 8 + 2 + (size_t)exchange_len + (size_t)routing_key_len + 4 +
                     (size_t)properties.len + (size_t)body.len;
    if ((uint64_t)properties.len > UINT32_MAX || (uint64_t)payload > UINT32_MAX ||
        payload > (size_t)PY_SSIZE_T_MAX / 2) {
        PyErr_SetString(PyExc_OverflowError, "record too large");
        goto done;
    }
    Py_ssize_t total = (Py_ssize_t)(HEADER_SIZE + payload + HEADER_SIZE + 32);
    Py_ssize_t at;
    PyObject *buffer = room(tail, total, &at);
    if (buffer == NULL) {
        if (!PyErr_Occurred()) result = Py_NewRef(Py_None);
        goto done;
    }
    unsigned char *out = (unsigned char *)PyByteArray_AS_STRING(buffer) + at;
    unsigned char *p = out + HEADER_SIZE;
    put_u64(p, message_id);
    p += 8;
    *p++ = (unsigned char)exchange_len;
    memcpy(p, exchange, (size_t)exchange_len);
    p += exchange_len;
    *p++ = (unsigned char)routing_key_len;
    memcpy(p, routing_key, (size_t)routing_key_len);
    p += routing_key_len;
    finish_message_with_enqueue(out, p, &properties, &body, message_id, queue_id, position,
                                expires_at_ms);
    result = counted(tail, buffer, at, total, 2);
done:
    PyBuffer_Release(&properties);
    PyBuffer_Release(&body);
    return result;
}

static PyObject *append_dequeue(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "append_dequeue takes 3 arguments");
        return NULL;
    }
    if (take_tail(args[0]) < 0) return NULL;
    uint64_t queue_id, message_id;
    if (take_u64(args[1], &queue_id) < 0 || take_u64(args[2], &message_id) < 0) return NULL;
    Tail *tail = (Tail *)args[0];
    Py_ssize_t at;
    PyObject *buffer = room(tail, HEADER_SIZE + 16, &at);
    if (buffer == NULL) {
        if (PyErr_Occurred()) return NULL;
        Py_RETURN_NONE;
    }
    unsigned char *out = (unsigned char *)PyByteArray_AS_STRING(buffer) + at;
    put_u64(out + HEADER_SIZE, queue_id);
    put_u64(out + HEADER_SIZE + 8, message_id);
    unsigned char kind = DEQUEUE_KIND;
    put_header(out, 16, crc32c(crc32c(0, &kind, 1), out + HEADER_SIZE, 16), DEQUEUE_KIND);
    return counted(tail, buffer, at, HEADER_SIZE + 16, 1);
}

static PyMethodDef methods[] = {
    {"append", (PyCFunction)(void (*)(void))append, METH_FASTCALL,
     "append(tail, record, count): tail.py's append, natively."},
    {"append_message_with_enqueue", (PyCFunction)(void (*)(void))append_message_with_enqueue,
     METH_FASTCALL,
     "append_message_with_enqueue(tail, message_id, exchange, routing_key, properties, body, "
     "queue_id, position, expires_at_ms): tail.py's, natively."},
    {"append_dequeue", (PyCFunction)(void (*)(void))append_dequeue, METH_FASTCALL,
     "append_dequeue(tail, queue_id, message_id): tail.py's, natively."},
    {"encode_message_with_enqueue", (PyCFunction)(void (*)(void))encode_message_with_enqueue,
     METH_FASTCALL,
     "encode_message_with_enqueue(message_id, route, properties, body, queue_id, position, "
     "expires_at_ms): a MESSAGE record and its first ENQUEUE, as records.py encodes them."},
    {"encode_dequeue", (PyCFunction)(void (*)(void))encode_dequeue, METH_FASTCALL,
     "encode_dequeue(queue_id, message_id): a DEQUEUE record, as records.py encodes it."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "broker.store._records",
    "The store's publish-path records, encoded natively.", -1, methods,
};

PyMODINIT_FUNC PyInit__records(void) {
    const uint16_t probe = 1;
    if (*(const unsigned char *)&probe != 1) { /* the software CRC reads words */
        PyErr_SetString(PyExc_ImportError, "the native records need a little-endian host");
        return NULL;
    }
    crc_init();
    records_name = PyUnicode_InternFromString("records");
    if (records_name == NULL || PyType_Ready(&TailType) < 0) return NULL;
    PyObject *module = PyModule_Create(&module_def);
    if (module == NULL) return NULL;
    if (PyModule_AddObjectRef(module, "Tail", (PyObject *)&TailType) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
