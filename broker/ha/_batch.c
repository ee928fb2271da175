/* A replication batch's common events decoded natively (broker/ha/wire_batch.py), and a
 * primary's plain messages packed natively (broker/ha/wire_writers.py, pack_enqueues).
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
 *
 * pack_enqueues() is the other end: a primary packs each message once per backup
 * (ReplicatingSubscription.next_batch, about 1.4 us a message and backup in Python). The
 * plain messages at the head of a backlog (outside any transaction, on the packer's route,
 * values the format carries) are packed here as EnqueuePacker.pack packs them; the first
 * other one is left to Python, which packs it (or names its problem). The same test file
 * holds it to wire_writers._pack_enqueues.
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

static PyObject *str_position, *str_message, *str_exchange, *str_routing_key, *str_properties_raw,
    *str_body, *str_tx, *str_packer_exchange, *str_packer_routing_key, *str_route, *str_lengths;

/* Append one ENQUEUE's parts for ``entry`` (its route the packer's) to ``parts`` and its
 * position to ``ids``; its size, 0 when it is not a plain one (left to Python: a
 * transaction's message, another route, a value the format cannot carry), -1 on error. */
static Py_ssize_t pack_one(PyObject *entry, PyObject *parts, PyObject *ids, PyObject *exchange,
                           PyObject *routing_key, PyObject *route, int exchange_len,
                           int key_len) {
    Py_ssize_t size = 0;
    PyObject *position = NULL, *message = NULL, *tx = NULL, *m_exchange = NULL;
    PyObject *m_key = NULL, *properties = NULL, *body = NULL, *head = NULL;
    if ((position = PyObject_GetAttr(entry, str_position)) == NULL) goto error;
    if ((message = PyObject_GetAttr(entry, str_message)) == NULL) goto error;
    if ((tx = PyObject_GetAttr(message, str_tx)) == NULL) goto error;
    if (tx != Py_None || !PyLong_CheckExact(position)) goto done;
    if ((m_exchange = PyObject_GetAttr(message, str_exchange)) == NULL) goto error;
    if ((m_key = PyObject_GetAttr(message, str_routing_key)) == NULL) goto error;
    int same = PyObject_RichCompareBool(m_exchange, exchange, Py_EQ);
    if (same > 0) same = PyObject_RichCompareBool(m_key, routing_key, Py_EQ);
    if (same < 0) goto error;
    if (!same) goto done;
    if ((properties = PyObject_GetAttr(message, str_properties_raw)) == NULL) goto error;
    if ((body = PyObject_GetAttr(message, str_body)) == NULL) goto error;
    if (!PyBytes_CheckExact(properties) || !PyBytes_CheckExact(body)) goto done;
    int overflow = 0;
    long long id = PyLong_AsLongLongAndOverflow(position, &overflow);
    if (id == -1 && PyErr_Occurred()) goto error;
    Py_ssize_t properties_len = PyBytes_GET_SIZE(properties), body_len = PyBytes_GET_SIZE(body);
    if (overflow || id < 0 || (uint64_t)properties_len > 0xFFFFFFFFu ||
        (uint64_t)body_len > 0xFFFFFFFFu)
        goto done;
    Py_ssize_t route_len = PyBytes_GET_SIZE(route);
    if ((head = PyBytes_FromStringAndSize(NULL, ENQUEUE_HEADER_SIZE + route_len)) == NULL)
        goto error;
    unsigned char *h = (unsigned char *)PyBytes_AS_STRING(head);
    h[0] = ENQUEUE;
    for (int i = 0; i < 8; i++) h[1 + i] = (unsigned char)((uint64_t)id >> (56 - 8 * i));
    h[9] = (unsigned char)exchange_len;
    h[10] = (unsigned char)key_len;
    for (int i = 0; i < 4; i++) {
        h[11 + i] = (unsigned char)((uint64_t)properties_len >> (24 - 8 * i));
        h[15 + i] = (unsigned char)((uint64_t)body_len >> (24 - 8 * i));
    }
    memcpy(h + ENQUEUE_HEADER_SIZE, PyBytes_AS_STRING(route), (size_t)route_len);
    if (PyList_Append(parts, head) < 0 || PyList_Append(parts, properties) < 0 ||
        PyList_Append(parts, body) < 0 || PyList_Append(ids, position) < 0)
        goto error;
    size = ENQUEUE_HEADER_SIZE + route_len + properties_len + body_len;
    goto done;
error:
    size = -1;
done:
    Py_XDECREF(head);
    Py_XDECREF(body);
    Py_XDECREF(properties);
    Py_XDECREF(m_key);
    Py_XDECREF(m_exchange);
    Py_XDECREF(tx);
    Py_XDECREF(message);
    Py_XDECREF(position);
    return size;
}

