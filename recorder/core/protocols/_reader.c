/* The template reader of recorder/core/protocols/template.py, in C.
 *
 * A Reader does for one event's data exactly what the Python reader made by
 * Template.reader does (the same return value, the same counts added to the
 * Observations), and Reader.run does it for a run of whole SSE events in one
 * piece, LF or CRLF (the run's loop in Python is SSEFramer.runner's in sse.py,
 * which hands out this one instead), Reader.run_objects for a run of the
 * elements of a streamed JSON array (JSONArrayFramer.runner's, json_array.py),
 * where the Python reader spends most of the meter's time
 * (docs/performance.md). The Python reader stays the reference: the tests run
 * both on the same bytes (tests/core/protocols/test_native_reader.py), and
 * without this module (no C compiler at install) the Python one is used.
 *
 * Whatever this reader is unsure of it refuses (returns -1): the event then
 * takes the full parse, which says the same by construction of the template
 * (see template.py). So it reads only what both agree on: the text of the
 * hole as plain characters, valid UTF-8 and the JSON escapes (a surrogate
 * escaped only as a pair, as orjson reads it).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* memmem */
#endif
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <string.h>

/* hole kinds (template.py: HoleKind) */
#define HOLE_STRING 1
#define HOLE_INT 2
/* kinds of output (observations.py: OutputKind) */
#define OUT_TEXT 0
#define OUT_REASONING 1
#define OUT_TOOL 2
#define OUT_SUMMARY 3

#define MAX_DIGITS 18 /* template.py _MAX_DIGITS */

typedef struct {
    int kind;
    PyObject *lit; /* bytes */
} Hole;

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *obs;
    int kind;
    PyObject *head; /* bytes */
    PyObject *tail; /* bytes */
    Py_ssize_t n_left, n_right;
    Hole *left;  /* the holes before the text, in order: (kind, the literal after it) */
    Hole *right; /* the holes after it, from the end: (kind, the literal before it) */
} Reader;

/* What one read or one run adds to the Observations. */
typedef struct {
    long long chars;  /* characters of output (code points) */
    long long deltas; /* events that carried any */
    long long cjk;    /* characters of 3 or 4 UTF-8 bytes */
    long long alpha;  /* characters of 2 UTF-8 bytes */
} Counts;

static PyObject *s_output_chars, *s_output_deltas, *s_text_chars, *s_reasoning_chars,
    *s_tool_chars, *s_summary_chars, *s_cjk_chars, *s_alphabetic_chars;

/* bytes.find(sub, start) on data[0:n] */
static Py_ssize_t
find_forward(const char *s, Py_ssize_t n, Py_ssize_t start, const char *sub, Py_ssize_t m)
{
    if (start > n) {
        return -1;
    }
    if (m == 0) {
        return start;
    }
    if (n - start < m) {
        return -1;
    }
    const char *at = memmem(s + start, (size_t)(n - start), sub, (size_t)m);
    return at == NULL ? -1 : at - s;
}

/* bytes.rfind(sub, start, end), end within the data */
static Py_ssize_t
find_backward(const char *s, Py_ssize_t start, Py_ssize_t end, const char *sub, Py_ssize_t m)
{
    if (start > end || end - start < m) {
        return -1;
    }
    for (Py_ssize_t i = end - m; i >= start; i--) {
        if (memcmp(s + i, sub, (size_t)m) == 0) {
            return i;
        }
    }
    return -1;
}

/* template.py _valid: a whole token of an ignored hole */
static int
valid_hole(int kind, const unsigned char *s, Py_ssize_t n)
{
    if (kind == HOLE_STRING) { /* printable ASCII, no quote, no backslash */
        for (Py_ssize_t i = 0; i < n; i++) {
            unsigned char b = s[i];
            if (b < 0x20 || b > 0x7e || b == '"' || b == '\\') {
                return 0;
            }
        }
        return 1;
    }
    if (n < 1 || n > MAX_DIGITS || (s[0] == '0' && n > 1)) {
        return 0;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') {
            return 0;
        }
    }
    return 1;
}

