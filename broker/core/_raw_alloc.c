/* Per-message objects from the C allocator (broker/core/raw_alloc.py, docs/memory-and-disk.md,
 * "Memory given back").
 *
 * Python's own allocator (pymalloc) takes memory from the kernel in arenas of 1 MiB and gives
 * an arena back only once every object in it is freed. A queue of 300,000 messages fills about
 * 60 arenas with the message's small objects (its Message, its queue Entry); after the queue is
 * deleted or drained, a few long-lived small objects made during the fill (counters' values,
 * timers' deadlines) keep 10-20 of them. glibc's malloc hands every free page back on
 * malloc_trim (broker/core/heap_return.py), whatever still lives beside it.
 *
 * raw_allocated(cls) gives a __slots__ class its own pair of allocation functions: tp_alloc
 * takes the object (and the garbage collector's header before it) from PyMem_RawMalloc and
 * tp_free hands it back with PyMem_RawFree. The pair is the type's own: no allocator is
 * swapped, no other object's memory goes through it, and an object of the class is always
 * freed by the function of the allocator it came from (even under PYTHONMALLOC=debug).
 * Call it in the class statement (a decorator), before any instance exists: an instance made
 * before would be freed by the wrong function. A subclass gets Python's usual pair back.
 *
 * Only for the layout it knows: a garbage-collected heap type, no items, no managed dict or
 * weak references, the GC header of two words (CPython 3.8-3.13, not free-threaded);
 * otherwise it changes nothing and returns False.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* The GC header before a garbage-collected object (PyGC_Head: two words). */
#define PRESIZE (2 * sizeof(uintptr_t))

static PyObject *raw_alloc(PyTypeObject *type, Py_ssize_t nitems) {
    (void)nitems; /* itemsize 0: checked by raw_allocated */
    size_t size = PRESIZE + (size_t)type->tp_basicsize;
    /* malloc and memset, not calloc: glibc's calloc skips its per-thread cache (tcache). */
    char *block = PyMem_RawMalloc(size);
    if (block == NULL) {
        return PyErr_NoMemory();
    }
    memset(block, 0, size);
    PyObject *object = (PyObject *)(block + PRESIZE);
    PyObject_Init(object, type); /* a reference to the heap type too */
    PyObject_GC_Track(object);
    return object;
}

static void raw_free(void *pointer) {
    PyObject *object = (PyObject *)pointer;
    if (PyObject_GC_IsTracked(object)) {
        PyObject_GC_UnTrack(object);
    }
    PyMem_RawFree((char *)pointer - PRESIZE);
}

static PyObject *raw_allocated(PyObject *module, PyObject *cls) {
    (void)module;
    if (!PyType_Check(cls)) {
        PyErr_SetString(PyExc_TypeError, "raw_allocated: a class");
        return NULL;
    }
    PyTypeObject *type = (PyTypeObject *)cls;
    if (type->tp_alloc == raw_alloc && type->tp_free == raw_free) {
        Py_RETURN_TRUE;
    }
#if PY_VERSION_HEX < 0x03080000 || PY_VERSION_HEX >= 0x030E0000 || defined(Py_GIL_DISABLED)
    Py_RETURN_FALSE;
#else
    unsigned long unknown = 0;
#ifdef Py_TPFLAGS_MANAGED_DICT
    unknown |= Py_TPFLAGS_MANAGED_DICT;
#endif
#ifdef Py_TPFLAGS_MANAGED_WEAKREF
    unknown |= Py_TPFLAGS_MANAGED_WEAKREF;
#endif
#ifdef Py_TPFLAGS_INLINE_VALUES
    unknown |= Py_TPFLAGS_INLINE_VALUES;
#endif
    unsigned long flags = PyType_GetFlags(type);
    if (!(flags & Py_TPFLAGS_HEAPTYPE) || !(flags & Py_TPFLAGS_HAVE_GC) || (flags & unknown) ||
        type->tp_itemsize != 0 || type->tp_dictoffset != 0 || type->tp_weaklistoffset != 0 ||
        type->tp_alloc != PyType_GenericAlloc || type->tp_free != PyObject_GC_Del) {
        Py_RETURN_FALSE;
    }
    type->tp_alloc = raw_alloc;
    type->tp_free = raw_free;
    Py_RETURN_TRUE;
#endif
}

static PyMethodDef methods[] = {
    {"raw_allocated", raw_allocated, METH_O,
     "Give a __slots__ class objects from the C allocator; True if it has them."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "broker.core._raw_alloc",
    "Per-message objects from the C allocator.", -1, methods,
};

PyMODINIT_FUNC PyInit__raw_alloc(void) { return PyModule_Create(&module_def); }