/* pack_enqueues(packer, backlog, parts, ids, size, budget, max_events) -> size */
static PyObject *pack_enqueues(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 7 || !PyList_CheckExact(args[2]) || !PyList_CheckExact(args[3])) {
        PyErr_SetString(PyExc_TypeError,
                        "pack_enqueues(packer, backlog, parts: list, ids: list, size, budget, "
                        "max_events)");
        return NULL;
    }
    PyObject *packer = args[0], *backlog = args[1], *parts = args[2], *ids = args[3];
    Py_ssize_t size = PyLong_AsSsize_t(args[4]);
    Py_ssize_t budget = PyLong_AsSsize_t(args[5]);
    Py_ssize_t max_events = PyLong_AsSsize_t(args[6]);
    if (PyErr_Occurred()) return NULL;
    PyObject *exchange = NULL, *routing_key = NULL, *route = NULL, *lengths = NULL;
    PyObject *result = NULL, *popleft = NULL;
    if ((popleft = PyObject_GetAttrString(backlog, "popleft")) == NULL) goto done;
    if ((exchange = PyObject_GetAttr(packer, str_packer_exchange)) == NULL) goto done;
    if ((routing_key = PyObject_GetAttr(packer, str_packer_routing_key)) == NULL) goto done;
    if ((route = PyObject_GetAttr(packer, str_route)) == NULL) goto done;
    if ((lengths = PyObject_GetAttr(packer, str_lengths)) == NULL) goto done;
    if (!PyUnicode_CheckExact(exchange) || !PyUnicode_CheckExact(routing_key) ||
        !PyBytes_CheckExact(route) || !PyTuple_CheckExact(lengths) ||
        PyTuple_GET_SIZE(lengths) != 2) {
        result = PyLong_FromSsize_t(size); /* no route yet: Python packs the first one */
        goto done;
    }
    long exchange_len = PyLong_AsLong(PyTuple_GET_ITEM(lengths, 0));
    long key_len = PyLong_AsLong(PyTuple_GET_ITEM(lengths, 1));
    if (PyErr_Occurred()) goto done;
    if (exchange_len < 0 || exchange_len > 255 || key_len < 0 || key_len > 255) {
        result = PyLong_FromSsize_t(size); /* Python's pack raises for it */
        goto done;
    }
    while (PyList_GET_SIZE(ids) < max_events && size < budget) {
        Py_ssize_t left = PyObject_Length(backlog);
        if (left < 0) goto done;
        if (left == 0) break;
        PyObject *entry = PySequence_GetItem(backlog, 0);
        if (entry == NULL) goto done;
        Py_ssize_t packed = pack_one(entry, parts, ids, exchange, routing_key, route,
                                     (int)exchange_len, (int)key_len);
        Py_DECREF(entry);
        if (packed < 0) goto done;
        if (packed == 0) break; /* Python takes it from here */
        PyObject *popped = PyObject_CallNoArgs(popleft);
        if (popped == NULL) goto done;
        Py_DECREF(popped);
        size += packed;
    }
    result = PyLong_FromSsize_t(size);
done:
    Py_XDECREF(popleft);
    Py_XDECREF(lengths);
    Py_XDECREF(route);
    Py_XDECREF(routing_key);
    Py_XDECREF(exchange);
    return result;
}

static PyMethodDef methods[] = {
    {"pack_enqueues", (PyCFunction)(void (*)(void))pack_enqueues, METH_FASTCALL,
     "pack_enqueues(packer, backlog, parts, ids, size, budget, max_events) -> size: the plain"
     " messages at the head of backlog packed as EnqueuePacker.pack packs them"},
    {"decode_simple", (PyCFunction)(void (*)(void))decode_simple, METH_FASTCALL,
     "decode_simple(data, Enqueue, descriptors, Dequeue, decode, QueueCaughtUp, Watermark)"
     " -> list | None: a version 1 batch of common events, as decode_batch decodes it"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_batch", "A replication batch's common events decoded natively.",
    -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__batch(void) {
    const char *names[] = {"position", "message", "exchange", "routing_key", "properties_raw",
                           "body", "tx", "_exchange", "_routing_key", "_route", "_lengths"};
    PyObject **slots[] = {&str_position, &str_message, &str_exchange, &str_routing_key,
                          &str_properties_raw, &str_body, &str_tx, &str_packer_exchange,
                          &str_packer_routing_key, &str_route, &str_lengths};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        *slots[i] = PyUnicode_InternFromString(names[i]);
        if (*slots[i] == NULL) return NULL;
    }
    return PyModule_Create(&module_def);
}
