// lineread.c — see lineread.h. libedit does the editing; quill supplies the
// character reader (EL_GETCFN) so that Ctrl-C can be told apart at an empty
// prompt (exit) and in the middle of typed text (drop the text): libedit
// clears its line before el_gets returns, so the reader looks at the line
// when the signal arrives.
#include "lineread.h"

#include <errno.h>
#include <histedit.h>
#include <langinfo.h>
#include <locale.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <wchar.h>

#include "util.h"

struct lineread {
    FILE *in;
    EditLine *el;        // NULL when `in` is not a terminal: lines come from getline
    History *hist;       // the history list, NULL without a terminal
    char *hist_path;     // where the history is kept, NULL for none
    int hist_warned;     // a failure to save it was reported
    const char *prompt;  // "> " for a new message, "... " inside one
    volatile sig_atomic_t *interrupted;  // the caller's SIGINT flag
    int had_text;        // the line held text when Ctrl-C arrived
    mbstate_t mb;        // a UTF-8 character split across reads
    char *line;          // getline's buffer (non-terminal input)
    size_t line_cap;
};

int lr_is_tty(const lineread *r) { return r->el != NULL; }

static char *lr_prompt(EditLine *el) {
    lineread *r;
    el_get(el, EL_CLIENTDATA, &r);
    return (char *)r->prompt;
}

// libedit's character source: 1 with *wc set, 0 at end of input, -1 on error
// or Ctrl-C (then el_gets returns NULL with count -1). Waits in poll rather
// than read so that a signal ends the wait even under SA_RESTART, and wakes
// every 200 ms in case the signal went to another thread (OpenMP's).
static int lr_getc(EditLine *el, wchar_t *wc) {
    lineread *r;
    el_get(el, EL_CLIENTDATA, &r);
    int fd = fileno(r->in);
    for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int ready = poll(&p, 1, 200);
        if (ready < 0 && errno != EINTR) return -1;
        if (ready <= 0) {
            if (!*r->interrupted) continue;  // a timeout, SIGWINCH and the like
            const LineInfoW *li = el_wline(el);
            r->had_text = li->lastchar > li->buffer;
            return -1;
        }
        char c;
        ssize_t k = read(fd, &c, 1);
        if (k == 0) return 0;
        if (k < 0) {
            if (errno == EINTR || errno == EAGAIN) continue;
            return -1;
        }
        size_t w = mbrtowc(wc, &c, 1, &r->mb);
        if (w == (size_t)-2) continue;  // more bytes of this character to come
        if (w == (size_t)-1) {          // not UTF-8: pass the byte on as it is
            memset(&r->mb, 0, sizeof r->mb);
            *wc = (unsigned char)c;
        }
        return 1;
    }
}

// libedit converts between the terminal's bytes and wide characters with the
// C library's locale: make it UTF-8 even when the environment names none.
static void utf8_locale(void) {
    setlocale(LC_CTYPE, "");
    if (strcmp(nl_langinfo(CODESET), "UTF-8")) setlocale(LC_CTYPE, "C.UTF-8");
}

static int open_editor(lineread *r, const char *hist_path) {
    utf8_locale();
    HistEvent ev;
    if (!(r->hist = history_init())) return -1;
    history(r->hist, &ev, H_SETSIZE, 1000);
    history(r->hist, &ev, H_SETUNIQUE, 1);
    if (hist_path) {
        if (!(r->hist_path = strdup(hist_path))) return -1;
        history(r->hist, &ev, H_LOAD, hist_path);  // absent on the first run
    }
    if (!(r->el = el_init("quill", r->in, stderr, stderr))) return -1;
    el_set(r->el, EL_CLIENTDATA, r);
    el_set(r->el, EL_PROMPT, lr_prompt);
    el_set(r->el, EL_EDITOR, "emacs");
    el_set(r->el, EL_GETCFN, lr_getc);
    el_set(r->el, EL_HIST, history, r->hist);
    el_source(r->el, NULL);  // the user's ~/.editrc, if any
    return 0;
}

lineread *lr_open(FILE *in, const char *hist_path, volatile sig_atomic_t *interrupted, char *err) {
    lineread *r = calloc(1, sizeof *r);
    if (!r) return errf(err, "out of memory"), NULL;
    *r = (lineread){.in = in, .interrupted = interrupted, .prompt = "> "};
    if (isatty(fileno(in)) && open_editor(r, hist_path)) {
        lr_close(r);
        return errf(err, "cannot start line editing (libedit)"), NULL;
    }
    return r;
}

void lr_close(lineread *r) {
    if (!r) return;
    if (r->el) el_end(r->el);
    if (r->hist) history_end(r->hist);
    free(r->hist_path);
    free(r->line);
    free(r);
}

