"""Fleetlens agent device check: a short workload with known phases (about 8 s each).

Writes one line per phase change to the file named by argv[1]: `<unix ms> <phase>`.
Phases (names as in shared/fixtures/README.md):
  idle         nothing on the GPU, no process holding it (torch not yet initialised)
  alloc_idle   40 GB held, no kernels
  one_block    one 32-thread block spinning (1 of 132 SMs): util 100 %, SM activity < 1 %
  matmul_bf16  8192^3 bf16 matrix products: tensor pipes busy
  memcopy      device-to-device copies: DRAM busy, no tensor
  idle_end     process alive, holding a little memory, no kernels
  done         process gone
"""
import sys, time

LOG = open(sys.argv[1], "a", buffering=1)
PHASE_S = float(sys.argv[2]) if len(sys.argv) > 2 else 8.0


def phase(name):
    LOG.write(f"{int(time.time() * 1000)} {name}\n")
    print(time.time(), name, flush=True)


phase("idle")
time.sleep(PHASE_S)

import torch  # noqa: E402  (imported late: 'idle' must have no CUDA context)
import cupy as cp  # noqa: E402

dev = torch.device("cuda")
spin = cp.RawKernel(r'''
extern "C" __global__ void spin(long long cycles) {
  long long s = clock64(); while (clock64() - s < cycles) {}
}''', "spin")
clock_khz = cp.cuda.runtime.getDeviceProperties(0)["clockRate"]

phase("alloc_idle")
big = torch.empty(int(40e9) // 2, dtype=torch.bfloat16, device=dev)
torch.cuda.synchronize()
time.sleep(PHASE_S)
del big
torch.cuda.empty_cache()

phase("one_block")
# clock64 counts SM cycles; at most the boost clock, so this spins for >= PHASE_S.
spin((1,), (32,), (cp.int64(int(clock_khz * 1000 * PHASE_S)),))
cp.cuda.Device().synchronize()

phase("matmul_bf16")
x = torch.randn(8192, 8192, dtype=torch.bfloat16, device=dev)
y = torch.randn_like(x)
t = time.time()
while time.time() - t < PHASE_S:
    for _ in range(10):
        z = x @ y
    torch.cuda.synchronize()
del x, y, z
torch.cuda.empty_cache()

phase("memcopy")
a = torch.empty(int(2e9), dtype=torch.uint8, device=dev)
b = torch.empty_like(a)
t = time.time()
while time.time() - t < PHASE_S:
    for _ in range(20):
        b.copy_(a)
    torch.cuda.synchronize()
del a, b
torch.cuda.empty_cache()

phase("idle_end")
keep = torch.empty(int(0.8e9), dtype=torch.uint8, device=dev)
torch.cuda.synchronize()
time.sleep(PHASE_S)
phase("done")
