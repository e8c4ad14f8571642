// reasoning.c — see reasoning.h.
#include "reasoning.h"

#include <string.h>

static const char THINK_OPEN[] = "<think>", THINK_CLOSE[] = "</think>";

void reason_init(reason_split *r, const char *prompt, size_t len) {
    *r = (reason_split){0};
    // the last <think> after the last </think>: the prompt left the reasoning open
    const char *open = NULL, *close = NULL;
    if (!len) return;
    for (const char *p = prompt; (p = memmem(p, len - (size_t)(p - prompt), THINK_OPEN, 7)); p++) open = p;
    for (const char *p = prompt; (p = memmem(p, len - (size_t)(p - prompt), THINK_CLOSE, 8)); p++) close = p;
    if (open && (!close || open > close)) r->think = r->opened = 1;
    const char *start = "<|start|>assistant";
    size_t k = strlen(start);
    if (len >= k && !memcmp(prompt + len - k, start, k)) r->header = 1, r->head_len = 0;
}

static int emit(reason_split *r, const char *s, size_t n, textout *answer, textout *reasoning) {
    if (!n) return 0;
    if (r->think) return reasoning ? (textout_text(reasoning, s, n) < 0 ? -1 : 0) : 0;
    return textout_text(answer, s, n);
}

// Text bytes through the <think> / </think> scanner.
static int scan(reason_split *r, const char *s, size_t n, textout *answer, textout *reasoning) {
    for (size_t i = 0; i < n; i++) {
        r->pend[r->pend_len++] = s[i];
        for (;;) {
            const char *m = r->think ? THINK_CLOSE : THINK_OPEN;
            const size_t ml = strlen(m);
            if ((size_t)r->pend_len <= ml && !memcmp(r->pend, m, (size_t)r->pend_len)) {
                if ((size_t)r->pend_len == ml) {  // a whole marker: switch sides
                    r->think = !r->think, r->opened = 1, r->pend_len = 0;
                }
                break;
            }
            int rc = emit(r, r->pend, 1, answer, reasoning);  // the first byte can start no marker
            if (rc) return rc;
            memmove(r->pend, r->pend + 1, (size_t)--r->pend_len);
            if (!r->pend_len) break;
        }
    }
    return 0;
}

// A control token of gpt-oss's harmony format; 1 when it was one.
static int harmony(reason_split *r, const char *piece) {
    if (!strcmp(piece, "<|start|>") || !strcmp(piece, "<|channel|>")) {
        if (!strcmp(piece, "<|channel|>")) r->head_len = 0;  // the channel name follows
        r->header = 1;
        return 1;
    }
    if (!strcmp(piece, "<|message|>")) {
        r->head[r->head_len < (int)sizeof r->head ? r->head_len : (int)sizeof r->head - 1] = 0;
        r->think = strstr(r->head, "analysis") != NULL;
        r->opened |= r->think;
        r->header = 0, r->head_len = 0;
        return 1;
    }
    if (!strcmp(piece, "<|end|>")) {
        r->think = 0;
        return 1;
    }
    return 0;
}

int reason_token(reason_split *r, const tokenizer *tok, int32_t prev, int32_t id, textout *answer, textout *reasoning) {
    char buf[512];
    int n = tok_decode(tok, prev, id, buf, sizeof buf);
    if (n <= 0) {  // a control token: its piece may be a harmony marker
        harmony(r, tok_piece(tok, id));
        return 0;
    }
    if (n > (int)sizeof buf) n = sizeof buf;
    if (r->think) r->n_think++;
    if (r->header) {  // a header's words (the role, the channel name): neither side
        for (int i = 0; i < n && r->head_len < (int)sizeof r->head - 1; i++) r->head[r->head_len++] = buf[i];
        return 0;
    }
    if (n == (int)sizeof buf)  // longer than any real piece: no marker inside, straight through
        return emit(r, buf, (size_t)n, answer, reasoning);
    return scan(r, buf, (size_t)n, answer, reasoning);
}

int reason_finish(reason_split *r, textout *answer, textout *reasoning) {
    int rc = emit(r, r->pend, (size_t)r->pend_len, answer, reasoning);
    r->pend_len = 0;
    return rc;
}
