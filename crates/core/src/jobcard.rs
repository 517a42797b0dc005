//! Job report cards (issue 24, docs/ACTIONS.md): what a finished job used and wasted, and the
//! two or three METRICS.md hints that apply to it, each with its number.
//!
//! A *run* is a job as the GPUs see it: the processes that share a run key ([`run_key`]): a
//! Slurm job, a pod, a container, else one process. Its card is computed once, when it ends,
//! from its share of each GPU-minute's credit (owner accounting, `crate::owners`): on a GPU it
//! shared with other runs, the minute is split by the processes' NVML SM % (an estimate,
//! flagged `shared_gpu`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::advice::right_size;
use crate::credit::Credit;
use crate::prices::PriceTable;
use crate::sample::GpuProcess;
use crate::state::WorkloadState;
use crate::thresholds::{GIB, Thresholds};

crate::named_enum! {
    /// Whether a job run is still seen on its GPUs.
    pub enum JobRunStatus("job run status") {
        Running = "running",
        /// It left its GPUs, or its end was requested (`POST /jobs/{id}/end`).
        Ended = "ended",
    }
}

impl JobRunStatus {
    /// A run is ended once it has an end time.
    pub fn of(ended_ms: Option<i64>) -> JobRunStatus {
        if ended_ms.is_some() { JobRunStatus::Ended } else { JobRunStatus::Running }
    }
}

/// The run a process belongs to, without its host: `slurm:<job id>`, a Kubernetes job as
/// `<kind, lower case>:<namespace>/<name>` (`jobset:ml/llm-pretrain`: every pod of the job, on
/// every node, is one run), `pod:<namespace>/<name>` (or `pod:<uid>`), `container:<id>`, else
/// `pid:<pid>` for a process whose user is known. `None`: nobody can be told (no owner at
/// all), so no card.
pub fn run_key(p: &GpuProcess) -> Option<String> {
    let o = p.owner.as_ref();
    let known = |v: Option<&String>| v.filter(|s| !s.trim().is_empty()).cloned();
    if let Some(job) = known(o.and_then(|o| o.job_id.as_ref())) {
        return Some(match known(o.and_then(|o| o.job_kind.as_ref())) {
            Some(kind) => format!("{}:{job}", kind.to_ascii_lowercase()),
            None => format!("slurm:{job}"),
        });
    }
    let (ns, name) = (known(o.and_then(|o| o.namespace.as_ref())), known(o.and_then(|o| o.pod_name.as_ref())));
    match (ns, name, known(o.and_then(|o| o.pod_uid.as_ref()))) {
        (Some(ns), Some(name), _) => return Some(format!("pod:{ns}/{name}")),
        (None, Some(name), _) => return Some(format!("pod:{name}")),
        (_, None, Some(uid)) => return Some(format!("pod:{uid}")),
        _ => {}
    }
    if let Some(c) = known(o.and_then(|o| o.container_id.as_ref())) {
        return Some(format!("container:{c}"));
    }
    let user = known(o.and_then(|o| o.user.as_ref())).or_else(|| known(p.user.as_ref()));
    user.map(|_| format!("pid:{}", p.pid))
}

/// The run key as stored: a lone process's key names its host (PIDs are per host).
pub fn global_run_key(host: &str, local: &str) -> String {
    match local.strip_prefix("pid:") {
        Some(pid) => format!("pid:{host}/{pid}"),
        None => local.to_string(),
    }
}

/// The key [`run_key`] gives the run's processes, from a stored key.
pub fn local_run_key(global: &str) -> String {
    match global.strip_prefix("pid:").and_then(|rest| rest.rsplit_once('/')) {
        Some((_, pid)) => format!("pid:{pid}"),
        None => global.to_string(),
    }
}

