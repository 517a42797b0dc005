//! Owner accounts: GPU time, states, energy, cost and wasted cost per owner (user, namespace,
//! pod, Slurm job, label), from the stored minute credits shared among the owners of the
//! processes in each minute's raw samples (`fleetlens_core::owners`). Raw samples are kept for
//! the raw retention only (7 days by default), so owner reports reach back that far.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};

use fleetlens_api::{BillingRow, OwnerWaste};
use fleetlens_core::Resolution;
use fleetlens_core::{Credit, GpuProcess, OwnerGroup, OwnerKey, PriceTable, WorkloadState, minute_shares};
use fleetlens_store::{BucketCredit, GpuId, GpuRecord, OrgId, ProcessList, Store};

use crate::error::{ApiError, ApiResult};
use crate::state::AppState;

use super::billing::Acc;
use super::ledger::{credit_share, ledger};

const MINUTE_MS: i64 = 60_000;

/// One distinct process list of a minute and its sample count.
type MinuteList<'a> = (Option<&'a [GpuProcess]>, u32);

/// Owner → GPU id → the owner's share of that GPU's credits over the period.
pub type OwnerCredits = BTreeMap<OwnerGroup, BTreeMap<GpuId, Credit>>;

/// Shares every minute credit in `[from_ms, end_ms)` among the owners of its minute's samples.
/// A minute whose raw samples are gone (older than the raw retention) is `(unknown)`.
pub fn owner_credits(
    gpus: &[GpuRecord],
    minutes: &[BucketCredit],
    lists: &[ProcessList],
    key: &OwnerKey,
    from_ms: i64,
    end_ms: i64,
) -> OwnerCredits {
    // The kubelet's allocations fold into the process lists: an allocated GPU with no
    // visible process is its pod's, not "(no process)".
    let holders: Vec<(&ProcessList, Option<Cow<'_, [GpuProcess]>>)> =
        lists.iter().map(|l| (l, fleetlens_core::sample::holders(l.processes.as_deref(), &l.allocations))).collect();
    let mut by_minute: HashMap<(GpuId, i64), Vec<MinuteList<'_>>> = HashMap::new();
    for (l, h) in &holders {
        let minute = l.minute_ms.div_euclid(MINUTE_MS) * MINUTE_MS;
        by_minute.entry((l.gpu_id, minute)).or_default().push((h.as_deref(), l.samples));
    }
    let by_id: HashMap<GpuId, &GpuRecord> = gpus.iter().map(|g| (g.id, g)).collect();
    let mut out = OwnerCredits::new();
    for m in minutes {
        let Some(gpu) = by_id.get(&m.gpu_id) else { continue };
        // A minute credit is its samples' sampled time; count its share in the period (as
        // the summary does).
        let weight = credit_share(gpu, m.bucket_ms, MINUTE_MS, from_ms, end_ms, m.credit.covered_s());
        if weight <= 0.0 || m.credit.is_zero() {
            continue;
        }
        let samples = by_minute.get(&(m.gpu_id, m.bucket_ms)).map(Vec::as_slice).unwrap_or_default();
        let mut shares = minute_shares(samples, key);
        if shares.is_empty() {
            shares.push((OwnerGroup::Unknown, 1.0));
        }
        for (group, share) in shares {
            // The minute's allocated time is its owners': time with no process on the GPU is
            // not allocated (the minute's own figure mixes both when a process came or went).
            let mut credit = m.credit;
            credit.allocated_s = if group == OwnerGroup::NoProcess { 0.0 } else { credit.allocation_covered_s };
            out.entry(group).or_default().entry(m.gpu_id).or_default().add_scaled(&credit, weight * share);
        }
    }
    out
}

/// Per owner, the billing accumulator over its GPUs.
fn accumulate(gpus: &[GpuRecord], credits: &OwnerCredits, prices: &PriceTable) -> Vec<(OwnerGroup, Acc)> {
    let by_id: HashMap<GpuId, &GpuRecord> = gpus.iter().map(|g| (g.id, g)).collect();
    credits
        .iter()
        .map(|(group, per_gpu)| {
            let mut acc = Acc::default();
            for (gpu_id, c) in per_gpu {
                if let Some(g) = by_id.get(gpu_id) {
                    // The owner's time is what it was credited: no offline part.
                    acc.add(g, &ledger(c.covered_s(), [(c, 1.0)]), prices);
                }
            }
            (group.clone(), acc)
        })
        .collect()
}

/// Billing rows, one per owner, then `(unknown)` and `(no process)`.
pub fn owner_rows(gpus: &[GpuRecord], credits: &OwnerCredits, prices: &PriceTable) -> Vec<BillingRow> {
    accumulate(gpus, credits, prices).into_iter().map(|(g, acc)| acc.into_row(g.name().to_string())).collect()
}

/// The owners wasting the most (by wasted cost, then wasted hours), at most `n`; time with no
/// process on the GPU is nobody's and left out.
pub fn top_owners(gpus: &[GpuRecord], credits: &OwnerCredits, prices: &PriceTable, n: usize) -> Vec<OwnerWaste> {
    let mut out: Vec<OwnerWaste> = accumulate(gpus, credits, prices)
        .into_iter()
        .filter(|(g, _)| *g != OwnerGroup::NoProcess)
        .map(|(g, acc)| {
            let (idle_held, hollow) = (acc.hours(WorkloadState::IdleHeld), acc.hours(WorkloadState::Hollow));
            let row = acc.into_row(g.name().to_string());
            OwnerWaste {
                owner: row.group,
                gpus: row.gpus,
                gpu_hours: row.gpu_hours,
                idle_held_hours: idle_held,
                hollow_hours: hollow,
                cost: row.cost,
                wasted_cost: row.wasted_cost,
            }
        })
        .filter(|o| o.wasted_cost.unwrap_or(0.0) > 0.0)
        .collect();
    out.sort_by(|a, b| b.wasted_cost.unwrap_or(0.0).total_cmp(&a.wasted_cost.unwrap_or(0.0)));
    out.truncate(n);
    out
}

/// What owner rows mean, for the report's `note`.
pub fn note(raw_retention_days: f64) -> String {
    format!(
        "owner rows come from the raw samples' process lists (kept {raw_retention_days} days): each minute's \
         state, energy and cost is shared among the processes on the GPU by their SM % where every one has \
         one, else evenly (on a shared GPU an estimate: NVML per-process utilization); '(unknown)' is \
         time of processes whose owner the agent could not read, '(no process)' time with nobody on the \
         GPU; offline time is nobody's and not in these rows"
    )
}

/// A `from` up to this much older than the raw retention is still accepted (the retention job
/// runs now and then, and a client's "7 days ago" is a little older by the time it arrives).
const RETENTION_GRACE_MS: i64 = 10 * 60_000;

/// Reads the minute credits and the raw process lists of `[from_ms, end_ms)` and shares them.
pub async fn read_owner_credits(
    store: &dyn Store,
    org: OrgId,
    gpus: &[GpuRecord],
    key: &OwnerKey,
    from_ms: i64,
    end_ms: i64,
) -> ApiResult<OwnerCredits> {
    if end_ms <= from_ms {
        return Ok(OwnerCredits::new());
    }
    let floor = from_ms.div_euclid(MINUTE_MS) * MINUTE_MS;
    let minutes = store.credits(org, None, Resolution::Minute, floor, end_ms).await?;
    let lists = store.process_lists(org, None, floor, end_ms).await?;
    Ok(owner_credits(gpus, &minutes, &lists, key, from_ms, end_ms))
}

/// The owner rows of a billing report, its real start and its note.
pub struct OwnerReport {
    pub from_ms: i64,
    pub currency: String,
    pub rows: Vec<BillingRow>,
    pub note: String,
}

/// `group_by=user|namespace|pod|job|label:<name>`: a period reaching back beyond the raw
/// retention is refused (422 on `from`); without `from`, the whole retention up to `to`.
pub async fn report(
    state: &AppState,
    org: OrgId,
    key: &OwnerKey,
    from_ms: Option<i64>,
    to_ms: i64,
    now_ms: i64,
) -> ApiResult<OwnerReport> {
    let retention = state.config.raw_retention;
    let oldest = now_ms - i64::try_from(retention.as_millis()).unwrap_or(i64::MAX / 2);
    let too_old = |t: Option<i64>| t.is_some_and(|t| t < oldest - RETENTION_GRACE_MS);
    let field = if too_old(Some(to_ms)) {
        Some("to")
    } else if too_old(from_ms) {
        Some("from")
    } else {
        None
    };
    let from_ms = match (field, from_ms) {
        (Some(field), _) => {
            return Err(ApiError::Unprocessable {
                field: field.into(),
                message: format!(
                    "owner reports (group_by={}) are computed from raw samples, which are kept for {} \
                     (FLEETLENS_RAW_RETENTION): {field} must be at or after {}; use team, host, gpu or model \
                     for older periods",
                    key.as_string(),
                    retention_text(retention),
                    fleetlens_core::time_text::format_rfc3339_s(oldest),
                ),
            });
        }
        (None, Some(f)) => f,
        (None, None) => oldest.min(to_ms),
    };
    let store = state.store.as_ref();
    let gpus = store.gpu_identities(org).await?;
    let prices = super::prices(store, org).await?;
    let credits = read_owner_credits(store, org, &gpus, key, from_ms, to_ms.min(now_ms)).await?;
    Ok(OwnerReport {
        from_ms,
        currency: prices.currency.clone(),
        rows: owner_rows(&gpus, &credits, &prices),
        note: note(retention.as_secs_f64() / 86_400.0),
    })
}

/// A retention period as a person writes it: `7 days`, `36 h`, else humantime's form.
/// (humantime alone prints `7days`.)
fn retention_text(d: std::time::Duration) -> String {
    let s = d.as_secs();
    match s {
        86_400 => "1 day".into(),
        s if s > 0 && s % 86_400 == 0 => format!("{} days", s / 86_400),
        s if s > 0 && s % 3_600 == 0 => format!("{} h", s / 3_600),
        _ => humantime::format_duration(d).to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fleetlens_core::{GpuInfo, ProcessOwner};

    fn gpu(id: i64, name: &str) -> GpuRecord {
        GpuRecord {
            id: GpuId(id),
            info: GpuInfo {
                uuid: format!("GPU-{id}"),
                host: "h".into(),
                name: Some(name.into()),
                last_seen_ms: 10 * 3_600_000,
                ..GpuInfo::default()
            },
            last_live_ms: 10 * 3_600_000,
            latest: None,
        }
    }

    fn minute(gpu_id: i64, bucket_ms: i64, state: WorkloadState, sm: f64) -> BucketCredit {
        let i = WorkloadState::ALL.iter().position(|s| *s == state).unwrap();
        let mut c = Credit::default();
        c.state_s[i] = 60.0;
        c.wasted_s[i] = 60.0 * state.waste_fraction(Some(sm));
        c.energy_j[i] = 60.0 * 100.0;
        c.sm_pct_s = sm * 60.0;
        c.sm_covered_s = 60.0;
        BucketCredit { gpu_id: GpuId(gpu_id), bucket_ms, credit: c }
    }

    fn procs(gpu_id: i64, minute_ms: i64, samples: u32, owners: &[(&str, Option<f64>)]) -> ProcessList {
        ProcessList {
            gpu_id: GpuId(gpu_id),
            minute_ms,
            samples,
            processes: Some(
                owners
                    .iter()
                    .enumerate()
                    .map(|(i, (u, sm))| GpuProcess {
                        pid: i as u32 + 1,
                        sm_pct: *sm,
                        owner: Some(ProcessOwner { user: Some(u.to_string()), ..Default::default() }),
                        ..Default::default()
                    })
                    .collect(),
            ),
            allocations: vec![],
        }
    }

    #[test]
    fn a_gpu_allocated_to_a_pod_with_no_process_is_the_pods() {
        let gpus = [gpu(1, "NVIDIA H100 80GB HBM3")];
        let prices = PriceTable::default().with_overrides(&PriceTable {
            per_gpu_hour: [("NVIDIA H100 80GB HBM3".to_string(), 6.0)].into(),
            ..PriceTable::default()
        });
        let mut m = minute(1, 0, WorkloadState::IdleHeld, 0.0);
        m.credit.allocated_s = 60.0;
        m.credit.allocation_covered_s = 60.0;
        let alloc = fleetlens_core::PodAllocation {
            namespace: "ml".into(),
            pod: "nb-alice".into(),
            container: "notebook".into(),
            resource: "nvidia.com/gpu".into(),
            device_id: "GPU-1".into(),
            ..Default::default()
        };
        let lists = vec![ProcessList {
            gpu_id: GpuId(1),
            minute_ms: 0,
            processes: Some(vec![]),
            allocations: vec![alloc],
            samples: 6,
        }];
        for (key, name) in [(OwnerKey::Pod, "ml/nb-alice"), (OwnerKey::Namespace, "ml"), (OwnerKey::User, "(unknown)")]
        {
            let credits = owner_credits(&gpus, std::slice::from_ref(&m), &lists, &key, 0, 60_000);
            let rows = owner_rows(&gpus, &credits, &prices);
            assert_eq!(rows.len(), 1, "{rows:?}");
            assert_eq!(rows[0].group, name);
            assert!((rows[0].hours_by_state["idle_held"] - 1.0 / 60.0).abs() < 1e-12);
            assert!((rows[0].allocated_hours - 1.0 / 60.0).abs() < 1e-12);
            assert!((rows[0].wasted_cost.unwrap() - 0.1).abs() < 1e-9, "{rows:?}");
        }
    }

    #[test]
    fn time_with_no_process_is_not_allocated() {
        let gpus = [gpu(1, "NVIDIA H100 80GB HBM3")];
        // One minute, alice on the GPU in 3 of its 6 samples: allocated 30 of 60 s.
        let mut m = minute(1, 0, WorkloadState::IdleHeld, 0.0);
        m.credit.allocated_s = 30.0;
        m.credit.allocation_covered_s = 60.0;
        let lists = vec![
            procs(1, 0, 3, &[("alice", Some(0.0))]),
            ProcessList { gpu_id: GpuId(1), minute_ms: 0, processes: Some(vec![]), allocations: vec![], samples: 3 },
        ];
        let credits = owner_credits(&gpus, &[m], &lists, &OwnerKey::User, 0, 60_000);
        let rows = owner_rows(&gpus, &credits, &PriceTable::default());
        let row = |n: &str| rows.iter().find(|r| r.group == n).unwrap_or_else(|| panic!("{n}: {rows:?}"));
        assert_eq!(row("(no process)").allocated_hours, 0.0);
        assert!((row("alice").allocated_hours - 30.0 / 3600.0).abs() < 1e-12, "{rows:?}");
    }

    #[test]
    fn retention_reads_as_written() {
        use std::time::Duration;
        assert_eq!(retention_text(Duration::from_secs(7 * 86_400)), "7 days");
        assert_eq!(retention_text(Duration::from_secs(86_400)), "1 day");
        assert_eq!(retention_text(Duration::from_secs(36 * 3_600)), "36 h");
    }

    #[test]
    fn minutes_shared_among_owners_add_up_to_the_gpu() {
        let gpus = [gpu(1, "NVIDIA H100 80GB HBM3"), gpu(2, "NVIDIA H100 80GB HBM3")];
        let prices = PriceTable::default().with_overrides(&PriceTable {
            per_gpu_hour: [("NVIDIA H100 80GB HBM3".to_string(), 6.0)].into(),
            ..PriceTable::default()
        });
        let mut minutes = Vec::new();
        let mut lists = Vec::new();
        for m in 0..30 {
            let t = m * 60_000;
            // GPU 1: alice idle-holds it. GPU 2: alice and bob share it 3:1 by SM %, compute-bound.
            minutes.push(minute(1, t, WorkloadState::IdleHeld, 0.0));
            minutes.push(minute(2, t, WorkloadState::ComputeBound, 90.0));
            // Six samples a minute: grouped on GPU 1, one list per sample on GPU 2.
            lists.push(procs(1, t, 6, &[("alice", Some(0.0))]));
            for _ in 0..6 {
                lists.push(procs(2, t, 1, &[("alice", Some(60.0)), ("bob", Some(20.0))]));
            }
        }
        // Minute 30 of GPU 1: nobody on it, idle; minute 31: samples gone.
        minutes.push(minute(1, 30 * 60_000, WorkloadState::Idle, 0.0));
        lists.push(ProcessList {
            gpu_id: GpuId(1),
            minute_ms: 30 * 60_000,
            processes: Some(vec![]),
            allocations: vec![],
            samples: 6,
        });
        minutes.push(minute(1, 31 * 60_000, WorkloadState::Idle, 0.0));
        let credits = owner_credits(&gpus, &minutes, &lists, &OwnerKey::User, 0, 32 * 60_000);
        let rows = owner_rows(&gpus, &credits, &prices);
        let row = |n: &str| rows.iter().find(|r| r.group == n).unwrap_or_else(|| panic!("{n}: {rows:?}"));
        let alice = row("alice");
        assert_eq!(alice.gpus, 2);
        assert!((alice.gpu_hours - (0.5 + 0.375)).abs() < 1e-9, "{}", alice.gpu_hours);
        assert!((alice.hours_by_state["idle_held"] - 0.5).abs() < 1e-9);
        assert!((alice.hours_by_state["compute_bound"] - 0.375).abs() < 1e-9);
        assert!((alice.cost.unwrap() - 0.875 * 6.0).abs() < 1e-9);
        assert!((alice.wasted_cost.unwrap() - 0.5 * 6.0).abs() < 1e-9);
        let bob = row("bob");
        assert!((bob.gpu_hours - 0.125).abs() < 1e-9);
        assert_eq!(bob.wasted_cost, Some(0.0));
        assert!((bob.energy_kwh - 0.125 * 3600.0 * 100.0 / 3.6e6).abs() < 1e-12);
        assert!((row("(no process)").hours_by_state["idle"] - 1.0 / 60.0).abs() < 1e-9);
        assert!((row("(unknown)").hours_by_state["idle"] - 1.0 / 60.0).abs() < 1e-9);
        // Everything adds up to the GPUs' time.
        let total: f64 = rows.iter().map(|r| r.gpu_hours).sum();
        assert!((total - 62.0 / 60.0).abs() < 1e-9);

        let top = top_owners(&gpus, &credits, &prices, 10);
        assert_eq!(top.len(), 2, "{top:?}");
        assert_eq!(top[0].owner, "alice");
        assert!((top[0].idle_held_hours - 0.5).abs() < 1e-9);
        assert_eq!(top[1].owner, "(unknown)");
        // A period cut in the middle of a minute counts part of it.
        let credits = owner_credits(&gpus, &minutes, &lists, &OwnerKey::User, 30_000, 60_000);
        let rows = owner_rows(&gpus, &credits, &prices);
        assert!((rows.iter().map(|r| r.gpu_hours).sum::<f64>() - 60.0 / 3600.0).abs() < 1e-9);
    }
}