/* The length of the valid UTF-8 sequence at s (n > 0 bytes left, s[0] >= 0x80), as
 * bytes.decode("utf-8") accepts it; 0 if it is not one. */
static int
utf8_length(const unsigned char *s, Py_ssize_t n)
{
    unsigned char b = s[0];
    if (b >= 0xc2 && b <= 0xdf) {
        return n >= 2 && (s[1] & 0xc0) == 0x80 ? 2 : 0;
    }
    if (b >= 0xe0 && b <= 0xef) {
        if (n < 3 || (s[2] & 0xc0) != 0x80) {
            return 0;
        }
        unsigned char lo = b == 0xe0 ? 0xa0 : 0x80, hi = b == 0xed ? 0x9f : 0xbf;
        return s[1] >= lo && s[1] <= hi ? 3 : 0;
    }
    if (b >= 0xf0 && b <= 0xf4) {
        if (n < 4 || (s[2] & 0xc0) != 0x80 || (s[3] & 0xc0) != 0x80) {
            return 0;
        }
        unsigned char lo = b == 0xf0 ? 0x90 : 0x80, hi = b == 0xf4 ? 0x8f : 0xbf;
        return s[1] >= lo && s[1] <= hi ? 4 : 0;
    }
    return 0;
}

static int
hex_digit(unsigned char c)
{
    if (c >= '0' && c <= '9') {
        return c - '0';
    }
    if (c >= 'a' && c <= 'f') {
        return c - 'a' + 10;
    }
    if (c >= 'A' && c <= 'F') {
        return c - 'A' + 10;
    }
    return -1;
}

/* The code point of four hex digits, or -1. */
static long
hex4(const unsigned char *s)
{
    long cp = 0;
    for (int k = 0; k < 4; k++) {
        int h = hex_digit(s[k]);
        if (h < 0) {
            return -1;
        }
        cp = cp * 16 + h;
    }
    return cp;
}

/* The inside of the text's JSON string, t[0:n]: its characters, counted into c as
 * Observations.add(kind, text) counts them; -1 if it is not one string's inside
 * that this reader reads. */
static Py_ssize_t
read_text(int kind, const unsigned char *t, Py_ssize_t n, Counts *c)
{
    Py_ssize_t chars = 0, cjk = 0, alpha = 0, i = 0;
    while (i < n) {
        unsigned char b = t[i];
        if (b < 0x80) {
            if (b == '\\') {
                if (i + 1 >= n) {
                    return -1;
                }
                switch (t[i + 1]) {
                case '"': case '\\': case '/': case 'b': case 'f': case 'n': case 'r': case 't':
                    i += 2;
                    break;
                case 'u': {
                    if (i + 6 > n) {
                        return -1;
                    }
                    long cp = hex4(t + i + 2);
                    if (cp < 0) {
                        return -1;
                    }
                    if (cp >= 0xd800 && cp <= 0xdfff) {
                        /* one character only as a high surrogate, then a low one
                         * (orjson refuses any other surrogate) */
                        long low = cp <= 0xdbff && i + 12 <= n && t[i + 6] == '\\' &&
                                           t[i + 7] == 'u'
                                       ? hex4(t + i + 8)
                                       : -1;
                        if (low < 0xdc00 || low > 0xdfff) {
                            return -1;
                        }
                        cjk++; /* 4 bytes in UTF-8 */
                        i += 12;
                        break;
                    }
                    if (cp >= 0x800) {
                        cjk++;
                    } else if (cp >= 0x80) {
                        alpha++;
                    }
                    i += 6;
                    break;
                }
                default:
                    return -1;
                }
            } else if (b < 0x20 || b == '"') {
                return -1; /* unescaped: not inside one JSON string */
            } else {
                i++;
            }
        } else {
            int len = utf8_length(t + i, n - i);
            if (len == 0) {
                return -1;
            }
            if (len == 2) {
                alpha++;
            } else {
                cjk++;
            }
            i += len;
        }
        chars++;
    }
    if (chars) {
        c->chars += chars;
        if (kind != OUT_SUMMARY) {
            c->deltas += 1;
        }
        if (kind == OUT_TEXT || kind == OUT_REASONING) {
            c->cjk += cjk;
            c->alpha += alpha;
        }
    }
    return chars;
}

