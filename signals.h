// signals.h — SIGINT and SIGTERM as requests to stop.
//
// Generation, `quill batch` and the chat poll the flag between forward
// passes and stop cleanly: the text already written stays (whole UTF-8
// characters, whole batch records), files are written whole or not at all,
// and the command exits with 128 + the signal's number (130 for SIGINT, 143
// for SIGTERM), the status a shell gives a process the signal killed. A
// second signal before the first is handled kills the process at once.
// SIGINT restarts interrupted system calls (a Ctrl-C in the chat must not
// break its terminal output); SIGTERM does not, so that a read waiting for
// input (a batch on an idle pipe) returns and the command can end.
#ifndef QUILL_SIGNALS_H
#define QUILL_SIGNALS_H

#include <signal.h>

// Installs the handlers (main, once, for the commands that poll the flag).
void sig_install(void);
// The number of the signal received and not yet cleared, or 0. The chat
// clears a SIGINT (it ends one answer) by storing 0.
volatile sig_atomic_t *sig_flag(void);

#endif
