#!/usr/bin/env bash
# tests/t_docs.sh — the man page (doc/quill.1) and the shell completions (completions/)
# say what `quill --help` says, so they cannot drift apart; --version and make install.
#   env: QUILL (quill binary), SHARED (../shared). Run from the repo root; exit 0 = pass.
#
# --help (main.c's usage text) is the one source. From it come the subcommands (the first
# word of a usage line, when it is not an option), the usage lines (without a note set off
# by three spaces, like "   (chat)"), and the options, each
# with its scope: a usage line's options belong to its subcommand (or to generation,
# "main"); a help section's to its subcommand ("options:" is main, "batch (...):" is batch),
# except a line whose description starts with a subcommand in parentheses ("(bench)").
#  - main.c parses no option and dispatches no subcommand that --help leaves out;
#  - the man page has each usage line in its SYNOPSIS, each subcommand and each option as a
#    .TP tag, no long option --help lacks, the version --version prints, and renders
#    without a warning (where groff is installed);
#  - completions/quill.bash, run as bash runs it, offers the subcommands after "quill ",
#    each scope's options after "quill [SUB] -", GGUF files, directories and the names
#    `quill list` finds after -m, and --help's chat templates;
#  - completions/_quill, run as compsys runs it (the body of the function _quill) with its
#    helpers stubbed to print what they are given, offers the same (where zsh is installed;
#    else only the names are looked for); neither script names a long option --help lacks;
#  - quill --version prints three lines: the cpu one as a generation run's stats name the
#    CPU backend, the cuda one as --gpu behaves;
#  - make install puts the binary, man page and completions under DESTDIR/PREFIX, and make
#    uninstall takes them away.
set -u
. "$(dirname "$0")/lib.sh"
M="$SHARED/models/gguf/stories260K.gguf"
MAN=doc/quill.1 BASHC=completions/quill.bash ZSHC=completions/_quill

# ---- what --help says ---------------------------------------------------------------
"$QUILL" --help >"$tmp/help" || { echo "FAIL quill --help"; exit 1; }
"$PY" - "$tmp/help" "$tmp" <<'EOF' || { echo "FAIL parsing --help"; exit 1; }
import re, sys
lines, out = open(sys.argv[1]).read().splitlines(), sys.argv[2]
OPT = re.compile(r'(?<![\w-])(--?[A-Za-z][\w-]*)')
blank = lines.index('')
usage = []                                  # the usage lines, each continued line joined
for l in lines[:blank]:
    l = re.split(r'\s{3,}', l.removeprefix('usage:').strip())[0]  # not a note after a gap
    if l.startswith('quill '): usage.append(l)
    else: usage[-1] += ' ' + l
cmds, opts = [], set()                      # opts: (scope, option)
for u in usage:
    w = u.split()[1]
    scope = w if re.fullmatch(r'[a-z]+', w) else 'main'
    if scope != 'main' and scope not in cmds: cmds.append(scope)
    opts |= {(scope, o) for o in OPT.findall(u)}
section = None
for l in lines[blank:]:
    if l and not l[0].isspace():            # a section header, or prose
        name = l.split()[0].rstrip(':')
        section = name if l.endswith(':') and (name == 'options' or name in cmds) else None
        continue
    if section:
        scope = 'main' if section == 'options' else section
        m = re.match(r'\s+(?:-\S+(?: [A-Z]+)?,? )+\s*\((\w+)\)', l)
        if m and m.group(1) in cmds: scope = m.group(1)
        opts |= {(scope, o) for o in OPT.findall(l)}
