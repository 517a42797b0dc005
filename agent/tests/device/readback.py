"""What the device scripts read back: the server under test's API, the phase marks a script
stamped (stack.sh's `stamp`), and nvidia-smi dmon's output, the reference reader."""
import json
import urllib.request
from datetime import datetime, timezone


def api(url, token, path, body=None, method=None):
    req = urllib.request.Request(url + path, headers={"Authorization": f"Bearer {token}"}, method=method)
    if body is not None:
        req.data = json.dumps(body).encode()
        req.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.load(r)


def first_gpu(url, token):
    """The GPU of the lowest index the server knows (the scripts' workloads run on GPU 0)."""
    gpus = api(url, token, "/api/v1/gpus")
    gpus = gpus["gpus"] if isinstance(gpus, dict) else gpus
    return sorted(gpus, key=lambda g: g.get("gpu_index") or 0)[0]


def samples(url, token, uuid, from_ms, to_ms):
    got = api(url, token, f"/api/v1/gpus/{uuid}/samples?from={from_ms}&to={to_ms}&limit=10000")
    return got["samples"] if isinstance(got, dict) else got


def marks(out):
    """OUTDIR/marks.txt as [(unix ms, phase name)], in order; other lines (exit codes) skipped."""
    rows = [line.split(None, 1) for line in open(f"{out}/marks.txt") if line[0].isdigit()]
    return [(int(t), n.strip()) for t, n in rows]


def phase_at(marks, ts_ms):
    """The phase that had started last at `ts_ms` ("before" ahead of the first)."""
    name = "before"
    for t, n in marks:
        if ts_ms >= t:
            name = n
    return name


def parse_dmon(path, gpu="0"):
    """nvidia-smi dmon -o DT: {unix s: {column: value}} for one GPU, every column of the header
    in its order, None where dmon printed no number ("-")."""
    rows, names = {}, None
    for line in open(path):
        if line.startswith("#"):
            toks = line[1:].split()
            if toks and toks[0] == "Date":
                names = toks
            continue
        toks = line.split()
        if not names or len(toks) != len(names):
            continue
        rec = dict(zip(names, toks))
        if rec.get("gpu") != gpu:
            continue
        ts = datetime.strptime(rec["Date"] + " " + rec["Time"], "%Y%m%d %H:%M:%S").replace(tzinfo=timezone.utc)
        rows[int(ts.timestamp())] = {k: number(v) for k, v in rec.items()}
    return rows


def number(text):
    try:
        return float(text)
    except ValueError:
        return None
