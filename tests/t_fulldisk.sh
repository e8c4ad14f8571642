#!/usr/bin/env bash
# tests/t_fulldisk.sh — a full disk is a clear error and leaves the previous files whole:
# generated text on stdout, --prompt-cache (a warning: the text is still right), --stats-json,
# batch -o and the chat's /save. The disk is a 1 MB tmpfs filled to the last block, mounted
# in a user and mount namespace of its own (unshare -rm: no root needed where unprivileged
# user namespaces are allowed); where that is refused, a file-size limit stands in for it
# (ulimit -f 0 with SIGXFSZ ignored: every write to a file fails with EFBIG, "File too large").
#   env: QUILL (quill binary). Run from the repo root; exit 0 = pass.
set -u
if [ -z "${FULLDISK_NS:-}" ] && [ -z "${FULLDISK_NO_NS:-}" ] && unshare -rm true 2>/dev/null; then
    FULLDISK_NS=1 exec unshare -rm bash "$0" "$@"
fi
. "$(dirname "$0")/lib.sh"
M=models/stories260K.gguf
FULL="No space left on device|File too large"
disk="$tmp/disk"
mkdir "$disk"
if [ -n "${FULLDISK_NS:-}" ] && mount -t tmpfs -o size=1m tmpfs "$disk"; then
    trap 'umount "$disk"; rm -rf "$tmp"' EXIT
    echo "note: a 1 MB tmpfs in a mount namespace"
    fill() { dd if=/dev/zero of="$disk/filler" bs=4k 2>/dev/null; sync; }  # until ENOSPC
    unfill() { rm -f "$disk/filler"; }
    limited() { "$@"; }
else
    echo "note: no mount namespace here: a file-size limit of 0 stands in for a full disk"
    fill() { :; }
    unfill() { :; }
    # (stderr goes through a pipe to a cat outside the limit, which writes it where it was going)
    limited() {
        { (trap "" XFSZ; ulimit -f 0; "$@" 2>&1 >&3 3>&-) | cat >&2; return "${PIPESTATUS[0]}"; } 3>&1
    }
fi
P1="Once upon a time there was a little girl named Lily. She loved to play outside in the park."
P2="The big dog ran to the park with his red ball and a stick, and he played all day long."

one_line_matching() {  # stderr file, regex
    [ "$(grep -c '^quill: ' "$1")" -eq 1 ] && grep -qE "^quill: .*($2)" "$1"
}

# the old files, written while there is room
"$QUILL" -m "$M" --prompt-cache "$disk/pc" --stats-json "$disk/stats" -n 4 "$P1" >/dev/null 2>&1
printf 'Hi\n/save %s\n' "$disk/conv" | "$QUILL" -m "$M" -i -q -n 4 >/dev/null 2>&1
for f in pc stats conv conv.chat; do cp "$disk/$f" "$tmp/old-$f"; done
check "the old files are there" test -s "$tmp/old-pc" -a -s "$tmp/old-stats" -a -s "$tmp/old-conv.chat"
fill

limited "$QUILL" -m "$M" -n 400 -c 512 "$P2" >"$disk/out" 2>"$tmp/err"
check "text to a full disk: exit 1" test $? -eq 1
check "text to a full disk: one line saying so" one_line_matching "$tmp/err" "cannot write the output: ($FULL)"

text=$(limited "$QUILL" -m "$M" --prompt-cache "$disk/pc" -n 4 "$P2" 2>"$tmp/err")
check "--prompt-cache on a full disk: the text is still written (exit 0)" test $? -eq 0 -a -n "$text"
check "--prompt-cache on a full disk: a warning says why" grep -qE "prompt cache .*pc: not saved: cannot write: ($FULL)" "$tmp/err"
check "--prompt-cache on a full disk: the old cache is whole" cmp -s "$disk/pc" "$tmp/old-pc"

limited "$QUILL" -m "$M" -q --stats-json "$disk/stats" -n 4 "$P2" >/dev/null 2>"$tmp/err"
check "--stats-json on a full disk: exit 1" test $? -eq 1
check "--stats-json on a full disk: one line saying so" one_line_matching "$tmp/err" "cannot write '.*stats': cannot write: ($FULL)"
check "--stats-json on a full disk: the old file is whole" cmp -s "$disk/stats" "$tmp/old-stats"

for i in $(seq 1 40); do echo "{\"prompt\": \"Once upon a time number $i\", \"n\": 64}"; done >"$tmp/in.jsonl"
limited "$QUILL" batch -m "$M" -i "$tmp/in.jsonl" -o "$disk/out.jsonl" >/dev/null 2>"$tmp/err"
check "batch -o to a full disk: exit 1" test $? -eq 1
check "batch -o to a full disk: one line saying so" one_line_matching "$tmp/err" "cannot write the output: ($FULL)"
check "batch -o to a full disk: whole lines, at most a partial last one" \
    "$PY" -c '
import json, sys
lines = open(sys.argv[1], "rb").read().split(b"\n")
[json.loads(l) for l in lines[:-1]]' "$disk/out.jsonl"

printf 'Tell me about a dog\n/save %s\n' "$disk/conv" | limited "$QUILL" -m "$M" -i -n 4 >/dev/null 2>"$tmp/err"
check "chat /save on a full disk: the chat goes on (exit 0)" test $? -eq 0
check "chat /save on a full disk: says why" grep -qE "/save .*conv: cannot write: ($FULL)" "$tmp/err"
check "chat /save on a full disk: the old files are whole" \
    bash -c "cmp -s '$disk/conv' '$tmp/old-conv' && cmp -s '$disk/conv.chat' '$tmp/old-conv.chat'"
check "no temp files left on the disk" test -z "$(ls "$disk" | grep tmp)"
unfill
exit $fail