/// One GPU of a run, as the card computation gets it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct CardGpuInput {
    pub uuid: String,
    /// NVML name (prices and datasheet).
    pub name: Option<String>,
    pub mem_total_bytes: Option<i64>,
    /// The run's share of this GPU's minute credits over its span.
    pub credit: Credit,
    /// The most GPU memory the run's processes held at once on this GPU (their `used_bytes`),
    /// else the device's peak while the run was on it.
    pub peak_mem_bytes: Option<i64>,
    /// Σ DRAM active % × s over the run's time on the GPU, and the seconds it covers.
    pub dram_pct_s: f64,
    pub dram_covered_s: f64,
    /// Other runs' processes were on the GPU at the same time: the run's share is estimated.
    pub shared: bool,
    /// Seconds of the minutes in which the run's processes were listed on the GPU.
    pub present_s: f64,
}

/// What a card is computed from.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct CardInput {
    pub from_ms: i64,
    pub to_ms: i64,
    pub gpus: Vec<CardGpuInput>,
    /// Time-weighted MFU of the throughput reports that overlap the run, if any.
    pub mfu: Option<f64>,
    /// 95th percentile of the minute means of SM activity while the run was on its GPUs.
    pub p95_sm_active_pct: Option<f64>,
}

/// One GPU's line on a card.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CardGpu {
    pub uuid: String,
    pub name: Option<String>,
    pub gpu_hours: f64,
    pub sm_active_pct: Option<f64>,
    pub peak_mem_bytes: Option<i64>,
    pub mem_total_bytes: Option<i64>,
    /// Shared with other runs: this GPU's hours are the run's estimated share (by SM %).
    pub shared: bool,
    /// The run's own SM activity on this GPU, as a share of the whole device over the time it
    /// was there: the device's SM activity × the run's share by NVML per-process SM %. An
    /// estimate; equal to `sm_active_pct` when the GPU was not shared.
    pub own_sm_active_pct: Option<f64>,
}

/// One hint on a card: a METRICS.md piece of advice with the run's own numbers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CardAdvice {
    /// `idle_held`, `hollow`, `starved`, `stalled`, `low_occupancy`, `memory_bound`,
    /// `no_tensor`, `right_size`.
    pub code: String,
    pub text: String,
    /// The money the hint is about (wasted in that state, or the monthly saving of a smaller
    /// GPU for `right_size`); null without a price.
    pub amount: Option<f64>,
}

/// A job's report card.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct JobCard {
    pub from_ms: i64,
    pub to_ms: i64,
    pub span_hours: f64,
    pub gpu_count: u32,
    pub gpus: Vec<CardGpu>,
    pub gpu_hours: f64,
    /// Hours per workload state (METRICS.md names), states with time only.
    pub hours_by_state: BTreeMap<String, f64>,
    pub gpu_util_pct: Option<f64>,
    pub sm_active_pct: Option<f64>,
    /// 95th percentile of its minutes' SM activity (plans use it).
    pub p95_sm_active_pct: Option<f64>,
    pub tensor_active_pct: Option<f64>,
    pub dram_active_pct: Option<f64>,
    /// SMACT ÷ kernel utilization × 100, capped at 100 (METRICS.md).
    pub efficiency: Option<f64>,
    /// The highest peak memory of any of its GPUs.
    pub peak_mem_bytes: Option<i64>,
    pub energy_kwh: f64,
    pub currency: String,
    pub cost: Option<f64>,
    pub wasted_cost: Option<f64>,
    pub wasted_hours: f64,
    /// Wasted hours ÷ GPU-hours × 100.
    pub waste_pct: f64,
    pub mfu: Option<f64>,
    pub advice: Vec<CardAdvice>,
    /// Some GPU was shared with other runs: its figures are the run's share by NVML
    /// per-process SM % — an estimate.
    pub shared_gpu: bool,
}

/// Hints on a card at most.
pub const MAX_ADVICE: usize = 3;

fn mean(sum: f64, covered: f64) -> Option<f64> {
    (covered > 0.0).then(|| sum / covered)
}

fn money(v: f64, currency: &str) -> String {
    if currency == "USD" { format!("${v:.2}") } else { format!("{v:.2} {currency}") }
}

fn gib(bytes: i64) -> f64 {
    bytes as f64 / GIB as f64
}

