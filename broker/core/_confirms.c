/* Publisher confirms, in C: broker/core/confirms.py's PublisherConfirms and ConfirmHandle,
 * the same rules (the Python classes are the reference and the fallback;
 * tests/core/test_native_confirms.py holds these to them).
 *
 * Every publish in confirm mode makes a handle (only PublisherConfirms.publish makes one),
 * and on an HA primary with two backups it is held three times (the store, each backup's
 * guard), released four and settled once: calls that were each a Python frame. Here they
 * are C calls, and the last release settles straight into its confirms' state.
 *
 * The handle and its message refer to each other until it settles (message.confirm), so
 * the type takes part in the cyclic collector, as the Python class did: a publish never
 * settled (its channel closed) is collected with its message.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

typedef struct {
    PyObject_HEAD
    PyObject *owner;   /* its PublisherConfirms (Confirms below) */
    PyObject *message; /* NULL: none, or settled */
    long long seq;
    long holds;
    int nack;
} ConfirmHandle;

static PyObject *str_confirm;
static PyObject *reply_type; /* confirms.py's ConfirmReply (bind_reply) */

/* The publishes of one channel (confirms.py's PublisherConfirms, the same rules). */
typedef struct {
    PyObject_HEAD
    long long next;
    long long low;        /* every tag below it is settled */
    long long acked_upto; /* every tag up to it is answered */
    PyObject *settled_ahead; /* set of settled tags above low (publishes settled out of order) */
    PyObject *nacked;        /* set */
    long long *unsent;       /* settled tags not yet answered, in the order settled */
    Py_ssize_t n_unsent, cap_unsent;
    int closed;
    PyObject *on_settled; /* NULL: none */
} Confirms;

static PyTypeObject ConfirmsType;
static int settle(Confirms *self, long long seq, int ack);

static PyObject *ConfirmHandle_hold(ConfirmHandle *self, PyObject *unused) {
    if (self->holds <= 0) {
        PyErr_Format(PyExc_RuntimeError, "confirm %lld already settled", self->seq);
        return NULL;
    }
    self->holds++;
    Py_RETURN_NONE;
}

