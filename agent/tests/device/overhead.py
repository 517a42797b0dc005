"""Agent overhead on the device machine.

  overhead.py stat PID            one JSON line: wall time, CPU seconds (utime+stime), CPU ns of the
                                  live threads (schedstat), RSS, peak RSS
  overhead.py diff NAME INTERVAL_S STAT0 STAT1   the cost between two `stat` lines
  overhead.py spawn BIN OUT SECS  runs several agent configurations side by side on the (idle) GPU
                                  for SECS seconds after a warm-up and writes their cost to OUT
  overhead.py received BATCHES.jsonl   per host (configuration): batches, samples per batch, labels
  overhead.py sequential BIN OUT LOGDIR [SCALE]
                                  runs each configuration of CONFIGS_ALONE by itself (no other NVML
                                  client contends for the driver's locks) and writes its cost, where
                                  its memory is (smaps), and what it left spooled at SIGTERM; SCALE
                                  shortens the windows, AGENT_SOURCE=simulate:1 tries it without a GPU
"""
import glob, json, os, shutil, subprocess, sys, time

TCK = os.sysconf("SC_CLK_TCK")


def sched_ns(pid):
    """CPU time of the process's live threads in ns (schedstat: exact, unlike the 10-ms ticks of
    stat; threads that exited are missing, so it is checked against stat)."""
    total = 0
    for t in glob.glob(f"/proc/{pid}/task/*/schedstat"):
        try:
            total += int(open(t).read().split()[0])
        except (OSError, ValueError, IndexError):
            pass
    return total


def stat(pid):
    s = open(f"/proc/{pid}/stat").read()
    f = s[s.rfind(")") + 2:].split()
    mem = {}
    for line in open(f"/proc/{pid}/status"):
        k, _, v = line.partition(":")
        if k in ("VmRSS", "VmHWM", "RssAnon", "RssFile", "RssShmem", "Threads"):
            mem[k] = int(v.split()[0])
    return {"t": time.time(), "cpu_s": (int(f[11]) + int(f[12])) / TCK, "sched_ns": sched_ns(pid),
            "rss_kib": mem.get("VmRSS"), "hwm_kib": mem.get("VmHWM"), "anon_kib": mem.get("RssAnon"),
            "file_kib": mem.get("RssFile"), "threads": mem.get("Threads")}


def cost(name, interval_s, a, b):
    secs = b["t"] - a["t"]
    polls = secs / interval_s
    cpu = b["cpu_s"] - a["cpu_s"]
    sched = (b.get("sched_ns", 0) - a.get("sched_ns", 0)) / 1e9
    return {"config": name, "interval_s": interval_s, "seconds": round(secs, 2),
            "cpu_s": round(cpu, 3), "polls": round(polls, 1),
            "cpu_ms_per_poll": round(cpu * 1000 / polls, 3),
            "cpu_pct_of_one_core": round(100 * cpu / secs, 3),
            "sched_cpu_ms_per_poll": round(sched * 1000 / polls, 3),
            "sched_cpu_pct_of_one_core": round(100 * sched / secs, 4),
            "rss_mib": round(b["rss_kib"] / 1024, 2), "peak_rss_mib": round(b["hwm_kib"] / 1024, 2),
            "anon_mib": round((b.get("anon_kib") or 0) / 1024, 2),
            "file_mib": round((b.get("file_kib") or 0) / 1024, 2), "threads": b.get("threads")}


def smaps_summary(pid):
    """Resident kB per mapped file ([anon], [heap], [stack] for the rest) and its anonymous part,
    plus the largest anonymous mappings."""
    per, big, name = {}, [], None
    cur = None
    for line in open(f"/proc/{pid}/smaps"):
        first = line.split(None, 1)[0]
        if "-" in first and not first.endswith(":"):
            parts = line.split()
            name = parts[5] if len(parts) > 5 else "[anon]"
            cur = {"range": first, "perms": parts[1], "name": name, "rss_kib": 0, "anon_kib": 0}
            big.append(cur)
        elif first in ("Rss:", "Anonymous:"):
            v = int(line.split()[1])
            key = "rss_kib" if first == "Rss:" else "anon_kib"
            cur[key] += v
            e = per.setdefault(name, {"rss_kib": 0, "anon_kib": 0})
            e[key] += v
    files = sorted(({"name": k, **v} for k, v in per.items() if v["rss_kib"] >= 64), key=lambda x: -x["rss_kib"])
    big = sorted((m for m in big if m["anon_kib"] >= 256), key=lambda m: -m["anon_kib"])[:8]
    rollup = {}
    for line in open(f"/proc/{pid}/smaps_rollup"):
        parts = line.split()
        if len(parts) >= 2 and parts[0].endswith(":") and parts[1].isdigit():
            rollup[parts[0][:-1]] = int(parts[1])
    return {"by_mapping": files, "largest_anon": big, "rollup_kib": rollup}


