//! The fleet summary: funnel, GPU-hours, cost, wasted cost by state, projected monthly waste,
//! energy, and the GPUs wasting the most with their advice.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use fleetlens_core::Credit;

use fleetlens_api::{FleetSummary, FunnelLevel, GpuWaste, RightSizeAdvice};
use fleetlens_core::{
    Funnel, GpuModel, PriceTable, Thresholds, WasteBreakdown, WorkloadState, p95, projected_monthly_waste, right_size,
};
use fleetlens_store::{BucketCredit, GpuId, GpuRecord, JobRecord};

use super::ledger::{GpuLedger, credit_share, ledger, paid_span};

const TOP_WASTERS: usize = 10;
pub const WEEK_MS: i64 = 7 * 86_400_000;

/// Everything the summary is computed from.
pub struct SummaryInput<'a> {
    pub gpus: &'a [GpuRecord],
    /// Credits of the period.
    pub period: &'a Credits,
    /// Credits of the last 7 days (for the projected monthly waste).
    pub last_week: &'a Credits,
    pub from_ms: i64,
    pub to_ms: i64,
    pub now_ms: i64,
    pub prices: &'a PriceTable,
    pub price_source: String,
    pub thresholds: &'a Thresholds,
    /// Jobs that reported model FLOPs in the period (for MFU).
    pub jobs: &'a [JobRecord],
    /// Peak memory used per GPU id in the period (for right-size advice).
    pub peak_mem: &'a HashMap<GpuId, i64>,
}

/// Stored credits read for one period, by GPU id.
#[derive(Debug, Clone, Default)]
pub struct Credits {
    pub hours: HashMap<GpuId, Vec<(i64, Credit)>>,
    /// Minute credits of the partial hours at the edges; empty when they are pro-rated from
    /// their hours instead.
    pub edge_minutes: HashMap<GpuId, Vec<(i64, Credit)>>,
    /// Per GPU, the sum of hour credits that weigh 1 whatever the plan (summed by the store,
    /// see `HourCreditSplit`); `hours` then holds only the other hours.
    pub whole: HashMap<GpuId, Credit>,
    pub plan: EdgePlan,
}

impl Credits {
    pub fn new(hours: Vec<BucketCredit>, edge_minutes: Vec<BucketCredit>, plan: EdgePlan) -> Self {
        let group = |rows: Vec<BucketCredit>| {
            let mut map: HashMap<GpuId, Vec<(i64, Credit)>> = HashMap::new();
            for r in rows {
                map.entry(r.gpu_id).or_default().push((r.bucket_ms, r.credit));
            }
            map
        };
        Credits { hours: group(hours), edge_minutes: group(edge_minutes), whole: HashMap::new(), plan }
    }

    /// Hour credits of a pro-rated (hourly) plan, the bulk already summed per GPU by the store.
    pub fn from_split(split: fleetlens_store::HourCreditSplit, plan: EdgePlan) -> Self {
        let mut c = Credits::new(split.partial, Vec::new(), plan);
        c.whole = split.whole.into_iter().map(|b| (b.gpu_id, b.credit)).collect();
        c
    }
}

/// Minute credits at the edges are exact but cost a row per GPU-minute; above this many the
/// partial hours are pro-rated from their hour credits instead.
pub const EXACT_EDGE_BUDGET: i64 = 200_000;
const HOUR_MS: i64 = 3_600_000;
const MINUTE_MS: i64 = 60_000;

/// How a period `[from, end)` (end = min(to, now)) is read: the whole hours inside it from
/// hour credits, the partial hours at its edges from minute credits when `exact`.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct EdgePlan {
    pub from_ms: i64,
    pub end_ms: i64,
    pub now_ms: i64,
    /// First and last whole hour boundaries inside the period (`first > last`: none).
    pub first_whole_ms: i64,
    pub last_whole_ms: i64,
    pub exact: bool,
}

impl EdgePlan {
    /// Always pro-rate partial hours (billing: "computed from the hourly rollups").
    pub fn hourly(from_ms: i64, to_ms: i64, now_ms: i64) -> Self {
        EdgePlan { exact: false, ..Self::new(from_ms, to_ms, now_ms, usize::MAX) }
    }

