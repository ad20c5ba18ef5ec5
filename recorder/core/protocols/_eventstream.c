/* The event-stream framer's run of sound messages (recorder/core/eventstream.py), in C.
 *
 * A Scanner frames, from a position of a piece on, the messages that are whole
 * and sound and whose header block the framer has named already (its cache,
 * a dict of header block -> (name, message type, data or None)), and stops at
 * the first message that is anything else: fewer than 12 bytes left, a prelude
 * CRC or a message CRC that does not match, lengths that cannot be, a message
 * longer than the cap, one the piece does not hold whole, a header block not
 * named yet. That message is the Python framer's, which stays the reference
 * (it reports the damage, names the block, keeps the rest) and then hands the
 * piece back here. So this code decides nothing the Python framer would decide
 * otherwise: it only builds, for the messages both agree are sound, the Event
 * the Python framer builds (tests/core/test_eventstream_native.py compares
 * them on bodies cut anywhere and damaged). Without this module (no C compiler
 * at install) the Python framer frames every message.
 *
 * A MessageReader (Scanner.reader) reads a piece that is one whole message for
 * the meter's batch path: the message framed as above, its header block named an
 * event of the reader's name, its payload handed to the interpreter's template
 * reader; anything else is -1, nothing read, and the piece goes the long way
 * (feed_one, then the interpreter), which decides the same. A ChunkReader does
 * InvokeModelInterpreter.handle's shortcut for such a payload (a Bedrock chunk:
 * its base64 decoded, the Anthropic event inside handed to the Messages
 * template's reader).
 *
 * The CRC is the CRC-32 of zlib (and of binascii.crc32), computed here by
 * tables (slicing by 8) so that no zlib header is needed to build.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define PRELUDE 12
#define MIN_MESSAGE 16

static uint32_t crc_table[8][256];

static void
crc_init(void)
{
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++) {
            c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        }
        crc_table[0][n] = c;
    }
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = crc_table[0][n];
        for (int k = 1; k < 8; k++) {
            c = crc_table[0][c & 0xff] ^ (c >> 8);
            crc_table[k][n] = c;
        }
    }
}

/* zlib's crc32(crc, buf, len): continues the running CRC ``crc`` (0 to begin). */
static uint32_t
crc32_update(uint32_t crc, const unsigned char *p, Py_ssize_t len)
{
    crc = ~crc;
    while (len >= 8) {
        uint32_t a = crc ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                            (uint32_t)p[3] << 24);
        crc = crc_table[7][a & 0xff] ^ crc_table[6][(a >> 8) & 0xff] ^
              crc_table[5][(a >> 16) & 0xff] ^ crc_table[4][a >> 24] ^
              crc_table[3][p[4]] ^ crc_table[2][p[5]] ^ crc_table[1][p[6]] ^
              crc_table[0][p[7]];
        p += 8;
        len -= 8;
    }
    while (len-- > 0) {
        crc = crc_table[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
    }
    return ~crc;
}

static inline uint32_t
be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyTypeObject *event; /* recorder.core.framing.Event (a tuple of 4) */
    PyObject *heads;     /* dict: header block (bytes) -> (name, mtype, data or None) */
    PyObject *last;      /* the block last found in heads (bytes), or NULL */
    PyObject *named;     /* its naming (a tuple of 3), or NULL */
} Scanner;

/* The length of the sound message at ``p`` (``avail`` bytes from it), or 0 when it
 * is not one this code frames (the Python framer's, then). */
static Py_ssize_t
sound(const unsigned char *p, Py_ssize_t avail, Py_ssize_t limit)
{
    if (avail < PRELUDE) {
        return 0;
    }
    uint32_t total = be32(p), head = be32(p + 4);
    uint32_t prelude_crc = crc32_update(0, p, 8);
    if (prelude_crc != be32(p + 8)) {
        return 0;
    }
    if (total < MIN_MESSAGE || head > total - MIN_MESSAGE || (Py_ssize_t)total > limit ||
        (Py_ssize_t)total > avail) {
        return 0;
    }
    /* the message CRC continues the prelude's (it covers the prelude too) */
    if (crc32_update(prelude_crc, p + 8, (Py_ssize_t)total - 12) != be32(p + total - 4)) {
        return 0;
    }
    return (Py_ssize_t)total;
}

