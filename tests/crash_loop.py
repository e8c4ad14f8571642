"""crash_loop.py — kills quill with SIGKILL at random instants while it writes its files,
and checks what is left (tests/t_crashsafe.sh runs it).

    /usr/bin/python3 tests/crash_loop.py QUILL MODEL TMPDIR KILLS

Three loops, each running until quill was killed KILLS times for the prompt cache, KILLS / 4
for /save and batch (the instants are seeded, so a failure reproduces):
  prompt cache  `quill --prompt-cache F -n 0` alternating two prompts that share no token,
                so every run rewrites F: afterwards F is absent (before the first whole
                write) or byte for byte one of the two files an unkilled run writes, and
                then a run with F reuses it without a warning.
  chat /save    `quill -i` saving one of two conversations to F (and F.chat): each file is
                absent or byte for byte what an unkilled run saves.
  batch -o      `quill batch -o OUT`: every whole line of OUT is the same record as in an
                unkilled run's output, in order (the timings aside), and at most one partial
                line (no newline) ends it; every tenth time the run is resumed by hand (the
                records after the last whole line, appended after cutting the partial
                line) and the result is then the unkilled run's records, none lost or
                duplicated.
Half the instants are uniform over an unkilled run's duration, half over its last third,
where the files are written.
"""
import json
import os
import random
import signal
import subprocess
import sys
import time