def spooled(d):
    """Batches and samples left in a spool directory (`<seq>-<samples>.pb.zst` or `.json.gz`)."""
    files = [f for f in os.listdir(d) if f.endswith((".pb.zst", ".json.gz"))] if os.path.isdir(d) else []
    return {"batches": len(files), "samples": sum(int(f.split("-")[1].split(".")[0]) for f in files)}


def received(path):
    """What the receiver got, per host (= configuration): batches, samples per batch, labels."""
    hosts = {}
    for line in open(path):
        b = json.loads(line)
        h = hosts.setdefault(b["host"], {"batches": 0, "samples": 0, "samples_per_batch": {}, "labels": {}})
        h["batches"] += 1
        n = len(b.get("samples", []))
        h["samples"] += n
        h["samples_per_batch"][str(n)] = h["samples_per_batch"].get(str(n), 0) + 1
        h["labels"] = {k: v for k, v in b.get("labels", {}).items() if k.startswith("nvml.")}
    return hosts


if sys.argv[1] == "received":
    print(json.dumps(received(sys.argv[2]), indent=1))
    sys.exit(0)
if sys.argv[1] == "stat":
    print(json.dumps(stat(int(sys.argv[2]))))
    sys.exit(0)
if sys.argv[1] == "diff":
    print(json.dumps(cost(sys.argv[2], float(sys.argv[3]), json.loads(sys.argv[4]), json.loads(sys.argv[5]))))
    sys.exit(0)

# name, interval (s), extra flags, RUST_LOG, extra environment, measured seconds
CONFIGS_ALONE = [
    ("1s-defaults", 1.0, [], "info", {}, 60),
    ("1s-flush-1s", 1.0, ["--flush-interval", "1s"], "info", {}, 40),
    ("5s-defaults", 5.0, [], "info", {}, 60),
    ("1s-defaults-malloc-arena-max-1", 1.0, [], "info", {"MALLOC_ARENA_MAX": "1"}, 30),
]


def run_alone(bin_, out, logdir, scale=1.0, configs=CONFIGS_ALONE):
    for name, iv, extra, level, env, secs in configs:
        secs = secs * scale
        spool = f"/tmp/spool-{name}"
        shutil.rmtree(spool, ignore_errors=True)
        log = open(f"{logdir}/agent-{name}.log", "w")
        source = os.environ.get("AGENT_SOURCE", "nvml")  # simulate:1 for a dry run without a GPU
        p = subprocess.Popen([bin_, "--source", source, "--interval", f"{iv}s", "--server", "http://127.0.0.1:18081",
                              "--api-key", "x", "--host", name, "--spool-dir", spool, *extra],
                             stderr=log, env={**os.environ, "RUST_LOG": level, **env})
        time.sleep(5)
        a = stat(p.pid)
        time.sleep(secs)
        b = stat(p.pid)
        r = cost(name, iv, a, b)
        r["flags"] = " ".join(extra)
        r["env"] = env
        r["thread_names"] = sorted(open(t).read().strip() for t in glob.glob(f"/proc/{p.pid}/task/*/comm"))
        try:
            r["smaps"] = smaps_summary(p.pid)
        except OSError as e:
            r["smaps"] = str(e)
        p.terminate()
        p.wait()
        r["exit_code"] = p.returncode
        r["spooled_at_sigterm"] = spooled(spool)
        with open(out, "a") as f:
            f.write(json.dumps(r) + "\n")
        print(json.dumps({k: v for k, v in r.items() if k != "smaps"}), flush=True)


if sys.argv[1] == "sequential":
    run_alone(sys.argv[2], sys.argv[3], sys.argv[4], float(sys.argv[5]) if len(sys.argv) > 5 else 1.0)
    sys.exit(0)

BIN, OUT, SECS = sys.argv[2], sys.argv[3], float(sys.argv[4])
CONFIGS = [
    ("1s-defaults", 1.0, []),
    ("1s-no-costly-calls", 1.0, ["--nvml-energy-every", "0", "--nvml-process-util-every", "0"]),
    ("5s-defaults", 5.0, []),
]
procs = []
for name, iv, extra in CONFIGS:
    log = open(f"/tmp/agent-{name}.log", "w")
    p = subprocess.Popen([BIN, "--source", "nvml", "--interval", f"{iv}s", "--server", "http://127.0.0.1:18081",
                          "--api-key", "x", "--host", name, "--spool-dir", f"/tmp/spool-{name}", *extra],
                         stderr=log, env={**os.environ, "RUST_LOG": "info"})
    procs.append((name, iv, p))
time.sleep(4)
start = {name: stat(p.pid) for name, _, p in procs}
time.sleep(SECS)
res = []
for name, iv, p in procs:
    res.append(cost(name, iv, start[name], stat(p.pid)))
    p.terminate()
    p.wait()
with open(OUT, "a") as f:
    for r in res:
        f.write(json.dumps(r) + "\n")
print("\n".join(json.dumps(r) for r in res))
