/* PyErr_GetRaisedException / PyErr_SetRaisedException are 3.12 API; Debian bookworm ships 3.11. */
#include <Python.h>
#if PY_VERSION_HEX < 0x030C0000
static inline PyObject *PyErr_GetRaisedException(void) {
	PyObject *type, *value, *tb;
	PyErr_Fetch(&type, &value, &tb);
	if (type == NULL) return NULL;
	PyErr_NormalizeException(&type, &value, &tb);
	if (tb != NULL) PyException_SetTraceback(value, tb);
	Py_XDECREF(type);
	Py_XDECREF(tb);
	return value;
}
static inline void PyErr_SetRaisedException(PyObject *exc) {
	if (exc == NULL) { PyErr_Clear(); return; }
	PyObject *type = (PyObject *)Py_TYPE(exc);
	Py_INCREF(type);
	PyObject *tb = PyException_GetTraceback(exc);
	PyErr_Restore(type, exc, tb);
}
#endif
