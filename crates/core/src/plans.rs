//! Collocation and right-size plans from job history (issue 24, docs/ACTIONS.md): from each
//! ended single-GPU job's p95 SM activity and peak memory (its report card), propose groups of
//! jobs that ran at the same time and would have fitted one GPU (CARMA's rule: summed p95 SM
//! activity ≤ the collocation limit, summed *peak* memory within the GPU's memory less a safety
//! margin), and jobs that a cheaper GPU or a MIG slice would have carried. Each plan has its
//! evidence and a monthly saving extrapolated from the period the history covers.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::advice::{gpu_memory_bytes, right_size};
use crate::cost::MONTH_HOURS;
use crate::datasheet::GpuModel;
use crate::prices::PriceTable;
use crate::thresholds::Thresholds;

/// One ended single-GPU job, as plans see it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct JobEvidence {
    /// The run key (`slurm:42799`, `pod:ml/nb`…).
    pub job: String,
    pub gpu_name: String,
    pub gpu_mem_total_bytes: Option<i64>,
    pub p95_sm_active_pct: f64,
    pub peak_mem_bytes: i64,
    pub gpu_hours: f64,
    pub from_ms: i64,
    pub to_ms: i64,
}

/// Jobs that could have shared one GPU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CollocationPlan {
    pub gpu_name: String,
    pub jobs: Vec<JobEvidence>,
    pub sum_p95_sm_active_pct: f64,
    pub sum_peak_mem_bytes: i64,
    /// The GPU's memory less the safety margin: what the summed peaks must fit in.
    pub usable_mem_bytes: i64,
    /// GPU-hours the group would have saved in the period (all but its longest job's).
    pub gpu_hours_saved: f64,
    pub saving_per_month: Option<f64>,
}

/// A job that a smaller GPU or a MIG slice would have carried.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RightSizePlan {
    pub job: JobEvidence,
    /// `smaller_gpu` or `mig`.
    pub kind: String,
    /// A model (`NVIDIA T4`) or a MIG profile of the job's GPU (`MIG 1g.10gb`).
    pub suggested: String,
    /// Memory of the suggestion less the safety margin.
    pub usable_mem_bytes: i64,
    pub saving_per_month: Option<f64>,
}

/// Every plan, and their total monthly saving.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Plans {
    pub collocation: Vec<CollocationPlan>,
    pub right_size: Vec<RightSizePlan>,
    /// Sum of the plans' savings (each job counted once: a job in a collocation group is not
    /// also right-sized).
    pub saving_per_month: f64,
}

/// MIG profiles of a model: (name, share of the GPU's compute, memory in GB).
fn mig_profiles(model: GpuModel) -> &'static [(&'static str, f64, f64)] {
    const A100_80: [(&str, f64, f64); 3] =
        [("1g.10gb", 1.0 / 7.0, 10.0), ("2g.20gb", 2.0 / 7.0, 20.0), ("3g.40gb", 3.0 / 7.0, 40.0)];
    const A100_40: [(&str, f64, f64); 3] =
        [("1g.5gb", 1.0 / 7.0, 5.0), ("2g.10gb", 2.0 / 7.0, 10.0), ("3g.20gb", 3.0 / 7.0, 20.0)];
    const H200: [(&str, f64, f64); 3] =
        [("1g.18gb", 1.0 / 7.0, 18.0), ("2g.35gb", 2.0 / 7.0, 35.0), ("3g.71gb", 3.0 / 7.0, 71.0)];
    const A30: [(&str, f64, f64); 2] = [("1g.6gb", 0.25, 6.0), ("2g.12gb", 0.5, 12.0)];
    match model {
        GpuModel::A100_80 | GpuModel::H100Sxm | GpuModel::H100Pcie => &A100_80,
        GpuModel::A100_40 => &A100_40,
        GpuModel::H200 | GpuModel::H200Nvl => &H200,
        GpuModel::A30 => &A30,
        _ => &[],
    }
}

const GB: f64 = 1e9;

