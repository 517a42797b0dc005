//! Model FLOPs utilisation of the jobs that report their throughput (`POST /api/v1/jobs`):
//! used by the jobs route, the fleet summary and the job cards.

use std::collections::HashMap;

use fleetlens_core::{GpuModel, JobThroughput};
use fleetlens_store::GpuRecord;

/// GPUs by UUID, the lookup a job's GPU list is read with. The registry rows
/// (`Store::gpu_identities`) are enough: a job's MFU needs each GPU's model, never its newest
/// sample.
pub fn gpus_by_uuid(gpus: &[GpuRecord]) -> HashMap<&str, &GpuRecord> {
    gpus.iter().map(|g| (g.info.uuid.as_str(), g)).collect()
}

/// MFU of a job: achieved ÷ the sum of its GPUs' dense peaks; None when any GPU's model or the
/// precision has no datasheet figure.
pub fn job_mfu(job: &JobThroughput, gpus: &HashMap<&str, &GpuRecord>) -> Option<f64> {
    let mut peak = 0.0;
    for uuid in &job.gpu_uuids {
        let model = gpus.get(uuid.as_str())?.info.name.as_deref().and_then(GpuModel::from_nvml_name)?;
        peak += model.spec().peak_flops(job.precision)?;
    }
    (peak > 0.0).then(|| job.achieved_flops_per_s / peak)
}
