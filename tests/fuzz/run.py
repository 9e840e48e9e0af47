"""Differential fuzzer: eager PyTorch on the CPU against torch_xla's lazy device.

    python -m tests.fuzz.run --seeds 0:5000 [--jobs 1] [--shrink] [--out report.json]
    python tests/fuzz/run.py --seeds 17 --show          # print seed 17's program and result

Programs run in worker processes (one per job, many programs each); a worker that dies or
takes longer than --timeout on one program is replaced and the program counts as a crash.
"""
import argparse
import collections
import json
import multiprocessing
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)
os.environ.setdefault("JAX_PLATFORMS", "cpu")

VALUE_KINDS = {"shape", "dtype", "device", "requires_grad", "value", "signed_zero", "grad",
               "pyvalue", "missing_var"}


def parse_seeds(text):
    out = []
    for part in text.split(","):
        if ":" in part:
            a, b = part.split(":")
            out.extend(range(int(a), int(b)))
        elif part:
            out.append(int(part))
    return out


def category(res):
    kind = res["finding"]["kind"]
    if kind in VALUE_KINDS:
        return "mismatch"
    if kind in ("crash", "timeout", "died"):
        return "crash"
    if kind == "missing_raise":
        return "one_side_raise"
    return kind            # exc_type, harness


class Worker:
    def __init__(self, args):
        import fuzz_harness as harness
        ctx = multiprocessing.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=harness.worker_main,
                                args=(child, tuple(args.exclude), args.shrink, args.shrink_budget),
                                daemon=True)
        self.proc.start()
        child.close()
        self.seed = None
        self.started = None
        self.done = 0

    def submit(self, seed):
        self.seed, self.started = seed, time.time()
        self.conn.send(seed)

    def kill(self):
        self.proc.kill()
        self.proc.join()

    def stop(self):
        try:
            self.conn.send(None)
            self.proc.join(5)
        except (OSError, BrokenPipeError):
            pass
        if self.proc.is_alive():
            self.kill()


def run(args, out=print):
    seeds = list(args.seeds)
    todo = collections.deque(seeds)
    results = []
    t0 = time.time()
    timeout = args.timeout + (args.shrink_budget * 2 if args.shrink else 0)
    workers = [Worker(args) for _ in range(min(args.jobs, len(seeds)) or 1)]
    busy = {}
    last = time.time()

    def record(res):
        results.append(res)
        if res.get("findings"):
            f = res["finding"]
            out(f"seed {res['seed']}: {f['kind']} at {f.get('op')} -- {f.get('detail', '').splitlines()[0][:160]}")

    try:
        while todo or busy:
            for w in workers:
                if w not in busy and todo:
                    w.submit(todo.popleft())
                    busy[w] = True
            ready = multiprocessing.connection.wait([w.conn for w in busy] + [w.proc.sentinel for w in busy],
                                                    timeout=1.0)
            for i, w in enumerate(workers):
                if w not in busy:
                    continue
                dead = not w.proc.is_alive()
                if w.conn in ready or (dead and w.conn.poll()):
                    try:
                        res = w.conn.recv()
                    except (EOFError, OSError):
                        res = None
                    if res is not None:
                        del busy[w]
                        w.done += 1
                        record(res)
                        if not res.get("clean", True) or w.done >= args.recycle:
                            w.stop()
                            workers[i] = Worker(args)
                        continue
                    dead = True
                if dead or time.time() - w.started > timeout:
                    kind = "died" if dead else "timeout"
                    f = {"kind": kind, "op": "?", "detail": f"the worker {'died' if dead else 'timed out'} "
                                                            f"(exit code {w.proc.exitcode})"}
                    record({"seed": w.seed, "findings": [f], "finding": f, "signature": [kind, "?", ""],
                            "repro": f"# python tests/fuzz/run.py --seeds {w.seed} --show"})
                    del busy[w]
                    w.kill()
                    workers[i] = Worker(args)
            if time.time() - last > args.progress:
                last = time.time()
                n = len(results)
                bad = sum(1 for r in results if r.get("findings"))
                out(f"[{n}/{len(seeds)}] {n / (time.time() - t0):.2f} programs/s, {bad} failing")
    finally:
        for w in workers:
            w.stop()
    return results, time.time() - t0


