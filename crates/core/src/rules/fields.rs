//! What a rule condition can read: the METRICS.md fields of one sample, a few values derived
//! from them, the GPU's workload state and how long it has been in it, and who the GPU
//! belongs to. An observation without a sample (the GPU sent nothing: `offline`) has every
//! sample field absent.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};

use crate::sample::Sample;
use crate::signal::{SIGNALS, signal};
use crate::state::WorkloadState;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum FieldType {
    Number,
    Bool,
    Text,
    State,
}

impl FieldType {
    pub fn name(self) -> &'static str {
        match self {
            FieldType::Number => "number",
            FieldType::Bool => "true/false value",
            FieldType::Text => "text",
            FieldType::State => "state",
        }
    }
}

/// One field of the condition language.
#[derive(Debug, Clone, Copy, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct FieldDef {
    pub name: &'static str,
    #[serde(rename = "type")]
    pub ty: FieldType,
    pub unit: &'static str,
    pub doc: &'static str,
}

const fn n(name: &'static str, unit: &'static str, doc: &'static str) -> FieldDef {
    FieldDef { name, ty: FieldType::Number, unit, doc }
}

const fn b(name: &'static str, doc: &'static str) -> FieldDef {
    FieldDef { name, ty: FieldType::Bool, unit: "", doc }
}

const fn t(name: &'static str, doc: &'static str) -> FieldDef {
    FieldDef { name, ty: FieldType::Text, unit: "", doc }
}

/// NVML clock-event reasons (`throttle_reasons` bits).
pub const THROTTLE_SW_POWER_CAP: u64 = 0x4;
pub const THROTTLE_HW_SLOWDOWN: u64 = 0x8;
pub const THROTTLE_SW_THERMAL: u64 = 0x20;
pub const THROTTLE_HW_THERMAL: u64 = 0x40;
pub const THROTTLE_HW_POWER_BRAKE: u64 = 0x80;

/// The fields computed from a sample's signals, its state, its GPU and its owners (after the
/// signals in [`FIELDS`]).
const DERIVED_FIELDS: &[FieldDef] = &[
    n("efficiency", "%", "SMACT / kernel utilization × 100, capped at 100; unknown when utilization is 0"),
    n("power_pct_of_limit", "%", "power draw as % of the power limit"),
    n("mem_used_pct", "%", "framebuffer in use as % of its size"),
    n("process_count", "", "compute processes on the GPU (unknown when the list could not be read)"),
    b("thermal_throttle", "clocks held down for heat (software or hardware thermal slowdown)"),
    b("power_throttle", "clocks held down for power (software power cap or hardware power brake)"),
    b("hw_slowdown", "hardware slowdown (thermal, power brake or external signal)"),
    n("xid_errors", "", "XID errors the agent reported for the GPU since its previous sample"),
    FieldDef { name: "state", ty: FieldType::State, unit: "", doc: "workload state (METRICS.md) of this sample" },
    n("duration_in_state_s", "s", "how long the GPU has been in its current state"),
    t("host", "host name"),
    t("gpu_uuid", "GPU UUID"),
    t("gpu_name", "GPU model as NVML names it"),
    n("gpu_index", "", "GPU index on its host"),
    t("team", "team that owns the host (the agent's `team` label)"),
    t(
        "owner_user",
        "owner of the GPU's holders: the pod's owner label, else the Unix (else Slurm) user; several: sorted, joined by \", \"",
    ),
    t(
        "owner_namespace",
        "Kubernetes namespace of the GPU's processes (where their environment names it) or of the pods the kubelet allocated it to",
    ),
    t(
        "owner_pod",
        "Kubernetes pod of the GPU's processes, or the pods the kubelet allocated it to: namespace/name, else the pod UID",
    ),
    t("owner_job", "job of the GPU's holders: Slurm job id, or a Kubernetes job's namespace/name"),
    t("owner_team", "team of the GPU's pods' namespaces (their fleetlens.io/team label, from the Kubernetes API)"),
    t("owner_container", "container of the GPU's processes (docker://…, containerd://…, …)"),
];