/* Template.match, then the text: one event's data, less the first skip bytes of
 * the head (0 but for run_objects, where they are the lead of a whole piece). */
static Py_ssize_t
read_event(Reader *r, const char *d, Py_ssize_t size, Counts *c, Py_ssize_t skip)
{
    Py_ssize_t hn = PyBytes_GET_SIZE(r->head) - skip, tn = PyBytes_GET_SIZE(r->tail);
    if (hn < 0 || size < hn || memcmp(d, PyBytes_AS_STRING(r->head) + skip, (size_t)hn) != 0) {
        return -1;
    }
    Py_ssize_t pos = hn;
    for (Py_ssize_t i = 0; i < r->n_left; i++) {
        PyObject *lit = r->left[i].lit;
        Py_ssize_t m = PyBytes_GET_SIZE(lit);
        Py_ssize_t at = find_forward(d, size, pos, PyBytes_AS_STRING(lit), m);
        if (at < 0 || !valid_hole(r->left[i].kind, (const unsigned char *)d + pos, at - pos)) {
            return -1;
        }
        pos = at + m;
    }
    if (size < tn || memcmp(d + size - tn, PyBytes_AS_STRING(r->tail), (size_t)tn) != 0) {
        return -1;
    }
    Py_ssize_t end = size - tn;
    for (Py_ssize_t i = 0; i < r->n_right; i++) {
        PyObject *lit = r->right[i].lit;
        Py_ssize_t m = PyBytes_GET_SIZE(lit);
        Py_ssize_t at = find_backward(d, pos, end, PyBytes_AS_STRING(lit), m);
        if (at < 0 ||
            !valid_hole(r->right[i].kind, (const unsigned char *)d + at + m, end - at - m)) {
            return -1;
        }
        end = at;
    }
    if (end < pos) {
        return -1;
    }
    return read_text(r->kind, (const unsigned char *)d + pos, end - pos, c);
}

static int
bump(PyObject *obs, PyObject *name, long long by)
{
    if (by == 0) {
        return 0;
    }
    PyObject *old = PyObject_GetAttr(obs, name);
    if (old == NULL) {
        return -1;
    }
    PyObject *delta = PyLong_FromLongLong(by);
    if (delta == NULL) {
        Py_DECREF(old);
        return -1;
    }
    PyObject *sum = PyNumber_Add(old, delta);
    Py_DECREF(old);
    Py_DECREF(delta);
    if (sum == NULL) {
        return -1;
    }
    int rc = PyObject_SetAttr(obs, name, sum);
    Py_DECREF(sum);
    return rc;
}

/* Add the counts to the Observations as Observations.add does. */
static int
flush(Reader *r, const Counts *c)
{
    PyObject *obs = r->obs;
    if (c->chars == 0) {
        return 0;
    }
    if (obs == NULL) { /* cleared by the garbage collector, and called after */
        PyErr_SetString(PyExc_RuntimeError, "this reader's Observations are gone");
        return -1;
    }
    if (bump(obs, s_output_chars, c->chars) < 0) {
        return -1;
    }
    switch (r->kind) {
    case OUT_SUMMARY:
        return bump(obs, s_summary_chars, c->chars);
    case OUT_TOOL:
        if (bump(obs, s_tool_chars, c->chars) < 0) {
            return -1;
        }
        return bump(obs, s_output_deltas, c->deltas);
    case OUT_REASONING:
        if (bump(obs, s_reasoning_chars, c->chars) < 0) {
            return -1;
        }
        /* fall through */
    default:
        if (bump(obs, s_text_chars, c->chars) < 0 ||
            bump(obs, s_output_deltas, c->deltas) < 0 ||
            bump(obs, s_cjk_chars, c->cjk) < 0 ||
            bump(obs, s_alphabetic_chars, c->alpha) < 0) {
            return -1;
        }
        return 0;
    }
}

