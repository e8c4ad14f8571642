// textout.c — see textout.h.
#include "textout.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int textout_init(textout *t, const tokenizer *tok, const char *const *stops, int n_stops, FILE *sink) {
    *t = (textout){.tok = tok, .stops = stops, .n_stops = n_stops, .sink = sink,
                   .piece_cap = tok_max_piece_len(tok) + 1, .stop_hit = -1};
    t->piece = malloc((size_t)t->piece_cap);
    return t->piece ? 0 : -1;
}

void textout_free(textout *t) {
    free(t->text);
    free(t->piece);
    *t = (textout){0};
}

static void write_to(textout *t, size_t end) {
    const size_t n = end - t->written;
    if (t->sink && !t->closed && n && (fwrite(t->text + t->written, 1, n, t->sink) != n || fflush(t->sink))) {
        t->closed = 1;
        t->error = errno == EPIPE ? 0 : errno ? errno : EIO;
    }
    t->written = end;
}

// Appends s[0..n); writes what can no longer begin a stop string. 1 when a
// stop string appeared (the text is cut before it), -1 out of memory.
static int push(textout *t, const char *s, size_t n) {
    if (!n) return 0;
    if (t->len + n > t->cap) {
        size_t cap = (t->len + n) * 2 + 256;
        char *p = realloc(t->text, cap);
        if (!p) return -1;
        t->text = p, t->cap = cap;
    }
    memcpy(t->text + t->len, s, n);
    t->len += n;
    size_t cut = t->len, hold = 0;
    const size_t fresh = t->len - t->written;  // text not yet released
    for (int i = 0; i < t->n_stops; i++) {
        const char *st = t->stops[i];
        const size_t sl = strlen(st);
        const char *hit = memmem(t->text + t->written, fresh, st, sl);
        if (hit && (size_t)(hit - t->text) < cut) cut = (size_t)(hit - t->text), t->stop_hit = i;
        for (size_t k = sl - 1 < fresh ? sl - 1 : fresh; k > hold; k--)  // longest tail that starts st
            if (!memcmp(t->text + t->len - k, st, k)) { hold = k; break; }
    }
    if (cut < t->len) {
        write_to(t, cut);
        t->len = cut;
        return 1;
    }
    write_to(t, t->len - hold);
    return 0;
}

int textout_text(textout *t, const char *s, size_t n) {
    char out[8 + 4];
    // utf8_stream_push writes at most n + 4 bytes: push in slices of 8
    for (size_t i = 0; i < n; i += 8) {
        size_t k = utf8_stream_push(&t->us, s + i, n - i < 8 ? n - i : 8, out);
        int r = push(t, out, k);
        if (r) return r;
    }
    return 0;
}

int textout_token(textout *t, int32_t prev, int32_t id) {
    int n = tok_decode(t->tok, prev, id, t->piece, (size_t)t->piece_cap);
    return n > 0 ? textout_text(t, t->piece, (size_t)n) : 0;
}

int textout_finish(textout *t) {
    char tail[8];
    int r = push(t, tail, utf8_stream_flush(&t->us, tail));
    if (r == 0) write_to(t, t->len);
    return r;
}
