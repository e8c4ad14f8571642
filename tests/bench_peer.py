"""quill beside llama.cpp on the same files, same machine, interleaved rounds.

usage: bench_peer.py [--rounds 5] [--types Q4_K_M,Q4_K,Q5_K_M,Q6_K,Q8_0,Q4_0]
                     [--shape llama-3.2-1b] [-t 2] [--prompts 128,512] [-n 64] [--depths 0,512]
                     [--quill build/quill] [--peer LLAMA_BENCH] [--build-peer]
                     [--models DIR] [--shared ../shared]

Each round runs, for every type, `quill bench` and llama.cpp's `llama-bench`
(in alternating order) on the same synthetic model (models/synth.py, written
once into --models), and keeps each run's tokens/s for prefill of each prompt
length and decode (tg) after a context of each depth (llama-bench -d; quill
bench -p DEPTH: the decode reads that many positions of KV, as llama's does). A run that another process disturbed is run again
(up to 3 times): /proc/stat's busy and steal time during the run, minus the
run's own CPU time, must stay under 5% of the machine. Prints every round,
then per metric the medians and quill's ratio to llama.cpp: the median of
the rounds' ratios (each round runs both under the same conditions; the
host's memory bandwidth can change by half from one minute to the next).
Asserts nothing.

llama.cpp is never vendored or linked: --peer (or $LLAMA_BENCH) names a
llama-bench binary; otherwise $QUILL_PEER_DIR (default ~/.cache/quill/peer)
holds one, which --build-peer builds there (CPU, -march=native like quill)
from the llama.cpp source that the npm package node-llama-cpp carries as a
git bundle (npm pack, then git clone of the bundle, then cmake).
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HZ = os.sysconf("SC_CLK_TCK")
NCPU = os.cpu_count() or 1


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def peer_dir():
    return os.environ.get("QUILL_PEER_DIR") or os.path.expanduser("~/.cache/quill/peer")


def build_peer():
    """llama-bench from node-llama-cpp's llama.cpp bundle, built in peer_dir()."""
    d = peer_dir()
    os.makedirs(d, exist_ok=True)
    src = os.path.join(d, "llama.cpp")
    if not os.path.isdir(src):
        log("bench_peer: fetching node-llama-cpp from the npm registry into " + d)
        out = subprocess.run(["npm", "pack", "node-llama-cpp", "--silent"], cwd=d, check=True,
                             capture_output=True, text=True).stdout.split()[-1]
        subprocess.run(["tar", "xzf", out, "package/llama/gitRelease.bundle"], cwd=d, check=True)
        subprocess.run(["git", "clone", "-q", "package/llama/gitRelease.bundle", "llama.cpp"], cwd=d, check=True)
    b = os.path.join(src, "build-quill-peer")
    subprocess.run(["cmake", "-S", src, "-B", b, "-DCMAKE_BUILD_TYPE=Release", "-DGGML_NATIVE=ON",
                    "-DGGML_CUDA=OFF", "-DLLAMA_CURL=OFF", "-DLLAMA_BUILD_SERVER=OFF"], check=True,
                   stdout=subprocess.DEVNULL)
    subprocess.run(["cmake", "--build", b, "--target", "llama-bench", "-j", str(NCPU)], check=True,
                   stdout=subprocess.DEVNULL)
    return os.path.join(b, "bin", "llama-bench")


def find_peer(args):
    if args.peer:
        return args.peer
    if os.environ.get("LLAMA_BENCH"):
        return os.environ["LLAMA_BENCH"]
    p = os.path.join(peer_dir(), "llama.cpp", "build-quill-peer", "bin", "llama-bench")
    if os.access(p, os.X_OK):
        return p
    if args.build_peer:
        return build_peer()
    sys.exit("bench_peer: no llama-bench: pass --peer PATH (or set LLAMA_BENCH), or --build-peer to build "
             "llama.cpp from the npm package node-llama-cpp into " + peer_dir())


