/* The journal's group writer, in C: a thread of its own that never takes the GIL
 * (docs/store.md, "Group commit").
 *
 * The journal (broker/store/journal.py) hands each turn of the event loop's records over
 * with submit(): one job per segment file, with the flush number it belongs to, the last
 * one marked. This
 * thread takes every job submitted while its previous write and sync ran, writes them in
 * order (writev, the segment's header first if the file is still empty; a failed write is
 * cut off again so that the file ends at a record boundary), syncs each file before it
 * goes on to the next one and the last one at the end (fdatasync, and fsync of the
 * directory where a job asks for it), then marks them done and writes 1 to the eventfd
 * the event loop watches. The loop calls take_done() and runs the callbacks of every flush
 * up to the highest done number, with the errors of the jobs that failed.
 *
 * Why C: a Python writer thread needs the GIL back after each system call, and a busy
 * event loop holds it for up to the interpreter's switch interval (5 ms) each time. On
 * this project's machines that wait was most of a group commit's time (fdatasync 0.26 ms
 * at p50, the Python thread's write and sync 0.68 ms, p90 0.67 against 4.96 ms:
 * docs/benchmarks.md). Here nothing between a submit and the eventfd needs the GIL.
 * broker/store/group_writer.py is the same writer in Python, used when this module is not
 * built; tests/store/test_group_writer.py runs both.
 *
 * The Py_buffer of every job is taken in submit() and released in take_done(), both with
 * the GIL held: the thread only reads memory whose exporter cannot move or free it.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

typedef struct Job {
    struct Job *next;
    long long number; /* the flush it belongs to */
    int fd;
    int sync;   /* fdatasync before it is done */
    int dir_fd; /* >= 0: fsync this directory (a new segment's entry) before it is done */
    int last;   /* the last job of its flush: the flush is done when it is */
    int has_header, has_data;
    Py_buffer header; /* written first when the file is empty */
    Py_buffer data;
    int error; /* errno of a failed write or sync, 0 when done well */
} Job;

typedef struct {
    PyObject_HEAD
    pthread_t thread;
    int started, joined, stopping;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    Job *todo, *todo_tail; /* submitted, not taken yet */
    Job *done, *done_tail; /* done, buffers not released yet */
    int done_fd;           /* eventfd the loop watches */
    long long syncs, bytes_written;
} GroupWriter;

static int write_all(int fd, const char *p, size_t size) {
    while (size > 0) {
        ssize_t n = write(fd, p, size);
        if (n < 0) {
            if (errno == EINTR) continue;
            return errno;
        }
        if (n == 0) return EIO;
        p += n;
        size -= (size_t)n;
    }
    return 0;
}

/* Write one job (no GIL). Returns its errno, 0 when written. */
static int write_job(Job *job, long long *written) {
    if (!job->has_data) return 0;
    off_t start = lseek(job->fd, 0, SEEK_END);
    if (start < 0) return errno;
    int error = 0;
    size_t size = (size_t)job->data.len;
    if (start == 0 && job->has_header) {
        error = write_all(job->fd, job->header.buf, (size_t)job->header.len);
        size += (size_t)job->header.len;
    }
    if (!error) error = write_all(job->fd, job->data.buf, (size_t)job->data.len);
    if (error) {
        /* Leave no partial record behind: the next write starts at a boundary. */
        while (ftruncate(job->fd, start) < 0 && errno == EINTR) {
        }
        return error;
    }
    *written += (long long)size;
    return 0;
}

static int sync_fd(int fd, int directory) {
    int result;
    do {
        result = directory ? fsync(fd) : fdatasync(fd);
    } while (result < 0 && errno == EINTR);
    return result < 0 ? errno : 0;
}

/* The jobs of [first, end) that wrote to fd with sync asked, and no error yet, get error. */
static void fail_synced(Job *first, Job *end, int fd, int error) {
    for (Job *job = first; job != end; job = job->next)
        if (job->fd == fd && job->sync && !job->error) job->error = error;
}