/* The data of an argument: a bytes object's, or any buffer's (view filled, to release). */
static int
get_data(PyObject *arg, const char **data, Py_ssize_t *size, Py_buffer *view)
{
    view->obj = NULL;
    if (PyBytes_CheckExact(arg)) {
        *data = PyBytes_AS_STRING(arg);
        *size = PyBytes_GET_SIZE(arg);
        return 0;
    }
    if (PyObject_GetBuffer(arg, view, PyBUF_SIMPLE) < 0) {
        return -1;
    }
    *data = view->buf;
    *size = view->len;
    return 0;
}

/* reader(data) -> the characters of output it carried, or -1 (counted nothing) */
static PyObject *
Reader_vectorcall(PyObject *callable, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Reader *r = (Reader *)callable;
    if (PyVectorcall_NARGS(nargsf) != 1 || (kwnames != NULL && PyTuple_GET_SIZE(kwnames))) {
        PyErr_SetString(PyExc_TypeError, "Reader takes one argument, an event's data");
        return NULL;
    }
    const char *data;
    Py_ssize_t size;
    Py_buffer view;
    if (get_data(args[0], &data, &size, &view) < 0) {
        return NULL;
    }
    Counts c = {0, 0, 0, 0};
    Py_ssize_t n = read_event(r, data, size, &c, 0);
    if (view.obj != NULL) {
        PyBuffer_Release(&view);
    }
    if (n > 0 && flush(r, &c) < 0) {
        return NULL;
    }
    return PyLong_FromSsize_t(n);
}

PyDoc_STRVAR(run_doc,
"run(data, pos, limit, end=b'\\n\\n') -> (pos, events, outputs)\n\n"
"Read the whole events of data from pos on, one after another, while each is\n"
"at most limit bytes long (through the first end after its start: an SSE\n"
"event's blank line, b'\\r\\n\\r\\n' for CRLF line ends) and this reader reads it;\n"
"count what they carried; return where it stopped, how many events it read\n"
"and how many of them carried output.");

PyDoc_STRVAR(run_objects_doc,
"run_objects(data, pos, limit, skip=0) -> (pos, events, outputs)\n\n"
"run() for the elements of a streamed JSON array: past the bytes that change no\n"
"nesting (the framing between elements), an element from its brace through the\n"
"brace that closes it (strings skipped, a backslash escaping the next byte), as\n"
"JSONArrayFramer frames one, at most limit bytes, read by this reader less the\n"
"first skip bytes of its head (the lead of a whole piece, JSONArrayFramer's).");

/* The arguments pos and limit of a run, checked. */
static int
run_bounds(PyObject *const *args, Py_ssize_t *pos, Py_ssize_t *limit)
{
    *pos = PyLong_AsSsize_t(args[1]);
    if (*pos == -1 && PyErr_Occurred()) {
        return -1;
    }
    *limit = PyLong_AsSsize_t(args[2]);
    if (*limit == -1 && PyErr_Occurred()) {
        return -1;
    }
    if (*pos < 0 || *limit < 0) {
        PyErr_SetString(PyExc_ValueError, "pos and limit must not be negative");
        return -1;
    }
    return 0;
}

/* Bytes that change the nesting of JSON outside a string. */
static unsigned char json_special[256];

/* The end (one past it) of the bracket that closes the first bracket in d[pos:stop]
 * (a string's brackets not counted), or -1 if it does not close there. Only a guess
 * of where an event ends: read_event says whether it is one. */
static Py_ssize_t
object_end(const char *d, Py_ssize_t pos, Py_ssize_t stop)
{
    const unsigned char *s = (const unsigned char *)d;
    Py_ssize_t depth = 0;
    Py_ssize_t i = pos;
    while (i < stop) {
        while (i < stop && !json_special[s[i]]) {
            i++;
        }
        if (i >= stop) {
            return -1;
        }
        unsigned char b = s[i++];
        if (b == '"') { /* to the closing quote */
            for (;;) {
                while (i < stop && s[i] != '"' && s[i] != '\\') {
                    i++;
                }
                if (i >= stop) {
                    return -1;
                }
                if (s[i] == '"') {
                    i++;
                    break;
                }
                i += 2; /* a backslash and the byte it escapes */
            }
        } else if (b == '{' || b == '[') {
            depth++;
        } else if (--depth <= 0) {
            return depth == 0 ? i : -1;
        }
    }
    return -1;
}

