// lineread.h — the chat REPL's input: one message per call, with line editing
// and history (libedit) on a terminal, plain lines otherwise.
//
// A message is one line; a line ending in '\' continues on the next (the
// backslash becomes a newline), and a line starting with """ opens a block
// that runs to a line ending with """. Prompts and the echo of typed text go
// to stderr, so stdout carries only the answers.
#ifndef QUILL_LINEREAD_H
#define QUILL_LINEREAD_H

#include <signal.h>
#include <stdio.h>

typedef struct lineread lineread;

enum lr_status {
    LR_LINE,       // a message in *text
    LR_EOF,        // Ctrl-D at an empty prompt, or the end of the input
    LR_INTERRUPT,  // Ctrl-C at an empty prompt
    LR_CANCEL,     // Ctrl-C with text typed: the text is dropped
};

// in: the input stream (editing when it is a terminal). hist_path: the history
// file, loaded now and rewritten after each line (NULL: no history).
// interrupted: set by the caller's SIGINT handler, which may use SA_RESTART
// (the terminal reader waits in poll, which returns on any signal).
// Returns NULL on allocation failure, with err set.
lineread *lr_open(FILE *in, const char *hist_path, volatile sig_atomic_t *interrupted, char *err);
void lr_close(lineread *r);
int lr_is_tty(const lineread *r);

// Reads the next message; on LR_LINE *text is malloc'd (the caller frees).
// A problem writing the history file is reported once in warn (else warn[0] = 0).
enum lr_status lr_read(lineread *r, char **text, char *warn);

// The history file: $XDG_STATE_HOME/quill/history, else
// ~/.local/state/quill/history; its directory is created (mode 0700). NULL
// when neither variable gives an absolute path or the directory cannot be made.
char *lr_history_path(void);

#endif
