// signals.c — see signals.h.
#include "signals.h"

#include <stddef.h>

// The one piece of global state: a signal handler can reach nothing else.
static volatile sig_atomic_t received;

static void on_signal(int sig) {
    if (received) {  // asked twice: stop now, as the default action would
        signal(sig, SIG_DFL);
        raise(sig);
        return;
    }
    received = sig;
}

void sig_install(void) {
    struct sigaction sa = {.sa_handler = on_signal, .sa_flags = SA_RESTART};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sa.sa_flags = 0;
    sigaction(SIGTERM, &sa, NULL);
}

volatile sig_atomic_t *sig_flag(void) { return &received; }
