/* The ledger's two per-message operations, natively (broker/store/ledger.py).
 *
 * Every persistent message on a durable queue costs a broker one message_enqueued (its
 * content and first enqueue, appended together) and one dequeued (its acknowledgement, or
 * on a backup the primary's DEQUEUE): in Python they were six method calls and about 60
 * bytecodes between them, on all three brokers of a cluster. Here they are one call each,
 * on the same objects: the shards of broker/store/id_shards.py (their ``_shards`` dicts:
 * shard number -> {message id: [segment, enqueues]} and {(queue id, message id): segment}),
 * the ledger's ``segments`` ({segment: SegmentUse}) and its ``delivered`` set. Nothing else
 * changes: compaction, recovery and the other ledger operations read and write the same
 * dicts. broker/store/ledger.py's ``_message_enqueued`` and ``_dequeued`` are the same
 * operations in Python, used where this module is not built;
 * tests/store/test_native_ledger.py runs both on any sequence of operations (hypothesis).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#define SHARD_BITS 15

static PyObject *str_shards, *str_live, *shard_bits, *zero;

/* The ``_shards`` dict of a MessageShards or EnqueueShards (a new reference). */
static PyObject *shards_of(PyObject *owner) {
    PyObject *shards = PyObject_GetAttr(owner, str_shards);
    if (shards != NULL && !PyDict_CheckExact(shards)) {
        PyErr_SetString(PyExc_TypeError, "_shards must be a dict");
        Py_DECREF(shards);
        return NULL;
    }
    return shards;
}

/* ``segments.get(segment).live += delta`` when the segment is known. 0, or -1 on error. */
static int add_live(PyObject *segments, PyObject *segment, long delta) {
    PyObject *use = PyDict_GetItemWithError(segments, segment); /* borrowed */
    if (use == NULL) return PyErr_Occurred() ? -1 : 0;
    Py_INCREF(use);
    int result = -1;
    PyObject *live = PyObject_GetAttr(use, str_live);
    if (live != NULL) {
        PyObject *by = PyLong_FromLong(delta);
        PyObject *sum = by == NULL ? NULL : PyNumber_Add(live, by);
        if (sum != NULL) {
            result = PyObject_SetAttr(use, str_live, sum);
            Py_DECREF(sum);
        }
        Py_XDECREF(by);
        Py_DECREF(live);
    }
    Py_DECREF(use);
    return result;
}

/* The shard of ``number`` in ``shards`` (borrowed), made when ``create``; NULL without an
 * error when it has none. */
static PyObject *shard_at(PyObject *shards, PyObject *number, int create) {
    PyObject *shard = PyDict_GetItemWithError(shards, number);
    if (shard != NULL || PyErr_Occurred() || !create) return shard;
    PyObject *fresh = PyDict_New();
    if (fresh == NULL) return NULL;
    int failed = PyDict_SetItem(shards, number, fresh);
    Py_DECREF(fresh); /* the shards hold it */
    return failed ? NULL : fresh;
}

/* message_enqueued(messages, enqueues, segments, key, segment): Ledger.message_enqueued
 * after its index is dropped. */
static PyObject *message_enqueued(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "message_enqueued takes 5 arguments");
        return NULL;
    }
    PyObject *segments = args[2], *key = args[3], *segment = args[4];
    if (!PyDict_CheckExact(segments) || !PyTuple_CheckExact(key) || PyTuple_GET_SIZE(key) != 2) {
        PyErr_SetString(PyExc_TypeError, "message_enqueued: a dict of segments, a (queue, id) key");
        return NULL;
    }
    PyObject *message_id = PyTuple_GET_ITEM(key, 1);
    PyObject *messages = NULL, *enqueues = NULL, *number = NULL, *value = NULL, *result = NULL;
    if ((messages = shards_of(args[0])) == NULL) goto done;
    if ((enqueues = shards_of(args[1])) == NULL) goto done;
    if ((number = PyNumber_Rshift(message_id, shard_bits)) == NULL) goto done;
    PyObject *shard = shard_at(messages, number, 1);
    if (shard == NULL) goto done;
    if ((value = PyList_New(2)) == NULL) goto done;
    Py_INCREF(segment);
    PyList_SET_ITEM(value, 0, segment);
    PyList_SET_ITEM(value, 1, PyLong_FromLong(1));
    if (PyList_GET_ITEM(value, 1) == NULL || PyDict_SetItem(shard, message_id, value) < 0) goto done;
    if ((shard = shard_at(enqueues, number, 1)) == NULL) goto done;
    if (PyDict_SetItem(shard, key, segment) < 0) goto done;
    if (add_live(segments, segment, 2) < 0) goto done;
    result = Py_NewRef(Py_None);
done:
    Py_XDECREF(value);
    Py_XDECREF(number);
    Py_XDECREF(enqueues);
    Py_XDECREF(messages);
    return result;
}