/* The naming of the message's header block (borrowed), NULL if the block is not
 * named yet (no error set) or on an error (set). */
static PyObject *
naming(Scanner *s, const unsigned char *block, Py_ssize_t size)
{
    PyObject *last = s->last;
    if (last != NULL && PyBytes_GET_SIZE(last) == size &&
        memcmp(PyBytes_AS_STRING(last), block, (size_t)size) == 0) {
        return s->named;
    }
    PyObject *key = PyBytes_FromStringAndSize((const char *)block, size);
    if (key == NULL) {
        return NULL;
    }
    PyObject *named = PyDict_GetItemWithError(s->heads, key); /* borrowed */
    if (named == NULL || !PyTuple_CheckExact(named) || PyTuple_GET_SIZE(named) != 3 ||
        !PyUnicode_CheckExact(PyTuple_GET_ITEM(named, 0)) ||
        !PyUnicode_CheckExact(PyTuple_GET_ITEM(named, 1))) {
        Py_DECREF(key);
        return NULL;
    }
    Py_XSETREF(s->last, key);
    Py_INCREF(named);
    Py_XSETREF(s->named, named);
    return named;
}

/* The Event of the sound message at ``p`` (``total`` bytes), or NULL: an error set,
 * or (no error) a header block not named yet. */
static PyObject *
event_of(Scanner *s, const unsigned char *p, Py_ssize_t total)
{
    Py_ssize_t head = (Py_ssize_t)be32(p + 4);
    PyObject *named = naming(s, p + PRELUDE, head);
    if (named == NULL) {
        return NULL;
    }
    PyObject *data = PyTuple_GET_ITEM(named, 2);
    if (data == Py_None) {
        data = PyBytes_FromStringAndSize((const char *)p + PRELUDE + head,
                                         total - PRELUDE - head - 4);
        if (data == NULL) {
            return NULL;
        }
    }
    else {
        Py_INCREF(data);
    }
    /* as tuple.__new__(Event, (name, data, mtype, None)) */
    PyObject *ev = s->event->tp_alloc(s->event, 4);
    if (ev == NULL) {
        Py_DECREF(data);
        return NULL;
    }
    PyObject *name = PyTuple_GET_ITEM(named, 0), *mtype = PyTuple_GET_ITEM(named, 1);
    Py_INCREF(name);
    Py_INCREF(mtype);
    PyTuple_SET_ITEM(ev, 0, name);
    PyTuple_SET_ITEM(ev, 1, data);
    PyTuple_SET_ITEM(ev, 2, mtype);
    PyTuple_SET_ITEM(ev, 3, Py_NewRef(Py_None));
    return ev;
}

static int
take_buffer(PyObject *data, const unsigned char **buf, Py_ssize_t *size)
{
    if (!PyBytes_Check(data)) {
        PyErr_SetString(PyExc_TypeError, "the piece must be bytes");
        return -1;
    }
    *buf = (const unsigned char *)PyBytes_AS_STRING(data);
    *size = PyBytes_GET_SIZE(data);
    return 0;
}