    pub fn new(from_ms: i64, to_ms: i64, now_ms: i64, gpu_count: usize) -> Self {
        let end_ms = to_ms.min(now_ms);
        let first_whole_ms =
            from_ms.div_euclid(HOUR_MS) * HOUR_MS + if from_ms.rem_euclid(HOUR_MS) == 0 { 0 } else { HOUR_MS };
        let last_whole_ms = end_ms.div_euclid(HOUR_MS) * HOUR_MS;
        let edge_minutes = if first_whole_ms <= last_whole_ms {
            (first_whole_ms - from_ms + end_ms - last_whole_ms) / MINUTE_MS
        } else {
            (end_ms - from_ms) / MINUTE_MS
        };
        let exact = edge_minutes.saturating_mul(gpu_count as i64) <= EXACT_EDGE_BUDGET;
        EdgePlan { from_ms, end_ms, now_ms, first_whole_ms, last_whole_ms, exact }
    }

    fn is_whole_hour(&self, hour_ms: i64) -> bool {
        hour_ms >= self.first_whole_ms && hour_ms + HOUR_MS <= self.last_whole_ms
    }

    /// The minute ranges to read at the edges (empty when not exact).
    pub fn edge_ranges(&self) -> Vec<(i64, i64)> {
        if !self.exact || self.end_ms <= self.from_ms {
            return Vec::new();
        }
        let floor_from = self.from_ms.div_euclid(MINUTE_MS) * MINUTE_MS;
        if self.first_whole_ms > self.last_whole_ms {
            return vec![(floor_from, self.end_ms)];
        }
        vec![(floor_from, self.first_whole_ms), (self.last_whole_ms, self.end_ms)]
    }

    /// The share of a bucket's credit (its samples' sampled time) that falls in the period:
    /// see [`credit_share`].
    fn weight(&self, gpu: &GpuRecord, bucket_ms: i64, len_ms: i64, credit: &Credit) -> f64 {
        credit_share(gpu, bucket_ms, len_ms, self.from_ms, self.end_ms, credit.covered_s())
    }
}

/// The weighted credits of one GPU over the period: whole hours from hour credits, the partial
/// hours at the edges from minute credits when exact, else from their pro-rated hours.
fn weighted<'a>(c: &'a Credits, gpu: &GpuRecord) -> Vec<(&'a Credit, f64)> {
    let p = &c.plan;
    let mut out = Vec::new();
    if let Some(sum) = c.whole.get(&gpu.id) {
        out.push((sum, 1.0));
    }
    for (hour_ms, credit) in c.hours.get(&gpu.id).into_iter().flatten() {
        if p.is_whole_hour(*hour_ms) || !p.exact {
            out.push((credit, p.weight(gpu, *hour_ms, HOUR_MS, credit)));
        }
    }
    if p.exact {
        for (minute_ms, credit) in c.edge_minutes.get(&gpu.id).into_iter().flatten() {
            let hour = minute_ms.div_euclid(HOUR_MS) * HOUR_MS;
            if !p.is_whole_hour(hour) {
                out.push((credit, p.weight(gpu, *minute_ms, MINUTE_MS, credit)));
            }
        }
    }
    out
}

pub fn ledgers(gpus: &[GpuRecord], credits: &Credits) -> Vec<(usize, GpuLedger)> {
    let p = &credits.plan;
    gpus.iter()
        .enumerate()
        .filter_map(|(i, g)| {
            let (start, end) = paid_span(g, p.from_ms, p.end_ms, p.now_ms)?;
            Some((i, ledger((end - start) as f64 / 1000.0, weighted(credits, g))))
        })
        .collect()
}

fn kwh(j: f64) -> f64 {
    j / 3.6e6
}