open(out + '/cmds', 'w').write(''.join(c + '\n' for c in cmds))
open(out + '/usage', 'w').write(''.join(' '.join(u.split()) + '\n' for u in usage))
open(out + '/opts', 'w').write(''.join(f'{s}\t{o}\n' for s, o in sorted(opts)))
EOF
cut -f2 "$tmp/opts" | sort -u >"$tmp/all_opts"
mapfile -t cmds <"$tmp/cmds"
mapfile -t scopes < <(cut -f1 "$tmp/opts" | sort -u)
echo "--help: ${#cmds[@]} subcommands (${cmds[*]}), $(wc -l <"$tmp/all_opts") options, scopes ${scopes[*]}"
check "--help lists the subcommands and options (${#cmds[@]} >= 5, >= 40)" \
    test "${#cmds[@]}" -ge 5 -a "$(wc -l <"$tmp/all_opts")" -ge 40
scope_opts() { awk -F'\t' -v s="$1" '$1 == s { print $2 }' "$tmp/opts"; }
# the option-like words of stdin, one a line
opt_words() { grep -oE -- '(^|[^[:alnum:]_-])--?[A-Za-z][[:alnum:]_-]*' | sed -E 's/^[^-]+//' | sort -u; }
# prints the words of $1 (a file of lines) that are not in $2 (a file); fails if there are any
missing() { local m; m=$(grep -vxF -f "$2" "$1"); [ -z "$m" ] || { echo "     missing: ${m//$'\n'/ }"; return 1; }; }

# ---- main.c parses nothing that --help leaves out --------------------------------------
grep -oE 'strcmp\((a|argv\[i\]), "-[^"]+"\)' main.c | sed -E 's/.*"(.*)".*/\1/' | grep -vx -- -- | sort -u >"$tmp/parsed"
check "main.c parses options ($(wc -l <"$tmp/parsed") >= 40)" test "$(wc -l <"$tmp/parsed")" -ge 40
check "every option main.c parses is in --help" missing "$tmp/parsed" "$tmp/all_opts"
grep -oE 'strcmp\(argv\[1\], "[a-z]+"\)' main.c | sed -E 's/.*"(.*)".*/\1/' | sort -u >"$tmp/dispatched"
check "every subcommand main.c dispatches is in --help" missing "$tmp/dispatched" "$tmp/cmds"

# ---- the man page -------------------------------------------------------------------
# the roff source as text: fonts dropped, \- as -, \e as \
man_text() { sed -e 's/\\f[BIRP]//g' -e 's/\\-/-/g' -e 's/\\e/\\/g' -e 's/\\&//g' "$MAN"; }
man_text | awk 'prev == ".TP" { print } { prev = $1 }' >"$tmp/man_tags"
opt_words <"$tmp/man_tags" >"$tmp/man_opts"
check "man page: every option has a .TP entry" missing "$tmp/all_opts" "$tmp/man_opts"
synopsis=" $(man_text | sed -n '/^\.SH SYNOPSIS/,/^\.SH [^S]/p' | grep -v '^\.' | tr -s ' \n' '  ') "
syn_has() { while read -r u; do [[ $synopsis == *" $u "* ]] || { echo "     not in SYNOPSIS: $u"; return 1; }; done <"$tmp/usage"; }
check "man page: the SYNOPSIS has every usage line of --help" syn_has
man_has_cmds() { for c in "${cmds[@]}"; do grep -q "quill $c\\b" "$tmp/man_tags" || { echo "     no entry: $c"; return 1; }; done; }
check "man page: every subcommand has an entry" man_has_cmds
man_text | opt_words | grep -- '^--' >"$tmp/man_long"
check "man page: no long option that --help lacks" missing "$tmp/man_long" "$tmp/all_opts"
version=$("$QUILL" --version | sed -n '1s/^quill \([^ ]*\) .*/\1/p')
check "man page: .TH carries the version --version prints ($version)" \
    grep -q "^\.TH QUILL 1 [^ ]* \"quill $version\"" "$MAN"
if command -v groff >/dev/null; then
    groff -man -Tutf8 -ww -z "$MAN" >"$tmp/groff" 2>&1
    check "man page: groff renders it without a warning" test ! -s "$tmp/groff"
    cat "$tmp/groff"
else
    echo "skip groff is not installed: the man page is not rendered"
fi

