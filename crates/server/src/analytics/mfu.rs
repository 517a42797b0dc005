//! Model FLOPs utilisation of the jobs that report their throughput (`POST /api/v1/jobs`):
//! used by the jobs route, the fleet summary and the job cards.

use std::collections::HashMap;

use fleetlens_core::{GpuModel, Precision};
use fleetlens_store::{GpuRecord, JobRecord};

pub fn parse_precision(p: &str) -> Option<Precision> {
    serde_json::from_value(serde_json::Value::String(p.trim().to_ascii_lowercase())).ok()
}

/// MFU of a job: achieved ÷ the sum of its GPUs' dense peaks; None when any GPU's model or the
/// precision has no datasheet figure.
pub fn job_mfu(job: &JobRecord, gpus: &HashMap<&str, &GpuRecord>) -> Option<f64> {
    let precision = parse_precision(&job.precision)?;
    let mut peak = 0.0;
    for uuid in &job.gpu_uuids {
        let model = gpus.get(uuid.as_str())?.name.as_deref().and_then(GpuModel::from_nvml_name)?;
        peak += model.spec().peak_flops(precision)?;
    }
    (peak > 0.0).then(|| job.achieved_flops_per_s / peak)
}