def summarize(results, elapsed, out=print, show_repros=True):
    cats = collections.Counter()
    sigs = collections.defaultdict(list)
    for r in results:
        if r.get("findings"):
            cats[category(r)] += 1
            sigs[tuple(r["signature"])].append(r)
    out("")
    out(f"programs: {len(results)}   time: {elapsed:.1f}s ({len(results) / max(elapsed, 1e-9):.2f}/s)")
    out(f"failing: {sum(cats.values())}   mismatches: {cats['mismatch']}   crashes: {cats['crash']}   "
        f"one-side raises: {cats['one_side_raise']}   exception types: {cats['exc_type']}"
        + (f"   harness errors: {cats['harness']}" if cats["harness"] else ""))
    if not sigs:
        return cats
    out("\nby signature (kind, op, detail): seeds")
    for sig, rs in sorted(sigs.items(), key=lambda kv: -len(kv[1])):
        out(f"  {sig}: {len(rs)} -- seeds {', '.join(str(r['seed']) for r in rs[:12])}{' ...' if len(rs) > 12 else ''}")
    if show_repros:
        for sig, rs in sorted(sigs.items(), key=lambda kv: -len(kv[1])):
            r = min(rs, key=lambda r: r.get("shrunk_stmts", r.get("stmts", 99)))
            out(f"\n==== {sig} (seed {r['seed']}, {len(rs)} seeds)")
            out(r.get("repro", ""))
    return cats


def show(seed, args):
    import fuzz_harness as harness
    prog = harness.program_of(seed, args.exclude)
    print(f"# seed {seed}: {len(prog.stmts)} statements, barriers after {sorted(prog.barriers)}, "
          f"final sync {prog.final_sync}")
    print(prog)
    findings = harness.run_pair(prog)
    if not findings:
        print("\n# eager and XLA agree")
        return 0
    for f in findings:
        print(f"\n# {f['kind']} at {f.get('op')}: {f.get('detail')}")
    f = findings[0]
    if args.shrink:
        prog, f = harness.shrink(prog, f, args.shrink_budget, log=lambda s: print("#", s))
    print("\n" + harness.repro(prog, f))
    return 1


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", type=parse_seeds, default=parse_seeds("0:100"),
                   help="A:B (half open), or a comma list of seeds and ranges")
    p.add_argument("--jobs", type=int, default=1, help="worker processes")
    p.add_argument("--shrink", action="store_true", help="shrink each failing program")
    p.add_argument("--shrink-budget", type=float, default=60.0, help="seconds of shrinking per failure")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds per program (shrinking excluded)")
    p.add_argument("--exclude", type=lambda s: [x for x in s.split(",") if x], default=[],
                   help="generator families to leave out (fuzz_gen.OPS names, 'backward'; 'raises': "
                        "no statement that eager refuses)")
    p.add_argument("--out", help="write the results as JSON here")
    p.add_argument("--show", action="store_true", help="run the seeds here, printing each program")
    p.add_argument("--recycle", type=int, default=500, help="programs per worker before a fresh one")
    p.add_argument("--progress", type=float, default=30.0, help="seconds between progress lines")
    p.add_argument("--no-repros", action="store_true", help="summary without the repro scripts")
    args = p.parse_args(argv)
    if args.show:
        rc = 0
        for s in args.seeds:
            rc |= show(s, args)
        return rc
    results, elapsed = run(args)
    cats = summarize(results, elapsed, show_repros=not args.no_repros)
    if args.out:
        with open(args.out, "w") as fh:
            json.dump({"elapsed": elapsed, "args": {k: v for k, v in vars(args).items() if k != "seeds"},
                       "seeds": [min(args.seeds), max(args.seeds)] if args.seeds else [],
                       "results": [r for r in results if r.get("findings")],
                       "programs": len(results)}, fh, indent=1, default=str)
    return 1 if sum(cats.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
