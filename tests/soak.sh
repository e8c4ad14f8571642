#!/usr/bin/env bash
# tests/soak.sh BUILD — `make soak`: long runs of the ASan+UBSan build (BUILD/quill) on the
# 656K model (models/tinystories-656K.gguf, from make models) that must end with status 0,
# which LeakSanitizer denies on any leak, and with stable memory:
#   1. quill batch over 10,000 records (prompts that share prefixes, n 1..24, sampled with
#      per-record seeds, a few error records) with --parallel 16;
#   2. a 2,000-turn scripted chat in a 256-token context, so the oldest exchanges are
#      dropped (context shifting) every few turns.
# The resident set is sampled every second: the peak RSS once a tenth of the work is done
# ("start") and at the end is printed, and the end may exceed the start by at most 25% +
# 16 MB. ASan's quarantine is held to 16 MB so that freed memory does not pass for growth.
# Slow (tens of minutes on 2 cores): not part of make test.
set -u
build=${1:-build/asan}
quill=$build/quill
model=models/tinystories-656K.gguf
PY=${PYTHON:-/usr/bin/python3}
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:quarantine_size_mb=16}
[ -x "$quill" ] && [ -f "$model" ] || { echo "soak: needs $quill and $model (make soak builds them)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0

hwm_kb() { sed -n 's/^VmHWM:[^0-9]*\([0-9]*\).*/\1/p' "/proc/$1/status" 2>/dev/null; }

# Runs "$@" (stdin from $in), sampling its peak RSS until the progress command (given
# the pid) reports `start_at`; prints both peaks; sets rc, start_kb, end_kb.
watch() {  # name, start_at, progress command, -- command...
    local name=$1 at=$2 progress=$3; shift 4
    local t0=$SECONDS
    "$@" <"$in" >"$tmp/out" 2>"$tmp/err" &
    local pid=$! kb
    start_kb=""
    while kill -0 "$pid" 2>/dev/null; do
        kb=$(hwm_kb "$pid")
        [ -n "$kb" ] && end_kb=$kb
        if [ -z "$start_kb" ] && [ "$($progress)" -ge "$at" ]; then start_kb=$kb; fi
        sleep 1
    done
    wait "$pid"
    rc=$?
    echo "soak $name: exit $rc after $((SECONDS - t0)) s; peak RSS at the start $((${start_kb:-0} / 1024)) MB, at the end $((${end_kb:-0} / 1024)) MB"
}

judge() {  # name, what else must hold (a command)...
    local name=$1; shift
    local ok=1
    [ "$rc" -eq 0 ] || ok=0
    [ -n "$start_kb" ] && [ "$end_kb" -le $((start_kb * 5 / 4 + 16384)) ] || ok=0
    "$@" || ok=0
    if [ $ok = 1 ]; then echo "ok   soak $name"; else echo "FAIL soak $name"; tail -n 20 "$tmp/err"; fail=1; fi
}

# ---- 1. batch: 10,000 records, --parallel 16
in=$tmp/in.jsonl
"$PY" - "$in" <<'PY'
import json, random, sys
rng = random.Random(7)
starts = ["Once upon a time", "One day, a little girl named Lily", "The big dog", "Tom and Sam were friends. They",
          "In a small town there was a"]
with open(sys.argv[1], "w") as f:
    for i in range(10000):
        if i % 997 == 5:
            f.write('{"prompt": 42}\n')  # an error record now and then
            continue
        p = rng.choice(starts) + " " + " ".join(rng.choice(["happy", "red", "ball", "park", "sun", "tree"])
                                              for _ in range(rng.randrange(0, 12)))
        f.write(json.dumps({"id": i, "prompt": p, "n": rng.randrange(1, 25), "temp": 0.8, "seed": i}) + "\n")
PY
lines_out() { wc -l <"$tmp/out"; }
watch batch 1000 lines_out -- "$quill" batch -m "$model" --parallel 16 -q
tail -n 2 "$tmp/err"
rc_batch=$rc
[ "$rc" -eq 1 ] && grep -q "input records failed" "$tmp/err" && rc=0  # the error records, on purpose
judge batch test "$(wc -l <"$tmp/out")" -eq 10000
[ "$rc_batch" -ne 0 ] && echo "     (exit $rc_batch: the $(grep -c '"error"' "$tmp/out") error records)"

# ---- 2. chat: 2,000 turns in a 256-token context
in=$tmp/chat.txt
"$PY" - "$in" <<'PY'
import random, sys
rng = random.Random(11)
msgs = ["Tell me a story about a cat.", "What happened next?", "Why was the dog sad?", "Tell me about the park.",
        "Who is Lily?", "And then?", "Make it longer, please.", "What did Tom say?"]
with open(sys.argv[1], "w") as f:
    for i in range(2000):
        f.write(rng.choice(msgs) + "\n")
        if i == 1000:
            f.write("/stats\n")
PY
turns() { grep -c "| context " "$tmp/err"; }
watch chat 200 turns -- "$quill" -m "$model" -i -c 256 -n 24 --temp 0.8 --seed 1
n_turns=$(turns)
n_shifts=$(grep -c "dropped the oldest" "$tmp/err")
echo "soak chat: $n_turns turns, the context full $n_shifts times (oldest exchanges dropped)"
judge chat test "$n_turns" -eq 2000 -a "$n_shifts" -gt 100
exit $fail