/* dequeued(messages, enqueues, segments, delivered, key) -> bool: Ledger.dequeued. */
static PyObject *dequeued(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "dequeued takes 5 arguments");
        return NULL;
    }
    PyObject *segments = args[2], *delivered = args[3], *key = args[4];
    if (!PyDict_CheckExact(segments) || !PyAnySet_CheckExact(delivered) ||
        !PyTuple_CheckExact(key) || PyTuple_GET_SIZE(key) != 2) {
        PyErr_SetString(PyExc_TypeError, "dequeued: segments, a delivered set, a (queue, id) key");
        return NULL;
    }
    PyObject *message_id = PyTuple_GET_ITEM(key, 1);
    PyObject *messages = NULL, *enqueues = NULL, *number = NULL, *segment = NULL;
    PyObject *result = NULL;
    if ((messages = shards_of(args[0])) == NULL) goto done;
    if ((enqueues = shards_of(args[1])) == NULL) goto done;
    if ((number = PyNumber_Rshift(message_id, shard_bits)) == NULL) goto done;
    /* EnqueueShards.pop */
    PyObject *shard = shard_at(enqueues, number, 0);
    if (shard == NULL) {
        if (!PyErr_Occurred()) result = Py_NewRef(Py_False);
        goto done;
    }
    segment = PyDict_GetItemWithError(shard, key);
    if (segment == NULL) {
        if (PyErr_Occurred()) goto done;
        if (PyDict_GET_SIZE(shard) == 0 && PyDict_DelItem(enqueues, number) < 0) goto done;
        result = Py_NewRef(Py_False);
        goto done;
    }
    Py_INCREF(segment);
    if (PyDict_DelItem(shard, key) < 0) goto done;
    if (PyDict_GET_SIZE(shard) == 0 && PyDict_DelItem(enqueues, number) < 0) goto done;
    if (add_live(segments, segment, -1) < 0) goto done;
    if (PySet_GET_SIZE(delivered) > 0 && PySet_Discard(delivered, key) < 0) goto done;
    /* MessageShards.drop_one: KeyError when the message is not there, as in Python */
    PyObject *mshard = PyDict_GetItemWithError(messages, number);
    if (mshard == NULL) {
        if (!PyErr_Occurred()) PyErr_SetObject(PyExc_KeyError, number);
        goto done;
    }
    PyObject *value = PyDict_GetItemWithError(mshard, message_id);
    if (value == NULL) {
        if (!PyErr_Occurred()) PyErr_SetObject(PyExc_KeyError, message_id);
        goto done;
    }
    if (!PyList_CheckExact(value) || PyList_GET_SIZE(value) != 2) {
        PyErr_SetString(PyExc_TypeError, "a message's value must be [segment, enqueues]");
        goto done;
    }
    PyObject *one = PyLong_FromLong(1);
    PyObject *left = one == NULL ? NULL : PyNumber_Subtract(PyList_GET_ITEM(value, 1), one);
    Py_XDECREF(one);
    if (left == NULL) goto done;
    int alive = PyObject_RichCompareBool(left, zero, Py_GT);
    PyList_SetItem(value, 1, left); /* steals left */
    if (alive < 0) goto done;
    if (!alive) {
        /* its last enqueue: the content is no longer live either */
        Py_INCREF(value);
        int failed = PyDict_DelItem(mshard, message_id) < 0 ||
                     (PyDict_GET_SIZE(mshard) == 0 && PyDict_DelItem(messages, number) < 0) ||
                     add_live(segments, PyList_GET_ITEM(value, 0), -1) < 0;
        Py_DECREF(value);
        if (failed) goto done;
    }
    result = Py_NewRef(Py_True);
done:
    Py_XDECREF(segment);
    Py_XDECREF(number);
    Py_XDECREF(enqueues);
    Py_XDECREF(messages);
    return result;
}

static PyMethodDef methods[] = {
    {"message_enqueued", (PyCFunction)(void (*)(void))message_enqueued, METH_FASTCALL,
     "message_enqueued(messages, enqueues, segments, key, segment): Ledger.message_enqueued"},
    {"dequeued", (PyCFunction)(void (*)(void))dequeued, METH_FASTCALL,
     "dequeued(messages, enqueues, segments, delivered, key) -> bool: Ledger.dequeued"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_ledger", "The ledger's per-message operations, natively.", -1,
    methods,
};

PyMODINIT_FUNC PyInit__ledger(void) {
    str_shards = PyUnicode_InternFromString("_shards");
    str_live = PyUnicode_InternFromString("live");
    shard_bits = PyLong_FromLong(SHARD_BITS);
    zero = PyLong_FromLong(0);
    if (str_shards == NULL || str_live == NULL || shard_bits == NULL || zero == NULL) return NULL;
    PyObject *module = PyModule_Create(&module_def);
    if (module != NULL && PyModule_AddIntConstant(module, "SHARD_BITS", SHARD_BITS) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