pub fn summarize(input: &SummaryInput<'_>) -> FleetSummary {
    let th = input.thresholds;
    let period = ledgers(input.gpus, input.period);
    let week = ledgers(input.gpus, input.last_week);

    let mut funnel = Funnel::default();
    let mut hours_by_state: BTreeMap<String, f64> = BTreeMap::new();
    let mut money = WasteBreakdown::default();
    let mut any_priced = false;
    let (mut unpriced_hours, mut unpriced_models) = (0.0, BTreeSet::new());
    let mut energy_by_state: BTreeMap<String, f64> = BTreeMap::new();
    let mut energy_j = 0.0;
    let mut wasters = Vec::new();
    for (i, l) in &period {
        let gpu = &input.gpus[*i];
        funnel += Funnel::gpu(&l.usage);
        for (state, secs) in &l.state_time.seconds {
            *hours_by_state.entry(state.as_str().to_string()).or_default() += secs / 3600.0;
        }
        energy_j += l.energy_j;
        for (state, j) in &l.energy_j_by_state {
            *energy_by_state.entry(state.as_str().to_string()).or_default() += kwh(*j);
        }
        let name = gpu.info.name.clone().unwrap_or_else(|| "unknown model".into());
        let price = input.prices.price_for(&name);
        let waste = price.map(|p| l.state_time.wasted_cost(p));
        match &waste {
            Some(w) => {
                money += w;
                any_priced = true;
            }
            None => {
                unpriced_hours += l.paid_s / 3600.0;
                unpriced_models.insert(name.clone());
            }
        }
        wasters.push(gpu_waste(gpu, l, waste.as_ref(), input.prices, th, input.peak_mem));
    }
    add_jobs(&mut funnel, input);
    wasters.retain(|w| w.wasted_hours > 0.0);
    wasters.sort_by(|a, b| {
        let key = |w: &GpuWaste| (w.wasted_cost.unwrap_or(0.0), w.wasted_hours);
        key(b).partial_cmp(&key(a)).unwrap_or(std::cmp::Ordering::Equal)
    });
    wasters.truncate(TOP_WASTERS);

    let (mut week_waste, mut week_priced_s) = (None, 0.0);
    for (i, l) in &week {
        if let Some(p) = input.gpus[*i].info.name.as_deref().and_then(|n| input.prices.price_for(n)) {
            *week_waste.get_or_insert(0.0) += l.state_time.wasted_cost(p).wasted;
            week_priced_s += l.paid_s;
        }
    }
    let cost = any_priced.then_some(money.cost);
    FleetSummary {
        from_ms: input.from_ms,
        to_ms: input.to_ms,
        gpu_count: period.len() as u32,
        paid_gpu_hours: funnel.paid_gpu_hours(),
        allocated_gpu_hours: funnel.allocated_gpu_hours(),
        funnel: funnel_levels(&funnel, cost),
        hours_by_state,
        currency: input.prices.currency.clone(),
        price_source: input.price_source.clone(),
        cost,
        wasted_cost: any_priced.then_some(money.wasted),
        wasted_cost_by_state: money.by_state.iter().map(|(s, c)| (s.as_str().to_string(), *c)).collect(),
        projected_monthly_waste: week_waste.map(projected_monthly_waste),
        projected_from_gpu_hours: week_priced_s / 3600.0,
        unpriced_gpu_hours: unpriced_hours,
        unpriced_models: unpriced_models.into_iter().collect(),
        energy_kwh: kwh(energy_j),
        energy_kwh_by_state: energy_by_state,
        top_wasters: wasters,
        // Filled in by the route (they need the raw samples).
        top_owners: Vec::new(),
        top_owners_from_ms: None,
        plan_saving_per_month: None,
    }
}

