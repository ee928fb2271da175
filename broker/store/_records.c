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
    put_u32(p, (uint32_t)properties.len);
    p += 4;
    memcpy(p, properties.buf, (size_t)properties.len);
    p += properties.len;
    memcpy(p, body.buf, (size_t)body.len);
    p += body.len;
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

static PyMethodDef methods[] = {
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
    return PyModule_Create(&module_def);
}
