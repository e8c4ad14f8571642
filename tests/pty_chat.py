"""pty_chat.py — quill's chat REPL driven through a pseudo-terminal, as a person would.

    /usr/bin/python3 tests/pty_chat.py QUILL SHARED

quill runs with a pty as its controlling terminal on stdin and stderr (so
libedit edits lines, Ctrl-C is a real SIGINT from the line discipline, and
prompts and stats appear there) and stdout redirected to a file, as in
`quill -m MODEL > transcript.txt`. Checks: a three-turn chat where each turn
prefills only its own tokens and the transcript holds only the answers;
Ctrl-C mid-answer returns to the prompt; Ctrl-C with text typed drops the
text; Ctrl-C at an empty prompt and Ctrl-D exit 0; history is kept across
runs in $XDG_STATE_HOME/quill/history (and ~/.local/state without it).
Prints ok/FAIL per check and exits 1 if any failed.
"""
import fcntl
import os
import re
import select
import subprocess
import sys
import tempfile
import termios
import time

QUILL, SHARED = sys.argv[1], sys.argv[2]
STORIES = os.path.join(SHARED, "models", "gguf", "stories260K.gguf")
SYNTH = os.path.join(SHARED, "models", "gguf", "synth-llama-Q8_0.gguf")  # gibberish that rarely ends
TIMEOUT = 120  # seconds for anything to appear (sanitized builds are slow)
fails = 0


def check(what, cond, detail=""):
    global fails
    print("%s %s%s" % ("ok  " if cond else "FAIL", what, "" if cond else ": " + detail))
    fails += 0 if cond else 1


