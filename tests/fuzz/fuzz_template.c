// tests/fuzz/fuzz_template.c — a chat template (template.c's Jinja engine:
// jinja_lex/parse/eval/value/lib) parsed and rendered, as a model's
// tokenizer.chat_template from an untrusted GGUF is.
//
// The input is the template source; after its first NUL byte, if any, come
// the variables as JSON (a mutated conversation), else a fixed conversation
// with a system prompt, two turns, a tool call and add_generation_prompt.
// The limits are small so that a render stays far below run.sh's 1 s (a
// limit reached is a clean error like any other). Seeds (tests/fuzz/
// template/seed/) are small templates written for this target that use the
// constructs real chat templates use.
#include <string.h>

#include "fuzz.h"
#include "jinja.h"
#include "util.h"

static const char VARS[] =
    "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"},"
    " {\"role\": \"user\", \"content\": \"Hi \\u00e9\"},"
    " {\"role\": \"assistant\", \"content\": null, \"tool_calls\": [{\"type\": \"function\","
    " \"function\": {\"name\": \"f\", \"arguments\": {\"x\": 1}}}]},"
    " {\"role\": \"tool\", \"content\": \"2\"}, {\"role\": \"user\", \"content\": \"\"}],"
    " \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": {}}}],"
    " \"add_generation_prompt\": true, \"bos_token\": \"<s>\", \"eos_token\": \"</s>\"}";

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *src = (const char *)data;
    const char *nul = memchr(src, 0, size);
    const size_t src_len = nul ? (size_t)(nul - src) : size;
    const char *vars = nul ? nul + 1 : VARS;
    const size_t vars_len = nul ? size - src_len - 1 : sizeof VARS - 1;
    const jinja_limits lim = {.max_output = 1 << 20, .max_memory = 64 << 20, .max_steps = 200000, .max_depth = 256,
                              .now = 1767225600};
    char err[ERR_LEN], *out = NULL;
    size_t len = 0;
    if (jinja_render_text(src, src_len, vars, vars_len, &lim, &out, &len, err) == 0 && (!out || out[len] != 0))
        abort();  // a rendering is NUL-terminated at len
    free(out);
    return 0;
}