/// The card of a run.
pub fn job_card(input: &CardInput, prices: &PriceTable, th: &Thresholds) -> JobCard {
    let mut total = Credit::default();
    let (mut cost, mut wasted_cost, mut priced) = (0.0, 0.0, true);
    let (mut dram_s, mut dram_cov) = (0.0, 0.0);
    let mut wasted_cost_by_state = [0.0; WorkloadState::ALL.len()];
    let mut gpus = Vec::new();
    for g in &input.gpus {
        total.add_scaled(&g.credit, 1.0);
        dram_s += g.dram_pct_s;
        dram_cov += g.dram_covered_s;
        let hours = g.credit.covered_s() / 3600.0;
        match g.name.as_deref().and_then(|n| prices.price_for(n)) {
            Some(p) => {
                cost += p * hours;
                let wasted: f64 = g.credit.wasted_s.iter().sum();
                wasted_cost += p * wasted / 3600.0;
                for (i, w) in g.credit.wasted_s.iter().enumerate() {
                    wasted_cost_by_state[i] += p * w / 3600.0;
                }
            }
            None if hours > 0.0 => priced = false,
            None => {}
        }
        gpus.push(CardGpu {
            uuid: g.uuid.clone(),
            name: g.name.clone(),
            gpu_hours: hours,
            sm_active_pct: mean(g.credit.sm_pct_s, g.credit.sm_covered_s),
            peak_mem_bytes: g.peak_mem_bytes,
            mem_total_bytes: g.mem_total_bytes,
            shared: g.shared,
            own_sm_active_pct: if g.shared {
                (g.present_s > 0.0 && g.credit.sm_covered_s > 0.0).then(|| g.credit.sm_pct_s / g.present_s)
            } else {
                mean(g.credit.sm_pct_s, g.credit.sm_covered_s)
            },
        });
    }
    let gpu_hours = total.covered_s() / 3600.0;
    let wasted_hours = total.wasted_s.iter().sum::<f64>() / 3600.0;
    let hours_by_state = WorkloadState::ALL
        .iter()
        .zip(total.state_s)
        .filter(|(_, s)| *s > 0.0)
        .map(|(st, s)| (st.as_str().to_string(), s / 3600.0))
        .collect();
    let util = mean(total.util_pct_s, total.util_covered_s);
    let sm = mean(total.sm_pct_s, total.sm_covered_s);
    let mut card = JobCard {
        from_ms: input.from_ms,
        to_ms: input.to_ms,
        span_hours: (input.to_ms - input.from_ms).max(0) as f64 / 3_600_000.0,
        gpu_count: input.gpus.len() as u32,
        gpus,
        gpu_hours,
        hours_by_state,
        gpu_util_pct: util,
        sm_active_pct: sm,
        p95_sm_active_pct: input.p95_sm_active_pct,
        tensor_active_pct: mean(total.tensor_pct_s, total.tensor_covered_s),
        dram_active_pct: mean(dram_s, dram_cov),
        efficiency: crate::efficiency(sm, util),
        peak_mem_bytes: input.gpus.iter().filter_map(|g| g.peak_mem_bytes).max(),
        energy_kwh: total.energy_j.iter().sum::<f64>() / 3.6e6,
        currency: prices.currency.clone(),
        cost: priced.then_some(cost),
        wasted_cost: priced.then_some(wasted_cost),
        wasted_hours,
        waste_pct: if gpu_hours > 0.0 { wasted_hours / gpu_hours * 100.0 } else { 0.0 },
        mfu: input.mfu,
        advice: Vec::new(),
        shared_gpu: input.gpus.iter().any(|g| g.shared),
    };
    let by_state: Vec<(WorkloadState, f64)> = WorkloadState::ALL.iter().copied().zip(wasted_cost_by_state).collect();
    card.advice = advice(&card, input, &total, &by_state, priced, prices, th);
    card
}