/* scanner(data, pos, limit, out) -> the position of the first message not framed */
static PyObject *
Scanner_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Scanner *s = (Scanner *)self;
    if (PyVectorcall_NARGS(nargsf) != 4 || kwnames != NULL) {
        PyErr_SetString(PyExc_TypeError, "scanner(data, pos, limit, out)");
        return NULL;
    }
    const unsigned char *buf;
    Py_ssize_t size;
    if (take_buffer(args[0], &buf, &size) < 0) {
        return NULL;
    }
    Py_ssize_t pos = PyLong_AsSsize_t(args[1]);
    Py_ssize_t limit = PyLong_AsSsize_t(args[2]);
    if ((pos == -1 || limit == -1) && PyErr_Occurred()) {
        return NULL;
    }
    PyObject *out = args[3];
    if (!PyList_Check(out)) {
        PyErr_SetString(PyExc_TypeError, "out must be a list");
        return NULL;
    }
    if (pos < 0) {
        pos = 0;
    }
    while (pos < size) {
        Py_ssize_t total = sound(buf + pos, size - pos, limit);
        if (total == 0) {
            break;
        }
        PyObject *ev = event_of(s, buf + pos, total);
        if (ev == NULL) {
            if (PyErr_Occurred()) {
                return NULL;
            }
            break;
        }
        int failed = PyList_Append(out, ev);
        Py_DECREF(ev);
        if (failed) {
            return NULL;
        }
        pos += total;
    }
    return PyLong_FromSsize_t(pos);
}

/* scanner.one(data, limit) -> the Event if data is exactly one such message, else None */
static PyObject *
Scanner_one(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    Scanner *s = (Scanner *)self;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "one(data, limit)");
        return NULL;
    }
    const unsigned char *buf;
    Py_ssize_t size;
    if (take_buffer(args[0], &buf, &size) < 0) {
        return NULL;
    }
    Py_ssize_t limit = PyLong_AsSsize_t(args[1]);
    if (limit == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (size < MIN_MESSAGE || (Py_ssize_t)be32(buf) != size) {
        Py_RETURN_NONE;
    }
    if (sound(buf, size, limit) != size) {
        Py_RETURN_NONE;
    }
    PyObject *ev = event_of(s, buf, size);
    if (ev == NULL && !PyErr_Occurred()) {
        Py_RETURN_NONE;
    }
    return ev;
}

static PyObject *
Scanner_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    PyObject *event, *heads;
    if (kwds != NULL && PyDict_GET_SIZE(kwds)) {
        PyErr_SetString(PyExc_TypeError, "Scanner takes no keyword arguments");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "O!O!:Scanner", &PyType_Type, &event, &PyDict_Type, &heads)) {
        return NULL;
    }
    if (!PyType_IsSubtype((PyTypeObject *)event, &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "the event type must be a tuple");
        return NULL;
    }
    Scanner *s = (Scanner *)type->tp_alloc(type, 0);
    if (s == NULL) {
        return NULL;
    }
    s->vectorcall = Scanner_vectorcall;
    s->event = (PyTypeObject *)Py_NewRef(event);
    s->heads = Py_NewRef(heads);
    s->last = NULL;
    s->named = NULL;
    return (PyObject *)s;
}

static int
Scanner_traverse(Scanner *s, visitproc visit, void *arg)
{
    Py_VISIT(s->event);
    Py_VISIT(s->heads);
    Py_VISIT(s->last);
    Py_VISIT(s->named);
    return 0;
}

static int
Scanner_clear(Scanner *s)
{
    Py_CLEAR(s->event);
    Py_CLEAR(s->heads);
    Py_CLEAR(s->last);
    Py_CLEAR(s->named);
    return 0;
}

static void
Scanner_dealloc(Scanner *s)
{
    PyObject_GC_UnTrack(s);
    Scanner_clear(s);
    Py_TYPE(s)->tp_free((PyObject *)s);
}

static PyObject *
crc32_py(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    Py_buffer view;
    if (nargs < 1 || nargs > 2) {
        PyErr_SetString(PyExc_TypeError, "crc32(data, crc=0)");
        return NULL;
    }
    unsigned long crc = 0;
    if (nargs == 2) {
        crc = PyLong_AsUnsignedLongMask(args[1]);
        if (crc == (unsigned long)-1 && PyErr_Occurred()) {
            return NULL;
        }
    }
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    uint32_t out = crc32_update((uint32_t)crc, view.buf, view.len);
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(out);
}

/* Base64 (RFC 4648's alphabet): each character's six bits, 64 for any other byte. */
static unsigned char b64_value[256];

