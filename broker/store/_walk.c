/* The segment walker of the store's recovery, in C (docs/store.md, "Recovery").
 *
 * Sans-I/O like broker/store/recovery.py, whose pure-Python walker it replaces when it is
 * built: bytes in, the folded records out. walk() reads the records of one segment from an
 * offset, checks each one's CRC-32C and folds the four kinds that make nearly every record
 * (MESSAGE, ENQUEUE, DEQUEUE, DELIVERED) into the caller's dicts and sets exactly as
 * Recovery._read_records does; it stops at the end, at a record of another kind (the
 * caller decodes it and calls again after it), at a bad record (the caller says whether it
 * is a torn tail or damage, as before) or at a record it cannot decode. The Python walker
 * stays the reference: tests/store/test_native_walk.py checks both give the same.
 *
 * THREAD UNSAFE: called with the GIL held, on dicts and sets the caller owns.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define HEADER_SIZE 24  /* segment header: magic, number, next id */
#define RECORD_HEADER 9 /* u32 length, u32 crc, u8 kind */
#define MAX_PAYLOAD (1u << 30)

enum { KIND_MESSAGE = 7, KIND_ENQUEUE = 8, KIND_DEQUEUE = 9, KIND_DELIVERED = 10 };
/* what walk() stopped at */
enum { END = 0, OTHER = 1, BAD = 2, UNDECODABLE = 3 };

/* -- CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), as the crc32c package ------- */
static uint32_t table[8][256];
static int hardware;

static void crc_init(void) {
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        table[0][n] = c;
    }
    for (uint32_t n = 0; n < 256; n++)
        for (int t = 1; t < 8; t++)
            table[t][n] = (table[t - 1][n] >> 8) ^ table[0][table[t - 1][n] & 0xff];
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    hardware = __builtin_cpu_supports("sse4.2") != 0;
#endif
}

static uint32_t crc_software(uint32_t crc, const unsigned char *p, size_t n) {
    crc = ~crc;
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, p, 8); /* little-endian hosts only (checked at import) */
        v ^= crc;
        crc = table[7][v & 0xff] ^ table[6][(v >> 8) & 0xff] ^ table[5][(v >> 16) & 0xff] ^
              table[4][(v >> 24) & 0xff] ^ table[3][(v >> 32) & 0xff] ^
              table[2][(v >> 40) & 0xff] ^ table[1][(v >> 48) & 0xff] ^ table[0][v >> 56];
        p += 8;
        n -= 8;
    }
    while (n--) crc = (crc >> 8) ^ table[0][(crc ^ *p++) & 0xff];
    return ~crc;
}

#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("sse4.2"))) static uint32_t crc_hardware(uint32_t crc,
                                                               const unsigned char *p,
                                                               size_t n) {
    uint64_t c = ~crc;
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        c = __builtin_ia32_crc32di(c, v);
        p += 8;
        n -= 8;
    }
    uint32_t c32 = (uint32_t)c;
    while (n--) c32 = __builtin_ia32_crc32qi(c32, *p++);
    return ~c32;
}
#endif

static uint32_t crc32c(uint32_t crc, const unsigned char *p, size_t n) {
#if defined(__x86_64__) && defined(__GNUC__)
    if (hardware) return crc_hardware(crc, p, n);
#endif
    return crc_software(crc, p, n);
}

