/* The body tap's piece taker (recorder/proxy/piece_tap.py), in C.
 *
 * mitmproxy calls the tap with every piece of every metered response body, on
 * its event loop: the one call of the recorder's that runs per piece before any
 * batching. A PieceTaker keeps the piece and its arrival time (the clock's) in
 * two lists the tap shares, counts what they hold, and calls ``on_batch`` when
 * they hold ``batch_pieces`` pieces or ``batch_bytes`` bytes; an empty piece (the
 * body's end) sets ``ended_at``; once ``broken`` it keeps nothing. It returns
 * the piece it was given, the same object, whatever happens: an exception
 * (the clock's, ``on_batch``'s) goes to ``on_error``, and one that ``on_error``
 * raises is dropped, so that none reaches mitmproxy. The Python class of the same
 * name in piece_tap.py is the reference (an install without a C compiler uses
 * it), and tests/proxy/test_piece_tap.py holds both to the same behaviour.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *pieces;   /* list of bytes */
    PyObject *stamps;   /* list of float */
    PyObject *clock;    /* () -> float, or None before start */
    PyObject *on_batch; /* () -> None, or None before start */
    PyObject *on_error; /* (exception) -> None */
    PyObject *ended_at; /* float or None */
    Py_ssize_t batch_pieces;
    Py_ssize_t batch_bytes;
    Py_ssize_t buffered; /* bytes in pieces */
    char seen;           /* whether a piece came through */
    char broken;         /* given up: keeps nothing */
} PieceTaker;

/* An exception is set: hand it to on_error (an Exception), dropping whatever
 * on_error raises; 0, or -1 with a BaseException that is not an Exception left
 * set (as ``except Exception`` would let it through). */
static int
handed_on(PieceTaker *t)
{
    if (!PyErr_ExceptionMatches(PyExc_Exception)) {
        return -1;
    }
    PyObject *exc = PyErr_GetRaisedException();
    PyObject *out = PyObject_CallOneArg(t->on_error, exc);
    Py_DECREF(exc);
    if (out == NULL) {
        PyErr_Clear();
    }
    Py_XDECREF(out);
    return 0;
}

static int
take(PieceTaker *t, PyObject *data, Py_ssize_t size)
{
    if (size == 0) {
        PyObject *now = PyObject_CallNoArgs(t->clock);
        if (now == NULL) {
            return -1;
        }
        Py_SETREF(t->ended_at, now);
        return 0;
    }
    if (t->broken) {
        return 0;
    }
    if (PyList_Append(t->pieces, data) < 0) {
        return -1;
    }
    PyObject *now = PyObject_CallNoArgs(t->clock);
    if (now == NULL) {
        return -1;
    }
    int failed = PyList_Append(t->stamps, now);
    Py_DECREF(now);
    if (failed) {
        return -1;
    }
    t->seen = 1;
    t->buffered += size;
    if (PyList_GET_SIZE(t->pieces) >= t->batch_pieces || t->buffered >= t->batch_bytes) {
        PyObject *out = PyObject_CallNoArgs(t->on_batch);
        if (out == NULL) {
            return -1;
        }
        Py_DECREF(out);
    }
    return 0;
}

static PyObject *
PieceTaker_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    PieceTaker *t = (PieceTaker *)self;
    if (PyVectorcall_NARGS(nargsf) != 1 || kwnames != NULL) {
        PyErr_SetString(PyExc_TypeError, "taker(data)");
        return NULL;
    }
    PyObject *data = args[0];
    if (t->clock == NULL) { /* (not started: mitmproxy is handed a started one) */
        return Py_NewRef(data);
    }
    Py_ssize_t size = PyBytes_Check(data) ? PyBytes_GET_SIZE(data) : PyObject_Length(data);
    if (size < 0 || take(t, data, size) < 0) {
        if (handed_on(t) < 0) {
            return NULL;
        }
    }
    return Py_NewRef(data);
}

static PyObject *
PieceTaker_start(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    PieceTaker *t = (PieceTaker *)self;
    if (nargs != 4 || !PyCallable_Check(args[0]) || !PyCallable_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError,
                        "start(clock, on_batch, batch_pieces: int, batch_bytes: int)");
        return NULL;
    }
    Py_ssize_t pieces = PyLong_AsSsize_t(args[2]);
    Py_ssize_t bytes = PyLong_AsSsize_t(args[3]);
    if ((pieces == -1 || bytes == -1) && PyErr_Occurred()) {
        return NULL;
    }
    Py_XSETREF(t->clock, Py_NewRef(args[0]));
    Py_XSETREF(t->on_batch, Py_NewRef(args[1]));
    t->batch_pieces = pieces;
    t->batch_bytes = bytes;
    Py_RETURN_NONE;
}