static void
b64_init(void)
{
    static const char alphabet[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    memset(b64_value, 64, sizeof(b64_value));
    for (int i = 0; i < 64; i++) {
        b64_value[(unsigned char)alphabet[i]] = (unsigned char)i;
    }
}

#define BYTES_KEY "{\"bytes\":\""
#define BYTES_AT (sizeof(BYTES_KEY) - 1)

/* chunk_bytes(data) -> the decoded base64 of a Bedrock chunk, or None.
 *
 * ``data`` must begin ``{"bytes":"`` (the envelope as Bedrock writes it) and the
 * base64 up to the next quote must be written as an encoder writes it: whole
 * groups of four alphabet characters, the last ending in at most two ``=``.
 * binascii.a2b_base64(strict_mode=True) decodes such a string alike (it too
 * ignores the bits a last group leaves over); anything else is None, and the
 * interpreter's Python path reads the chunk (invoke_model.py). */
static PyObject *
decode_chunk(PyObject *data)
{
    const unsigned char *buf = (const unsigned char *)PyBytes_AS_STRING(data);
    Py_ssize_t size = PyBytes_GET_SIZE(data);
    if (size < (Py_ssize_t)BYTES_AT || memcmp(buf, BYTES_KEY, BYTES_AT) != 0) {
        Py_RETURN_NONE;
    }
    const unsigned char *b64 = buf + BYTES_AT;
    const unsigned char *quote = memchr(b64, '"', (size_t)(size - (Py_ssize_t)BYTES_AT));
    if (quote == NULL) {
        Py_RETURN_NONE;
    }
    Py_ssize_t len = quote - b64;
    if (len % 4) {
        Py_RETURN_NONE;
    }
    Py_ssize_t pad = 0;
    if (len && b64[len - 1] == '=') {
        pad = b64[len - 2] == '=' ? 2 : 1;
    }
    for (Py_ssize_t i = 0; i < len - pad; i++) {
        if (b64_value[b64[i]] == 64) {
            Py_RETURN_NONE;
        }
    }
    Py_ssize_t out_len = len / 4 * 3 - pad;
    PyObject *out = PyBytes_FromStringAndSize(NULL, out_len);
    if (out == NULL) {
        return NULL;
    }
    unsigned char *o = (unsigned char *)PyBytes_AS_STRING(out);
    Py_ssize_t i = 0, w = 0;
    for (; i + 4 <= len - (pad ? 4 : 0); i += 4) {
        uint32_t v = (uint32_t)b64_value[b64[i]] << 18 | (uint32_t)b64_value[b64[i + 1]] << 12 |
                     (uint32_t)b64_value[b64[i + 2]] << 6 | (uint32_t)b64_value[b64[i + 3]];
        o[w++] = (unsigned char)(v >> 16);
        o[w++] = (unsigned char)(v >> 8);
        o[w++] = (unsigned char)v;
    }
    if (pad) { /* the last group: two or three characters, then the padding */
        uint32_t v = (uint32_t)b64_value[b64[i]] << 18 | (uint32_t)b64_value[b64[i + 1]] << 12;
        o[w++] = (unsigned char)(v >> 16);
        if (pad == 1) {
            v |= (uint32_t)b64_value[b64[i + 2]] << 6;
            o[w++] = (unsigned char)(v >> 8);
        }
    }
    return out;
}

static PyObject *
chunk_bytes(PyObject *module, PyObject *data)
{
    (void)module;
    if (!PyBytes_Check(data)) {
        PyErr_SetString(PyExc_TypeError, "the data must be bytes");
        return NULL;
    }
    return decode_chunk(data);
}

#define MESSAGES_START "{\"type\":\""
#define METRICS_KEY "amazon-bedrock-invocationMetrics"

static int
holds(const unsigned char *hay, Py_ssize_t size, const char *needle, Py_ssize_t len)
{
    for (Py_ssize_t i = 0; i + len <= size; i++) {
        const unsigned char *at = memchr(hay + i, needle[0], (size_t)(size - len - i + 1));
        if (at == NULL) {
            return 0;
        }
        i = at - hay;
        if (memcmp(at, needle, (size_t)len) == 0) {
            return 1;
        }
    }
    return 0;
}

/* A reader of one event's data, made of another (``read``): the data is a Bedrock
 * chunk, and ``read`` is given the Anthropic event inside it. */
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *read;
} ChunkReader;

