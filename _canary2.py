import multiprocessing as mp, subprocess, json, sys
from bench.predict.canary import canary_ms

def worker(barrier, q):
    canary_ms(); barrier.wait(); q.put(canary_ms())

def together(n):
    ctx = mp.get_context("fork")
    b, q = ctx.Barrier(n), ctx.Queue()
    ps = [ctx.Process(target=worker, args=(b, q)) for _ in range(n)]
    [p.start() for p in ps]; v = [q.get() for _ in ps]; [p.join() for p in ps]
    return max(v)

if __name__ == "__main__":
    import torch
    for i in range(int(sys.argv[1])):
        c1, c2 = canary_ms(), together(2)
        subprocess.run([sys.executable, "-m", "bench", "run", "--strategy", "pp", "--devices", "2", "--microbatches", "4",
                        "--model", "mlp", "--preset", "small", "--out", "/tmp/pp/canary-runs.jsonl"], capture_output=True)
        r = [json.loads(l) for l in open("/tmp/pp/canary-runs.jsonl")][-1]
        c2b = together(2)
        print(f"canary1 {c1:.2f} canary2 {c2:.2f}/{c2b:.2f} pp {r['step_time_ms_median']:.1f}", flush=True)