/* The shared loop of run and run_objects: each event from pos through its end
 * (sep != NULL: through the first sep; else the bytes that change no nesting,
 * then an object from its brace to object_end, read less skip bytes of the
 * head), read while it can be. */
static PyObject *
run_events(Reader *r, PyObject *arg, Py_ssize_t pos, Py_ssize_t limit, const char *sep,
           Py_ssize_t m, Py_ssize_t skip)
{
    const char *data;
    Py_ssize_t size;
    Py_buffer view;
    if (get_data(arg, &data, &size, &view) < 0) {
        return NULL;
    }
    Counts c = {0, 0, 0, 0};
    Py_ssize_t events = 0, outputs = 0;
    while (pos < size) {
        Py_ssize_t start = pos, stop;
        if (sep != NULL) {
            const char *at = memmem(data + pos, (size_t)(size - pos), sep, (size_t)m);
            if (at == NULL) {
                break;
            }
            stop = at - data + m;
        } else {
            while (start < size && !json_special[(unsigned char)data[start]]) {
                start++;
            }
            if (start >= size || data[start] != '{') {
                break;
            }
            Py_ssize_t bound = size - start > limit ? start + limit : size;
            stop = object_end(data, start, bound);
            if (stop < 0) {
                break;
            }
        }
        if (stop - start > limit) {
            break;
        }
        Py_ssize_t n = read_event(r, data + start, stop - start, &c, skip);
        if (n < 0) {
            break;
        }
        events++;
        if (n) {
            outputs++;
        }
        pos = stop;
    }
    if (view.obj != NULL) {
        PyBuffer_Release(&view);
    }
    if (flush(r, &c) < 0) {
        return NULL;
    }
    return Py_BuildValue("(nnn)", pos, events, outputs);
}

static PyObject *
Reader_run(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3 && nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "run takes data, pos, limit and maybe end");
        return NULL;
    }
    Py_ssize_t pos, limit;
    if (run_bounds(args, &pos, &limit) < 0) {
        return NULL;
    }
    const char *sep = "\n\n";
    Py_ssize_t m = 2;
    if (nargs == 4) {
        if (!PyBytes_CheckExact(args[3]) || PyBytes_GET_SIZE(args[3]) == 0) {
            PyErr_SetString(PyExc_TypeError, "end must be bytes, not empty");
            return NULL;
        }
        sep = PyBytes_AS_STRING(args[3]);
        m = PyBytes_GET_SIZE(args[3]);
    }
    return run_events((Reader *)self, args[0], pos, limit, sep, m, 0);
}

static PyObject *
Reader_run_objects(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3 && nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "run_objects takes data, pos, limit and maybe skip");
        return NULL;
    }
    Py_ssize_t pos, limit, skip = 0;
    if (run_bounds(args, &pos, &limit) < 0) {
        return NULL;
    }
    if (nargs == 4) {
        skip = PyLong_AsSsize_t(args[3]);
        if (skip == -1 && PyErr_Occurred()) {
            return NULL;
        }
        if (skip < 0 || skip > PyBytes_GET_SIZE(((Reader *)self)->head)) {
            PyErr_SetString(PyExc_ValueError, "skip must be within the head");
            return NULL;
        }
    }
    return run_events((Reader *)self, args[0], pos, limit, NULL, 0, skip);
}

PyDoc_STRVAR(scan_doc,
"scan(data, pos, depth, string) -> (end, depth, string)\n\n"
"Walk data from pos inside a JSON value depth brackets deep (string: 0 outside\n"
"a string, 1 inside one, 2 inside one right after a backslash), as\n"
"JSONArrayFramer walks an element: end is one past the bracket that closes the\n"
"outermost of them (depth and string then 0), or -1 if none does before the\n"
"end of data, with the depth and string state there.");

