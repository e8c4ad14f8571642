# bash completion for quill: the subcommands, each one's options (those `quill --help`
# lists; tests/t_docs.sh checks that they agree), GGUF files and the names of the models
# `quill list` finds after -m and --draft, files after the other options that take one,
# and the values of --kv, --chat-template, --think and --context-full. Installed by make install as
# share/bash-completion/completions/quill; without bash-completion: source this file.

# COMPREPLY: the files under the word being completed that match the glob $2
# (default: any), and directories to walk into.
_quill_files() {
    local cur=$1 glob=${2:-*}
    compopt -o filenames 2>/dev/null  # quote and mark directories (only inside completion)
    mapfile -t COMPREPLY < <(compgen -f -X "!$glob" -- "$cur"; compgen -d -- "$cur")
}

# COMPREPLY: GGUF files as _quill_files gives them, and the names of the models that
# `quill list` finds (what -m also takes), asking the quill being completed ($2).
_quill_models() {
    local cur=$1 quill=$2 IFS=$'\n' names
    # shellcheck disable=SC2088  # the word as typed: expand its ~ by hand
    [[ $quill == "~/"* ]] && quill=$HOME/${quill#"~/"}
    _quill_files "$cur" '*.gguf'
    names=$("$quill" list --json 2>/dev/null | sed -n 's/.*"name":"\([^"\\]*\)".*/\1/p')
    mapfile -t -O "${#COMPREPLY[@]}" COMPREPLY < <(compgen -W "$names" -- "$cur")
}

# COMPREPLY: the words of the list $1 that start with the word being completed ($2)
_quill_words() { mapfile -t COMPREPLY < <(compgen -W "$1" -- "$2"); }

_quill() {
    local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]}
    local cmds="info ppl bench tokenize batch list template" sub=
    # a subcommand is the first word, as quill dispatches it
    if ((COMP_CWORD > 1)) && [[ " $cmds " == *" ${COMP_WORDS[1]} "* ]]; then sub=${COMP_WORDS[1]}; fi

    # the options each mode takes
    local help="-h --help"
    local backend="-m --model -t --threads -c --ctx-size --cpu --gpu --kv -q --quiet $help"
    local sampling="-n --n-predict --temp --top-k --top-p --min-p --repeat-penalty --repeat-last-n
                    --seed --stop --no-bos --special --stats-json --grammar --json-schema --json --logprobs
                    --reasoning"
    local opts
    case $sub in
    info)     opts=$help ;;
    list)     opts="--json $help" ;;
    ppl)      opts="$backend -f --file --no-bos" ;;
    bench)    opts="$backend -p -n --n-predict --stats-json" ;;
    tokenize) opts="-m --model -f --file --ids --no-bos --special $help" ;;
    template) opts="-m --model --chat-template --no-generation-prompt --var --think -q --quiet $help" ;;
    batch)    opts="$backend $sampling -i --input -o --output --format --lines --shard --resume --parallel --chunk
                    --kv-mem --unordered" ;;
    *)        opts="$backend $sampling -f --file --echo --prompt-cache --draft --lookup --draft-max
                    --draft-fixed -i --interactive --chat-template --var --think --system --context-full --version
                    --output-format" ;;
    esac

    # the value of the option before the cursor
    case $prev in
    -m | --model | --draft) _quill_models "$cur" "${COMP_WORDS[0]}"; return ;;
    -f | --file | --stats-json | --prompt-cache | -o | --output | --grammar | --json-schema) _quill_files "$cur"; return ;;
    -i | --input) if [[ $sub == batch ]]; then _quill_files "$cur"; return; fi ;;  # else chat: no value
    --kv) _quill_words "f16 q8" "$cur"; return ;;
    --chat-template) _quill_words "plain chatml llama2 llama3 mistral gemma phi3" "$cur"; return ;;
    --context-full) _quill_words "shift stop" "$cur"; return ;;
    --think) _quill_words "on off low medium high" "$cur"; return ;;
    --reasoning) _quill_words "hide show off" "$cur"; return ;;
    --output-format) _quill_words "text json jsonl" "$cur"; return ;;
    -n | --n-predict | -p | -c | --ctx-size | -t | --threads | --temp | --top-k | --top-p | --min-p | \
    --repeat-penalty | --repeat-last-n | --seed | --stop | --draft-max | --system | --parallel | \
    --chunk | --kv-mem | --var | --logprobs) return ;;  # a number or free text
    esac

    if [[ $cur == -* ]]; then
        _quill_words "$opts" "$cur"
    elif ((COMP_CWORD == 1)); then
        _quill_words "$cmds" "$cur"
    elif [[ $sub == info ]]; then
        _quill_models "$cur" "${COMP_WORDS[0]}"
    elif [[ $sub == template ]]; then
        _quill_files "$cur" '*.json' 
    fi  # else a prompt: nothing to offer
}

complete -F _quill quill