const FIELD_COUNT: usize = SIGNALS.len() + DERIVED_FIELDS.len();

/// The signal table's rows as rule fields, then the derived fields.
const fn all_fields() -> [FieldDef; FIELD_COUNT] {
    let mut out = [DERIVED_FIELDS[0]; FIELD_COUNT];
    let mut i = 0;
    while i < SIGNALS.len() {
        out[i] = n(SIGNALS[i].name, SIGNALS[i].unit, SIGNALS[i].doc);
        i += 1;
    }
    while i < FIELD_COUNT {
        out[i] = DERIVED_FIELDS[i - SIGNALS.len()];
        i += 1;
    }
    out
}

/// Every field, in the order the API lists them: the signals of [`SIGNALS`], then the derived ones.
pub const FIELDS: &[FieldDef] = &all_fields();

/// The owner fields (also alert labels when known).
pub const OWNER_FIELDS: [&str; 6] =
    ["owner_user", "owner_namespace", "owner_pod", "owner_job", "owner_container", "owner_team"];

/// The owners of a sample's processes for one owner field: the distinct known values, sorted,
/// joined by ", "; `None` when no process has one (or the list was not read).
pub fn owners_of(s: &Sample, field: &str) -> Option<String> {
    use crate::owners::OwnerKey;
    let key = match field {
        "owner_user" => Some(OwnerKey::User),
        "owner_namespace" => Some(OwnerKey::Namespace),
        "owner_pod" => Some(OwnerKey::Pod),
        "owner_job" => Some(OwnerKey::Job),
        "owner_team" => Some(OwnerKey::NamespaceTeam),
        "owner_container" => None,
        _ => return None,
    };
    let holders = s.holders()?;
    let mut values: Vec<String> = holders
        .iter()
        .filter_map(|p| match &key {
            Some(k) => k.value_of(p),
            None => p.owner.as_ref().and_then(|o| o.container_id.clone()).or_else(|| p.container_id.clone()),
        })
        .collect();
    values.sort();
    values.dedup();
    (!values.is_empty()).then(|| values.join(", "))
}

/// The field named `name`.
pub fn field(name: &str) -> Option<&'static FieldDef> {
    FIELDS.iter().find(|f| f.name == name)
}

/// The known field closest to a misspelt `name` (edit distance ≤ 3, or a shared prefix).
pub fn closest(name: &str) -> Option<&'static str> {
    if name.len() >= 3
        && let Some(f) = FIELDS.iter().map(|f| f.name).find(|f| f.starts_with(name) || name.starts_with(f))
    {
        return Some(f);
    }
    let best = FIELDS.iter().map(|f| (edit_distance(name, f.name), f.name)).min_by_key(|(d, _)| *d)?;
    (best.0 <= 3.max(name.len() / 4)).then_some(best.1)
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            cur[j + 1] = (prev[j] + usize::from(ca != *cb)).min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

/// A value read from an observation.
#[derive(Debug, Clone, PartialEq)]
pub enum Value<'a> {
    Num(f64),
    Bool(bool),
    Text(Cow<'a, str>),
    State(WorkloadState),
    Absent,
}

impl Value<'_> {
    /// For messages: `100`, `0.76`, `true`, `stalled`, `n/a`.
    pub fn display(&self) -> String {
        match self {
            Value::Num(v) => format_number(*v),
            Value::Bool(b) => b.to_string(),
            Value::Text(t) => t.to_string(),
            Value::State(s) => s.as_str().to_string(),
            Value::Absent => "n/a".to_string(),
        }
    }
}

/// A number with at most 2 decimals and no trailing zeros.
pub fn format_number(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        return format!("{v:.0}");
    }
    let s = format!("{v:.2}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// What one evaluation of a rule sees for one GPU at one instant.
#[derive(Debug, Clone)]
pub struct Observation<'a> {
    pub ts_ms: i64,
    /// The sample, or `None` when the GPU sent nothing (offline).
    pub sample: Option<&'a Sample>,
    pub state: WorkloadState,
    pub duration_in_state_s: f64,
    pub host: &'a str,
    pub gpu_uuid: &'a str,
    pub gpu_name: Option<&'a str>,
    pub gpu_index: Option<u32>,
    pub team: Option<&'a str>,
    /// XID errors the agent reported for this GPU since its previous sample (None where no
    /// event feed is known).
    pub xid_errors: Option<u32>,
}

