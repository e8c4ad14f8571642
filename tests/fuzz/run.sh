#!/usr/bin/env bash
# tests/fuzz/run.sh BUILD SECONDS TARGET... — runs the libFuzzer targets built in BUILD
# (BUILD/fuzz_TARGET, from tests/fuzz/fuzz_TARGET.c), FUZZ_JOBS (default 2) at a time:
#   1. replays every regression input in tests/fuzz/TARGET/crash/ (each must run clean);
#   2. fuzzes for SECONDS from the committed seeds (tests/fuzz/TARGET/seed/) and the
#      corpus grown by earlier runs (BUILD/corpus/TARGET/, new inputs are kept there),
#      under ASan+UBSan, LeakSanitizer and a 2 GB RSS limit;
#   3. prints the executions run, the coverage reached (cov: edges, ft: features), the
#      corpus size and the slowest input.
# Fails on a crash, a leak, an out-of-memory, or an input slower than 1 s (libFuzzer
# reports whole seconds: one reported at 2 s or more that still takes over 1 s when run
# alone; -timeout stops one at FUZZ_TIMEOUT, default 10 s). The
# input is left in BUILD/artifacts/TARGET/: fix the bug, then keep the input as a
# regression case in tests/fuzz/TARGET/crash/ (make test replays it from then on).
# Run from the repository root; SHARED (default ../shared) is passed on to the targets.
set -u
build=$1; secs=$2; shift 2
jobs=${FUZZ_JOBS:-2}
export SHARED=${SHARED:-../shared}
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT

# 0 when the newest input of a kind (slow-unit, timeout) a run left runs in
# under 1 s alone (libFuzzer times the input itself, not the start-up): the
# machine stalled (another process's benchmark can stop this one for a
# minute), not quill; the file is removed.
replay_fast() {  # binary, artifact dir, kind
    local unit ms
    unit=$(ls -t "$2/$3"-* 2>/dev/null | head -n 1)
    [ -n "$unit" ] || return 1
    ms=$("$1" "$unit" 2>&1 | sed -n 's/^Executed .* in \([0-9]*\) ms$/\1/p')
    [ -n "$ms" ] && [ "$ms" -lt 1000 ] && rm -f "$unit"
}

fuzz_one() {  # target; writes $logs/target.result (one line) and .log
    local t=$1 bin="$build/fuzz_$1" log="$logs/$1.log" res="$logs/$1.result"
    local art="$build/artifacts/$t/" corpus="$build/corpus/$t"
    mkdir -p "$art" "$corpus"
    local crash=(tests/fuzz/"$t"/crash/*)
    if [ -e "${crash[0]}" ] && ! "$bin" "${crash[@]}" >"$log" 2>&1; then
        echo "FAIL fuzz $t: a regression input in tests/fuzz/$t/crash fails again" >"$res"
        return
    fi
    "$bin" -max_total_time="$secs" -timeout="${FUZZ_TIMEOUT:-10}" -rss_limit_mb=2048 -report_slow_units=1 \
        -print_final_stats=1 -close_fd_mask=1 -artifact_prefix="$art" \
        "$corpus" "tests/fuzz/$t/seed" >"$log" 2>&1
    local rc=$?
    local runs cov ft corp slow rss
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    slow=$(sed -n 's/^stat::slowest_unit_time_sec: *//p' "$log")
    rss=$(sed -n 's/^stat::peak_rss_mb: *//p' "$log")
    read -r cov ft corp < <(grep -E '^#[0-9]+' "$log" | tail -n 1 |
        sed -E 's/.*cov: ([0-9]+).*ft: ([0-9]+).*corp: ([0-9]+).*/\1 \2 \3/')
    local what="${runs:-?} runs in $secs s, cov ${cov:-?} edges, ft ${ft:-?}, corpus ${corp:-?}, slowest ${slow:-?} s, peak RSS ${rss:-?} MB"
    if [ "$rc" -ne 0 ] && grep -q 'ERROR: libFuzzer: timeout' "$log" && replay_fast "$bin" "$art" timeout; then
        echo "ok   fuzz $t: $what (stopped early by a timeout of the machine: the input runs in under 1 s)" >"$res"
    elif [ "$rc" -ne 0 ]; then
        echo "FAIL fuzz $t: $what; the input is in $art ($(ls -t "$art" | head -n 1))" >"$res"
    elif [ "${slow:-0}" -ge 2 ] && ! replay_fast "$bin" "$art" slow-unit; then
        echo "FAIL fuzz $t: $what: an input took ${slow} s, and over 1 s again alone (kept in $art)" >"$res"
    else
        echo "ok   fuzz $t: $what" >"$res"
    fi
}

running=0
for t in "$@"; do
    fuzz_one "$t" &
    running=$((running + 1))
    if [ "$running" -ge "$jobs" ]; then wait -n; running=$((running - 1)); fi
done
wait
pass=0; fail=0
for t in "$@"; do
    if [ -s "$logs/$t.result" ]; then cat "$logs/$t.result"; else echo "FAIL fuzz $t: no result"; fi
    if grep -q '^ok' "$logs/$t.result" 2>/dev/null; then pass=$((pass + 1))
    else fail=$((fail + 1)); grep -avE '^ *#[0-9]+ 0x|^#[0-9]+|^INFO|^"|Uses: ' "$logs/$t.log" | tail -n 25 | sed 's/^/     /'; fi
done
echo "fuzz: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
