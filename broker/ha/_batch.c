/* A replication batch's common events decoded natively (broker/ha/wire_batch.py).
 *
 * Every message a primary replicates is decoded by each backup: in Python that was
 * decode_batch's loop, about 2 us a message of a backup's 15 (a struct unpack, four
 * slices, five slot sets a message). decode_simple() decodes a batch of version 1 made of
 * ENQUEUE, DEQUEUE, CAUGHT_UP and WATERMARK events into the same objects decode_batch
 * makes (Enqueue built as decode_batch builds it, without its frozen __init__; a batch's
 * equal routes and property blocks shared as decode_batch shares them; the rest built by
 * calling their classes, a DEQUEUE's ids by IdSet.decode). Anything else (another version,
 * another event, anything malformed, a ValueError of IdSet.decode) answers None, and
 * decode_batch decodes the batch in Python, which names the problem: one decoder's rules,
 * one set of errors. tests/ha/test_native_batch.py holds the two to the same events for
 * any batch (hypothesis).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define VERSION 1
#define ENQUEUE 1
#define DEQUEUE 2
#define CAUGHT_UP 3
#define WATERMARK 6
#define ENQUEUE_HEADER_SIZE 19 /* type, id (q), exchange (B), routing key (B), props, body (I) */

static uint64_t be64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v = (v << 8) | p[i];
    return v;
}