/* Write and sync one batch, in order (no GIL). */
static void run_batch(GroupWriter *self, Job *batch) {
    long long written = 0, syncs = 0;
    Job *run = batch; /* first job of the run on the current file */
    int current = -1, dirty = 0;
    for (Job *job = batch; job != NULL; job = job->next) {
        if (job->fd != current) {
            if (dirty) { /* the previous file is synced before the next one is written */
                int error = sync_fd(current, 0);
                syncs++;
                if (error) fail_synced(run, job, current, error);
            }
            current = job->fd;
            run = job;
            dirty = 0;
        }
        job->error = write_job(job, &written);
        dirty |= job->sync;
    }
    if (dirty) {
        int error = sync_fd(current, 0);
        syncs++;
        if (error) fail_synced(run, NULL, current, error);
    }
    for (Job *job = batch; job != NULL; job = job->next) {
        if (job->dir_fd >= 0) {
            int error = sync_fd(job->dir_fd, 1);
            if (error && !job->error) job->error = error;
        }
    }
    pthread_mutex_lock(&self->lock);
    self->syncs += syncs;
    self->bytes_written += written;
    pthread_mutex_unlock(&self->lock);
}

static void *writer_main(void *arg) {
    GroupWriter *self = arg;
    pthread_mutex_lock(&self->lock);
    for (;;) {
        while (self->todo == NULL && !self->stopping) pthread_cond_wait(&self->wake, &self->lock);
        if (self->todo == NULL) break; /* stopping, nothing left */
        Job *batch = self->todo, *tail = self->todo_tail;
        self->todo = self->todo_tail = NULL;
        pthread_mutex_unlock(&self->lock);
        run_batch(self, batch);
        pthread_mutex_lock(&self->lock);
        if (self->done_tail) self->done_tail->next = batch;
        else self->done = batch;
        self->done_tail = tail;
        pthread_mutex_unlock(&self->lock);
        uint64_t one = 1;
        ssize_t ignored = write(self->done_fd, &one, sizeof one);
        (void)ignored; /* a full eventfd counter still wakes the loop */
        pthread_mutex_lock(&self->lock);
    }
    pthread_mutex_unlock(&self->lock);
    return NULL;
}

static void release_job(Job *job) {
    if (job->has_header) PyBuffer_Release(&job->header);
    if (job->has_data) PyBuffer_Release(&job->data);
    PyMem_Free(job);
}

static int GroupWriter_init(GroupWriter *self, PyObject *args, PyObject *kwds) {
    static char *keywords[] = {"done_fd", NULL};
    int done_fd;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "i", keywords, &done_fd)) return -1;
    if (self->started) {
        PyErr_SetString(PyExc_RuntimeError, "GroupWriter already started");
        return -1;
    }
    self->done_fd = done_fd;
    pthread_mutex_init(&self->lock, NULL);
    pthread_cond_init(&self->wake, NULL);
    int error = pthread_create(&self->thread, NULL, writer_main, self);
    if (error) {
        pthread_mutex_destroy(&self->lock);
        pthread_cond_destroy(&self->wake);
        errno = error;
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    self->started = 1;
    return 0;
}

static PyObject *GroupWriter_submit(GroupWriter *self, PyObject *args, PyObject *kwds) {
    static char *keywords[] = {"number", "fd", "data", "sync", "dir_fd", "header", "last", NULL};
    long long number;
    int fd, sync, dir_fd = -1, last = 1;
    PyObject *data, *header = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "LiOp|iOp", keywords, &number, &fd, &data,
                                     &sync, &dir_fd, &header, &last))
        return NULL;
    if (!self->started || self->stopping) {
        PyErr_SetString(PyExc_RuntimeError, "GroupWriter is closed");
        return NULL;
    }
    Job *job = PyMem_Calloc(1, sizeof(Job));
    if (job == NULL) return PyErr_NoMemory();
    job->number = number;
    job->fd = fd;
    job->sync = sync;
    job->dir_fd = dir_fd;
    job->last = last;
    if (data != Py_None) {
        if (PyObject_GetBuffer(data, &job->data, PyBUF_SIMPLE) < 0) goto fail;
        job->has_data = 1;
    }
    if (header != Py_None) {
        if (PyObject_GetBuffer(header, &job->header, PyBUF_SIMPLE) < 0) goto fail;
        job->has_header = 1;
    }
    pthread_mutex_lock(&self->lock);
    if (self->todo_tail) self->todo_tail->next = job;
    else self->todo = job;
    self->todo_tail = job;
    pthread_mutex_unlock(&self->lock);
    /* Signalled once the lock is free: woken, the writer takes it at once (signalled under
     * the lock, it woke only to block on the lock until the unlock, a second wake-up). Its
     * wait re-checks the list under the lock, so an early or spurious wake is harmless. */
    pthread_cond_signal(&self->wake);
    Py_RETURN_NONE;