/// The hints that apply, the costliest first, at most [`MAX_ADVICE`]. Each hint is ranked by
/// the GPU-hours it is about (its wasted hours, or for `no_tensor` and `right_size` the hours
/// it could save), so that unpriced GPUs rank too.
fn advice(
    card: &JobCard,
    input: &CardInput,
    total: &Credit,
    wasted_cost_by_state: &[(WorkloadState, f64)],
    priced: bool,
    prices: &PriceTable,
    th: &Thresholds,
) -> Vec<CardAdvice> {
    let cur = &card.currency;
    let hours = |s: WorkloadState| total.seconds(s) / 3600.0;
    let wasted_h = |s: WorkloadState| total.wasted(s) / 3600.0;
    let state_cost = |s: WorkloadState| {
        priced.then(|| wasted_cost_by_state.iter().find(|(st, _)| *st == s).map_or(0.0, |(_, c)| *c))
    };
    let cost_text = |c: Option<f64>| c.map(|c| format!(" ({} wasted)", money(c, cur))).unwrap_or_default();
    let pct = |h: f64| if card.gpu_hours > 0.0 { h / card.gpu_hours * 100.0 } else { 0.0 };
    // A state gets a hint when it holds at least 5 % of the run's GPU-hours.
    let notable = |s: WorkloadState| card.gpu_hours > 0.0 && hours(s) / card.gpu_hours >= 0.05;
    let fmt_opt = |v: Option<f64>| v.map_or_else(|| "unknown".to_string(), |v| format!("{v:.0}"));
    let mut out: Vec<(f64, CardAdvice)> = Vec::new();
    let mut push = |rank: f64, code: &str, text: String, amount: Option<f64>| {
        out.push((rank, CardAdvice { code: code.into(), text, amount }));
    };
    use WorkloadState as W;
    if notable(W::IdleHeld) {
        let h = hours(W::IdleHeld);
        push(
            wasted_h(W::IdleHeld),
            "idle_held",
            format!(
                "Held the GPU with no kernels for {h:.1} of {:.1} GPU-hours ({:.0} %){}: release GPUs between runs; \
                 notebooks and crashed jobs hold them for nothing",
                card.gpu_hours,
                pct(h),
                cost_text(state_cost(W::IdleHeld))
            ),
            state_cost(W::IdleHeld),
        );
    }
    if notable(W::Stalled) {
        let h = hours(W::Stalled);
        push(
            wasted_h(W::Stalled),
            "stalled",
            format!(
                "Stalled for {h:.1} GPU-hours (util ≥ 90 % with SM activity < 5 %){}: often a hung collective (NCCL) \
                 or a deadlock; inspect the job",
                cost_text(state_cost(W::Stalled))
            ),
            state_cost(W::Stalled),
        );
    }
    if notable(W::Hollow) {
        push(
            wasted_h(W::Hollow),
            "hollow",
            format!(
                "SM activity {} % with util {} %: tiny kernels or batch 1{} — bigger batches or CUDA graphs would use \
                 the GPU you paid for",
                fmt_opt(card.sm_active_pct),
                fmt_opt(card.gpu_util_pct),
                cost_text(state_cost(W::Hollow))
            ),
            state_cost(W::Hollow),
        );
    }
    if notable(W::Starved) {
        let h = hours(W::Starved);
        push(
            wasted_h(W::Starved),
            "starved",
            format!(
                "Waited for the host {h:.1} GPU-hours ({:.0} %; SM activity {} %){}: more DataLoader workers, \
                 pin_memory, prefetch; profile the input pipeline",
                pct(h),
                fmt_opt(card.sm_active_pct),
                cost_text(state_cost(W::Starved))
            ),
            state_cost(W::Starved),
        );
    }
    if notable(W::LowOccupancy) {
        push(
            wasted_h(W::LowOccupancy),
            "low_occupancy",
            format!(
                "Low SM occupancy for {:.1} GPU-hours{}: larger blocks or batches, fused kernels",
                hours(W::LowOccupancy),
                cost_text(state_cost(W::LowOccupancy))
            ),
            state_cost(W::LowOccupancy),
        );
    }
    if notable(W::MemoryBound) {
        let h = hours(W::MemoryBound);
        push(
            // Not waste by METRICS.md's rule, but time the math units wait on memory.
            h * 0.5,
            "memory_bound",
            format!(
                "Memory-bound for {h:.1} GPU-hours (DRAM active {} %): kernel fusion, FlashAttention, a larger batch \
                 or lower precision",
                fmt_opt(card.dram_active_pct)
            ),
            None,
        );
    }
    // Busy SMs with idle tensor cores: mixed precision.
    if let (Some(sm), Some(tensor)) = (card.sm_active_pct, card.tensor_active_pct)
        && sm >= 50.0
        && tensor < 5.0
    {
        push(
            card.gpu_hours * 0.3,
            "no_tensor",
            format!(
                "Tensor activity {tensor:.0} % with SM activity {sm:.0} %: the tensor cores sit idle — bf16 or TF32 \
                 mixed precision would do the same math several times faster"
            ),
            None,
        );
    }
    // Right-size: the GPU's peak fits a cheaper model, with the SM activity of its working time
    // (not the held or hung hours, METRICS.md) below the right-size bar.
    if let Some(sm) = total.working_sm_active_pct()
        && input.gpus.len() == 1
        && let Some(g) = input.gpus.first()
        && let (Some(name), Some(peak)) = (g.name.as_deref(), g.peak_mem_bytes)
        && let Some(hint) = right_size(name, sm, peak, prices, th)
    {
        let fraction = 1.0 - hint.suggested_price_per_hour / hint.current_price_per_hour;
        push(
            card.gpu_hours * fraction,
            "right_size",
            format!(
                "Peak memory {:.1} GiB and SM activity {sm:.0} %: a {} would carry this job ({} a month less per GPU \
                 than the {})",
                gib(peak),
                hint.suggested.spec().display_name,
                money(hint.saving_per_month, cur),
                hint.current.spec().display_name
            ),
            Some(hint.saving_per_month),
        );
    }
    out.sort_by(|a, b| b.0.total_cmp(&a.0));
    out.into_iter().filter(|(rank, _)| *rank > 0.0).take(MAX_ADVICE).map(|(_, a)| a).collect()
}