static uint32_t be32(const unsigned char *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

/* Set a slot through its member descriptor (as decode_batch's _ENQUEUE_SETTERS do). */
static int set_slot(PyObject *descriptor, PyObject *object, PyObject *value) {
    descrsetfunc set = Py_TYPE(descriptor)->tp_descr_set;
    if (set == NULL) {
        PyErr_SetString(PyExc_TypeError, "not a slot descriptor");
        return -1;
    }
    return set(descriptor, object, value);
}

/* decode_simple(data, Enqueue, (id, exchange, routing_key, properties, body descriptors),
 *               Dequeue, IdSet.decode, QueueCaughtUp, Watermark) -> list | None */
static PyObject *decode_simple(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 7 || !PyBytes_CheckExact(args[0]) || !PyType_Check(args[1]) ||
        !PyTuple_CheckExact(args[2]) || PyTuple_GET_SIZE(args[2]) != 5) {
        PyErr_SetString(PyExc_TypeError,
                        "decode_simple(data: bytes, Enqueue, descriptors, Dequeue, decode, "
                        "QueueCaughtUp, Watermark)");
        return NULL;
    }
    PyObject *data = args[0];
    PyTypeObject *enqueue_type = (PyTypeObject *)args[1];
    PyObject *const *slots = &PyTuple_GET_ITEM(args[2], 0);
    PyObject *dequeue_type = args[3], *decode_ids = args[4], *caught_up_type = args[5];
    PyObject *watermark_type = args[6];
    const unsigned char *bytes = (const unsigned char *)PyBytes_AS_STRING(data);
    Py_ssize_t end = PyBytes_GET_SIZE(data);
    if (end == 0 || bytes[0] != VERSION) Py_RETURN_NONE;

    PyObject *events = PyList_New(0);
    PyObject *empty = PyTuple_New(0);
    /* The shared pieces: the last route's strs and bytes, the last properties block. */
    PyObject *exchange = NULL, *routing_key = NULL, *route = NULL, *properties = NULL;
    Py_ssize_t route_exchange_len = -1, route_key_len = -1;
    int fallback = 0;
    if (events == NULL || empty == NULL) goto error;
    properties = PyBytes_FromStringAndSize(NULL, 0);
    if (properties == NULL) goto error;

    Py_ssize_t pos = 1;
    while (pos < end) {
        int kind = bytes[pos];
        if (kind == ENQUEUE) {
            Py_ssize_t start = pos + ENQUEUE_HEADER_SIZE;
            if (start > end) goto fall_back;
            const unsigned char *h = bytes + pos + 1;
            uint64_t id = be64(h);
            Py_ssize_t exchange_len = h[8], key_len = h[9];
            uint64_t properties_len = be32(h + 10), body_len = be32(h + 14);
            Py_ssize_t key_start = start + exchange_len;
            Py_ssize_t properties_start = key_start + key_len;
            if (properties_start > end || (uint64_t)(end - properties_start) < properties_len)
                goto fall_back;
            Py_ssize_t body_start = properties_start + (Py_ssize_t)properties_len;
            if ((uint64_t)(end - body_start) < body_len) goto fall_back;
            Py_ssize_t next_pos = body_start + (Py_ssize_t)body_len;
            if (id >> 63) goto fall_back; /* a negative ">q": decode_batch's error */
            if (exchange_len != route_exchange_len || key_len != route_key_len ||
                memcmp(PyBytes_AS_STRING(route), bytes + start, exchange_len + key_len) != 0) {
                PyObject *new_exchange = PyUnicode_DecodeUTF8((const char *)bytes + start,
                                                              exchange_len, NULL);
                if (new_exchange == NULL) goto fall_back_on_error;
                PyObject *new_key = PyUnicode_DecodeUTF8((const char *)bytes + key_start,
                                                         key_len, NULL);
                if (new_key == NULL) {
                    Py_DECREF(new_exchange);
                    goto fall_back_on_error;
                }
                PyObject *new_route = PyBytes_FromStringAndSize((const char *)bytes + start,
                                                                exchange_len + key_len);
                if (new_route == NULL) {
                    Py_DECREF(new_exchange);
                    Py_DECREF(new_key);
                    goto error;
                }
                Py_XSETREF(exchange, new_exchange);
                Py_XSETREF(routing_key, new_key);
                Py_XSETREF(route, new_route);
                route_exchange_len = exchange_len;
                route_key_len = key_len;
            }
            if ((uint64_t)PyBytes_GET_SIZE(properties) != properties_len ||
                memcmp(PyBytes_AS_STRING(properties), bytes + properties_start,
                       (size_t)properties_len) != 0) {
                PyObject *block = PyBytes_FromStringAndSize(
                    (const char *)bytes + properties_start, (Py_ssize_t)properties_len);
                if (block == NULL) goto error;
                Py_SETREF(properties, block);
            }
            PyObject *body = PyBytes_FromStringAndSize((const char *)bytes + body_start,
                                                       (Py_ssize_t)body_len);
            if (body == NULL) goto error;
            PyObject *event = PyBaseObject_Type.tp_new(enqueue_type, empty, NULL);
            PyObject *id_object = event == NULL ? NULL : PyLong_FromUnsignedLongLong(id);
            int failed = id_object == NULL || set_slot(slots[0], event, id_object) < 0 ||
                         set_slot(slots[1], event, exchange) < 0 ||
                         set_slot(slots[2], event, routing_key) < 0 ||
                         set_slot(slots[3], event, properties) < 0 ||
                         set_slot(slots[4], event, body) < 0;
            Py_XDECREF(id_object);
            Py_DECREF(body);
            if (failed || PyList_Append(events, event) < 0) {
                Py_XDECREF(event);
                goto error;
            }
            Py_DECREF(event);
            pos = next_pos;
        } else if (kind == DEQUEUE) {
            Py_ssize_t start = pos + 5;
            if (start > end) goto fall_back;
            uint64_t length = be32(bytes + pos + 1);
            if ((uint64_t)(end - start) < length) goto fall_back;
            Py_ssize_t next_pos = start + (Py_ssize_t)length;
            PyObject *encoded = PyBytes_FromStringAndSize((const char *)bytes + start,
                                                          (Py_ssize_t)length);
            if (encoded == NULL) goto error;
            PyObject *ids = PyObject_CallOneArg(decode_ids, encoded);
            Py_DECREF(encoded);
            if (ids == NULL) {
                if (PyErr_ExceptionMatches(PyExc_ValueError)) goto fall_back_on_error;
                goto error;
            }
            PyObject *event = PyObject_CallOneArg(dequeue_type, ids);
            Py_DECREF(ids);
            if (event == NULL || PyList_Append(events, event) < 0) {
                Py_XDECREF(event);
                goto error;
            }
            Py_DECREF(event);
            pos = next_pos;
        } else if (kind == CAUGHT_UP) {
            PyObject *event = PyObject_CallNoArgs(caught_up_type);
            if (event == NULL || PyList_Append(events, event) < 0) {
                Py_XDECREF(event);
                goto error;
            }
            Py_DECREF(event);
            pos += 1;
        } else if (kind == WATERMARK) {
            if (pos + 9 > end) goto fall_back;
            uint64_t position = be64(bytes + pos + 1);
            if (position >> 63) goto fall_back; /* decode_batch's error */
            PyObject *number = PyLong_FromUnsignedLongLong(position);
            PyObject *event = number == NULL ? NULL : PyObject_CallOneArg(watermark_type, number);
            Py_XDECREF(number);
            if (event == NULL || PyList_Append(events, event) < 0) {
                Py_XDECREF(event);
                goto error;
            }
            Py_DECREF(event);
            pos += 9;
        } else {
            goto fall_back; /* a transaction's events, or an unknown one */
        }
    }
    goto done;

fall_back_on_error:
    PyErr_Clear();
fall_back:
    fallback = 1;
    goto done;
error:
    Py_CLEAR(events);
done:
    Py_XDECREF(empty);
    Py_XDECREF(exchange);
    Py_XDECREF(routing_key);
    Py_XDECREF(route);
    Py_XDECREF(properties);
    if (fallback) {
        Py_CLEAR(events);
        Py_RETURN_NONE;
    }
    return events;
}

static PyMethodDef methods[] = {
    {"decode_simple", (PyCFunction)(void (*)(void))decode_simple, METH_FASTCALL,
     "decode_simple(data, Enqueue, descriptors, Dequeue, decode, QueueCaughtUp, Watermark)"
     " -> list | None: a version 1 batch of common events, as decode_batch decodes it"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_batch", "A replication batch's common events decoded natively.",
    -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__batch(void) { return PyModule_Create(&module_def); }
