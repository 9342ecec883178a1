// A C program that embeds CPython through libpython3.X.so (the interpreter in a shared
// library, not the executable): runs the script argv[1] with the arguments after it.
#define PY_SSIZE_T_CLEAN
#include <Python.h>

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s script.py [args...]\n", argv[0]);
        return 2;
    }
    PyConfig config;
    PyConfig_InitPythonConfig(&config);
    // sys.argv is the script and its arguments, not options for the interpreter.
    config.parse_argv = 0;
    PyStatus status = PyConfig_SetBytesArgv(&config, argc - 1, argv + 1);
    if (!PyStatus_Exception(status))
        status = PyConfig_SetBytesString(&config, &config.run_filename, argv[1]);
    if (!PyStatus_Exception(status))
        status = Py_InitializeFromConfig(&config);
    PyConfig_Clear(&config);
    if (PyStatus_Exception(status))
        Py_ExitStatusException(status);
    return Py_RunMain();
}