impl<'a> Observation<'a> {
    /// An observation of one sample.
    pub fn of_sample(
        sample: &'a Sample,
        state: WorkloadState,
        duration_in_state_s: f64,
        host: &'a str,
        team: Option<&'a str>,
    ) -> Self {
        Observation {
            ts_ms: sample.ts_ms,
            sample: Some(sample),
            state,
            duration_in_state_s,
            host,
            gpu_uuid: &sample.uuid,
            gpu_name: sample.name.as_deref(),
            gpu_index: sample.gpu_index,
            team,
            xid_errors: None,
        }
    }

    /// An observation of the state alone: no sample and every other field unknown, the state
    /// held for ever. A condition true on it holds in that state whatever the GPU sends (on
    /// `offline`: it holds on no data).
    pub fn of_state_alone(state: WorkloadState) -> Observation<'static> {
        Observation {
            ts_ms: 0,
            sample: None,
            state,
            duration_in_state_s: 1e12,
            host: "",
            gpu_uuid: "",
            gpu_name: None,
            gpu_index: None,
            team: None,
            xid_errors: None,
        }
    }

    /// The value of field `name` (absent for unknown names).
    pub fn value(&self, name: &str) -> Value<'a> {
        let num = |v: Option<f64>| v.map_or(Value::Absent, Value::Num);
        let text = |v: Option<&'a str>| v.map_or(Value::Absent, |t| Value::Text(Cow::Borrowed(t)));
        match name {
            "state" => return Value::State(self.state),
            "duration_in_state_s" => return Value::Num(self.duration_in_state_s),
            "host" => return text(Some(self.host)),
            "gpu_uuid" => return text(Some(self.gpu_uuid)),
            "gpu_name" => return text(self.gpu_name),
            "gpu_index" => return self.gpu_index.map_or(Value::Absent, |i| Value::Num(f64::from(i))),
            "team" => return text(self.team),
            "xid_errors" => return self.xid_errors.map_or(Value::Absent, |n| Value::Num(f64::from(n))),
            _ => {}
        }
        let Some(s) = self.sample else { return Value::Absent };
        if let Some(signal) = signal(name) {
            return num((signal.get)(s));
        }
        let bits = |mask: u64| s.throttle_reasons.map_or(Value::Absent, |r| Value::Bool(r & mask != 0));
        match name {
            "efficiency" => num(s.efficiency()),
            "power_pct_of_limit" => match (s.power_w, s.power_limit_w) {
                (Some(p), Some(l)) if l > 0.0 => Value::Num(p / l * 100.0),
                _ => Value::Absent,
            },
            "mem_used_pct" => match (s.mem_used_bytes, s.mem_total_bytes) {
                (Some(u), Some(t)) if t > 0 => Value::Num(u as f64 / t as f64 * 100.0),
                _ => Value::Absent,
            },
            "owner_user" | "owner_namespace" | "owner_pod" | "owner_job" | "owner_container" | "owner_team" => {
                owners_of(s, name).map_or(Value::Absent, |v| Value::Text(Cow::Owned(v)))
            }
            "process_count" => s.processes.as_ref().map_or(Value::Absent, |p| Value::Num(p.len() as f64)),
            "thermal_throttle" => bits(THROTTLE_SW_THERMAL | THROTTLE_HW_THERMAL),
            "power_throttle" => bits(THROTTLE_SW_POWER_CAP | THROTTLE_HW_POWER_BRAKE),
            "hw_slowdown" => bits(THROTTLE_HW_SLOWDOWN | THROTTLE_HW_THERMAL | THROTTLE_HW_POWER_BRAKE),
            _ => Value::Absent,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_field_is_readable_and_unique() {
        let s = Sample {
            ts_ms: 5,
            uuid: "GPU-1".into(),
            gpu_util_pct: Some(100.0),
            power_w: Some(70.0),
            power_limit_w: Some(700.0),
            ..Default::default()
        };
        let o = Observation::of_sample(&s, WorkloadState::Idle, 3.0, "h", None);
        for f in FIELDS {
            assert_eq!(FIELDS.iter().filter(|g| g.name == f.name).count(), 1, "{}", f.name);
            let v = o.value(f.name);
            let ok = matches!(
                (&v, f.ty),
                (Value::Absent, _)
                    | (Value::Num(_), FieldType::Number)
                    | (Value::Bool(_), FieldType::Bool)
                    | (Value::Text(_), FieldType::Text)
                    | (Value::State(_), FieldType::State)
            );
            assert!(ok, "{} has type {:?} but read {v:?}", f.name, f.ty);
        }
        assert_eq!(o.value("power_pct_of_limit"), Value::Num(10.0));
        assert_eq!(o.value("team"), Value::Absent);
        assert_eq!(o.value("sm_active_pct"), Value::Absent);
    }

    #[test]
    fn owner_fields() {
        use crate::sample::{GpuProcess, ProcessOwner};
        let p = |pid: u32, user: &str, ns: Option<&str>| GpuProcess {
            pid,
            owner: Some(ProcessOwner {
                user: Some(user.into()),
                namespace: ns.map(str::to_string),
                pod_name: ns.map(|_| format!("nb-{user}")),
                ..Default::default()
            }),
            ..Default::default()
        };
        let mut s = Sample { ts_ms: 5, uuid: "GPU-1".into(), ..Default::default() };
        let o = Observation::of_sample(&s, WorkloadState::Idle, 0.0, "h", None);
        assert_eq!(o.value("owner_user"), Value::Absent, "no process list: unknown");
        s.processes = Some(vec![p(1, "bob", None), p(2, "alice", Some("ml")), p(3, "alice", Some("ml"))]);
        let o = Observation::of_sample(&s, WorkloadState::IdleHeld, 0.0, "h", None);
        assert_eq!(o.value("owner_user").display(), "alice, bob");
        assert_eq!(o.value("owner_namespace").display(), "ml");
        assert_eq!(o.value("owner_pod").display(), "ml/nb-alice");
        assert_eq!(o.value("owner_job"), Value::Absent);
        assert_eq!(o.value("owner_container"), Value::Absent);
        let c = crate::rules::expr::Condition::parse("state == idle_held && owner_namespace == \"ml\"").unwrap();
        assert!(c.matches(&o));
        let c = crate::rules::expr::Condition::parse("owner_job == \"1\"").unwrap();
        assert_eq!(c.eval(&o), crate::rules::expr::Truth::Unknown, "absent is unknown");
        assert_eq!(o.value("owner_team"), Value::Absent);

        // A pod only the kubelet names, with its Kubernetes metadata: its team, owner and job.
        s.processes = Some(vec![]);
        s.allocations = vec![crate::sample::PodAllocation {
            namespace: "ml".into(),
            pod: "llm-0".into(),
            team: Some("research".into()),
            pod_user: Some("bob".into()),
            job_kind: Some("JobSet".into()),
            job_name: Some("llm".into()),
            ..Default::default()
        }];
        let o = Observation::of_sample(&s, WorkloadState::IdleHeld, 0.0, "h", None);
        assert_eq!(o.value("owner_team").display(), "research");
        assert_eq!(o.value("owner_user").display(), "bob");
        assert_eq!(o.value("owner_job").display(), "ml/llm");
        assert_eq!(o.value("owner_pod").display(), "ml/llm-0");
    }

    #[test]
    fn suggestions() {
        assert_eq!(closest("sm_actve_pct"), Some("sm_active_pct"));
        assert_eq!(closest("gpu_util"), Some("gpu_util_pct"));
        assert_eq!(closest("zzzzzzzzzzzzzzzzzzzzzz"), None);
        assert_eq!(format_number(100.0), "100");
        assert_eq!(format_number(0.7571), "0.76");
        assert_eq!(format_number(2.5), "2.5");
    }
}
