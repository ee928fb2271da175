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
#include <structmember.h>
#include <stdint.h>
#include <string.h>

#define HEADER_SIZE 24  /* segment header: magic, number, next id */
#define RECORD_HEADER 9 /* u32 length, u32 crc, u8 kind */
#define MAX_PAYLOAD (1u << 30)

enum { KIND_MESSAGE = 7, KIND_ENQUEUE = 8, KIND_DEQUEUE = 9, KIND_DELIVERED = 10 };
/* what walk() stopped at */
enum { END = 0, OTHER = 1, BAD = 2, UNDECODABLE = 3 };

#include "_crc32c.h"

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

/* The int of an id, the previous one's object again when it is the same id: a queue id (a
 * store holds few queues; fold() then finds the queue's list by identity), or a message id
 * (a message's content record is followed by its enqueue: one int a message spared). */
typedef struct {
    PyObject *object;
    uint64_t value;
} IdCache;

static PyObject *cached_id(IdCache *cache, uint64_t value) {
    if (cache->object == NULL || cache->value != value) {
        PyObject *object = PyLong_FromUnsignedLongLong(value);
        if (object == NULL) return NULL;
        Py_XDECREF(cache->object);
        cache->object = object;
        cache->value = value;
    }
    Py_INCREF(cache->object);
    return cache->object;
}

