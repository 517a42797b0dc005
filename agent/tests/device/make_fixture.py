"""Turns a device run's output (run.sh) into the committed trace fixtures.

  python3 agent/tests/device/make_fixture.py RUN_OUTDIR agent/tests/fixtures

Writes real-h100-agent.jsonl (one GPU sample per line, in the format of
shared/fixtures/README.md, with the workload phase each sample fell in; samples before the
workload's first marker are 'idle': nothing ran yet), real-h100-labels.json (the batch labels the
agent sent: inventory), and copies the phase log and the nvidia-smi recordings beside it.
"""
import json, shutil, sys

src, dst = sys.argv[1], sys.argv[2]
phases = [(int(t), p) for t, p in (l.split() for l in open(f"{src}/phases.log"))]


def phase_at(ts):
    name = phases[0][1]
    for t, p in phases:
        if ts >= t:
            name = p
    return name


lines, labels = [], None
for line in open(f"{src}/batches.jsonl"):
    batch = json.loads(line)
    labels = batch.get("labels", labels)
    for s in batch["samples"]:
        rec = {"ts_ms": s["ts_ms"], "host": batch["host"], "phase": phase_at(s["ts_ms"])}
        rec.update({k: v for k, v in s.items() if k != "ts_ms"})
        lines.append(rec)
lines.sort(key=lambda r: (r["ts_ms"], r["uuid"]))
with open(f"{dst}/real-h100-agent.jsonl", "w") as f:
    for r in lines:
        f.write(json.dumps(r, separators=(",", ":")) + "\n")
with open(f"{dst}/real-h100-labels.json", "w") as f:
    json.dump(labels, f, indent=1, sort_keys=True)
    f.write("\n")
shutil.copy(f"{src}/phases.log", f"{dst}/real-h100-phases.log")
shutil.copy(f"{src}/smi.csv", f"{dst}/real-h100-nvidia-smi.csv")
shutil.copy(f"{src}/dmon.txt", f"{dst}/real-h100-nvidia-smi-dmon.txt")
print(len(lines), "samples")
