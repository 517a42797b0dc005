//! Money-saving hints (METRICS.md "Cost"): right-size a GPU that a cheaper model could
//! carry, and collocate small jobs on one GPU (the CARMA rule). Monthly savings assume the
//! GPU is paid around the clock for a 30-day month ([`MONTH_HOURS`]).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::cost::MONTH_HOURS;
use crate::datasheet::{GpuModel, SPECS};
use crate::prices::PriceTable;
use crate::thresholds::Thresholds;

/// The `p`-th percentile (0–100) by linear interpolation between closest ranks (numpy's
/// default). Non-finite values are ignored; `None` when nothing is left.
pub fn percentile(values: &[f64], p: f64) -> Option<f64> {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() || !p.is_finite() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let rank = (p.clamp(0.0, 100.0) / 100.0) * (v.len() - 1) as f64;
    let (lo, hi) = (rank.floor() as usize, rank.ceil() as usize);
    Some(v[lo] + (v[hi] - v[lo]) * (rank - lo as f64))
}

/// 95th percentile, e.g. of a GPU's per-window SMACT.
pub fn p95(values: &[f64]) -> Option<f64> {
    percentile(values, 95.0)
}

/// "This GPU could be a cheaper model."
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RightSizeHint {
    pub current: GpuModel,
    pub suggested: GpuModel,
    pub p95_sm_active_pct: f64,
    pub peak_mem_bytes: i64,
    /// Memory of the suggested model that the peak must fit in (nominal less headroom).
    pub suggested_usable_mem_bytes: i64,
    pub current_price_per_hour: f64,
    pub suggested_price_per_hour: f64,
    pub saving_per_month: f64,
}

/// Right-size hint: a GPU whose p95 SMACT < `right_size_max_p95_sm_active_pct` and whose peak
/// memory fits a cheaper model's memory (less `right_size_memory_headroom_pct`) → the
/// cheapest such model among those with a price. `None` when the GPU is busy enough, its
/// model or price is unknown, or nothing cheaper fits.
pub fn right_size(
    gpu_name: &str,
    p95_sm_active_pct: f64,
    peak_mem_bytes: i64,
    prices: &PriceTable,
    th: &Thresholds,
) -> Option<RightSizeHint> {
    // NaN (no SMACT) gives no hint: only a measured low p95 does.
    let low = p95_sm_active_pct < th.right_size_max_p95_sm_active_pct;
    if !low {
        return None;
    }
    let current = GpuModel::from_nvml_name(gpu_name)?;
    let current_price = prices.price_for(gpu_name)?;
    let keep = 1.0 - th.right_size_memory_headroom_pct / 100.0;
    SPECS
        .iter()
        .filter(|s| s.model != current)
        .filter_map(|s| {
            let price = prices.price_of(s.model)?;
            let usable = (s.memory_bytes() as f64 * keep) as i64;
            (price < current_price && peak_mem_bytes <= usable).then_some((s.model, price, usable))
        })
        .min_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(suggested, price, usable)| RightSizeHint {
            current,
            suggested,
            p95_sm_active_pct,
            peak_mem_bytes,
            suggested_usable_mem_bytes: usable,
            current_price_per_hour: current_price,
            suggested_price_per_hour: price,
            saving_per_month: (current_price - price) * MONTH_HOURS,
        })
}

/// One single-GPU job, as the collocation hint sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobUsage {
    pub job: String,
    /// NVML name of the GPU model it runs on.
    pub gpu_name: String,
    pub p95_sm_active_pct: f64,
    pub peak_mem_bytes: i64,
    /// The GPU's framebuffer as NVML reports it; the datasheet's figure when `None`.
    pub gpu_mem_total_bytes: Option<i64>,
}

/// "These jobs could share one GPU under MPS."
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CollocationHint {
    pub gpu_name: String,
    pub jobs: Vec<String>,
    pub sum_p95_sm_active_pct: f64,
    pub sum_peak_mem_bytes: i64,
    pub gpu_mem_bytes: i64,
    pub gpus_freed: u32,
    /// Price of the GPUs freed over a month; `None` when the model has no price.
    pub saving_per_month: Option<f64>,
}

/// The memory of one GPU of a group of jobs on the model named `name`: the least that any job
/// reported (a MIG slice or a smaller board variant), else the datasheet's; `None` for a model
/// without a datasheet whose jobs reported none.
pub(crate) fn gpu_memory_bytes(name: &str, reported: impl IntoIterator<Item = Option<i64>>) -> Option<i64> {
    reported.into_iter().flatten().min().or_else(|| GpuModel::from_nvml_name(name).map(|m| m.spec().memory_bytes()))
}