fail:
    release_job(job);
    return NULL;
}

/* (highest flush number whose last job is done, [(number, errno), ...] of the jobs that
 * failed). */
static PyObject *GroupWriter_take_done(GroupWriter *self, PyObject *unused) {
    PyObject *errors = PyList_New(0);
    if (errors == NULL) return NULL; /* the jobs stay on the done list for the next call */
    pthread_mutex_lock(&self->lock);
    Job *done = self->done;
    self->done = self->done_tail = NULL;
    pthread_mutex_unlock(&self->lock);
    long long upto = 0;
    while (done != NULL) {
        Job *job = done;
        done = job->next;
        if (job->last && job->number > upto) upto = job->number;
        if (job->error) {
            PyObject *item = Py_BuildValue("(Li)", job->number, job->error);
            if (item == NULL || PyList_Append(errors, item) < 0) {
                Py_XDECREF(item);
                PyErr_Clear(); /* still counted done; the error is lost only under no memory */
            } else {
                Py_DECREF(item);
            }
        }
        release_job(job);
    }
    return Py_BuildValue("(LN)", upto, errors);
}

static void stop_thread(GroupWriter *self) {
    if (!self->started || self->joined) return;
    pthread_mutex_lock(&self->lock);
    self->stopping = 1;
    pthread_cond_signal(&self->wake);
    pthread_mutex_unlock(&self->lock);
    Py_BEGIN_ALLOW_THREADS
    pthread_join(self->thread, NULL);
    Py_END_ALLOW_THREADS
    self->joined = 1;
}

static PyObject *GroupWriter_close(GroupWriter *self, PyObject *unused) {
    stop_thread(self); /* every job submitted is done first */
    Py_RETURN_NONE;
}

static PyObject *GroupWriter_get_syncs(GroupWriter *self, void *closure) {
    pthread_mutex_lock(&self->lock);
    long long value = self->syncs;
    pthread_mutex_unlock(&self->lock);
    return PyLong_FromLongLong(value);
}

static PyObject *GroupWriter_get_bytes_written(GroupWriter *self, void *closure) {
    pthread_mutex_lock(&self->lock);
    long long value = self->bytes_written;
    pthread_mutex_unlock(&self->lock);
    return PyLong_FromLongLong(value);
}

static void GroupWriter_dealloc(GroupWriter *self) {
    stop_thread(self);
    Job *lists[2] = {self->todo, self->done};
    for (int i = 0; i < 2; i++) {
        while (lists[i] != NULL) {
            Job *job = lists[i];
            lists[i] = job->next;
            release_job(job);
        }
    }
    if (self->started) {
        pthread_mutex_destroy(&self->lock);
        pthread_cond_destroy(&self->wake);
    }
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef GroupWriter_methods[] = {
    {"submit", (PyCFunction)(void (*)(void))GroupWriter_submit, METH_VARARGS | METH_KEYWORDS,
     "submit(number, fd, data, sync, dir_fd=-1, header=None, last=True): a job for the "
     "thread."},
    {"take_done", (PyCFunction)GroupWriter_take_done, METH_NOARGS,
     "take_done() -> (highest number done, [(number, errno), ...])"},
    {"close", (PyCFunction)GroupWriter_close, METH_NOARGS,
     "close(): finish every job submitted, then stop the thread."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef GroupWriter_getset[] = {
    {"syncs", (getter)GroupWriter_get_syncs, NULL, "fdatasync calls so far", NULL},
    {"bytes_written", (getter)GroupWriter_get_bytes_written, NULL, "bytes written so far",
     NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject GroupWriterType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "broker.store._group_write.GroupWriter",
    .tp_basicsize = sizeof(GroupWriter),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The journal's group writer thread (see the module's comment).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)GroupWriter_init,
    .tp_dealloc = (destructor)GroupWriter_dealloc,
    .tp_methods = GroupWriter_methods,
    .tp_getset = GroupWriter_getset,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "broker.store._group_write",
    "The journal's group writer thread, without the GIL.", -1, NULL,
};

PyMODINIT_FUNC PyInit__group_write(void) {
    if (PyType_Ready(&GroupWriterType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    Py_INCREF(&GroupWriterType);
    if (PyModule_AddObject(m, "GroupWriter", (PyObject *)&GroupWriterType) < 0) {
        Py_DECREF(&GroupWriterType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