static inline uint32_t be32(const unsigned char *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static inline uint64_t be64(const unsigned char *p) {
    return ((uint64_t)be32(p) << 32) | be32(p + 4);
}

/* A short string's str, the previous one's object again when the bytes are the same
 * (exchange names and routing keys repeat from message to message). */
typedef struct {
    PyObject *text;
    Py_ssize_t size;
    char bytes[256];
} ShortCache;

static PyObject *short_text(ShortCache *cache, const unsigned char *p, Py_ssize_t size) {
    if (cache->text != NULL && cache->size == size && memcmp(cache->bytes, p, size) == 0) {
        Py_INCREF(cache->text);
        return cache->text;
    }
    PyObject *text = PyUnicode_DecodeUTF8((const char *)p, size, NULL);
    if (text == NULL) return NULL;
    Py_XDECREF(cache->text);
    Py_INCREF(text);
    cache->text = text;
    cache->size = size;
    memcpy(cache->bytes, p, size);
    return text;
}

static PyObject *pair(uint64_t a, uint64_t b) {
    PyObject *x = PyLong_FromUnsignedLongLong(a);
    PyObject *y = x ? PyLong_FromUnsignedLongLong(b) : NULL;
    if (y == NULL) {
        Py_XDECREF(x);
        return NULL;
    }
    PyObject *t = PyTuple_New(2);
    if (t == NULL) {
        Py_DECREF(x);
        Py_DECREF(y);
        return NULL;
    }
    PyTuple_SET_ITEM(t, 0, x);
    PyTuple_SET_ITEM(t, 1, y);
    return t;
}

/* A MessageRecord (a tuple subclass without a dict) from its five fields, stolen. */
static PyObject *record5(PyTypeObject *type, PyObject *items[5]) {
    PyObject *t = type->tp_alloc(type, 5);
    if (t == NULL) {
        for (int i = 0; i < 5; i++) Py_DECREF(items[i]);
        return NULL;
    }
    for (int i = 0; i < 5; i++) PyTuple_SET_ITEM(t, i, items[i]);
    return t;
}

static PyObject *stopped(Py_ssize_t pos, Py_ssize_t count, uint64_t top, int status,
                         const char *reason) {
    return Py_BuildValue("(nnKis)", pos, count, (unsigned long long)top, status, reason);
}

/* walk(data, pos, segment, top, enqueued, messages, where, dequeued, delivered,
 *      message_type) -> (pos, count, top, status, reason)
 *
 * Folds the records of ``data`` from ``pos`` until it stops; ``count``: the records folded,
 * ``top``: the highest message id seen (at least the ``top`` given), ``pos``: where it
 * stopped (the end, or the record it did not fold), ``status``: END, OTHER (a valid record
 * of another kind at pos), BAD (a record at pos whose header does not fit, runs past the
 * end or fails its checksum) or UNDECODABLE (``reason`` says why). */
static PyObject *walk(PyObject *self, PyObject *args) {
    Py_buffer buffer;
    Py_ssize_t pos;
    unsigned long long segment, top;
    PyObject *enqueued, *messages, *where, *dequeued, *delivered;
    PyTypeObject *message_type;
    if (!PyArg_ParseTuple(args, "y*nKKO!O!O!O!O!O!", &buffer, &pos, &segment, &top,
                          &PyDict_Type, &enqueued, &PyDict_Type, &messages, &PyDict_Type,
                          &where, &PySet_Type, &dequeued, &PySet_Type, &delivered,
                          &PyType_Type, &message_type))
        return NULL;
    if (!PyType_IsSubtype(message_type, &PyTuple_Type)) {
        PyBuffer_Release(&buffer);
        PyErr_SetString(PyExc_TypeError, "message_type must be a tuple subclass");
        return NULL;
    }
    const unsigned char *data = buffer.buf;
    const Py_ssize_t end = buffer.len;
    Py_ssize_t count = 0;
    PyObject *result = NULL;
    PyObject *number = PyLong_FromUnsignedLongLong(segment);
    ShortCache exchange = {0}, key = {0};
    PyObject *properties = NULL; /* the previous message's, shared when the same */
    if (number == NULL) goto done;
    while (pos < end) {
        if (pos < 0 || end - pos < RECORD_HEADER) {
            result = stopped(pos, count, top, BAD, "");
            goto done;
        }
        const unsigned char *at = data + pos;
        uint32_t length = be32(at);
        uint32_t crc = be32(at + 4);
        int kind = at[8];
        if (length > MAX_PAYLOAD || (Py_ssize_t)length > end - pos - RECORD_HEADER ||
            crc32c(0, at + 8, (size_t)length + 1) != crc) {
            result = stopped(pos, count, top, BAD, "");
            goto done;
        }
        const unsigned char *payload = at + RECORD_HEADER;
        Py_ssize_t next = pos + RECORD_HEADER + length;
        if (kind == KIND_ENQUEUE) {
            if (length != 32) {
                result = stopped(pos, count, top, UNDECODABLE, "undecodable ENQUEUE record");
                goto done;
            }
            uint64_t message_id = be64(payload + 8);
            PyObject *k = pair(be64(payload), message_id);
            if (k == NULL) goto done;
            PyObject *v = Py_BuildValue("(KKO)", (unsigned long long)be64(payload + 16),
                                        (unsigned long long)be64(payload + 24), number);
            if (v == NULL || PyDict_SetItem(enqueued, k, v) < 0) {
                Py_DECREF(k);
                Py_XDECREF(v);
                goto done;
            }
            Py_DECREF(k);
            Py_DECREF(v);
            if (message_id > top) top = message_id;
        } else if (kind == KIND_MESSAGE) {
            const unsigned char *stop = payload + length;
            if (length < 10 || payload + 9 + payload[8] >= stop) {
                result = stopped(pos, count, top, UNDECODABLE,
                                 "message names run past the record");
                goto done;
            }
            uint64_t message_id = be64(payload);
            const unsigned char *x = payload + 9, *x_end = x + payload[8];
            const unsigned char *k = x_end + 1, *k_end = k + *x_end;
            if (k_end + 4 > stop) {
                result = stopped(pos, count, top, UNDECODABLE,
                                 "message names run past the record");
                goto done;
            }
            uint32_t properties_size = be32(k_end);
            const unsigned char *props = k_end + 4;
            if (properties_size > (size_t)(stop - props)) {
                result = stopped(pos, count, top, UNDECODABLE,
                                 "message properties run past the record");
                goto done;
            }
            const unsigned char *body = props + properties_size;
            PyObject *items[5];
            items[0] = PyLong_FromUnsignedLongLong(message_id);
            items[1] = items[0] ? short_text(&exchange, x, x_end - x) : NULL;
            items[2] = items[1] ? short_text(&key, k, k_end - k) : NULL;
            if (items[2] == NULL) {
                Py_XDECREF(items[0]);
                Py_XDECREF(items[1]);
                if (PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) {
                    PyErr_Clear();
                    result = stopped(pos, count, top, UNDECODABLE,
                                     "undecodable record: a name is not UTF-8");
                }
                goto done;
            }
            if (properties != NULL && PyBytes_GET_SIZE(properties) == properties_size &&
                memcmp(PyBytes_AS_STRING(properties), props, properties_size) == 0) {
                Py_INCREF(properties);
                items[3] = properties;
            } else {
                items[3] = PyBytes_FromStringAndSize((const char *)props, properties_size);
                if (items[3] != NULL) {
                    Py_XDECREF(properties);
                    Py_INCREF(items[3]);
                    properties = items[3];
                }
            }
            items[4] = items[3] ? PyBytes_FromStringAndSize((const char *)body, stop - body)
                                : NULL;
            if (items[4] == NULL) {
                for (int i = 0; i < 4; i++) Py_XDECREF(items[i]);
                goto done;
            }
            PyObject *id = items[0];
            Py_INCREF(id);
            PyObject *record = record5(message_type, items);
            if (record == NULL || PyDict_SetItem(messages, id, record) < 0 ||
                PyDict_SetItem(where, id, number) < 0) {
                Py_DECREF(id);
                Py_XDECREF(record);
                goto done;
            }
            Py_DECREF(id);
            Py_DECREF(record);
            if (message_id > top) top = message_id;
        } else if (kind == KIND_DEQUEUE || kind == KIND_DELIVERED) {
            if (length != 16) {
                result = stopped(pos, count, top, UNDECODABLE,
                                 kind == KIND_DEQUEUE ? "undecodable DEQUEUE record"
                                                      : "undecodable DELIVERED record");
                goto done;
            }
            PyObject *k = pair(be64(payload), be64(payload + 8));
            if (k == NULL || PySet_Add(kind == KIND_DEQUEUE ? dequeued : delivered, k) < 0) {
                Py_XDECREF(k);
                goto done;
            }
            Py_DECREF(k);
        } else {
            result = stopped(pos, count, top, OTHER, "");
            goto done;
        }
        count++;
        pos = next;
    }
    result = stopped(pos, count, top, END, "");
done:
    Py_XDECREF(number);
    Py_XDECREF(exchange.text);
    Py_XDECREF(key.text);
    Py_XDECREF(properties);
    PyBuffer_Release(&buffer);
    return result;
}

static PyObject *py_crc32c(PyObject *self, PyObject *args) {
    Py_buffer buffer;
    unsigned int value = 0;
    if (!PyArg_ParseTuple(args, "y*|I", &buffer, &value)) return NULL;
    uint32_t crc = crc32c(value, buffer.buf, buffer.len);
    PyBuffer_Release(&buffer);
    return PyLong_FromUnsignedLong(crc);
}

static PyMethodDef methods[] = {
    {"walk", walk, METH_VARARGS, "Fold a segment's common records (see the module source)."},
    {"crc32c", py_crc32c, METH_VARARGS, "CRC-32C of bytes, continuing from a value."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "broker.store._walk", "The store's native segment walker.", -1,
    methods,
};

PyMODINIT_FUNC PyInit__walk(void) {
    const uint16_t probe = 1;
    if (*(const unsigned char *)&probe != 1) {
        PyErr_SetString(PyExc_ImportError, "the native walker needs a little-endian host");
        return NULL;
    }
    crc_init();
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    if (PyModule_AddIntConstant(m, "END", END) < 0 ||
        PyModule_AddIntConstant(m, "OTHER", OTHER) < 0 ||
        PyModule_AddIntConstant(m, "BAD", BAD) < 0 ||
        PyModule_AddIntConstant(m, "UNDECODABLE", UNDECODABLE) < 0 ||
        PyModule_AddIntConstant(m, "HARDWARE_CRC", hardware) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