/// Collocation hints (CARMA): among jobs on the same GPU model, groups of two or more whose
/// summed p95 SMACT ≤ `collocation_max_sum_p95_sm_active_pct` and summed peak memory < one
/// GPU's memory could share one GPU; each group frees (size − 1) GPUs. Groups are packed
/// first-fit by decreasing p95 SMACT, a simple heuristic that finds most of the saving.
pub fn collocation(jobs: &[JobUsage], prices: &PriceTable, th: &Thresholds) -> Vec<CollocationHint> {
    let mut by_model: BTreeMap<String, Vec<&JobUsage>> = BTreeMap::new();
    for j in jobs {
        let key =
            GpuModel::from_nvml_name(&j.gpu_name).map_or_else(|| j.gpu_name.trim().to_string(), |m| m.id().to_string());
        by_model.entry(key).or_default().push(j);
    }
    let limit = th.collocation_max_sum_p95_sm_active_pct;
    let mut hints = Vec::new();
    for group in by_model.values() {
        let name = &group[0].gpu_name;
        let Some(capacity) = gpu_memory_bytes(name, group.iter().map(|j| j.gpu_mem_total_bytes)) else { continue };
        let mut candidates: Vec<&JobUsage> =
            group.iter().copied().filter(|j| j.p95_sm_active_pct.is_finite() && j.p95_sm_active_pct <= limit).collect();
        candidates.sort_by(|a, b| {
            b.p95_sm_active_pct.total_cmp(&a.p95_sm_active_pct).then(b.peak_mem_bytes.cmp(&a.peak_mem_bytes))
        });
        let mut bins: Vec<(f64, i64, Vec<&JobUsage>)> = Vec::new();
        for j in candidates {
            let fits = |b: &&mut (f64, i64, Vec<&JobUsage>)| {
                b.0 + j.p95_sm_active_pct <= limit && b.1 + j.peak_mem_bytes < capacity
            };
            match bins.iter_mut().find(fits) {
                Some(bin) => {
                    bin.0 += j.p95_sm_active_pct;
                    bin.1 += j.peak_mem_bytes;
                    bin.2.push(j);
                }
                None => bins.push((j.p95_sm_active_pct, j.peak_mem_bytes, vec![j])),
            }
        }
        let price = prices.price_for(name);
        for (sm, mem, members) in bins.into_iter().filter(|b| b.2.len() >= 2) {
            let freed = (members.len() - 1) as u32;
            hints.push(CollocationHint {
                gpu_name: name.clone(),
                jobs: members.iter().map(|j| j.job.clone()).collect(),
                sum_p95_sm_active_pct: sm,
                sum_peak_mem_bytes: mem,
                gpu_mem_bytes: capacity,
                gpus_freed: freed,
                saving_per_month: price.map(|p| p * f64::from(freed) * MONTH_HOURS),
            });
        }
    }
    hints
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::thresholds::GIB;

    #[test]
    fn percentiles() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert!((p95(&v).unwrap() - 95.05).abs() < 1e-9);
        assert_eq!(percentile(&v, 0.0), Some(1.0));
        assert_eq!(percentile(&v, 100.0), Some(100.0));
        assert_eq!(percentile(&[3.0, 1.0, 2.0], 50.0), Some(2.0));
        assert_eq!(p95(&[7.0]), Some(7.0));
        assert_eq!(p95(&[]), None);
        assert_eq!(p95(&[f64::NAN]), None);
    }

    #[test]
    fn gpu_memory_is_the_least_reported_else_the_datasheets() {
        let h100 = "NVIDIA H100 80GB HBM3";
        assert_eq!(gpu_memory_bytes(h100, [Some(40 * GIB), None, Some(20 * GIB)]), Some(20 * GIB));
        assert_eq!(gpu_memory_bytes(h100, [None]), Some(GpuModel::H100Sxm.spec().memory_bytes()));
        assert_eq!(gpu_memory_bytes("Unknown GPU", [None, None]), None);
        assert_eq!(gpu_memory_bytes("Unknown GPU", [Some(GIB)]), Some(GIB));
    }

    #[test]
    fn right_size_picks_the_cheapest_model_that_fits() {
        let (prices, th) = (PriceTable::default(), Thresholds::default());
        // H100 at p95 SMACT 10 % with 12 GiB peak: a T4 (16 GB, 90 % usable = 14.4 GiB) fits.
        let h = right_size("NVIDIA H100 80GB HBM3", 10.0, 12 * GIB, &prices, &th).unwrap();
        assert_eq!((h.current, h.suggested), (GpuModel::H100Sxm, GpuModel::T4));
        assert!((h.saving_per_month - (3.00 - 0.53) * 720.0).abs() < 1e-9);
        // 20 GiB peak: T4 is too small; the A10 (24 GB → 21.6 GiB usable) at $0.75 is next.
        let h = right_size("NVIDIA H100 80GB HBM3", 10.0, 20 * GIB, &prices, &th).unwrap();
        assert_eq!(h.suggested, GpuModel::A10);
        // 70 GiB peak: only 80 GB+ models fit; A100 80GB (72 GiB usable) at $1.80.
        let h = right_size("NVIDIA H100 80GB HBM3", 10.0, 70 * GIB, &prices, &th).unwrap();
        assert_eq!(h.suggested, GpuModel::A100_80);
    }

    #[test]
    fn right_size_boundaries() {
        let (prices, th) = (PriceTable::default(), Thresholds::default());
        assert!(right_size("NVIDIA H100 80GB HBM3", 25.0, GIB, &prices, &th).is_none());
        assert!(right_size("NVIDIA H100 80GB HBM3", 24.9, GIB, &prices, &th).is_some());
        assert!(right_size("NVIDIA H100 80GB HBM3", f64::NAN, GIB, &prices, &th).is_none());
        // Nothing cheaper than a T4; unknown model or price → no hint.
        assert!(right_size("Tesla T4", 1.0, GIB, &prices, &th).is_none());
        assert!(right_size("NVIDIA GeForce RTX 4090", 1.0, GIB, &prices, &th).is_none());
        assert!(right_size("NVIDIA A30", 1.0, GIB, &prices, &th).is_none());
        // H200 holding 140 GiB: nothing cheaper has the memory.
        assert!(right_size("NVIDIA H200", 5.0, 140 * GIB, &prices, &th).is_none());
    }

    fn job(name: &str, sm: f64, mem_gib: i64) -> JobUsage {
        JobUsage {
            job: name.into(),
            gpu_name: "NVIDIA A100-SXM4-80GB".into(),
            p95_sm_active_pct: sm,
            peak_mem_bytes: mem_gib * GIB,
            gpu_mem_total_bytes: Some(80 * GIB),
        }
    }

    #[test]
    fn collocation_groups_jobs_under_the_carma_limits() {
        let (prices, th) = (PriceTable::default(), Thresholds::default());
        let jobs = vec![
            job("a", 40.0, 20),
            job("b", 30.0, 20),
            job("c", 10.0, 20),
            job("d", 85.0, 10), // too busy to share
            job("e", 50.0, 70), // fits with nobody: memory
        ];
        let hints = collocation(&jobs, &prices, &th);
        assert_eq!(hints.len(), 1);
        let h = &hints[0];
        assert_eq!(h.jobs, ["a", "b", "c"]);
        assert_eq!(h.sum_p95_sm_active_pct, 80.0);
        assert_eq!(h.sum_peak_mem_bytes, 60 * GIB);
        assert_eq!(h.gpus_freed, 2);
        assert!((h.saving_per_month.unwrap() - 2.0 * 1.80 * 720.0).abs() < 1e-9);
    }

    #[test]
    fn collocation_boundaries() {
        let (prices, th) = (PriceTable::default(), Thresholds::default());
        // Summed SMACT exactly 80 shares; 80.1 does not.
        assert_eq!(collocation(&[job("a", 40.0, 1), job("b", 40.0, 1)], &prices, &th).len(), 1);
        assert!(collocation(&[job("a", 40.0, 1), job("b", 40.1, 1)], &prices, &th).is_empty());
        // Summed memory must be strictly below the GPU's.
        assert!(collocation(&[job("a", 10.0, 40), job("b", 10.0, 40)], &prices, &th).is_empty());
        assert_eq!(collocation(&[job("a", 10.0, 40), job("b", 10.0, 39)], &prices, &th).len(), 1);
        // Jobs on different models are not packed together.
        let mut other = job("b", 10.0, 1);
        other.gpu_name = "NVIDIA H100 80GB HBM3".into();
        assert!(collocation(&[job("a", 10.0, 1), other], &prices, &th).is_empty());
        // No price: the hint stands, the saving is unknown.
        let hint = collocation(&[job("a", 10.0, 1), job("b", 10.0, 1)], &PriceTable::empty("USD", "-"), &th);
        assert_eq!(hint[0].saving_per_month, None);
    }
}