static PyObject *ConfirmHandle_release(ConfirmHandle *self, PyObject *const *args,
                                       Py_ssize_t nargs, PyObject *kwnames) {
    PyObject *ok_arg = NULL;
    Py_ssize_t nkw = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    if (nargs + nkw > 1) {
        PyErr_SetString(PyExc_TypeError, "release() takes at most 1 argument");
        return NULL;
    }
    if (nargs == 1) {
        ok_arg = args[0];
    } else if (nkw == 1) {
        PyObject *name = PyTuple_GET_ITEM(kwnames, 0);
        if (!PyUnicode_Check(name) || PyUnicode_CompareWithASCIIString(name, "ok") != 0) {
            PyErr_Format(PyExc_TypeError, "release() got an unexpected keyword argument %R",
                         name);
            return NULL;
        }
        ok_arg = args[0];
    }
    if (self->holds <= 0) {
        PyErr_Format(PyExc_RuntimeError, "confirm %lld released more often than held",
                     self->seq);
        return NULL;
    }
    if (ok_arg != NULL && ok_arg != Py_True) {
        int ok = PyObject_IsTrue(ok_arg);
        if (ok < 0) return NULL;
        if (!ok) self->nack = 1;
    }
    self->holds--;
    if (self->holds == 0) {
        PyObject *message = self->message;
        if (message != NULL) { /* nothing reads it any more: neither keeps the other */
            self->message = NULL;
            int failed = PyObject_SetAttr(message, str_confirm, Py_None);
            Py_DECREF(message);
            if (failed < 0) return NULL;
        }
        /* straight into its confirms' state (the handle is only made by their publish) */
        if (settle((Confirms *)self->owner, self->seq, !self->nack) < 0) return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *ConfirmHandle_get_settled(ConfirmHandle *self, void *closure) {
    return PyBool_FromLong(self->holds == 0);
}

static PyObject *ConfirmHandle_get_seq(ConfirmHandle *self, void *closure) {
    return PyLong_FromLongLong(self->seq);
}

static int ConfirmHandle_traverse(ConfirmHandle *self, visitproc visit, void *arg) {
    Py_VISIT(self->owner);
    Py_VISIT(self->message);
    return 0;
}

static int ConfirmHandle_clear(ConfirmHandle *self) {
    Py_CLEAR(self->owner);
    Py_CLEAR(self->message);
    return 0;
}

static void ConfirmHandle_dealloc(ConfirmHandle *self) {
    PyObject_GC_UnTrack(self);
    ConfirmHandle_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *ConfirmHandle_repr(ConfirmHandle *self) {
    return PyUnicode_FromFormat("<ConfirmHandle %lld holds=%ld>", self->seq, self->holds);
}

static PyMethodDef ConfirmHandle_methods[] = {
    {"hold", (PyCFunction)ConfirmHandle_hold, METH_NOARGS,
     "Withhold the confirm until a matching release()."},
    {"release", (PyCFunction)(void (*)(void))ConfirmHandle_release,
     METH_FASTCALL | METH_KEYWORDS,
     "release(ok=True): drop one hold; ok=False turns the eventual reply into a nack."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef ConfirmHandle_getset[] = {
    {"settled", (getter)ConfirmHandle_get_settled, NULL, "every hold released", NULL},
    {"seq", (getter)ConfirmHandle_get_seq, NULL, "the publish's delivery tag", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject ConfirmHandleType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "broker.core._confirms.ConfirmHandle",
    .tp_basicsize = sizeof(ConfirmHandle),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "The pending confirm of one publish (broker/core/confirms.py).",
    .tp_dealloc = (destructor)ConfirmHandle_dealloc,
    .tp_traverse = (traverseproc)ConfirmHandle_traverse,
    .tp_clear = (inquiry)ConfirmHandle_clear,
    .tp_repr = (reprfunc)ConfirmHandle_repr,
    .tp_methods = ConfirmHandle_methods,
    .tp_getset = ConfirmHandle_getset,
};


/* -- PublisherConfirms ------------------------------------------------------------------ */

static int Confirms_init(Confirms *self, PyObject *args, PyObject *kwds) {
    static char *keywords[] = {"on_settled", NULL};
    PyObject *on_settled = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|O", keywords, &on_settled)) return -1;
    self->next = 1;
    self->low = 1;
    self->acked_upto = 0;
    Py_XSETREF(self->settled_ahead, PySet_New(NULL));
    Py_XSETREF(self->nacked, PySet_New(NULL));
    if (self->settled_ahead == NULL || self->nacked == NULL) return -1;
    self->n_unsent = 0;
    self->closed = 0;
    Py_CLEAR(self->on_settled);
    if (on_settled != Py_None) {
        Py_INCREF(on_settled);
        self->on_settled = on_settled;
    }
    return 0;
}

/* Is seq in the set? -1 on error. */
static int set_has(PyObject *set, long long seq) {
    if (PySet_GET_SIZE(set) == 0) return 0;
    PyObject *key = PyLong_FromLongLong(seq);
    if (key == NULL) return -1;
    int found = PySet_Contains(set, key);
    Py_DECREF(key);
    return found;
}

static int set_change(PyObject *set, long long seq, int add) {
    PyObject *key = PyLong_FromLongLong(seq);
    if (key == NULL) return -1;
    int result = add ? PySet_Add(set, key) : PySet_Discard(set, key);
    Py_DECREF(key);
    return result < 0 ? -1 : 0;
}

static int settle(Confirms *self, long long seq, int ack) {
    if (self->closed) return 0;
    if (!ack && set_change(self->nacked, seq, 1) < 0) return -1;
    if (seq == self->low) {
        self->low++;
        for (;;) {
            int found = set_has(self->settled_ahead, self->low);
            if (found < 0) return -1;
            if (!found) break;
            if (set_change(self->settled_ahead, self->low, 0) < 0) return -1;
            self->low++;
        }
    } else if (set_change(self->settled_ahead, seq, 1) < 0) {
        return -1;
    }
    if (self->n_unsent == self->cap_unsent) {
        Py_ssize_t grown = self->cap_unsent ? self->cap_unsent * 2 : 64;
        long long *more = PyMem_Realloc(self->unsent, sizeof(long long) * (size_t)grown);
        if (more == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        self->unsent = more;
        self->cap_unsent = grown;
    }
    self->unsent[self->n_unsent++] = seq;
    if (self->on_settled != NULL) {
        /* held for the call: the callback may close these confirms (a transaction's
         * answer does), which lets go of it */
        PyObject *callback = self->on_settled;
        Py_INCREF(callback);
        PyObject *result = PyObject_CallNoArgs(callback);
        Py_DECREF(callback);
        if (result == NULL) return -1;
        Py_DECREF(result);
    }
    return 0;
}

static PyObject *Confirms_publish(Confirms *self, PyObject *const *args, Py_ssize_t nargs,
                                  PyObject *kwnames) {
    PyObject *message = Py_None;
    Py_ssize_t nkw = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    if (nargs + nkw > 1) {
        PyErr_SetString(PyExc_TypeError, "publish() takes at most 1 argument");
        return NULL;
    }
    if (nargs + nkw == 1) {
        if (nkw == 1 &&
            PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kwnames, 0), "message") != 0) {
            PyErr_SetString(PyExc_TypeError, "publish() got an unexpected keyword argument");
            return NULL;
        }
        message = args[0];
    }
    ConfirmHandle *handle = PyObject_GC_New(ConfirmHandle, &ConfirmHandleType);
    if (handle == NULL) return NULL;
    Py_INCREF(self);
    handle->owner = (PyObject *)self;
    handle->message = NULL;
    handle->seq = self->next;
    handle->holds = 1;
    handle->nack = 0;
    PyObject_GC_Track(handle);
    if (message != Py_None) {
        Py_INCREF(message);
        handle->message = message;
        if (PyObject_SetAttr(message, str_confirm, (PyObject *)handle) < 0) {
            Py_DECREF(handle);
            return NULL;
        }
    }
    self->next++;
    return (PyObject *)handle;
}

static PyObject *Confirms_close(Confirms *self, PyObject *unused) {
    self->closed = 1;
    Py_CLEAR(self->on_settled);
    Py_RETURN_NONE;
}

static int compare_seq(const void *a, const void *b) {
    long long x = *(const long long *)a, y = *(const long long *)b;
    return (x > y) - (x < y);
}

static int add_reply(PyObject *replies, long long tag, int multiple, int ack) {
    PyObject *reply = PyObject_CallFunction(reply_type, "LOO", tag, multiple ? Py_True : Py_False,
                                            ack ? Py_True : Py_False);
    if (reply == NULL) return -1;
    int result = PyList_Append(replies, reply);
    Py_DECREF(reply);
    return result;
}

static PyObject *Confirms_take_replies(Confirms *self, PyObject *unused) {
    if (reply_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "ConfirmReply is not bound (bind_reply)");
        return NULL;
    }
    PyObject *replies = PyList_New(0);
    if (replies == NULL || self->n_unsent == 0) return replies;
    long long *unsent = self->unsent; /* taken: a settle meanwhile starts a new array */
    Py_ssize_t n = self->n_unsent;
    self->unsent = NULL;
    self->n_unsent = self->cap_unsent = 0;
    long long top = self->low - 1;
    if (top > self->acked_upto && PySet_GET_SIZE(self->nacked) == 0) {
        Py_ssize_t in_run = 0;
        for (Py_ssize_t i = 0; i < n; i++) in_run += unsent[i] <= top;
        if (in_run == top - self->acked_upto) {
            if (add_reply(replies, top, top - self->acked_upto > 1, 1) < 0) goto error;
            self->acked_upto = top;
            Py_ssize_t kept = 0;
            for (Py_ssize_t i = 0; i < n; i++)
                if (unsent[i] > top) unsent[kept++] = unsent[i];
            n = kept;
        }
    }
    qsort(unsent, (size_t)n, sizeof(long long), compare_seq);
    for (Py_ssize_t i = 0; i < n; i++) {
        int nacked = set_has(self->nacked, unsent[i]);
        if (nacked < 0) goto error;
        if (nacked && set_change(self->nacked, unsent[i], 0) < 0) goto error;
        if (add_reply(replies, unsent[i], 0, !nacked) < 0) goto error;
    }
    if (top > self->acked_upto) self->acked_upto = top;
    PyMem_Free(unsent);
    return replies;
error:
    PyMem_Free(unsent);
    Py_DECREF(replies);
    return NULL;
}

static PyObject *Confirms_get_outstanding(Confirms *self, void *closure) {
    return PyLong_FromLongLong(self->next - self->low - PySet_GET_SIZE(self->settled_ahead));
}

static PyObject *Confirms_get_has_replies(Confirms *self, void *closure) {
    return PyBool_FromLong(self->n_unsent > 0);
}

static int Confirms_traverse(Confirms *self, visitproc visit, void *arg) {
    Py_VISIT(self->on_settled);
    Py_VISIT(self->settled_ahead);
    Py_VISIT(self->nacked);
    return 0;
}

static int Confirms_clear(Confirms *self) {
    Py_CLEAR(self->on_settled);
    Py_CLEAR(self->settled_ahead);
    Py_CLEAR(self->nacked);
    return 0;
}

static void Confirms_dealloc(Confirms *self) {
    PyObject_GC_UnTrack(self);
    Confirms_clear(self);
    PyMem_Free(self->unsent);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef Confirms_methods[] = {
    {"publish", (PyCFunction)(void (*)(void))Confirms_publish, METH_FASTCALL | METH_KEYWORDS,
     "publish(message=None) -> ConfirmHandle: the next delivery tag, routing hold taken."},
    {"close", (PyCFunction)Confirms_close, METH_NOARGS,
     "The channel closed: later settlements are dropped."},
    {"take_replies", (PyCFunction)Confirms_take_replies, METH_NOARGS,
     "The replies for everything settled since the last call, fewest first."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Confirms_getset[] = {
    {"outstanding", (getter)Confirms_get_outstanding, NULL, "publishes not yet settled", NULL},
    {"has_replies", (getter)Confirms_get_has_replies, NULL, "replies to take", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject ConfirmsType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "broker.core._confirms.PublisherConfirms",
    .tp_basicsize = sizeof(Confirms),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "The publishes of one channel and its confirm replies (broker/core/confirms.py).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Confirms_init,
    .tp_dealloc = (destructor)Confirms_dealloc,
    .tp_traverse = (traverseproc)Confirms_traverse,
    .tp_clear = (inquiry)Confirms_clear,
    .tp_methods = Confirms_methods,
    .tp_getset = Confirms_getset,
};

static PyObject *bind_reply(PyObject *module, PyObject *cls) {
    Py_INCREF(cls);
    Py_XSETREF(reply_type, cls);
    Py_RETURN_NONE;
}

static PyMethodDef module_methods[] = {
    {"bind_reply", (PyCFunction)bind_reply, METH_O,
     "bind_reply(ConfirmReply): the class take_replies() makes its replies of."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "broker.core._confirms", "Publisher confirms, in C.", -1,
    module_methods,
};

PyMODINIT_FUNC PyInit__confirms(void) {
    str_confirm = PyUnicode_InternFromString("confirm");
    if (str_confirm == NULL) return NULL;
    if (PyType_Ready(&ConfirmHandleType) < 0 || PyType_Ready(&ConfirmsType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    Py_INCREF(&ConfirmHandleType);
    if (PyModule_AddObject(m, "ConfirmHandle", (PyObject *)&ConfirmHandleType) < 0) {
        Py_DECREF(&ConfirmHandleType);
        Py_DECREF(m);
        return NULL;
    }
    Py_INCREF(&ConfirmsType);
    if (PyModule_AddObject(m, "PublisherConfirms", (PyObject *)&ConfirmsType) < 0) {
        Py_DECREF(&ConfirmsType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