static PyObject *
reader_scan(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "scan takes data, pos, depth and string");
        return NULL;
    }
    Py_ssize_t pos = PyLong_AsSsize_t(args[1]);
    if (pos == -1 && PyErr_Occurred()) {
        return NULL;
    }
    Py_ssize_t depth = PyLong_AsSsize_t(args[2]);
    if (depth == -1 && PyErr_Occurred()) {
        return NULL;
    }
    long string = PyLong_AsLong(args[3]);
    if (string == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (pos < 0 || depth < 1 || string < 0 || string > 2) {
        PyErr_SetString(PyExc_ValueError, "pos >= 0, depth >= 1, string 0, 1 or 2");
        return NULL;
    }
    const char *data;
    Py_ssize_t size;
    Py_buffer view;
    if (get_data(args[0], &data, &size, &view) < 0) {
        return NULL;
    }
    const unsigned char *s = (const unsigned char *)data;
    Py_ssize_t i = pos, end = -1;
    while (i < size) {
        if (string) {
            if (string == 2) {
                i++; /* the escaped byte */
                string = 1;
            }
            while (i < size && s[i] != '"' && s[i] != '\\') {
                i++;
            }
            if (i >= size) {
                break;
            }
            if (s[i] == '"') {
                string = 0;
                i++;
            } else if (i + 1 >= size) {
                string = 2; /* the backslash ends the data */
                i = size;
            } else {
                i += 2;
            }
            continue;
        }
        while (i < size && !json_special[s[i]]) {
            i++;
        }
        if (i >= size) {
            break;
        }
        unsigned char b = s[i++];
        if (b == '"') {
            string = 1;
        } else if (b == '{' || b == '[') {
            depth++;
        } else if (--depth == 0) {
            end = i;
            break;
        }
    }
    if (view.obj != NULL) {
        PyBuffer_Release(&view);
    }
    return Py_BuildValue("(nnl)", end, depth, string);
}

static PyMethodDef module_methods[] = {
    {"scan", (PyCFunction)(void (*)(void))reader_scan, METH_FASTCALL, scan_doc},
    {NULL, NULL, 0, NULL},
};

static int
take_holes(PyObject *seq, Hole **out, Py_ssize_t *count, int literal_first)
{
    if (!PyTuple_Check(seq)) {
        PyErr_SetString(PyExc_TypeError, "holes must be a tuple of pairs");
        return -1;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(seq);
    Hole *holes = PyMem_Calloc(n ? (size_t)n : 1, sizeof(Hole));
    if (holes == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    *out = holes;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *pair = PyTuple_GET_ITEM(seq, i);
        if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) {
            PyErr_SetString(PyExc_TypeError, "a hole is a pair");
            return -1;
        }
        PyObject *kind = PyTuple_GET_ITEM(pair, literal_first ? 1 : 0);
        PyObject *lit = PyTuple_GET_ITEM(pair, literal_first ? 0 : 1);
        long k = PyLong_AsLong(kind);
        if (k == -1 && PyErr_Occurred()) {
            return -1;
        }
        if ((k != HOLE_STRING && k != HOLE_INT) || !PyBytes_CheckExact(lit)) {
            PyErr_SetString(PyExc_ValueError, "an ignored hole is (STRING or INT, bytes)");
            return -1;
        }
        holes[i].kind = (int)k;
        Py_INCREF(lit);
        holes[i].lit = lit;
        *count = i + 1;
    }
    return 0;
}

static int
Reader_traverse(PyObject *self, visitproc visit, void *arg)
{
    Py_VISIT(((Reader *)self)->obs);
    return 0;
}

static int
Reader_clear(PyObject *self)
{
    Py_CLEAR(((Reader *)self)->obs);
    return 0;
}