/// A job's slice: the smallest MIG profile whose memory (less the margin) holds its peak and
/// whose share of the SMs, less a fifth for headroom, covers its p95 SM activity.
fn mig_plan(j: &JobEvidence, price: Option<f64>, keep: f64, factor: f64) -> Option<RightSizePlan> {
    let model = GpuModel::from_nvml_name(&j.gpu_name)?;
    let (name, share, mem_gb) = mig_profiles(model).iter().find(|(_, share, mem_gb)| {
        (j.peak_mem_bytes as f64) <= mem_gb * GB * keep && j.p95_sm_active_pct <= share * 100.0 * 0.8
    })?;
    Some(RightSizePlan {
        job: j.clone(),
        kind: "mig".into(),
        suggested: format!("MIG {name}"),
        usable_mem_bytes: (mem_gb * GB * keep) as i64,
        saving_per_month: price.map(|p| p * (1.0 - share) * j.gpu_hours * factor),
    })
}

fn overlaps(a: &JobEvidence, b: &JobEvidence) -> bool {
    a.from_ms < b.to_ms && b.from_ms < a.to_ms
}

/// The plans for the jobs of a period `window_ms` long.
pub fn plans(jobs: &[JobEvidence], window_ms: i64, prices: &PriceTable, th: &Thresholds) -> Plans {
    let factor = if window_ms > 0 { MONTH_HOURS * 3_600_000.0 / window_ms as f64 } else { 0.0 };
    let keep = 1.0 - th.right_size_memory_headroom_pct / 100.0;
    let limit = th.collocation_max_sum_p95_sm_active_pct;
    let mut by_model: BTreeMap<String, Vec<&JobEvidence>> = BTreeMap::new();
    for j in jobs.iter().filter(|j| j.p95_sm_active_pct.is_finite() && j.gpu_hours > 0.0) {
        let key = GpuModel::from_nvml_name(&j.gpu_name).map_or_else(|| j.gpu_name.clone(), |m| m.id().to_string());
        by_model.entry(key).or_default().push(j);
    }
    let mut out = Plans::default();
    let mut grouped: Vec<&str> = Vec::new();
    for group in by_model.values() {
        let name = &group[0].gpu_name;
        let Some(capacity) = gpu_memory_bytes(name, group.iter().map(|j| j.gpu_mem_total_bytes)) else { continue };
        let usable = (capacity as f64 * keep) as i64;
        let mut candidates: Vec<&JobEvidence> =
            group.iter().copied().filter(|j| j.p95_sm_active_pct <= limit).collect();
        candidates.sort_by(|a, b| b.p95_sm_active_pct.total_cmp(&a.p95_sm_active_pct).then(a.job.cmp(&b.job)));
        let mut bins: Vec<Vec<&JobEvidence>> = Vec::new();
        for j in candidates {
            let fits = |bin: &&mut Vec<&JobEvidence>| {
                bin.iter().map(|m| m.p95_sm_active_pct).sum::<f64>() + j.p95_sm_active_pct <= limit
                    && bin.iter().map(|m| m.peak_mem_bytes).sum::<i64>() + j.peak_mem_bytes <= usable
                    && bin.iter().all(|m| overlaps(m, j))
            };
            match bins.iter_mut().find(fits) {
                Some(bin) => bin.push(j),
                None => bins.push(vec![j]),
            }
        }
        let price = prices.price_for(name);
        for bin in bins.into_iter().filter(|b| b.len() >= 2) {
            let longest = bin.iter().map(|j| j.gpu_hours).fold(0.0, f64::max);
            let saved = bin.iter().map(|j| j.gpu_hours).sum::<f64>() - longest;
            grouped.extend(bin.iter().map(|j| j.job.as_str()));
            out.collocation.push(CollocationPlan {
                gpu_name: name.clone(),
                sum_p95_sm_active_pct: bin.iter().map(|j| j.p95_sm_active_pct).sum(),
                sum_peak_mem_bytes: bin.iter().map(|j| j.peak_mem_bytes).sum(),
                usable_mem_bytes: usable,
                gpu_hours_saved: saved,
                saving_per_month: price.map(|p| p * saved * factor),
                jobs: bin.into_iter().cloned().collect(),
            });
        }
    }
    for j in jobs.iter().filter(|j| j.p95_sm_active_pct.is_finite() && !grouped.contains(&j.job.as_str())) {
        let price = prices.price_for(&j.gpu_name);
        let smaller =
            right_size(&j.gpu_name, j.p95_sm_active_pct, j.peak_mem_bytes, prices, th).map(|h| RightSizePlan {
                job: j.clone(),
                kind: "smaller_gpu".into(),
                suggested: h.suggested.spec().display_name.to_string(),
                usable_mem_bytes: h.suggested_usable_mem_bytes,
                saving_per_month: Some((h.current_price_per_hour - h.suggested_price_per_hour) * j.gpu_hours * factor),
            });
        let mig = mig_plan(j, price, keep, factor);
        let best = match (smaller, mig) {
            (Some(a), Some(b)) => {
                Some(if b.saving_per_month.unwrap_or(0.0) > a.saving_per_month.unwrap_or(0.0) { b } else { a })
            }
            (a, b) => a.or(b),
        };
        out.right_size.extend(best);
    }
    out.saving_per_month = out.collocation.iter().filter_map(|p| p.saving_per_month).sum::<f64>()
        + out.right_size.iter().filter_map(|p| p.saving_per_month).sum::<f64>();
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::thresholds::GIB;

    const H: i64 = 3_600_000;

    fn job(name: &str, sm: f64, mem_gib: i64, from_h: i64, to_h: i64) -> JobEvidence {
        JobEvidence {
            job: name.into(),
            gpu_name: "NVIDIA A100-SXM4-80GB".into(),
            gpu_mem_total_bytes: Some(80 * GIB),
            p95_sm_active_pct: sm,
            peak_mem_bytes: mem_gib * GIB,
            gpu_hours: (to_h - from_h) as f64,
            from_ms: from_h * H,
            to_ms: to_h * H,
        }
    }

    #[test]
    fn concurrent_small_jobs_are_grouped_by_peak_memory_with_a_margin() {
        let (prices, th) = (PriceTable::default(), Thresholds::default());
        let jobs = vec![
            job("a", 40.0, 30, 0, 10),
            job("b", 30.0, 30, 2, 8),
            // Would fit by SM activity, but 30 + 30 + 15 GiB > 72 GiB usable (80 less 10 %).
            job("c", 5.0, 15, 0, 10),
            // Busy: alone.
            job("d", 90.0, 10, 0, 10),
            // Never ran at the same time as a or b.
            job("e", 10.0, 5, 20, 30),
        ];
        let p = plans(&jobs, 7 * 24 * H, &prices, &th);
        assert_eq!(p.collocation.len(), 1, "{:?}", p.collocation);
        let g = &p.collocation[0];
        let names: Vec<&str> = g.jobs.iter().map(|j| j.job.as_str()).collect();
        assert_eq!(names, ["a", "b"]);
        assert_eq!(g.sum_peak_mem_bytes, 60 * GIB);
        assert_eq!(g.usable_mem_bytes, (80.0 * GIB as f64 * 0.9) as i64);
        assert!((g.gpu_hours_saved - 6.0).abs() < 1e-9);
        // 6 GPU-hours a week at $1.80 → × 720/168 a month.
        assert!((g.saving_per_month.unwrap() - 6.0 * 1.80 * 720.0 / 168.0).abs() < 1e-9);
        // c (5 % SM, 15 GiB) and e (10 %, 5 GiB) are right-sized: a MIG slice or a T4.
        let rs: Vec<(&str, &str)> = p.right_size.iter().map(|r| (r.job.job.as_str(), r.kind.as_str())).collect();
        assert_eq!(rs.len(), 2, "{:?}", p.right_size);
        assert!(rs.iter().any(|(j, _)| *j == "c") && rs.iter().any(|(j, _)| *j == "e"), "{rs:?}");
        let e = p.right_size.iter().find(|r| r.job.job == "e").unwrap();
        // 10 % SM fits a 1g slice (14 % × 0.8 = 11.4 %); 5 GiB fits 10 GB less 10 %.
        assert_eq!((e.kind.as_str(), e.suggested.as_str()), ("mig", "MIG 1g.10gb"));
        assert!((e.saving_per_month.unwrap() - 1.80 * 6.0 / 7.0 * 10.0 * 720.0 / 168.0).abs() < 1e-9);
        let total: f64 =
            g.saving_per_month.unwrap() + p.right_size.iter().filter_map(|r| r.saving_per_month).sum::<f64>();
        assert!((p.saving_per_month - total).abs() < 1e-9);
    }

    #[test]
    fn busy_or_big_jobs_get_no_plan() {
        let (prices, th) = (PriceTable::default(), Thresholds::default());
        let p = plans(&[job("big", 95.0, 75, 0, 5), job("busy", 85.0, 70, 0, 5)], 24 * H, &prices, &th);
        assert!(p.collocation.is_empty() && p.right_size.is_empty(), "{p:?}");
        assert_eq!(p.saving_per_month, 0.0);
        assert!(plans(&[], 24 * H, &prices, &th).collocation.is_empty());
    }
}