def machine_busy():
    """Jiffies the machine spent busy (user, nice, system, irq, softirq) and stolen."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return v[0] + v[1] + v[2] + v[5] + v[6] + v[7]


def timed(cmd):
    """Runs cmd; returns (stdout, the share of the machine others used meanwhile)."""
    t0, b0 = time.monotonic(), machine_busy()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _, status, ru = os.wait4(p.pid, 0)
    out, err = p.stdout.read(), p.stderr.read()
    p.stdout.close(), p.stderr.close()
    p.returncode = os.waitstatus_to_exitcode(status)
    wall, busy = time.monotonic() - t0, (machine_busy() - b0) / HZ
    if p.returncode != 0:
        raise RuntimeError("%s: exit %d: %s" % (cmd[0], p.returncode, err.strip()[-300:]))
    others = max(0.0, busy - (ru.ru_utime + ru.ru_stime)) / (wall * NCPU)
    return out, others


def tg_key(args, d):
    return "tg%d" % args.n + ("@d%d" % d if d else "")


def run_quill(args, model, prompts):
    """{"pp128": tok/s, ..., "tg64": tok/s, "tg64@d512": ...}, the bandwidth, and the disturbance.
    quill bench decodes after its prompt: -p P -n 1 measures prefill, -p D -n N decode
    at depth D (llama-bench's tg at -d D; at depth 0 a one-token prompt)."""
    res, worst, bws = {}, 0.0, []
    with tempfile.TemporaryDirectory() as tmp:
        js = os.path.join(tmp, "stats.json")
        runs = [("pp", p, 1) for p in prompts] + [("tg", d, args.n) for d in args.depths]
        for kind, p, n in runs:
            _, others = timed([args.quill, "bench", "-m", model, "-p", str(max(p, 1)), "-n", str(n),
                               "-t", str(args.threads), "--stats-json", js])
            with open(js) as f:
                s = json.load(f)
            if kind == "pp":
                res["pp%d" % p] = s["prefill_tok_s"]
            else:
                res[tg_key(args, p)] = s["decode_tok_s"]
                bws = bws or [s["bandwidth_before"] / 1e9, s["bandwidth_after"] / 1e9]
            worst = max(worst, others)
    return res, bws, worst


def run_peer(args, peer, model, prompts):
    out, others = timed([peer, "-m", model, "-p", ",".join(map(str, prompts)), "-n", str(args.n),
                         "-d", ",".join(map(str, args.depths)), "-t", str(args.threads), "-r", "1", "-o", "json"])
    res = {}
    for t in json.loads(out):
        d = t.get("n_depth", 0)
        if t["n_gen"] == 0 and d == args.depths[0]:  # its prompts run at every depth: the first's
            res["pp%d" % t["n_prompt"]] = t["avg_ts"]
        elif t["n_gen"]:
            res[tg_key(args, d)] = t["avg_ts"]
    return res, others


def steady(fn, what, limit=0.05, tries=3):
    """fn() -> (..., others) run again while others > limit."""
    for i in range(tries):
        r = fn()
        if r[-1] <= limit:
            return r, False
        log("bench_peer: %s disturbed (others used %.0f%% of the machine), %s" %
            (what, 100 * r[-1], "again" if i + 1 < tries else "kept, marked *"))
    return r, True


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--types", default="Q4_K_M,Q4_K,Q5_K_M,Q6_K,Q8_0,Q4_0")
    ap.add_argument("--shape", default="llama-3.2-1b")
    ap.add_argument("-t", "--threads", type=int, default=NCPU)
    ap.add_argument("--prompts", default="128,512")
    ap.add_argument("-n", type=int, default=64)
    ap.add_argument("--depths", default="0,512", help="context depths of the decode runs")
    ap.add_argument("--quill", default=os.path.join(ROOT, "build", "quill"))
    ap.add_argument("--peer")
    ap.add_argument("--build-peer", action="store_true")
    ap.add_argument("--models", default=os.path.join(ROOT, "models"))
    ap.add_argument("--shared", default=os.path.join(ROOT, "..", "shared"))
    args = ap.parse_args()
    peer = find_peer(args)
    types, prompts = args.types.split(","), [int(p) for p in args.prompts.split(",")]
    args.depths = [int(d) for d in args.depths.split(",")]
    models = {}
    for ty in types:
        f = os.path.join(args.models, "synth-%s-%s.gguf" % (args.shape, ty))
        if not os.path.exists(f):
            subprocess.run([sys.executable, os.path.join(ROOT, "models", "synth.py"), "--shape", args.shape,
                            "--type", ty, "--shared", args.shared, "-o", f], check=True)
        models[ty] = f
    metrics = ["pp%d" % p for p in prompts] + [tg_key(args, d) for d in args.depths]
    rows = {(ty, m): ([], []) for ty in types for m in metrics}  # (quill runs, llama.cpp runs)
    print("quill %s vs llama.cpp %s: %s, %d threads, %d rounds (tok/s; * = run disturbed by another process)"
          % (args.quill, peer, args.shape, args.threads, args.rounds))
    for r in range(args.rounds):
        for ty in types:
            order = ["quill", "peer"] if r % 2 == 0 else ["peer", "quill"]
            got = {}
            for who in order:
                if who == "quill":
                    (res, bws, _), bad = steady(lambda: run_quill(args, models[ty], prompts), "quill " + ty)
                    got[who] = (res, bad, bws)
                else:
                    (res, _), bad = steady(lambda: run_peer(args, peer, models[ty], prompts), "llama.cpp " + ty)
                    got[who] = (res, bad, None)
            line = []
            for m in metrics:
                q, p = got["quill"][0][m], got["peer"][0][m]
                rows[(ty, m)][0].append(q)
                rows[(ty, m)][1].append(p)
                line.append("%s %.1f%s / %.1f%s" % (m, q, "*" if got["quill"][1] else "", p,
                                                   "*" if got["peer"][1] else ""))
            bws = got["quill"][2]
            print("round %d %-7s %s | bandwidth %.1f / %.1f GB/s" % (r + 1, ty, " | ".join(line), bws[0], bws[1]),
                  flush=True)
    print("\nmedians of %d rounds (tok/s; ratio: the median of the rounds' quill / llama.cpp)" % args.rounds)
    print("%-7s %-9s %10s %10s %7s" % ("type", "test", "quill", "llama.cpp", "ratio"))
    for ty in types:
        for m in metrics:
            qs, ps = rows[(ty, m)]
            ratio = statistics.median(q / p for q, p in zip(qs, ps))
            print("%-7s %-9s %10.1f %10.1f %7.2f" % (ty, m, statistics.median(qs), statistics.median(ps), ratio))


if __name__ == "__main__":
    main()
