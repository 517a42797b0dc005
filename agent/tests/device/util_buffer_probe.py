"""What NVML's utilization sample buffer holds and what reading it costs, straight through ctypes
(no binding in between, so each NVML call is timed alone):
  python3 util_buffer_probe.py OUT.json
- capacity: entries and seconds of a whole-buffer read of the kernel (1) and memory (2) buffers,
  idle and after a busy spell, and the spacing of the entries;
- cost: CPU of the calling thread per call for the count call (samples = NULL) and for a fetch
  into a buffer allocated beforehand (no count call), for the whole buffer and for the last ~5
  entries, next to nvmlDeviceGetUtilizationRates;
- clock: how far the newest entry lies behind the wall clock when it is read (the entries'
  timestamps are Unix microseconds);
- a 1-s sawtooth (0.2 s of bf16 matmuls, 0.8 s asleep) read once a second, entries kept."""
import ctypes as C
import json
import statistics
import sys
import threading
import time

nvml = C.CDLL("libnvidia-ml.so.1")
NOT_FOUND = 6


class Value(C.Union):
    _fields_ = [("d", C.c_double), ("ui", C.c_uint), ("ul", C.c_ulong), ("ull", C.c_ulonglong),
                ("sll", C.c_longlong), ("us", C.c_ushort)]


class Sample(C.Structure):
    _fields_ = [("ts", C.c_ulonglong), ("v", Value)]


assert nvml.nvmlInit_v2() == 0
dev = C.c_void_p()
assert nvml.nvmlDeviceGetHandleByIndex_v2(0, C.byref(dev)) == 0
get = nvml.nvmlDeviceGetSamples
get.argtypes = [C.c_void_p, C.c_int, C.c_ulonglong, C.POINTER(C.c_int), C.POINTER(C.c_uint), C.c_void_p]
BUF = (Sample * 4096)()


def count(kind, since):
    vt, n = C.c_int(), C.c_uint(0)
    rc = get(dev, kind, since, C.byref(vt), C.byref(n), None)
    return rc, n.value


def fetch(kind, since, room=4096):
    vt, n = C.c_int(), C.c_uint(room)
    rc = get(dev, kind, since, C.byref(vt), C.byref(n), BUF)
    out = []
    if rc == 0:
        for i in range(n.value):
            s = BUF[i]
            v = {0: s.v.d, 1: s.v.ui, 2: s.v.ul, 3: s.v.ull, 4: s.v.sll}.get(vt.value, s.v.ui)
            out.append((s.ts, v))
    return rc, out, vt.value


class Util(C.Structure):
    _fields_ = [("gpu", C.c_uint), ("memory", C.c_uint)]


def util_rates():
    u = Util()
    return nvml.nvmlDeviceGetUtilizationRates(dev, C.byref(u))


def cpu_us(f, reps=40):
    xs = []
    for _ in range(reps):
        t0 = time.thread_time_ns()
        f()
        xs.append((time.thread_time_ns() - t0) / 1000)
        time.sleep(0.02)
    return {"median_us": statistics.median(xs), "mean_us": statistics.fmean(xs), "min_us": min(xs), "max_us": max(xs)}


def whole(kind):
    rc_c, n = count(kind, 0)
    rc, entries, vt = fetch(kind, 0)
    now = time.time_ns() // 1000
    gaps = [b[0] - a[0] for a, b in zip(entries, entries[1:])]
    return {
        "count_rc": rc_c, "count": n, "fetch_rc": rc, "entries": len(entries), "value_type": vt,
        "span_s": (entries[-1][0] - entries[0][0]) / 1e6 if entries else None,
        "newest_behind_wall_ms": (now - entries[-1][0]) / 1000 if entries else None,
        "gap_ms_median": statistics.median(gaps) / 1000 if gaps else None,
        "gap_ms_min": min(gaps) / 1000 if gaps else None, "gap_ms_max": max(gaps) / 1000 if gaps else None,
        "sorted": all(g > 0 for g in gaps),
        "first": entries[:3], "last": entries[-3:],
    }


res = {"idle_whole": {k: whole(k) for k in (1, 2)}}
newest = res["idle_whole"][1]["last"][-1][0]
recent = newest - 1_000_000
res["cost"] = {
    "count_whole": cpu_us(lambda: count(1, 0)),
    "count_recent": cpu_us(lambda: count(1, time.time_ns() // 1000 - 1_000_000)),
    "fetch_whole_prealloc": cpu_us(lambda: fetch(1, 0)),
    "fetch_recent_prealloc": cpu_us(lambda: fetch(1, time.time_ns() // 1000 - 1_000_000)),
    "fetch_recent_room16": cpu_us(lambda: fetch(1, time.time_ns() // 1000 - 1_000_000, 16)),
    "utilization_rates": cpu_us(util_rates),
}
# Does a fetch with room for fewer than the entries asked for fail (INSUFFICIENT_SIZE = 7)?
rc, got, _ = fetch(1, 0, 4)
res["fetch_whole_room4"] = {"rc": rc, "entries": len(got)}
res["count_since_future"] = count(1, time.time_ns() // 1000 + 10_000_000)

# A 1-s sawtooth for 24 s, the buffer read once a second (incremental) in this thread.
stop = threading.Event()


def sawtooth():
    import torch
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    torch.cuda.synchronize()
    while not stop.is_set():
        t0 = time.time()
        while time.time() - t0 < 0.2:
            a @ a
            torch.cuda.synchronize()
        time.sleep(max(0.0, 1.0 - (time.time() - t0)))


th = threading.Thread(target=sawtooth, daemon=True)
th.start()
time.sleep(4)
reads = []
since = time.time_ns() // 1000 - 1_000_000
for _ in range(24):
    time.sleep(1)
    now = time.time_ns() // 1000
    rc, got, _ = fetch(1, since)
    if got:
        since = got[-1][0]
    reads.append({"now_us": now, "rc": rc, "entries": got})
stop.set()
th.join()
res["sawtooth_reads"] = reads
res["busy_whole"] = {k: whole(k) for k in (1, 2)}
time.sleep(5)
res["after_idle_whole"] = {k: whole(k) for k in (1, 2)}
json.dump(res, open(sys.argv[1], "w"), indent=1)
for k in ("idle_whole", "busy_whole", "after_idle_whole"):
    for kind, w in res[k].items():
        print(k, kind, {x: w[x] for x in w if x not in ("first", "last")})
for k, v in res["cost"].items():
    print("cost", k, v)
print("fetch_whole_room4", res["fetch_whole_room4"], "count_since_future", res["count_since_future"])
for r in reads[:6]:
    print("read", r["now_us"], r["rc"], [(ts, v, round((r["now_us"] - ts) / 1000)) for ts, v in r["entries"]])
