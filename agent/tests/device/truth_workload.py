"""Fleetlens truth suite: the workload. Runs phases of PHASE_S seconds each on GPU 0 and writes,
to the JSON file named by argv[1], each phase's start and end (Unix ms) and the busy fraction it
measured itself (CUDA events around its own GPU work), where it has one.

Phases (the state a truthful monitor must give is in truth_check.py):
  idle            no CUDA context, nothing on the GPU
  held_30gb       30 GB held, no kernels
  spin_2_blocks   one kernel spinning on 2 blocks of 32 threads (a hung collective)
  matmul_bf16     8192^3 bf16 matrix products back to back
  d2d_copy        device-to-device copies of 2 GB
  mlp_batch1      a 4-layer MLP at batch 1 (launch-bound, tiny kernels)
  saw_0.5s, saw_1s, saw_2s
                  sawtooth: 20 % of each period bf16 matmuls, then the host sleeps
  resnet_starved  ResNet-18 training steps fed by a CPU-heavy data loader, num_workers=0
  resnet_fed      the same steps, the same loader with enough worker processes to make batches
                  twice as fast as the GPU takes them, and pinned memory
"""
import json
import math
import os
import sys
import time

OUT = sys.argv[1]
PHASE_S = float(sys.argv[2]) if len(sys.argv) > 2 else 40.0
phases = []


def begin(name):
    phases.append({"phase": name, "start_ms": int(time.time() * 1000)})
    print(f"{time.time():.3f} {name}", flush=True)


def end(busy=None, **extra):
    p = phases[-1]
    p["end_ms"] = int(time.time() * 1000)
    if busy is not None:
        p["busy_frac"] = busy
    p.update(extra)
    with open(OUT, "w") as f:
        json.dump(phases, f, indent=1)
    print(f"  {p}", flush=True)


begin("idle")
time.sleep(PHASE_S)
end()

import numpy as np  # noqa: E402
import torch  # noqa: E402  (imported late: 'idle' must have no CUDA context)
import cupy as cp  # noqa: E402

dev = torch.device("cuda")
torch.backends.cudnn.benchmark = True

begin("held_30gb")
held = torch.empty(30 * 10**9, dtype=torch.uint8, device=dev)
torch.cuda.synchronize()
time.sleep(PHASE_S - (time.time() * 1000 - phases[-1]["start_ms"]) / 1000)
end()
del held
torch.cuda.empty_cache()

begin("spin_2_blocks")
spin = cp.RawKernel(r'''
extern "C" __global__ void spin(long long cycles) {
  long long s = clock64(); while (clock64() - s < cycles) {}
}''', "spin")
clock_khz = cp.cuda.runtime.getDeviceProperties(0)["clockRate"]
remaining = PHASE_S - (time.time() * 1000 - phases[-1]["start_ms"]) / 1000
# clock64 counts SM cycles at no more than the boost clock: the kernel spins for >= remaining s;
# the host stops waiting at the phase's end and resets nothing (the kernel ends by itself soon).
spin((2,), (32,), (cp.int64(int(clock_khz * 1000 * remaining)),))
cp.cuda.Device().synchronize()
end()

x = torch.randn(8192, 8192, dtype=torch.bfloat16, device=dev)
y = torch.randn_like(x)
for _ in range(3):
    x @ y
torch.cuda.synchronize()

begin("matmul_bf16")
t = time.time()
while time.time() - t < PHASE_S:
    for _ in range(20):
        z = x @ y
    torch.cuda.synchronize()
end()

begin("d2d_copy")
a = torch.empty(2 * 10**9, dtype=torch.uint8, device=dev)
b = torch.empty_like(a)
t = time.time()
while time.time() - t < PHASE_S:
    for _ in range(10):
        b.copy_(a)
    torch.cuda.synchronize()
end()
del a, b
torch.cuda.empty_cache()

begin("mlp_batch1")
mlp = torch.nn.Sequential(
    torch.nn.Linear(1024, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1024), torch.nn.ReLU(),
    torch.nn.Linear(1024, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 10)).to(dev)
inp = torch.randn(1, 1024, device=dev)
t = time.time()
with torch.no_grad():
    while time.time() - t < PHASE_S:
        for _ in range(100):
            out = mlp(inp)
        torch.cuda.synchronize()
end()


def sawtooth(period_s, duty=0.2):
    """duty x period of matmuls, then sleep; the busy time is measured with CUDA events."""
    busy_ms = 0.0
    t0 = time.time()
    while time.time() - t0 < PHASE_S:
        start = time.time()
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        while time.time() - start < duty * period_s:
            for _ in range(4):
                x @ y
            torch.cuda.synchronize()
        e1.record()
        e1.synchronize()
        busy_ms += e0.elapsed_time(e1)
        rest = period_s - (time.time() - start)
        if rest > 0:
            time.sleep(rest)
    return busy_ms / ((time.time() - t0) * 1000)


for period in (0.5, 1.0, 2.0):
    begin(f"saw_{period:g}s")
    frac = sawtooth(period)
    end(busy=frac)