/// Whether a card is worth a message: big enough (`min_gpu_hours`) and wasteful enough
/// (`min_waste_pct`), so that healthy short jobs do not spam their owners.
pub fn worth_sending(card: &JobCard, min_gpu_hours: f64, min_waste_pct: f64) -> bool {
    card.gpu_hours >= min_gpu_hours && card.waste_pct >= min_waste_pct
}

// Every field of a report route, defined once: the store reads it as part of the route's row
// (flattened into `ReportRoute`; inserts take it alone) and the API sends it flattened into
// `ReportRouteView`. The doc comment below is the OpenAPI schema's description.
/// Where the report cards of a team's (any team's: `team_id` null) owner (anyone's: `owner`
/// null) jobs go, and the bar a card must pass to be sent ([`worth_sending`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "sqlx", derive(sqlx::FromRow))]
pub struct ReportRouteSpec {
    /// Only jobs on this team's GPUs (null: any team).
    pub team_id: Option<crate::TeamId>,
    /// Only this user's jobs (null: anyone's).
    pub owner: Option<String>,
    /// A `slack` or `webhook` notification channel.
    pub channel_id: crate::ChannelId,
    /// Send only cards of jobs with at least this many GPU-hours…
    pub min_gpu_hours: f64,
    /// …and at least this share wasted, %.
    pub min_waste_pct: f64,
}