/* chunk_reader(data) -> read(the event inside), or -1 (nothing read) when the
 * chunk is not the usual one: InvokeModelInterpreter.handle's shortcut, whose
 * other cases (base64 written otherwise, the metrics' chunk, another family's
 * JSON) it leaves to that method. */
static PyObject *
ChunkReader_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    if (PyVectorcall_NARGS(nargsf) != 1 || kwnames != NULL || !PyBytes_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "chunk_reader(data: bytes)");
        return NULL;
    }
    PyObject *inner = decode_chunk(args[0]);
    if (inner == NULL) {
        return NULL;
    }
    if (inner == Py_None) {
        Py_DECREF(inner);
        return PyLong_FromLong(-1);
    }
    const unsigned char *buf = (const unsigned char *)PyBytes_AS_STRING(inner);
    Py_ssize_t size = PyBytes_GET_SIZE(inner);
    Py_ssize_t start = (Py_ssize_t)sizeof(MESSAGES_START) - 1;
    if (size < start || memcmp(buf, MESSAGES_START, (size_t)start) != 0 ||
        holds(buf, size, METRICS_KEY, (Py_ssize_t)sizeof(METRICS_KEY) - 1)) {
        Py_DECREF(inner);
        return PyLong_FromLong(-1);
    }
    PyObject *out = PyObject_Vectorcall(((ChunkReader *)self)->read, &inner, 1, NULL);
    Py_DECREF(inner);
    return out;
}

static PyObject *
ChunkReader_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    PyObject *read;
    if (kwds != NULL && PyDict_GET_SIZE(kwds)) {
        PyErr_SetString(PyExc_TypeError, "ChunkReader takes no keyword arguments");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "O:ChunkReader", &read)) {
        return NULL;
    }
    if (!PyCallable_Check(read)) {
        PyErr_SetString(PyExc_TypeError, "read must be callable");
        return NULL;
    }
    ChunkReader *r = (ChunkReader *)type->tp_alloc(type, 0);
    if (r == NULL) {
        return NULL;
    }
    r->vectorcall = ChunkReader_vectorcall;
    r->read = Py_NewRef(read);
    return (PyObject *)r;
}

static int
ChunkReader_traverse(ChunkReader *r, visitproc visit, void *arg)
{
    Py_VISIT(r->read);
    return 0;
}

static int
ChunkReader_clear(ChunkReader *r)
{
    Py_CLEAR(r->read);
    return 0;
}

static void
ChunkReader_dealloc(ChunkReader *r)
{
    PyObject_GC_UnTrack(r);
    ChunkReader_clear(r);
    Py_TYPE(r)->tp_free((PyObject *)r);
}

PyDoc_STRVAR(ChunkReader_doc,
"ChunkReader(read)\n\n"
"Called as chunk_reader(data): data is a Bedrock chunk's payload; if it is the\n"
"usual one (chunk_bytes decodes it to an Anthropic event, not the metrics'),\n"
"read(that event), else -1 (nothing read).");

static PyTypeObject ChunkReaderType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "recorder.core.protocols._eventstream.ChunkReader",
    .tp_basicsize = sizeof(ChunkReader),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = ChunkReader_doc,
    .tp_new = ChunkReader_new,
    .tp_dealloc = (destructor)ChunkReader_dealloc,
    .tp_traverse = (traverseproc)ChunkReader_traverse,
    .tp_clear = (inquiry)ChunkReader_clear,
    .tp_vectorcall_offset = offsetof(ChunkReader, vectorcall),
    .tp_call = PyVectorcall_Call,
};