del x, y, z
torch.cuda.empty_cache()

# ResNet-18 training steps, bf16 autocast, channels-last.
import torchvision  # noqa: E402

SIDE = 128
model = torchvision.models.resnet18(num_classes=100).to(dev).to(memory_format=torch.channels_last)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
lossf = torch.nn.CrossEntropyLoss()


def step(images, labels):
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = lossf(model(images), labels)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()


def step_s(batch, n=20):
    """Seconds per training step of `batch` images already on the GPU."""
    images = torch.randn(batch, 3, SIDE, SIDE, device=dev).to(memory_format=torch.channels_last)
    labels = torch.randint(0, 100, (batch,), device=dev)
    for _ in range(5):
        step(images, labels)
    torch.cuda.synchronize()
    t = time.time()
    for _ in range(n):
        step(images, labels)
    torch.cuda.synchronize()
    return (time.time() - t) / n


# The batch: large enough that a step is bound by the GPU, not by the host launching its
# kernels (doubling the batch must cost at least 1.7x the time). On a fast GPU a small batch's
# step is launch-bound: its kernels then run half the time however fast the loader is, and
# "fed" would read, truthfully, as starved. At most 1024 images (48 MiB of uint8 a batch: the
# workers' batches in flight pass through shared memory).
BATCH = 256
gpu_step_s = step_s(BATCH)
while BATCH < 1024:
    doubled = step_s(2 * BATCH)
    if doubled >= 1.7 * gpu_step_s:
        break
    BATCH, gpu_step_s = 2 * BATCH, doubled


class Augmenting(torch.utils.data.Dataset):
    """A CPU-heavy loader: each uint8 image is "decoded and augmented" by `rounds` passes of numpy
    math over a float copy (the GPU gets uint8, as from a real decoder: 4x less to pin and copy)."""

    def __init__(self, rounds):
        self.rounds = rounds
        self.base = np.random.default_rng(0).standard_normal((3, SIDE, SIDE), dtype=np.float32)

    def __len__(self):
        return 10**9

    def __getitem__(self, i):
        img = self.base + np.float32(i % 7) * 0.01
        for _ in range(self.rounds):
            img = np.tanh(img * 1.01 + 0.01)
        return torch.from_numpy((img * 100 + 128).clip(0, 255).astype(np.uint8)), int(i % 100)


def per_image_s(rounds, n=64):
    d = Augmenting(rounds)
    t = time.time()
    for i in range(n):
        d[i]
    return (time.time() - t) / n


# Calibrate: the single-process loader must take about STARVE_RATIO GPU steps per batch (the GPU
# then waits ~80 % of the time); then enough worker processes to make batches twice as fast as
# the GPU takes them (at most the machine's cores less two: the main process and the pinning
# thread). Where even that is too few, the fed phase is loader-bound and reads, truthfully, as
# starved: the suite then fails on the workload, and says so in the table.
STARVE_RATIO = 4
c1, c5 = per_image_s(1), per_image_s(5)
per_round = max((c5 - c1) / 4, 1e-6)
fixed = max(c1 - per_round, 0.0)
rounds = max(1, round((STARVE_RATIO * gpu_step_s / BATCH - fixed) / per_round))
batch_load_s = (fixed + rounds * per_round) * BATCH
WORKERS = max(2, min((os.cpu_count() or 4) - 2, math.ceil(2 * batch_load_s / gpu_step_s)))
print(f"batch {BATCH}, gpu step {gpu_step_s * 1000:.1f} ms, per image {fixed * 1e6:.0f} us + {per_round * 1e6:.0f} us "
      f"per round, rounds {rounds}, a batch loads in {batch_load_s * 1000:.0f} ms, {WORKERS} workers", flush=True)


def to_gpu(images, labels):
    images = images.to(dev, non_blocking=True).float().div_(255).contiguous(memory_format=torch.channels_last)
    return images, labels.to(dev, non_blocking=True)


def train(loader):
    busy_ms = 0.0
    t0 = time.time()
    steps = 0
    for images, labels in loader:
        images, labels = to_gpu(images, labels)
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        step(images, labels)
        e1.record()
        e1.synchronize()
        busy_ms += e0.elapsed_time(e1)
        steps += 1
        if time.time() - t0 >= PHASE_S:
            break
    return busy_ms / ((time.time() - t0) * 1000), steps


begin("resnet_starved")
frac, steps = train(torch.utils.data.DataLoader(Augmenting(rounds), batch_size=BATCH, num_workers=0))
end(busy=frac, steps=steps, rounds=rounds, batch=BATCH, gpu_step_ms=gpu_step_s * 1000)

fed = torch.utils.data.DataLoader(Augmenting(rounds), batch_size=BATCH, num_workers=WORKERS, pin_memory=True,
                                  persistent_workers=True, prefetch_factor=2)
it = iter(fed)
next(it)  # the workers are up before the phase starts
begin("resnet_fed")
frac, steps = train(it)
end(busy=frac, steps=steps, workers=WORKERS)
os._exit(0)  # the loader's workers are not waited for