/// MFU: each job's achieved FLOP/s, shared evenly by its GPUs, over the part of the job inside
/// the period, against each GPU's dense peak.
fn add_jobs(funnel: &mut Funnel, input: &SummaryInput<'_>) {
    let by_uuid = crate::analytics::mfu::gpus_by_uuid(input.gpus);
    for job in input.jobs {
        let seconds = (job.report.to_ms.min(input.to_ms) - job.report.from_ms.max(input.from_ms)) as f64 / 1000.0;
        if seconds <= 0.0 || job.report.gpu_uuids.is_empty() {
            continue;
        }
        let per_gpu = job.report.achieved_flops_per_s / job.report.gpu_uuids.len() as f64;
        for uuid in &job.report.gpu_uuids {
            if let Some(model) =
                by_uuid.get(uuid.as_str()).and_then(|g| g.info.name.as_deref()).and_then(GpuModel::from_nvml_name)
            {
                funnel.add_job_flops(per_gpu, seconds, model, job.report.precision);
            }
        }
    }
}

/// The funnel levels with the cost of each step's gap (previous level − this level, the first
/// measured against 100 %), over the priced cost.
fn funnel_levels(f: &Funnel, cost: Option<f64>) -> Vec<FunnelLevel> {
    let mut prev = Some(1.0);
    f.levels()
        .into_iter()
        .map(|(name, level)| {
            let gap_cost = match (prev, level.fraction, cost) {
                (Some(p), Some(x), Some(c)) => Some(((p - x).max(0.0)) * c),
                _ => None,
            };
            if level.fraction.is_some() {
                prev = level.fraction;
            }
            FunnelLevel { level: name, fraction: level.fraction, coverage: level.coverage, gap_cost }
        })
        .collect()
}

fn gpu_waste(
    gpu: &GpuRecord,
    l: &GpuLedger,
    waste: Option<&WasteBreakdown>,
    prices: &PriceTable,
    th: &Thresholds,
    peak_mem: &HashMap<GpuId, i64>,
) -> GpuWaste {
    let wasted_s: f64 = l.state_time.wasted_seconds.values().sum();
    let main = l
        .state_time
        .wasted_seconds
        .iter()
        .max_by(|a, b| a.1.partial_cmp(b.1).unwrap_or(std::cmp::Ordering::Equal))
        .map(|(s, _)| *s);
    let efficiency = match (l.usage.sm_active_pct_s, l.usage.util_pct_s) {
        (Some(sm), Some(u)) if u > 0.0 => Some((sm / u * 100.0).min(100.0)),
        _ => None,
    };
    let right = match (gpu.info.name.as_deref(), p95(&l.working_sm_active_by_bucket), peak_mem.get(&gpu.id).copied()) {
        (Some(name), Some(p), Some(mem)) => right_size(name, p, mem, prices, th).map(|h| RightSizeAdvice {
            suggested_model: h.suggested.id().to_string(),
            p95_sm_active_pct: h.p95_sm_active_pct,
            peak_mem_bytes: h.peak_mem_bytes,
            saving_per_month: h.saving_per_month,
        }),
        _ => None,
    };
    GpuWaste {
        uuid: gpu.info.uuid.clone(),
        host: gpu.info.host.clone(),
        name: gpu.info.name.clone(),
        main_waste_state: main,
        paid_gpu_hours: l.paid_s / 3600.0,
        wasted_cost: waste.map(|w| w.wasted),
        wasted_hours: wasted_s / 3600.0,
        efficiency,
        advice: main.map(WorkloadState::advice).unwrap_or_default().to_string(),
        right_size: right,
    }
}

/// Each priced GPU's wasted cost over the credits' period, by index into `gpus` (for the
/// Prometheus exposition; GPUs of unpriced models are left out).
pub fn wasted_costs(gpus: &[GpuRecord], credits: &Credits, prices: &PriceTable) -> Vec<(usize, f64)> {
    ledgers(gpus, credits)
        .into_iter()
        .filter_map(|(i, l)| {
            let price = gpus[i].info.name.as_deref().and_then(|n| prices.price_for(n))?;
            Some((i, l.state_time.wasted_cost(price).wasted))
        })
        .collect()
}

/// The funnel levels alone (no prices), for the Prometheus exposition.
pub fn funnel_only(gpus: &[GpuRecord], credits: &Credits) -> Vec<FunnelLevel> {
    let funnel = ledgers(gpus, credits).iter().map(|(_, l)| Funnel::gpu(&l.usage)).sum::<Funnel>();
    funnel_levels(&funnel, None)
}
