"""Background GPU user for the overhead runs: holds 2 GB and runs a small matmul every 0.2 s, so
the agents list a process and NVML has per-process utilization samples to return."""
import time, torch
x = torch.randn(1024, 1024, device="cuda")
keep = torch.empty(int(2e9), dtype=torch.uint8, device="cuda")
while True:
    y = x @ x
    torch.cuda.synchronize()
    time.sleep(0.2)