static PyObject *
PieceTaker_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    PyObject *pieces, *stamps, *on_error;
    if (kwds != NULL && PyDict_GET_SIZE(kwds)) {
        PyErr_SetString(PyExc_TypeError, "PieceTaker takes no keyword arguments");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "O!O!O:PieceTaker", &PyList_Type, &pieces, &PyList_Type,
                          &stamps, &on_error)) {
        return NULL;
    }
    if (!PyCallable_Check(on_error)) {
        PyErr_SetString(PyExc_TypeError, "on_error must be callable");
        return NULL;
    }
    PieceTaker *t = (PieceTaker *)type->tp_alloc(type, 0);
    if (t == NULL) {
        return NULL;
    }
    t->vectorcall = PieceTaker_vectorcall;
    t->pieces = Py_NewRef(pieces);
    t->stamps = Py_NewRef(stamps);
    t->on_error = Py_NewRef(on_error);
    t->clock = NULL;
    t->on_batch = NULL;
    t->ended_at = Py_NewRef(Py_None);
    t->batch_pieces = PY_SSIZE_T_MAX;
    t->batch_bytes = PY_SSIZE_T_MAX;
    return (PyObject *)t;
}

static int
PieceTaker_traverse(PieceTaker *t, visitproc visit, void *arg)
{
    Py_VISIT(t->pieces);
    Py_VISIT(t->stamps);
    Py_VISIT(t->clock);
    Py_VISIT(t->on_batch);
    Py_VISIT(t->on_error);
    Py_VISIT(t->ended_at);
    return 0;
}

static int
PieceTaker_clear(PieceTaker *t)
{
    Py_CLEAR(t->pieces);
    Py_CLEAR(t->stamps);
    Py_CLEAR(t->clock);
    Py_CLEAR(t->on_batch);
    Py_CLEAR(t->on_error);
    Py_CLEAR(t->ended_at);
    return 0;
}

static void
PieceTaker_dealloc(PieceTaker *t)
{
    PyObject_GC_UnTrack(t);
    PieceTaker_clear(t);
    Py_TYPE(t)->tp_free((PyObject *)t);
}

static PyMemberDef PieceTaker_members[] = {
    {"broken", Py_T_BOOL, offsetof(PieceTaker, broken), 0, "given up: keeps nothing"},
    {"seen", Py_T_BOOL, offsetof(PieceTaker, seen), 0, "whether a piece came through"},
    {"buffered", Py_T_PYSSIZET, offsetof(PieceTaker, buffered), 0, "bytes in pieces"},
    {"ended_at", Py_T_OBJECT_EX, offsetof(PieceTaker, ended_at), Py_READONLY,
     "when the body ended (an empty piece), or None"},
    {NULL, 0, 0, 0, NULL},
};

static PyMethodDef PieceTaker_methods[] = {
    {"start", (PyCFunction)(void (*)(void))PieceTaker_start, METH_FASTCALL,
     "start(clock, on_batch, batch_pieces, batch_bytes): what a call uses (before\n"
     "it, a call keeps nothing)."},
    {NULL, NULL, 0, NULL},
};

PyDoc_STRVAR(PieceTaker_doc,
"PieceTaker(pieces, stamps, on_error)\n\n"
"Called as taker(data) with each piece of a body: see piece_tap.PieceTaker.");

static PyTypeObject PieceTakerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "recorder.proxy._pieces.PieceTaker",
    .tp_basicsize = sizeof(PieceTaker),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = PieceTaker_doc,
    .tp_new = PieceTaker_new,
    .tp_dealloc = (destructor)PieceTaker_dealloc,
    .tp_traverse = (traverseproc)PieceTaker_traverse,
    .tp_clear = (inquiry)PieceTaker_clear,
    .tp_vectorcall_offset = offsetof(PieceTaker, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_members = PieceTaker_members,
    .tp_methods = PieceTaker_methods,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "recorder.proxy._pieces",
    .m_doc = "The body tap's piece taker in C (see piece_tap.py).",
    .m_size = -1,
};

PyMODINIT_FUNC
PyInit__pieces(void)
{
    if (PyType_Ready(&PieceTakerType) < 0) {
        return NULL;
    }
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) {
        return NULL;
    }
    if (PyModule_AddObjectRef(m, "PieceTaker", (PyObject *)&PieceTakerType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