/* (queue id, message id): a new tuple. */
static PyObject *pair(IdCache *queues, IdCache *messages, uint64_t a, uint64_t b) {
    PyObject *x = cached_id(queues, a);
    PyObject *y = x ? cached_id(messages, b) : NULL;
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
    IdCache queues = {0}, message_ids = {0};
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
            PyObject *k = pair(&queues, &message_ids, be64(payload), message_id);
            if (k == NULL) goto done;
            PyObject *v = PyTuple_New(3);
            PyObject *position = v ? PyLong_FromUnsignedLongLong(be64(payload + 16)) : NULL;
            PyObject *expires = position ? PyLong_FromUnsignedLongLong(be64(payload + 24)) : NULL;
            if (v != NULL) {
                PyTuple_SET_ITEM(v, 0, position); /* NULL-safe: the tuple's dealloc skips */
                PyTuple_SET_ITEM(v, 1, expires);
                Py_INCREF(number);
                PyTuple_SET_ITEM(v, 2, number);
            }
            if (expires == NULL || PyDict_SetItem(enqueued, k, v) < 0) {
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
            items[0] = cached_id(&message_ids, message_id);
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
            PyObject *k = pair(&queues, &message_ids, be64(payload), be64(payload + 8));
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
    Py_XDECREF(queues.object);
    Py_XDECREF(message_ids.object);
    Py_XDECREF(properties);
    PyBuffer_Release(&buffer);
    return result;
}

/* fold(enqueued, lists, dequeued, delivered, messages, where, used, uses, live, recovered_type,
 *      unsorted)
 *
 * The hot loop of Recovery.state (one pass over every enqueue, see there): for each
 * enqueue on a recovered queue (``lists``: queue id -> its list) and not dequeued, append a
 * ``recovered_type`` (message id, position, expiry, delivered) to its queue's list, and fill
 * the ledger's dicts: ``used`` (message id -> content), ``uses`` (message id -> [segment of
 * its content, live enqueues]), ``live`` ((queue id, message id) -> segment); ``unsorted``
 * gets the id of each queue whose list is not in position order (an enqueue after one of a
 * higher position: compaction moved it; the caller sorts those lists only). Returns None,
 * or (segment, message id) of an enqueue whose content is missing (a damaged store). */
static PyObject *fold(PyObject *self, PyObject *args) {
    PyObject *enqueued, *lists, *dequeued, *delivered, *messages, *where, *used, *uses, *live,
        *unsorted;
    PyTypeObject *recovered_type;
    (void)self;
    if (!PyArg_ParseTuple(args, "O!O!O!O!O!O!O!O!O!O!O!", &PyDict_Type, &enqueued, &PyDict_Type,
                          &lists, &PySet_Type, &dequeued, &PySet_Type, &delivered, &PyDict_Type,
                          &messages, &PyDict_Type, &where, &PyDict_Type, &used, &PyDict_Type,
                          &uses, &PyDict_Type, &live, &PyType_Type, &recovered_type, &PySet_Type,
                          &unsorted))
        return NULL;
    if (!PyType_IsSubtype(recovered_type, &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "recovered_type must be a tuple subclass");
        return NULL;
    }
    Py_ssize_t i = 0;
    PyObject *key, *value;
    /* The last queue id object and its list (the walk shares a queue id's int between
     * consecutive records, so most lookups are an identity compare). */
    PyObject *last_queue = NULL, *last_list = NULL;
    /* Nearly always empty after a crash (DELIVERED records are written at a clean stop),
     * and often small: no hash and probe of each key in an empty set. */
    const int any_dequeued = PySet_GET_SIZE(dequeued) > 0;
    const int any_delivered = PySet_GET_SIZE(delivered) > 0;
    while (PyDict_Next(enqueued, &i, &key, &value)) {
        if (!PyTuple_CheckExact(key) || PyTuple_GET_SIZE(key) != 2 ||
            !PyTuple_CheckExact(value) || PyTuple_GET_SIZE(value) != 3) {
            PyErr_SetString(PyExc_TypeError, "enqueued: (queue, message) -> (pos, exp, seg)");
            return NULL;
        }
        PyObject *queue = PyTuple_GET_ITEM(key, 0);
        PyObject *list;
        if (queue == last_queue) {
            list = last_list;
        } else {
            list = PyDict_GetItemWithError(lists, queue);
            if (list == NULL && PyErr_Occurred()) return NULL;
            if (list != NULL && !PyList_Check(list)) {
                PyErr_SetString(PyExc_TypeError, "lists: queue id -> list");
                return NULL;
            }
            last_queue = queue; /* borrowed: enqueued and lists hold them meanwhile */
            last_list = list;
        }
        if (list == NULL) continue;
        if (any_dequeued) {
            int gone = PySet_Contains(dequeued, key);
            if (gone < 0) return NULL;
            if (gone) continue;
        }
        PyObject *message_id = PyTuple_GET_ITEM(key, 1);
        PyObject *segment = PyTuple_GET_ITEM(value, 2);
        /* The usual case first: the message's first live enqueue. Its [segment, 1] is put
         * in ``uses`` by one setdefault (a lookup and an insert in one probe); when
         * another enqueue put it there before, that one's count goes up instead. */
        PyObject *content = PyDict_GetItemWithError(messages, message_id);
        if (content == NULL) {
            if (PyErr_Occurred()) return NULL;
            if (PyDict_GetItemWithError(uses, message_id) == NULL) {
                if (PyErr_Occurred()) return NULL;
                return Py_BuildValue("(OO)", segment, message_id);
            }
        }
        PyObject *use = NULL;
        if (content != NULL) {
            PyObject *at = PyDict_GetItemWithError(where, message_id);
            if (at == NULL) {
                if (!PyErr_Occurred()) PyErr_SetObject(PyExc_KeyError, message_id);
                return NULL;
            }
            PyObject *one = PyLong_FromLong(1);
            PyObject *fresh = one ? PyList_New(2) : NULL;
            if (fresh == NULL) {
                Py_XDECREF(one);
                return NULL;
            }
            Py_INCREF(at);
            PyList_SET_ITEM(fresh, 0, at);
            PyList_SET_ITEM(fresh, 1, one);
            use = PyDict_SetDefault(uses, message_id, fresh);
            Py_DECREF(fresh); /* ``uses`` holds it when it was put there */
            if (use == NULL) return NULL;
            if (use == fresh) {
                if (PyDict_SetItem(used, message_id, content) < 0) return NULL;
                use = NULL;
            }
        } else {
            use = PyDict_GetItemWithError(uses, message_id);
        }
        if (use != NULL) {
            if (!PyList_Check(use) || PyList_GET_SIZE(use) != 2) {
                PyErr_SetString(PyExc_TypeError, "uses: message id -> [segment, enqueues]");
                return NULL;
            }
            long count = PyLong_AsLong(PyList_GET_ITEM(use, 1));
            if (count == -1 && PyErr_Occurred()) return NULL;
            PyObject *more = PyLong_FromLong(count + 1);
            if (more == NULL || PyList_SetItem(use, 1, more) < 0) return NULL;
        }
        if (PyDict_SetItem(live, key, segment) < 0) return NULL;
        int was_delivered = 0;
        if (any_delivered) {
            was_delivered = PySet_Contains(delivered, key);
            if (was_delivered < 0) return NULL;
        }
        PyObject *position = PyTuple_GET_ITEM(value, 0);
        Py_ssize_t size = PyList_GET_SIZE(list);
        if (size > 0) {
            PyObject *before = PyList_GET_ITEM(list, size - 1);
            if (!PyTuple_Check(before) || PyTuple_GET_SIZE(before) != 4) {
                PyErr_SetString(PyExc_TypeError, "lists: lists of recovered messages");
                return NULL;
            }
            int lower = PyObject_RichCompareBool(position, PyTuple_GET_ITEM(before, 1), Py_LT);
            if (lower < 0 || (lower && PySet_Add(unsorted, queue) < 0)) return NULL;
        }
        PyObject *recovered = recovered_type->tp_alloc(recovered_type, 4);
        if (recovered == NULL) return NULL;
        PyObject *flag = was_delivered ? Py_True : Py_False;
        PyObject *items[4] = {message_id, position, PyTuple_GET_ITEM(value, 1), flag};
        for (int k = 0; k < 4; k++) {
            Py_INCREF(items[k]);
            PyTuple_SET_ITEM(recovered, k, items[k]);
        }
        int failed = PyList_Append(list, recovered) < 0;
        Py_DECREF(recovered);
        if (failed) return NULL;
    }
    Py_RETURN_NONE;
}

/* -- objects from templates ------------------------------------------------------------
 * The offsets of a __slots__ class's attributes, from its member descriptors (each an
 * object slot, as __slots__ makes them). */
typedef struct {
    Py_ssize_t count;
    Py_ssize_t offsets[32];
} Slots;

static int slots_of(PyTypeObject *type, PyObject *descriptors, Slots *slots) {
    if (!PyTuple_Check(descriptors) || PyTuple_GET_SIZE(descriptors) > 32) {
        PyErr_SetString(PyExc_TypeError, "slots: a tuple of at most 32 member descriptors");
        return -1;
    }
    slots->count = PyTuple_GET_SIZE(descriptors);
    for (Py_ssize_t i = 0; i < slots->count; i++) {
        PyObject *d = PyTuple_GET_ITEM(descriptors, i);
        if (!PyObject_TypeCheck(d, &PyMemberDescr_Type) ||
            ((PyDescrObject *)d)->d_type != type) {
            PyErr_SetString(PyExc_TypeError, "slots: member descriptors of the type");
            return -1;
        }
        PyMemberDef *member = ((PyMemberDescrObject *)d)->d_member;
        if (member->type != T_OBJECT_EX || member->offset < (Py_ssize_t)sizeof(PyObject) ||
            member->offset + (Py_ssize_t)sizeof(PyObject *) > type->tp_basicsize) {
            PyErr_SetString(PyExc_TypeError, "slots: object slots only");
            return -1;
        }
        slots->offsets[i] = member->offset;
    }
    return 0;
}

#define SLOT(object, offset) (*(PyObject **)((char *)(object) + (offset)))

/* A new object of ``template``'s type holding what it holds (a dict: a copy of it). */
static PyObject *copy_of(PyObject *template, const Slots *slots) {
    PyTypeObject *type = Py_TYPE(template);
    PyObject *object = type->tp_alloc(type, 0);
    if (object == NULL) return NULL;
    for (Py_ssize_t i = 0; i < slots->count; i++) {
        PyObject *value = SLOT(template, slots->offsets[i]);
        if (value != NULL && PyDict_CheckExact(value)) {
            value = PyDict_Copy(value);
            if (value == NULL) {
                Py_DECREF(object);
                return NULL;
            }
        } else {
            Py_XINCREF(value);
        }
        SLOT(object, slots->offsets[i]) = value;
    }
    return object;
}

static void put(PyObject *object, Py_ssize_t offset, PyObject *value) {
    PyObject *old = SLOT(object, offset);
    Py_INCREF(value);
    SLOT(object, offset) = value;
    Py_XDECREF(old);
}

/* entries(recovered, contents, shared, make_message, message_slots, message_fields,
 *         entry_template, entry_slots, entry_fields, now, wall_now_ms, crashed)
 *     -> (entries, body bytes)
 *
 * The hot loop of MessageStore.recover_into: one Entry per RecoveredMessage of
 * ``recovered`` (message id, position, expiry ms, delivered), on a Message of its content
 * (``contents``: message id -> MessageRecord). The first message of each distinct
 * properties is made by ``make_message(exchange, routing_key, properties, body)`` (the
 * class itself: everything it derives from the properties, computed once); the others are
 * copies of it with their own exchange, routing key, body and store id (``message_fields``:
 * those four descriptors). Entries are copies of ``entry_template`` with their message,
 * position, expiry (``now`` + what is left of it, None for none) and delivery count
 * (1 when delivered or ``crashed``). ``shared``: a dict (message id -> Message) when a
 * message may be on several queues, else None. ``body bytes``: the sum of the entries'
 * message body sizes (what Queue.restore would count). Each content used is taken out of
 * ``contents`` once its message is made (a message on several queues: then it is in
 * ``shared``), and ``recovered`` is emptied, each one freed once its entry is made. */
static PyObject *entries(PyObject *self, PyObject *args) {
    PyObject *recovered, *contents, *shared, *make_message, *message_descriptors,
        *message_fields, *entry_template, *entry_descriptors, *entry_fields;
    double now, wall_now_ms;
    int crashed;
    (void)self;
    if (!PyArg_ParseTuple(args, "O!O!OOO!O!OO!O!ddp", &PyList_Type, &recovered, &PyDict_Type,
                          &contents, &shared, &make_message, &PyTuple_Type,
                          &message_descriptors, &PyTuple_Type, &message_fields,
                          &entry_template, &PyTuple_Type, &entry_descriptors, &PyTuple_Type,
                          &entry_fields, &now, &wall_now_ms, &crashed))
        return NULL;
    if (shared != Py_None && !PyDict_Check(shared)) {
        PyErr_SetString(PyExc_TypeError, "shared: a dict or None");
        return NULL;
    }
    if (!PyType_Check(make_message)) {
        PyErr_SetString(PyExc_TypeError, "make_message: the message class");
        return NULL;
    }
    Slots message_slots, message_at, entry_slots, entry_at;
    PyTypeObject *entry_type = Py_TYPE(entry_template);
    if (slots_of((PyTypeObject *)make_message, message_descriptors, &message_slots) < 0 ||
        slots_of((PyTypeObject *)make_message, message_fields, &message_at) < 0 ||
        slots_of(entry_type, entry_descriptors, &entry_slots) < 0 ||
        slots_of(entry_type, entry_fields, &entry_at) < 0)
        return NULL;
    if (message_at.count != 4 || entry_at.count != 4) {
        PyErr_SetString(PyExc_TypeError, "fields: four descriptors each");
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(recovered);
    Py_ssize_t body_bytes = 0;
    PyObject *out = PyList_New(n);
    PyObject *templates = PyDict_New(); /* properties -> the first Message with them */
    PyObject *one = PyLong_FromLong(1), *zero = PyLong_FromLong(0);
    if (out == NULL || templates == NULL || one == NULL || zero == NULL) goto fail;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyList_GET_ITEM(recovered, i);
        if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 4) {
            PyErr_SetString(PyExc_TypeError, "recovered: (id, position, expiry, delivered)");
            goto fail;
        }
        PyObject *message_id = PyTuple_GET_ITEM(item, 0);
        PyObject *message = NULL;
        if (shared != Py_None) {
            message = PyDict_GetItemWithError(shared, message_id);
            if (message == NULL && PyErr_Occurred()) goto fail;
            Py_XINCREF(message);
        }
        if (message == NULL) {
            PyObject *content = PyDict_GetItemWithError(contents, message_id);
            if (content == NULL) {
                if (!PyErr_Occurred()) PyErr_SetObject(PyExc_KeyError, message_id);
                goto fail;
            }
            if (!PyTuple_Check(content) || PyTuple_GET_SIZE(content) != 5) {
                PyErr_SetString(PyExc_TypeError, "contents: message id -> MessageRecord");
                goto fail;
            }
            PyObject *exchange = PyTuple_GET_ITEM(content, 1);
            PyObject *key = PyTuple_GET_ITEM(content, 2);
            PyObject *properties = PyTuple_GET_ITEM(content, 3);
            PyObject *body = PyTuple_GET_ITEM(content, 4);
            PyObject *template = PyDict_GetItemWithError(templates, properties);
            if (template == NULL) {
                if (PyErr_Occurred()) goto fail;
                message = PyObject_CallFunctionObjArgs(make_message, exchange, key, properties,
                                                       body, NULL);
                if (message == NULL) goto fail;
                if (Py_TYPE(message) != (PyTypeObject *)make_message ||
                    PyDict_SetItem(templates, properties, message) < 0) {
                    if (!PyErr_Occurred())
                        PyErr_SetString(PyExc_TypeError, "make_message made another type");
                    Py_DECREF(message);
                    goto fail;
                }
            } else {
                message = copy_of(template, &message_slots);
                if (message == NULL) goto fail;
                put(message, message_at.offsets[0], exchange);
                put(message, message_at.offsets[1], key);
                put(message, message_at.offsets[2], body);
            }
            put(message, message_at.offsets[3], message_id);
            if (shared != Py_None && PyDict_SetItem(shared, message_id, message) < 0) {
                Py_DECREF(message);
                goto fail;
            }
            /* Its content record is freed now, while its body is in the cache: freed
             * later with the rest of the state, the body's refcount of each would be a
             * cache miss (0.3 CPU s for 1M x 1 KiB, docs/benchmarks.md). */
            if (PyDict_DelItem(contents, message_id) < 0) {
                Py_DECREF(message);
                goto fail;
            }
        }
        PyObject *entry = copy_of(entry_template, &entry_slots);
        if (entry == NULL) {
            Py_DECREF(message);
            goto fail;
        }
        put(entry, entry_at.offsets[0], message);
        PyObject *body_now = SLOT(message, message_at.offsets[2]);
        if (body_now != NULL && PyBytes_Check(body_now)) body_bytes += PyBytes_GET_SIZE(body_now);
        Py_DECREF(message);
        put(entry, entry_at.offsets[1], PyTuple_GET_ITEM(item, 1));
        PyObject *expiry = PyTuple_GET_ITEM(item, 2);
        double expires_at_ms = PyFloat_AsDouble(expiry);
        if (expires_at_ms == -1.0 && PyErr_Occurred()) {
            Py_DECREF(entry);
            goto fail;
        }
        if (expires_at_ms != 0.0) {
            PyObject *at = PyFloat_FromDouble(now + (expires_at_ms - wall_now_ms) / 1000.0);
            if (at == NULL) {
                Py_DECREF(entry);
                goto fail;
            }
            put(entry, entry_at.offsets[2], at);
            Py_DECREF(at);
        } else {
            put(entry, entry_at.offsets[2], Py_None);
        }
        int was_delivered = PyObject_IsTrue(PyTuple_GET_ITEM(item, 3));
        if (was_delivered < 0) {
            Py_DECREF(entry);
            goto fail;
        }
        put(entry, entry_at.offsets[3], was_delivered || crashed ? one : zero);
        PyList_SET_ITEM(out, i, entry);
        /* The recovered message is used: freed now, while it is in the cache. */
        Py_INCREF(Py_None);
        PyList_SET_ITEM(recovered, i, Py_None);
        Py_DECREF(item);
    }
    if (PyList_SetSlice(recovered, 0, n, NULL) < 0) goto fail;
    Py_DECREF(templates);
    Py_DECREF(one);
    Py_DECREF(zero);
    PyObject *result = Py_BuildValue("(Nn)", out, body_bytes);
    return result;
fail:
    Py_XDECREF(out);
    Py_XDECREF(templates);
    Py_XDECREF(one);
    Py_XDECREF(zero);
    return NULL;
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
    {"fold", fold, METH_VARARGS, "Recovery.state's pass over the enqueues (see the source)."},
    {"entries", entries, METH_VARARGS, "Entries and messages of a recovered queue (source)."},
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