class Chat:
    """quill with stdin/stderr on a pty and stdout in a file."""

    def __init__(self, args, env):
        self.master, slave = os.openpty()
        self.out_path = tempfile.mktemp(dir=env["TMPDIR"])
        self.out = open(self.out_path, "wb")
        self.proc = subprocess.Popen([QUILL] + args, stdin=slave, stdout=self.out, stderr=slave, env=env,
                                     start_new_session=True,  # a session whose controlling tty is the pty:
                                     preexec_fn=lambda: fcntl.ioctl(0, termios.TIOCSCTTY, 0))
        os.close(slave)
        self.screen = b""  # everything quill wrote to the terminal

    def read(self, wait):
        end = time.time() + wait
        while time.time() < end:
            r, _, _ = select.select([self.master], [], [], 0.02)
            if r:
                try:
                    data = os.read(self.master, 65536)
                except OSError:  # the child closed the pty
                    return
                if not data:
                    return
                self.screen += data

    def expect(self, pattern, start=0):
        """Waits until regex `pattern` (bytes) appears in the terminal output after offset
        start; returns (match, absolute end offset) or (None, start)."""
        end = time.time() + TIMEOUT
        while True:
            m = re.search(pattern, self.screen[start:])
            if m:
                return m, start + m.end()
            if time.time() > end or self.proc.poll() is not None:
                self.read(0.2)
                m = re.search(pattern, self.screen[start:])
                return (m, start + m.end()) if m else (None, start)
            self.read(0.05)

    def send(self, data):
        os.write(self.master, data)

    def transcript(self):
        with open(self.out_path, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def wait(self):
        try:
            rc = self.proc.wait(TIMEOUT)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = "timeout"
        self.read(0.1)
        os.close(self.master)
        self.out.close()
        return rc


PROMPT = rb"> $"  # quill waits for a message
STATS = rb"prompt (\d+) tok \((\d+) reused\), TTFT [\d.]+ ms \| generated (\d+) tok[^\n]*\| (\w+) \|"


def n_tokens(text):
    ids = subprocess.run([QUILL, "tokenize", "-m", STORIES, "--ids", "--special", text], capture_output=True,
                         check=True).stdout.split()
    return len(ids)


def three_turns(env):
    c = Chat(["-m", STORIES, "--temp", "0", "-n", "8"], env)
    check("banner warns that the model has no chat template", c.expect(rb"no chat template")[0] is not None)
    stats, mark = [], 0
    for q in ["Hi", "Tell me a story", "What happened next?"]:
        m, mark = c.expect(PROMPT, mark)
        check("prompt shown before %r" % q, m is not None, repr(c.screen[-200:]))
        c.send(q.encode() + b"\r")
        m, mark = c.expect(STATS, mark)
        check("stats after %r" % q, m is not None, repr(c.screen[-300:]))
        stats.append(tuple(int(x) for x in m.groups()[:3]) if m else (0, 0, 0))
    c.expect(PROMPT, mark)  # Ctrl-D is only an end of input once libedit has the terminal
    c.send(b"\x04")
    rc = c.wait()
    check("Ctrl-D exits 0", rc == 0, str(rc))
    answers = c.transcript().split("\n")
    check("the transcript holds the three answers only", len(answers) == 4 and answers[3] == "" and
          not any(s in c.transcript() for s in ["> ", "quill:", "User:"]), repr(c.transcript()))
    if len(answers) != 4:
        return
    # Independent counts: the plain format's text of each turn, tokenized by `quill tokenize`.
    qs = ["Hi", "Tell me a story", "What happened next?"]
    text, totals = "", []
    for i, q in enumerate(qs):
        text += "User: %s\nAssistant:" % q
        totals.append(n_tokens(text))
        text += answers[i] + "\n"
    check("turn 1 prefills the whole prompt", stats[0][1] == 0 and stats[0][0] == totals[0],
          "%s vs %d" % (stats[0], totals[0]))
    for t in (2, 3):
        p, r, g = stats[t - 1]
        check("turn %d: reused + prefilled = the conversation's tokens" % t, p + r == totals[t - 1],
              "%d + %d vs %d" % (p, r, totals[t - 1]))
        own = totals[t - 1] - totals[t - 2] - stats[t - 2][2]  # new tokens this turn: minus the previous answer
        check("turn %d prefills only its own tokens (%d)" % (t, own), p <= own + 2 and r >= totals[t - 2],
              "prefilled %d, reused %d" % (p, r))


def ctrl_c_mid_answer(env):
    c = Chat(["-m", SYNTH, "--temp", "0", "-c", "160", "--chat-template", "chatml"], env)
    _, mark = c.expect(PROMPT)
    c.send(b"Tell me everything\r")
    end = time.time() + TIMEOUT
    while time.time() < end and len(c.transcript()) < 20:  # the answer has started
        c.read(0.005)
    c.send(b"\x03")
    m, mark = c.expect(STATS, mark)
    check("Ctrl-C mid-answer ends the answer as interrupted", m is not None and m.group(4) == b"interrupted",
          repr(c.screen[-300:]))
    check("the interrupted answer is short of the context", m is not None and int(m.group(3)) < 100,
          repr(m and m.group(0)))
    m, mark = c.expect(PROMPT, mark)
    check("back at the prompt after Ctrl-C", m is not None)
    # The next answer runs into the end of the context: the first exchange is dropped
    # and the answer goes on until the context is full again with nothing left to drop.
    c.send(b"Go on\r")
    m, end = c.expect(STATS, mark)
    check("context full mid-answer: the oldest exchange is dropped", b"dropped the oldest 1 exchange" in
          c.screen[mark:end], repr(c.screen[mark:end]))
    check("... and the answer goes on until the context is full again", m is not None and m.group(4) == b"context",
          repr(m and m.group(0)))
    m, mark = c.expect(PROMPT, end)
    c.send(b"some typed text")
    _, mark = c.expect(rb"some typed text", mark)
    c.send(b"\x03")
    m, mark = c.expect(PROMPT, mark)
    check("Ctrl-C with text typed: a fresh prompt, still running", m is not None and c.proc.poll() is None,
          repr(c.screen[-200:]))
    c.send(b"\x03")
    rc = c.wait()
    check("Ctrl-C at an empty prompt exits 0", rc == 0, str(rc))
    check("no answer was started by the dropped text", c.screen.count(b"generated") == 2, repr(c.screen[-300:]))


def history(env):
    state = os.path.join(env["TMPDIR"], "state")
    env = dict(env, XDG_STATE_HOME=state)
    c = Chat(["-m", STORIES, "--temp", "0", "-n", "4"], env)
    c.expect(PROMPT)
    c.send(b"remember this line\r")
    _, mark = c.expect(STATS)
    c.expect(PROMPT, mark)
    c.send(b"\x04")
    check("first run exits 0", c.wait() == 0)
    path = os.path.join(state, "quill", "history")
    saved = open(path, "rb").read().decode("utf-8", "replace") if os.path.exists(path) else ""
    check("history saved in $XDG_STATE_HOME/quill/history", "remember" in saved, repr(saved))
    c = Chat(["-m", STORIES, "--temp", "0", "-n", "4"], env)
    _, mark = c.expect(PROMPT)
    c.send(b"\x1b[A")  # Up: the previous run's line
    m, mark = c.expect(rb"remember this line", mark)
    check("Up recalls the line from the previous run", m is not None, repr(c.screen[-200:]))
    c.send(b"\r")
    m, mark = c.expect(STATS, mark)
    check("the recalled line is sent", m is not None)
    c.expect(PROMPT, mark)
    c.send(b"\x04")
    check("second run exits 0", c.wait() == 0)
    home = os.path.join(env["TMPDIR"], "home")
    os.makedirs(home)
    env = {k: v for k, v in env.items() if k != "XDG_STATE_HOME"}
    env["HOME"] = home
    c = Chat(["-m", STORIES, "--temp", "0", "-n", "4"], env)
    c.expect(PROMPT)
    c.send(b"at home\r")
    _, mark = c.expect(STATS)
    c.expect(PROMPT, mark)
    c.send(b"\x04")
    c.wait()
    check("without XDG_STATE_HOME: ~/.local/state/quill/history",
          os.path.exists(os.path.join(home, ".local", "state", "quill", "history")))


def main():
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, TERM="xterm", TMPDIR=tmp, XDG_STATE_HOME=os.path.join(tmp, "xdg"))
        three_turns(env)
        ctrl_c_mid_answer(env)
        history(env)
    print("pty_chat: %s" % ("FAILED" if fails else "all checks passed"))
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