static void
Reader_dealloc(PyObject *self)
{
    Reader *r = (Reader *)self;
    PyObject_GC_UnTrack(self);
    Reader_clear(self);
    Py_CLEAR(r->head);
    Py_CLEAR(r->tail);
    for (Py_ssize_t i = 0; i < r->n_left; i++) {
        Py_CLEAR(r->left[i].lit);
    }
    for (Py_ssize_t i = 0; i < r->n_right; i++) {
        Py_CLEAR(r->right[i].lit);
    }
    PyMem_Free(r->left);
    PyMem_Free(r->right);
    Py_TYPE(self)->tp_free(self);
}

static PyObject *
Reader_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    PyObject *obs, *head, *left, *right, *tail;
    int kind;
    static char *names[] = {"obs", "kind", "head", "left", "right", "tail", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OiSOOS:Reader", names, &obs, &kind, &head,
                                     &left, &right, &tail)) {
        return NULL;
    }
    if (kind < OUT_TEXT || kind > OUT_SUMMARY) {
        PyErr_SetString(PyExc_ValueError, "kind must be TEXT, REASONING, TOOL or SUMMARY");
        return NULL;
    }
    if (!PyBytes_CheckExact(head) || !PyBytes_CheckExact(tail)) {
        PyErr_SetString(PyExc_TypeError, "head and tail must be bytes");
        return NULL;
    }
    Reader *r = (Reader *)type->tp_alloc(type, 0);
    if (r == NULL) {
        return NULL;
    }
    r->vectorcall = Reader_vectorcall;
    r->kind = kind;
    Py_INCREF(obs);
    r->obs = obs;
    Py_INCREF(head);
    r->head = head;
    Py_INCREF(tail);
    r->tail = tail;
    if (take_holes(left, &r->left, &r->n_left, 0) < 0 ||
        take_holes(right, &r->right, &r->n_right, 1) < 0) {
        Py_DECREF(r);
        return NULL;
    }
    return (PyObject *)r;
}

static PyMethodDef Reader_methods[] = {
    {"run", (PyCFunction)(void (*)(void))Reader_run, METH_FASTCALL, run_doc},
    {"run_objects", (PyCFunction)(void (*)(void))Reader_run_objects, METH_FASTCALL,
     run_objects_doc},
    {NULL, NULL, 0, NULL},
};

PyDoc_STRVAR(Reader_doc,
"Reader(obs, kind, head, left, right, tail)\n\n"
"A template's reader (Template.reader in template.py), in C: called with an\n"
"event's data, it returns the characters of output the event carried and counts\n"
"them into obs as the Python reader does, or returns -1 and counts nothing.");

static PyTypeObject ReaderType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "recorder.core.protocols._reader.Reader",
    .tp_basicsize = sizeof(Reader),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = Reader_doc,
    .tp_new = Reader_new,
    .tp_dealloc = Reader_dealloc,
    .tp_traverse = Reader_traverse,
    .tp_clear = Reader_clear,
    .tp_vectorcall_offset = offsetof(Reader, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_methods = Reader_methods,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "recorder.core.protocols._reader",
    .m_doc = "The template reader in C (see recorder/core/protocols/template.py).",
    .m_size = -1,
    .m_methods = module_methods,
};

PyMODINIT_FUNC
PyInit__reader(void)
{
    struct {
        PyObject **slot;
        const char *name;
    } names[] = {
        {&s_output_chars, "output_chars"},   {&s_output_deltas, "output_deltas"},
        {&s_text_chars, "text_chars"},       {&s_reasoning_chars, "reasoning_chars"},
        {&s_tool_chars, "tool_chars"},       {&s_summary_chars, "summary_chars"},
        {&s_cjk_chars, "cjk_chars"},         {&s_alphabetic_chars, "alphabetic_chars"},
    };
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        *names[i].slot = PyUnicode_InternFromString(names[i].name);
        if (*names[i].slot == NULL) {
            return NULL;
        }
    }
    json_special['"'] = json_special['{'] = json_special['}'] = 1;
    json_special['['] = json_special[']'] = 1;
    if (PyType_Ready(&ReaderType) < 0) {
        return NULL;
    }
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) {
        return NULL;
    }
    if (PyModule_AddObjectRef(m, "Reader", (PyObject *)&ReaderType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