// One physical line without its newline, into *line (owned by r or libedit,
// valid until the next call). Returns LR_LINE, LR_EOF or LR_INTERRUPT (Ctrl-C;
// r->had_text says whether text was typed).
static enum lr_status read_line(lineread *r, const char **line, char *warn) {
    if (!r->el) {
        ssize_t n = getline(&r->line, &r->line_cap, r->in);
        if (n < 0) return LR_EOF;
        if (n && r->line[n - 1] == '\n') r->line[--n] = 0;
        if (n && r->line[n - 1] == '\r') r->line[--n] = 0;
        *line = r->line;
        return LR_LINE;
    }
    int count;
    r->had_text = 0;
    const char *s = el_gets(r->el, &count);
    if (!s) return count < 0 && *r->interrupted ? LR_INTERRUPT : LR_EOF;
    size_t n = strlen(s);
    if (n && s[n - 1] == '\n') n--;
    free(r->line);
    if (!(r->line = strndup(s, n))) return LR_EOF;
    *line = r->line;
    if (n) {
        HistEvent ev;
        history(r->hist, &ev, H_ENTER, r->line);
        if (r->hist_path && history(r->hist, &ev, H_SAVE, r->hist_path) < 0 && !r->hist_warned) {
            r->hist_warned = 1;
            snprintf(warn, ERR_LEN, "cannot save the history to %s", r->hist_path);
        }
    }
    return LR_LINE;
}

// Appends one line of a message to *buf, after a newline unless it is the first.
static int add_line(char **buf, size_t *len, int *first, const char *s, size_t n) {
    char *p = realloc(*buf, *len + n + 2);
    if (!p) return -1;
    if (!*first) p[(*len)++] = '\n';
    memcpy(p + *len, s, n);
    *len += n;
    p[*len] = 0;
    *buf = p;
    *first = 0;
    return 0;
}

static int ends_with(const char *s, size_t n, const char *tail) {
    size_t k = strlen(tail);
    return n >= k && !memcmp(s + n - k, tail, k);
}

// Adds `line` to the message being read. Returns 1 when the message is
// complete, 0 when more lines follow, -1 when out of memory.
static int take_line(char **buf, size_t *len, int *first, int *block, const char *line) {
    size_t n = strlen(line);
    if (!*block && *first && !strncmp(line, "\"\"\"", 3)) {  // opens a block: """text...
        line += 3, n -= 3;
        *block = 1;
        if (n >= 3 && ends_with(line, n, "\"\"\"")) return add_line(buf, len, first, line, n - 3) ? -1 : 1;
        return n && add_line(buf, len, first, line, n) ? -1 : 0;
    }
    if (*block) {
        int done = ends_with(line, n, "\"\"\"");
        if (done) n -= 3;
        if ((n || !done) && add_line(buf, len, first, line, n)) return -1;
        return done;
    }
    int more = n && line[n - 1] == '\\';  // continues on the next line
    return add_line(buf, len, first, line, n - more) ? -1 : !more;
}

enum lr_status lr_read(lineread *r, char **text, char *warn) {
    char *buf = NULL;
    size_t len = 0;
    int first = 1, block = 0;  // no line taken yet; inside """ ... """
    warn[0] = 0;
    for (int done = 0; !done;) {
        const char *line;
        r->prompt = first && !block ? "> " : "... ";
        enum lr_status st = read_line(r, &line, warn);
        if (st == LR_INTERRUPT && (r->had_text || !first || block)) st = LR_CANCEL;
        if (st == LR_EOF && (!first || block)) break;  // input ended inside a message: send what there is
        if (st != LR_LINE || (done = take_line(&buf, &len, &first, &block, line)) < 0) {
            free(buf);
            return st == LR_LINE ? LR_EOF : st;
        }
    }
    if (!buf && !(buf = calloc(1, 1))) return LR_EOF;
    *text = buf;
    return LR_LINE;
}

// mkdir -p for the history directory, each level 0700 (the history is private).
static int make_dirs(char *path) {
    for (char *p = path + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        int rc = mkdir(path, 0700);
        *p = '/';
        if (rc && errno != EEXIST) return -1;
    }
    return mkdir(path, 0700) && errno != EEXIST ? -1 : 0;
}

char *lr_history_path(void) {
    const char *state = getenv("XDG_STATE_HOME"), *home = getenv("HOME");
    char dir[4096];
    if (state && state[0] == '/') snprintf(dir, sizeof dir, "%s/quill", state);
    else if (home && home[0] == '/') snprintf(dir, sizeof dir, "%s/.local/state/quill", home);
    else return NULL;
    if (make_dirs(dir)) return NULL;
    size_t n = strlen(dir) + sizeof "/history";
    char *path = malloc(n);
    if (path) snprintf(path, n, "%s/history", dir);
    return path;
}