/* A reader of a piece that is exactly one whole, sound message whose event is
 * ``name`` (an event message whose data is its payload): what the meter's batch
 * path does for such a piece (Scanner.one, then the interpreter's template
 * reader of its data), in one call. */
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    Scanner *scanner; /* names the header blocks (its cache, the framer's heads) */
    PyObject *name;   /* str */
    PyObject *read;   /* the reader of an event's data: data -> int */
    Py_ssize_t limit; /* the framer's cap on a message */
} MessageReader;

/* message_reader(data) -> read(its payload), or -1 (nothing read) when data is
 * not exactly one whole, sound message under the cap whose header block the
 * framer has named an event ``name`` with the payload as data. */
static PyObject *
MessageReader_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf,
                         PyObject *kwnames)
{
    MessageReader *r = (MessageReader *)self;
    if (PyVectorcall_NARGS(nargsf) != 1 || kwnames != NULL) {
        PyErr_SetString(PyExc_TypeError, "message_reader(data)");
        return NULL;
    }
    const unsigned char *buf;
    Py_ssize_t size;
    if (take_buffer(args[0], &buf, &size) < 0) {
        return NULL;
    }
    if (size < MIN_MESSAGE || (Py_ssize_t)be32(buf) != size ||
        sound(buf, size, r->limit) != size) {
        return PyLong_FromLong(-1);
    }
    Py_ssize_t head = (Py_ssize_t)be32(buf + 4);
    PyObject *named = naming(r->scanner, buf + PRELUDE, head);
    if (named == NULL) {
        return PyErr_Occurred() ? NULL : PyLong_FromLong(-1);
    }
    PyObject *name = PyTuple_GET_ITEM(named, 0), *mtype = PyTuple_GET_ITEM(named, 1);
    if (PyTuple_GET_ITEM(named, 2) != Py_None ||
        PyUnicode_CompareWithASCIIString(mtype, "event") != 0) {
        return PyLong_FromLong(-1);
    }
    if (name != r->name) {
        int same = PyUnicode_Compare(name, r->name);
        if (same == -1 && PyErr_Occurred()) {
            return NULL;
        }
        if (same != 0) {
            return PyLong_FromLong(-1);
        }
    }
    PyObject *payload =
        PyBytes_FromStringAndSize((const char *)buf + PRELUDE + head, size - PRELUDE - head - 4);
    if (payload == NULL) {
        return NULL;
    }
    PyObject *out = PyObject_Vectorcall(r->read, &payload, 1, NULL);
    Py_DECREF(payload);
    return out;
}

static int
MessageReader_traverse(MessageReader *r, visitproc visit, void *arg)
{
    Py_VISIT(r->scanner);
    Py_VISIT(r->name);
    Py_VISIT(r->read);
    return 0;
}

static int
MessageReader_clear(MessageReader *r)
{
    Py_CLEAR(r->scanner);
    Py_CLEAR(r->name);
    Py_CLEAR(r->read);
    return 0;
}

static void
MessageReader_dealloc(MessageReader *r)
{
    PyObject_GC_UnTrack(r);
    MessageReader_clear(r);
    Py_TYPE(r)->tp_free((PyObject *)r);
}

PyDoc_STRVAR(MessageReader_doc,
"Made by Scanner.reader(name, read, limit); called as message_reader(data):\n"
"read(the payload) if data is exactly one whole, sound message no longer than\n"
"limit whose header block the framer has named an event called name, else -1.");

static PyTypeObject MessageReaderType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "recorder.core.protocols._eventstream.MessageReader",
    .tp_basicsize = sizeof(MessageReader),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = MessageReader_doc,
    .tp_dealloc = (destructor)MessageReader_dealloc,
    .tp_traverse = (traverseproc)MessageReader_traverse,
    .tp_clear = (inquiry)MessageReader_clear,
    .tp_vectorcall_offset = offsetof(MessageReader, vectorcall),
    .tp_call = PyVectorcall_Call,
};

