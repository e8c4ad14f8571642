// test_reasoning.c — reasoning.c's split of gpt-oss's harmony format, token by
// token, on a synthetic vocabulary that has harmony's control tokens (no model
// in ../shared speaks harmony). The expected split is the format's definition
// (OpenAI's harmony response format): a message is <|start|>ROLE<|channel|>NAME
// <|message|>TEXT, ended by <|end|> (another message follows) or <|return|> (the
// turn ends); the analysis channel's text is the model's reasoning, the final
// channel's the answer, and the headers (role, channel name) are neither.
//   build/tests/test_reasoning
#include "reasoning.h"
#include "textout.h"
#include "util.h"
#include "check.h"
#include "vocab_synth.h"

enum { START = 3, CHANNEL, MESSAGE, END, RETURN, CALL, ANALYSIS, FINAL, ASSISTANT, THINK, ING, FOUR, TWO };

static const vpiece VOCAB[] = {
    {"<unk>", 0, 2},     {"<s>", 0, 3},      {"</s>", 0, 3},       {"<|start|>", 0, 3}, {"<|channel|>", 0, 3},
    {"<|message|>", 0, 3}, {"<|end|>", 0, 3}, {"<|return|>", 0, 3}, {"<|call|>", 0, 3},  {"analysis", -1, 1},
    {"final", -1, 1},    {"assistant", -1, 1}, {"Think", -1, 1},    {"ing", -1, 1},      {"4", -1, 1},
    {"2", -1, 1}};

// The generated ids after prompt (until the end-of-generation token, which the
// decode loop does not pass on) through the split; the answer and reasoning.
static void split(const tokenizer *t, const char *prompt, const int32_t *ids, int n, const char *want_answer,
                  const char *want_reasoning, int want_opened, const char *label) {
    reason_split r;
    textout ans, rea;
    if (textout_init(&ans, t, NULL, 0, NULL) || textout_init(&rea, t, NULL, 0, NULL)) {
        fail("%s: out of memory", label);
        return;
    }
    reason_init(&r, prompt, strlen(prompt));
    int32_t prev = -1;
    for (int i = 0; i < n; i++) {
        CHECK(reason_token(&r, t, prev, ids[i], &ans, &rea) == 0, "%s: token %d", label, i);
        prev = ids[i];
    }
    CHECK(reason_finish(&r, &ans, &rea) == 0 && textout_finish(&ans) == 0 && textout_finish(&rea) == 0,
          "%s: finish", label);
    CHECK(ans.len == strlen(want_answer) && (!ans.len || !memcmp(ans.text, want_answer, ans.len)),
          "%s: answer '%.*s', want '%s'", label, (int)ans.len, ans.text, want_answer);
    CHECK(rea.len == strlen(want_reasoning) && (!rea.len || !memcmp(rea.text, want_reasoning, rea.len)),
          "%s: reasoning '%.*s', want '%s'", label, (int)rea.len, rea.text, want_reasoning);
    CHECK(r.opened == want_opened, "%s: reasoning seen %d, want %d", label, r.opened, want_opened);
    textout_free(&ans), textout_free(&rea);
}

int main(void) {
    const int n = (int)(sizeof VOCAB / sizeof *VOCAB);
    gbuf g = make_vocab("llama", VOCAB, n, 0, NULL, 0, n);
    tokenizer *t = NULL;
    char err[ERR_LEN] = "";
    CHECK(load_buf(&g, &t, err) == 0, "harmony vocabulary: %s", err);
    free(g.b);
    if (!t) return 1;
    // the analysis message ends in <|end|>, which must not end the generation here
    CHECK(!tok_is_eog(t, END) && tok_is_eog(t, RETURN) && tok_is_eog(t, CALL), "<|end|> does not end generation; "
          "<|return|> and <|call|> do");
    // the template's generation prompt ends in "<|start|>assistant": the model writes the channel
    const char *prompt = "<|start|>user<|message|>Hi<|end|><|start|>assistant";
    const int32_t both[] = {CHANNEL, ANALYSIS, MESSAGE, THINK,   ING,  END, START,
                            ASSISTANT, CHANNEL, FINAL, MESSAGE, FOUR, TWO};
    split(t, prompt, both, (int)(sizeof both / sizeof *both), "42", "Thinking", 1, "analysis, then final");
    // straight to the final channel: no reasoning
    const int32_t final_only[] = {CHANNEL, FINAL, MESSAGE, FOUR, TWO};
    split(t, prompt, final_only, (int)(sizeof final_only / sizeof *final_only), "42", "", 0, "final channel alone");
    tok_free(t);
    printf("test_reasoning: %s\n", n_fail ? "FAILED" : "ok");
    return n_fail ? 1 : 0;
}