# ---- bash completion ----------------------------------------------------------------
# shellcheck source=completions/quill.bash
. "$BASHC"
quill_abs=$(realpath "$QUILL")
bcomp() {  # quill words...: what quill.bash offers for the last word (quill: $QUILL), one a line
    COMP_WORDS=("$quill_abs" "${@:2}") COMP_CWORD=$(($# - 1)) COMPREPLY=()
    _quill
    printf '%s\n' "${COMPREPLY[@]}" | sort -u
}
scope_words() { [ "$1" = main ] && echo quill || echo "quill $1"; }
for s in "${scopes[@]}"; do
    # shellcheck disable=SC2046  # the words
    bcomp $(scope_words "$s") - >"$tmp/b_$s"
    scope_opts "$s" >"$tmp/want_$s"
    check "bash: '$(scope_words "$s") -' offers the $(wc -l <"$tmp/want_$s") options of $s" missing "$tmp/want_$s" "$tmp/b_$s"
done
bcomp quill '' >"$tmp/b_cmds"
check "bash: 'quill ' offers every subcommand" missing "$tmp/cmds" "$tmp/b_cmds"
# -m: GGUF files, directories, and the names `quill list` finds (here only in $QUILL_MODELS)
mkdir -p "$tmp/files/dir" "$tmp/models" && touch "$tmp/files/a.gguf" "$tmp/files/b.txt"
cp "$M" "$tmp/models/tiny-model.gguf"
models_here() {  # command...: run in $tmp/files, finding models in $tmp/models alone
    (cd "$tmp/files" && unset HF_HUB_CACHE HF_HOME LLAMA_CACHE OLLAMA_MODELS &&
     HOME="$tmp/home" XDG_CACHE_HOME="$tmp/home/.cache" QUILL_MODELS="$tmp/models" "$@")
}
models_here bcomp quill -m '' >"$tmp/b_m"
check "bash: -m offers GGUF files, directories and model names, not other files" \
    test "$(paste -sd' ' "$tmp/b_m")" = "a.gguf dir tiny-model"
models_here bcomp quill info '' >"$tmp/b_info"
check "bash: 'quill info ' offers the same" cmp -s "$tmp/b_m" "$tmp/b_info"
sed -n 's/^ *--chat-template NAME  *//p' "$tmp/help" | tr -d ',' | tr ' ' '\n' | sort >"$tmp/templates"
bcomp quill --chat-template '' >"$tmp/b_tpl"
check "bash: --chat-template offers the $(wc -l <"$tmp/templates") templates of --help" cmp -s "$tmp/templates" "$tmp/b_tpl"
opt_words <"$BASHC" | grep -- '^--' >"$tmp/b_long"
check "bash: no long option that --help lacks" missing "$tmp/b_long" "$tmp/all_opts"

# ---- zsh completion -----------------------------------------------------------------
zcomp() {  # words...: the option names and subcommands that _quill gives its helpers
    zsh -f -c '
        _arguments() { print -rl -- "$@" }
        _describe() { print -rl -- "${(@P)${@[-1]}}" }
        _files() { : }
        eval "_quill() { $(<$1) }"
        shift; words=("$@"); CURRENT=$#; PREFIX=${words[-1]}
        _quill' _ "$ZSHC" "$@" |
        sed -E 's/^\([^)]*\)//; s/^\*//' | grep -oE -- '^--?[A-Za-z][[:alnum:]_-]*|^[a-z]+:' | tr -d : | sort -u
}
if command -v zsh >/dev/null; then
    check "zsh: the script parses" zsh -n "$ZSHC"
    for s in "${scopes[@]}"; do
        # shellcheck disable=SC2046
        zcomp $(scope_words "$s") - >"$tmp/z_$s"
        check "zsh: '$(scope_words "$s") -' offers the options of $s" missing "$tmp/want_$s" "$tmp/z_$s"
    done
    zcomp quill '' >"$tmp/z_cmds"
    check "zsh: 'quill ' offers every subcommand" missing "$tmp/cmds" "$tmp/z_cmds"
else
    echo "skip zsh is not installed: _quill is only searched for the names"
    opt_words <"$ZSHC" >"$tmp/z_words"
    check "zsh: _quill names every option" missing "$tmp/all_opts" "$tmp/z_words"
    zsh_has_cmds() { for c in "${cmds[@]}"; do grep -q "'$c:" "$ZSHC" || return 1; done; }
    check "zsh: _quill names every subcommand" zsh_has_cmds
fi
tpl=$(sed -n 's/.*--chat-template\[.*(\(.*\)).*/\1/p' "$ZSHC" | tr ' ' '\n' | sort)
check "zsh: --chat-template offers the templates of --help" test "$tpl" = "$(cat "$tmp/templates")"
opt_words <"$ZSHC" | grep -- '^--' >"$tmp/z_long"
check "zsh: no long option that --help lacks" missing "$tmp/z_long" "$tmp/all_opts"

# ---- --version ----------------------------------------------------------------------
"$QUILL" --version >"$tmp/v" 2>"$tmp/verr"; rc=$?
cat "$tmp/v"
check "--version exits 0, nothing on stderr" test "$rc" = 0 -a ! -s "$tmp/verr"
check "--version: 'quill X.Y.Z (commit C)'" grep -qE '^quill [0-9]+\.[0-9]+\.[0-9]+ \(commit [^ ]+\)$' "$tmp/v"
check "--version: three lines" test "$(wc -l <"$tmp/v")" = 3
"$QUILL" -m "$M" --cpu --temp 0 -n 1 -q --stats-json "$tmp/s.json" "Once" >/dev/null 2>&1
cpu=$("$PY" -c "import json; print(json.load(open('$tmp/s.json'))['backend'])" 2>/dev/null)
check "--version: the cpu backend line is what a --cpu run reports ($cpu)" \
    grep -qxF "cpu backend: $cpu" "$tmp/v"
"$QUILL" -m "$M" --gpu --temp 0 -n 1 -q "Once" >/dev/null 2>"$tmp/gpu_err"
if grep -qx 'cuda: off.*' "$tmp/v"; then
    check "--version says cuda off: --gpu says the build has no CUDA" grep -q "built without CUDA" "$tmp/gpu_err"
else
    check "--version says cuda on: --gpu does not say the build lacks it" \
        bash -c "grep -q '^cuda: on' '$tmp/v' && ! grep -q 'built without CUDA' '$tmp/gpu_err'"
fi

# ---- make install / uninstall -------------------------------------------------------
# into a scratch DESTDIR, from a scratch BUILD holding a copy of this binary (make install
# builds nothing, and the real build directories stay untouched)
mkdir -p "$tmp/b" && cp "$QUILL" "$tmp/b/quill"
mk() { env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make -s "$@" BUILD="$tmp/b" PREFIX=/usr DESTDIR="$tmp/root"; }
installed="bin/quill:755 share/man/man1/quill.1:644 share/bash-completion/completions/quill:644
           share/zsh/site-functions/_quill:644"
mk install >"$tmp/mk" 2>&1
check "make install exits 0" test $? = 0
cat "$tmp/mk"
for f in $installed; do
    check "make install: /usr/${f%:*} mode ${f#*:}" test "$(stat -c %a "$tmp/root/usr/${f%:*}" 2>/dev/null)" = "${f#*:}"
done
check "make install: the man page and completions are the repo's" bash -c \
    "cmp -s $MAN '$tmp/root/usr/share/man/man1/quill.1' && cmp -s $BASHC '$tmp/root/usr/share/bash-completion/completions/quill' && cmp -s $ZSHC '$tmp/root/usr/share/zsh/site-functions/_quill'"
check "make install: the installed quill runs --version" \
    bash -c "'$tmp/root/usr/bin/quill' --version | cmp -s - '$tmp/v'"
mk uninstall >/dev/null 2>&1
check "make uninstall removes every file" test -z "$(find "$tmp/root" -type f)"
exit $fail