/// A card as plain text (Slack messages, logs): title line, figures, hints.
pub fn card_text(title: &str, card: &JobCard) -> String {
    let cur = &card.currency;
    let pct = |v: Option<f64>| v.map_or_else(|| "–".to_string(), |v| format!("{v:.0} %"));
    let mut lines = vec![
        title.to_string(),
        format!(
            "{} GPU{} · {:.2} h · {:.2} GPU-hours · SM activity {} · tensor {} · DRAM {} · efficiency {}{}",
            card.gpu_count,
            if card.gpu_count == 1 { "" } else { "s" },
            card.span_hours,
            card.gpu_hours,
            pct(card.sm_active_pct),
            pct(card.tensor_active_pct),
            pct(card.dram_active_pct),
            pct(card.efficiency),
            card.mfu.map(|m| format!(" · MFU {:.0} %", m * 100.0)).unwrap_or_default()
        ),
        format!(
            "Cost {} · wasted {} ({:.0} %) · energy {:.2} kWh{}",
            card.cost.map_or_else(|| "unknown".into(), |c| money(c, cur)),
            card.wasted_cost.map_or_else(|| "unknown".into(), |c| money(c, cur)),
            card.waste_pct,
            card.energy_kwh,
            card.peak_mem_bytes.map(|b| format!(" · peak memory {:.1} GiB", gib(b))).unwrap_or_default()
        ),
    ];
    for a in &card.advice {
        lines.push(format!("• {}", a.text));
    }
    if card.shared_gpu {
        lines.push("(shared GPU: this job's share is estimated from per-process SM %)".into());
    }
    lines.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ProcessOwner;

    #[test]
    fn a_run_with_an_end_time_is_ended() {
        assert_eq!(JobRunStatus::of(None), JobRunStatus::Running);
        assert_eq!(JobRunStatus::of(Some(0)), JobRunStatus::Ended);
        assert_eq!(serde_json::to_string(&JobRunStatus::Ended).unwrap(), "\"ended\"");
    }

    fn credit(state: WorkloadState, seconds: f64, util: f64, sm: f64, tensor: f64) -> Credit {
        let i = WorkloadState::ALL.iter().position(|s| *s == state).unwrap();
        let mut c = Credit::default();
        c.state_s[i] = seconds;
        c.wasted_s[i] = seconds * state.waste_fraction(Some(sm));
        c.energy_j[i] = seconds * 300.0;
        c.util_pct_s = util * seconds;
        c.util_covered_s = seconds;
        c.sm_pct_s = sm * seconds;
        c.sm_covered_s = seconds;
        c.tensor_pct_s = tensor * seconds;
        c.tensor_covered_s = seconds;
        c
    }

    fn gpu(credit: Credit, peak_gib: i64) -> CardGpuInput {
        CardGpuInput {
            uuid: "GPU-1".into(),
            name: Some("NVIDIA H100 80GB HBM3".into()),
            mem_total_bytes: Some(80 * GIB),
            credit,
            peak_mem_bytes: Some(peak_gib * GIB),
            dram_pct_s: 10.0 * credit.covered_s(),
            dram_covered_s: credit.covered_s(),
            shared: false,
            present_s: credit.covered_s(),
        }
    }

    #[test]
    fn run_keys_prefer_slurm_then_pod_then_container_then_pid() {
        let with = |o: ProcessOwner| GpuProcess { pid: 42, owner: Some(o), ..Default::default() };
        let slurm = ProcessOwner { job_id: Some("77".into()), namespace: Some("ml".into()), ..Default::default() };
        assert_eq!(run_key(&with(slurm)).as_deref(), Some("slurm:77"));
        // A Kubernetes job: every pod of it, on every node, is one run of its kind and name.
        let jobset = ProcessOwner {
            job_id: Some("ml/llm".into()),
            job_kind: Some("JobSet".into()),
            namespace: Some("ml".into()),
            pod_name: Some("llm-workers-0-0".into()),
            ..Default::default()
        };
        assert_eq!(run_key(&with(jobset)).as_deref(), Some("jobset:ml/llm"));
        assert_eq!(global_run_key("node-1", "jobset:ml/llm"), "jobset:ml/llm");
        let pod = ProcessOwner {
            namespace: Some("ml".into()),
            pod_name: Some("nb".into()),
            pod_uid: Some("u".into()),
            ..Default::default()
        };
        assert_eq!(run_key(&with(pod)).as_deref(), Some("pod:ml/nb"));
        assert_eq!(
            run_key(&with(ProcessOwner { pod_uid: Some("abc".into()), ..Default::default() })).as_deref(),
            Some("pod:abc")
        );
        let c = ProcessOwner { container_id: Some("docker://f00".into()), ..Default::default() };
        assert_eq!(run_key(&with(c)).as_deref(), Some("container:docker://f00"));
        assert_eq!(
            run_key(&with(ProcessOwner { user: Some("alice".into()), ..Default::default() })).as_deref(),
            Some("pid:42")
        );
        assert_eq!(run_key(&GpuProcess { pid: 1, ..Default::default() }), None);
        assert_eq!(
            run_key(&GpuProcess { pid: 1, user: Some("bob".into()), ..Default::default() }).as_deref(),
            Some("pid:1")
        );
        assert_eq!(global_run_key("node-1", "pid:42"), "pid:node-1/42");
        assert_eq!(local_run_key("pid:node-1/42"), "pid:42");
        assert_eq!(global_run_key("node-1", "pod:ml/nb"), "pod:ml/nb");
        assert_eq!(local_run_key("pod:ml/nb"), "pod:ml/nb");
    }

    #[test]
    fn a_hollow_job_gets_its_numbers_and_the_batch_hint() {
        let (prices, th) = (PriceTable::default(), Thresholds::default());
        // 2 h hollow at util 61 %, SMACT 9 %, then 1 h idle-held, on one H100 ($3.00/h).
        let mut c = credit(WorkloadState::Hollow, 7200.0, 61.0, 9.0, 0.0);
        c.add_scaled(&credit(WorkloadState::IdleHeld, 3600.0, 0.0, 0.0, 0.0), 1.0);
        let input = CardInput {
            from_ms: 0,
            to_ms: 3 * 3_600_000,
            gpus: vec![gpu(c, 70)],
            mfu: Some(0.12),
            p95_sm_active_pct: None,
        };
        let card = job_card(&input, &prices, &th);
        assert_eq!(card.gpu_count, 1);
        assert!((card.gpu_hours - 3.0).abs() < 1e-9);
        assert!((card.hours_by_state["hollow"] - 2.0).abs() < 1e-9);
        assert!((card.hours_by_state["idle_held"] - 1.0).abs() < 1e-9);
        // Means over measured time: util (61×2 + 0)/3, SMACT 6.
        assert!((card.gpu_util_pct.unwrap() - 122.0 / 3.0).abs() < 1e-9);
        assert!((card.sm_active_pct.unwrap() - 6.0).abs() < 1e-9);
        assert!((card.dram_active_pct.unwrap() - 10.0).abs() < 1e-9);
        assert!((card.cost.unwrap() - 9.0).abs() < 1e-9);
        // Wasted: 1 h idle-held + 2 h × (1 − 0.09) hollow = 2.82 h → $8.46.
        assert!((card.wasted_hours - 2.82).abs() < 1e-9);
        assert!((card.wasted_cost.unwrap() - 8.46).abs() < 1e-9);
        assert!((card.waste_pct - 94.0).abs() < 1e-9);
        assert!((card.energy_kwh - 3.0 * 3600.0 * 300.0 / 3.6e6).abs() < 1e-9);
        assert_eq!(card.peak_mem_bytes, Some(70 * GIB));
        assert_eq!(card.mfu, Some(0.12));
        let codes: Vec<&str> = card.advice.iter().map(|a| a.code.as_str()).collect();
        // The hollow hours cost most; a cheaper GPU for 60 % of 3 h; the idle-held hour.
        assert_eq!(codes, ["hollow", "right_size", "idle_held"], "{:?}", card.advice);
        // Sized by the hollow hours' SM activity (9 %), not the 6 % the held hour dilutes it to.
        assert!(card.advice[1].text.starts_with("Peak memory 70.0 GiB and SM activity 9 %"), "{}", card.advice[1].text);
        assert!(card.advice[0].text.starts_with("SM activity 6 % with util 41 %"), "{}", card.advice[0].text);
        assert!((card.advice[0].amount.unwrap() - 2.0 * 0.91 * 3.0).abs() < 1e-9);
        assert!(card.advice[2].text.contains("1.0 of 3.0 GPU-hours (33 %)"), "{}", card.advice[2].text);
        assert!(card.advice.len() <= MAX_ADVICE);
        assert!(!card.shared_gpu);
        let text = card_text("job slurm:1", &card);
        assert!(text.contains("wasted $8.46 (94 %)"), "{text}");
        assert!(text.contains("MFU 12 %"), "{text}");
    }

    #[test]
    fn a_healthy_job_gets_no_hint_and_is_not_sent() {
        let (prices, th) = (PriceTable::default(), Thresholds::default());
        let c = credit(WorkloadState::ComputeBound, 600.0, 98.0, 90.0, 60.0);
        let card = job_card(
            &CardInput { from_ms: 0, to_ms: 600_000, gpus: vec![gpu(c, 70)], mfu: None, p95_sm_active_pct: None },
            &prices,
            &th,
        );
        assert!(card.advice.is_empty(), "{:?}", card.advice);
        assert_eq!(card.wasted_cost, Some(0.0));
        assert!(!worth_sending(&card, 0.1, 10.0));
        assert!(worth_sending(&card, 0.1, 0.0));
        assert!(!worth_sending(&card, 0.2, 0.0));
    }

    /// The card of an hour-long job on one GPU of `peak_gib` peak, at list prices.
    fn hour_on_one_gpu(c: Credit, peak_gib: i64) -> JobCard {
        let input = CardInput {
            from_ms: 0,
            to_ms: 3_600_000,
            gpus: vec![gpu(c, peak_gib)],
            mfu: None,
            p95_sm_active_pct: None,
        };
        job_card(&input, &PriceTable::default(), &Thresholds::default())
    }

    #[test]
    fn a_hung_job_is_told_to_look_at_the_job_not_to_take_a_smaller_gpu() {
        // An hour of one kernel spinning on 2 of 132 SMs, 12 GiB: that fits a T4, but it is a bug.
        let card = hour_on_one_gpu(credit(WorkloadState::Stalled, 3600.0, 100.0, 1.5, 0.0), 12);
        let codes: Vec<&str> = card.advice.iter().map(|a| a.code.as_str()).collect();
        assert_eq!(codes, ["stalled"], "{:?}", card.advice);
    }

    #[test]
    fn small_low_activity_jobs_are_told_to_right_size_and_busy_fp32_jobs_to_use_tensor_cores() {
        // Starved at SMACT 10 % with 12 GiB peak: a T4 would carry it.
        let card = hour_on_one_gpu(credit(WorkloadState::Starved, 3600.0, 20.0, 10.0, 0.0), 12);
        let codes: Vec<&str> = card.advice.iter().map(|a| a.code.as_str()).collect();
        assert_eq!(codes, ["starved", "right_size"], "{:?}", card.advice);
        assert!(card.advice[1].text.contains("12.0 GiB"), "{}", card.advice[1].text);
        assert!(card.advice[1].text.contains("T4"), "{}", card.advice[1].text);
        // Active at SMACT 70 % with tensor 0 %: mixed precision.
        let card = hour_on_one_gpu(credit(WorkloadState::Active, 3600.0, 95.0, 70.0, 0.0), 70);
        assert_eq!(card.advice.len(), 1);
        assert_eq!(card.advice[0].code, "no_tensor");
        assert!(card.advice[0].text.starts_with("Tensor activity 0 % with SM activity 70 %"));
    }

    #[test]
    fn unpriced_gpus_give_unknown_money_and_shared_gpus_are_flagged() {
        let th = Thresholds::default();
        let prices = PriceTable::empty("EUR", "-");
        let mut g = gpu(credit(WorkloadState::IdleHeld, 3600.0, 0.0, 0.0, 0.0), 10);
        g.shared = true;
        // A quarter of each minute by SM % (device at 80 %) over an hour on the GPU: its own
        // SM activity is 80 × 0.25 = 20 %.
        g.credit.sm_pct_s = 80.0 * 900.0;
        g.credit.sm_covered_s = 900.0;
        g.present_s = 3600.0;
        let card = job_card(
            &CardInput { from_ms: 0, to_ms: 3_600_000, gpus: vec![g], mfu: None, p95_sm_active_pct: None },
            &prices,
            &th,
        );
        assert_eq!(card.cost, None);
        assert_eq!(card.wasted_cost, None);
        assert_eq!(card.currency, "EUR");
        assert!(card.shared_gpu);
        assert_eq!(card.advice[0].code, "idle_held");
        assert_eq!(card.advice[0].amount, None);
        assert!(card_text("t", &card).contains("estimated"));
        assert_eq!(card.gpus[0].own_sm_active_pct, Some(20.0));
        assert_eq!(card.gpus[0].sm_active_pct, Some(80.0));
    }
}