class Run:
    def __init__(self, quill, model, tmp):
        self.quill, self.model, self.tmp = quill, model, tmp
        self.fail = 0

    def check(self, what, ok, detail=""):
        print("%s %s%s" % ("ok  " if ok else "FAIL", what, (": " + detail) if detail and not ok else ""))
        self.fail |= not ok

    def cmd(self, args, stdin=None, timeout=300):
        """Runs quill to the end; returns (seconds, stderr)."""
        t = time.monotonic()
        p = subprocess.run([self.quill] + args, input=stdin, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                           timeout=timeout)
        if p.returncode != 0:
            raise RuntimeError("quill %s failed: %s" % (" ".join(args), p.stderr.decode(errors="replace")))
        return time.monotonic() - t, p.stderr.decode(errors="replace")

    def kill_loop(self, kills, dur, rng, run, check):
        """Runs run(delay) until `kills` of them were killed (at most 6 * kills runs),
        check() after each; returns (runs, kills). Half the instants are uniform over an
        unkilled run's duration, half over its last third (where the files are written);
        the duration is the shortest seen, as a busy machine makes some runs slow."""
        runs = n_killed = 0
        while n_killed < kills and runs < 6 * kills:
            delay = rng.uniform(0, dur) if runs % 2 else rng.uniform(0.67 * dur, dur)
            t = time.monotonic()
            was_killed = run(delay)
            if not was_killed:
                dur = min(dur, time.monotonic() - t)
            n_killed += was_killed
            check(runs)
            runs += 1
        return runs, n_killed

    def killed(self, args, delay, stdin=None):
        """Starts quill, kills it with SIGKILL after delay seconds (if still running)."""
        p = subprocess.Popen([self.quill] + args, stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if stdin:
            try:
                p.stdin.write(stdin)
                p.stdin.close()
            except BrokenPipeError:
                pass
        try:
            p.wait(timeout=delay)
        except subprocess.TimeoutExpired:
            p.send_signal(signal.SIGKILL)
            p.wait()
            return True
        return False


def read(path):
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None


def prompt_cache(r, kills, rng):
    f = os.path.join(r.tmp, "cache")
    prompts = ["Once upon a time there was a little girl named Lily. " * 12,
               "The big dog ran to the park with his red ball. " * 14]
    refs, dur = [], 0.0
    for i, p in enumerate(prompts):  # what an unkilled run writes
        ref = os.path.join(r.tmp, "ref%d" % i)
        dur = max(dur, min(r.cmd(["-m", r.model, "--no-bos", "--prompt-cache", ref + "x%d" % k, "-n", "0", p])[0]
                           for k in range(3)))
        os.rename(ref + "x0", ref)
        refs.append(read(ref))
    bad = []

    def run(delay):  # the other prompt each time: every run rewrites the file
        run.turn = getattr(run, "turn", 0) + 1
        return r.killed(["-m", r.model, "--no-bos", "--prompt-cache", f, "-n", "0", prompts[run.turn % 2]], delay)

    runs, n_killed = r.kill_loop(kills, dur, rng, run, lambda k: bad.append(k) if read(f) not in refs + [None] else None)
    r.check("prompt cache: %d runs, %d killed: the file is always absent, the old or a whole new one"
            % (runs, n_killed), not bad and n_killed >= kills, "%d times something else" % len(bad))
    _, err = r.cmd(["-m", r.model, "--no-bos", "--prompt-cache", f, "-n", "0", prompts[0]])
    r.check("prompt cache: the file left is used without a warning", "ignoring it" not in err, err.strip())
    temps = [n for n in os.listdir(r.tmp) if n.startswith("cache.tmp-")]
    print("note prompt cache: %d temp files left by kills mid-write (never read as the cache)" % len(temps))


def chat_save(r, kills, rng):
    f = os.path.join(r.tmp, "conv")
    talks = [b"Hi\n/save %s\n" % f.encode(), b"Tell me about a dog\nAnd a cat\n/save %s\n" % f.encode()]
    args = ["-m", r.model, "-i", "-q", "--temp", "0", "-n", "8"]
    refs, dur = [], 0.0
    for i, t in enumerate(talks):
        dur = max(dur, min(r.cmd(args, stdin=t)[0] for _ in range(3)))
        refs.append((read(f), read(f + ".chat")))
    bad = []
    kvs, chats = [x[0] for x in refs] + [None], [x[1] for x in refs] + [None]
    runs, n_killed = r.kill_loop(kills, dur, rng, lambda delay: r.killed(args, delay, stdin=talks[rng.randrange(2)]),
                                 lambda k: bad.append(k) if read(f) not in kvs or read(f + ".chat") not in chats else None)
    r.check("chat /save: %d runs, %d killed: FILE and FILE.chat always absent, old or whole" % (runs, n_killed),
            not bad and n_killed >= kills, "%d times something else" % len(bad))


def records(data):
    """The whole lines of a batch output as comparable records (timings dropped), and
    the partial last line (b"" if none)."""
    lines = data.split(b"\n")
    out = []
    for line in lines[:-1]:
        o = json.loads(line)
        o.pop("ttft_ms", None), o.pop("tpot_ms", None)
        out.append(o)
    return out, lines[-1]


def batch(r, kills, rng):
    inp, out, ref = (os.path.join(r.tmp, n) for n in ("in.jsonl", "out.jsonl", "ref.jsonl"))
    lines = ['{"id": %d, "prompt": "Once upon a time number %d", "n": %d}' % (i, i, 4 + i % 9) for i in range(24)]
    with open(inp, "w") as fh:
        fh.write("\n".join(lines) + "\n")
    args = ["batch", "-m", r.model, "--temp", "0", "--parallel", "4", "-q"]
    dur = min(r.cmd(args + ["-i", inp, "-o", ref])[0] for _ in range(3))
    want, _ = records(read(ref))
    bad, partial, resumed = [], [0], [0]

    def check(k):
        data = read(out) or b""
        try:
            got, tail = records(data)
        except ValueError as e:
            return bad.append("run %d: a whole line is not JSON (%s)" % (k, e))
        partial[0] += tail != b""
        if got != want[:len(got)]:
            return bad.append("run %d: the %d whole lines are not the first records" % (k, len(got)))
        if k % 10 == 0:  # resume by hand: keep the whole lines, run the rest, append
            with open(out, "wb") as fh:
                fh.write(data[:len(data) - len(tail)])
            rest = os.path.join(r.tmp, "rest.jsonl")
            with open(rest, "w") as fh:
                fh.write("".join(l + "\n" for l in lines[len(got):]))
            with open(out, "ab") as fh:
                subprocess.run([r.quill] + args + ["-i", rest], stdout=fh, stderr=subprocess.DEVNULL, check=True)
            resumed[0] += 1
            if records(read(out))[0] != want:
                bad.append("run %d: resumed after %d records, the output differs" % (k, len(got)))

    runs, n_killed = r.kill_loop(kills, dur, rng, lambda delay: r.killed(args + ["-i", inp, "-o", out], delay), check)
    r.check("batch -o: %d runs, %d killed (%d with a partial last line): whole lines are the first records"
            % (runs, n_killed, partial[0]), not bad and n_killed >= kills, "; ".join(bad[:5]))
    r.check("batch -o: %d resumed by hand from the whole lines: every record once" % resumed[0],
            not any("resumed" in b for b in bad))


def main(quill, model, tmp, kills):
    r = Run(quill, model, tmp)
    rng = random.Random(21)
    prompt_cache(r, kills, rng)
    chat_save(r, max(kills // 4, 1), rng)
    batch(r, max(kills // 4, 1), rng)
    return r.fail


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])))
