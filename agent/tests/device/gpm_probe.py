"""What GPM itself returns, once a second, through NVML's Python binding (nvidia-ml-py): the
errors of nvmlGpmSampleGet / nvmlGpmMetricsGet, or the values of GRACT (1), SMACT (2), SMOCC (3),
tensor (5), DRAM (10) and FP32 (12), next to NVML's utilization rate.
  python3 gpm_probe.py OUT.jsonl SECONDS"""
import json
import sys
import time

from pynvml import (NVML_GPM_METRICS_GET_VERSION, NVMLError, c_nvmlGpmMetricsGet_t, nvmlDeviceGetHandleByIndex,
                    nvmlDeviceGetUtilizationRates, nvmlGpmMetricsGet, nvmlGpmSampleAlloc, nvmlGpmSampleGet, nvmlInit)

IDS = [1, 2, 3, 5, 10, 12]
nvmlInit()
h = nvmlDeviceGetHandleByIndex(0)
out = open(sys.argv[1], "w", buffering=1)
a, b = nvmlGpmSampleAlloc(), nvmlGpmSampleAlloc()
have_a = False
try:
    nvmlGpmSampleGet(h, a)
    have_a = True
except NVMLError:
    pass
end = time.time() + float(sys.argv[2])
while time.time() < end:
    time.sleep(1)
    rec = {"t_ms": int(time.time() * 1000), "util": nvmlDeviceGetUtilizationRates(h).gpu}
    try:
        nvmlGpmSampleGet(h, b)
    except NVMLError as e:
        rec["sample_error"] = str(e)
        out.write(json.dumps(rec) + "\n")
        have_a = False
        continue
    if have_a:
        mg = c_nvmlGpmMetricsGet_t()
        mg.version = NVML_GPM_METRICS_GET_VERSION
        mg.numMetrics = len(IDS)
        mg.sample1, mg.sample2 = a, b
        for i, m in enumerate(IDS):
            mg.metrics[i].metricId = m
        try:
            nvmlGpmMetricsGet(mg)
            rec["metrics"] = {str(m): (mg.metrics[i].value if mg.metrics[i].nvmlReturn == 0
                                       else f"error {mg.metrics[i].nvmlReturn}") for i, m in enumerate(IDS)}
        except NVMLError as e:
            rec["metrics_error"] = str(e)
    out.write(json.dumps(rec) + "\n")
    a, b = b, a
    have_a = True