/* scanner.reader(name, read, limit) -> a MessageReader sharing this scanner's names */
static PyObject *
Scanner_reader(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3 || !PyUnicode_Check(args[0]) || !PyCallable_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "reader(name: str, read, limit: int)");
        return NULL;
    }
    Py_ssize_t limit = PyLong_AsSsize_t(args[2]);
    if (limit == -1 && PyErr_Occurred()) {
        return NULL;
    }
    MessageReader *r = PyObject_GC_New(MessageReader, &MessageReaderType);
    if (r == NULL) {
        return NULL;
    }
    r->vectorcall = MessageReader_vectorcall;
    r->scanner = (Scanner *)Py_NewRef(self);
    r->name = Py_NewRef(args[0]);
    r->read = Py_NewRef(args[1]);
    r->limit = limit;
    PyObject_GC_Track(r);
    return (PyObject *)r;
}

PyDoc_STRVAR(reader_doc,
"reader(name, read, limit) -> MessageReader\n\n"
"A reader of a piece that is one whole message named name, as the batch path\n"
"reads it: read(its payload), or -1 when it is not such a piece.");

PyDoc_STRVAR(one_doc,
"one(data, limit) -> Event | None\n\n"
"The Event of data if data is exactly one whole, sound message no longer than\n"
"limit whose header block is named; else None.");

static PyMethodDef Scanner_methods[] = {
    {"one", (PyCFunction)(void (*)(void))Scanner_one, METH_FASTCALL, one_doc},
    {"reader", (PyCFunction)(void (*)(void))Scanner_reader, METH_FASTCALL, reader_doc},
    {NULL, NULL, 0, NULL},
};

PyDoc_STRVAR(Scanner_doc,
"Scanner(event_type, heads)\n\n"
"Called as scanner(data, pos, limit, out): appends to out the Event of each\n"
"whole, sound message of data from pos on (no longer than limit, its header\n"
"block a key of heads) and returns where it stopped: at the first message that\n"
"is anything else, which the Python framer frames.");

static PyTypeObject ScannerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "recorder.core.protocols._eventstream.Scanner",
    .tp_basicsize = sizeof(Scanner),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = Scanner_doc,
    .tp_new = Scanner_new,
    .tp_dealloc = (destructor)Scanner_dealloc,
    .tp_traverse = (traverseproc)Scanner_traverse,
    .tp_clear = (inquiry)Scanner_clear,
    .tp_vectorcall_offset = offsetof(Scanner, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_methods = Scanner_methods,
};

static PyMethodDef module_methods[] = {
    {"chunk_bytes", (PyCFunction)chunk_bytes, METH_O,
     "chunk_bytes(data): the decoded base64 of a Bedrock chunk written as Bedrock\n"
     "writes it ({\"bytes\":\"<base64>\"...), or None (read it the long way)."},
    {"crc32", (PyCFunction)(void (*)(void))crc32_py, METH_FASTCALL,
     "crc32(data, crc=0): zlib's CRC-32, as this module computes it (for the tests)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "recorder.core.protocols._eventstream",
    .m_doc = "The event-stream framer's run of sound messages in C (see eventstream.py).",
    .m_size = -1,
    .m_methods = module_methods,
};

PyMODINIT_FUNC
PyInit__eventstream(void)
{
    crc_init();
    b64_init();
    if (PyType_Ready(&ScannerType) < 0 || PyType_Ready(&ChunkReaderType) < 0 ||
        PyType_Ready(&MessageReaderType) < 0) {
        return NULL;
    }
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) {
        return NULL;
    }
    if (PyModule_AddObjectRef(m, "Scanner", (PyObject *)&ScannerType) < 0 ||
        PyModule_AddObjectRef(m, "ChunkReader", (PyObject *)&ChunkReaderType) < 0 ||
        PyModule_AddObjectRef(m, "MessageReader", (PyObject *)&MessageReaderType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
