//! Inhibition: an open alert of one rule holds back the notifications of alerts of other rules
//! on the same GPU, host or job ("one problem, one notification"). A stalled GPU also reads as
//! busy-but-hollow and inefficient; an offline GPU's other alerts are frozen, not fixed.
//!
//! - A rule names the rules it inhibits (`inhibits`): a shipped rule's key or any rule's name,
//!   `*` (every other rule), or `state:<state>` (rules whose condition holds whenever the GPU
//!   is in that workload state, e.g. `state:idle` for `state == idle`).
//! - The scope says which alerts are "the same problem": the same `gpu`, the same `host`, or
//!   the same `job` (the `owner_job` label; alerts without one are matched per GPU).
//! - A **firing** alert inhibits; a **pending** one too, so that a rule with a longer
//!   for-duration (stalled, 10 min) holds back the cheaper symptoms (hollow, 5 min) until it
//!   fires or is dropped: otherwise the symptom would be sent first.
//! - Inhibited alerts are still evaluated and recorded; they only send nothing.
//! - Two rules that inhibit each other: the older alert wins (no alert is held back by an
//!   alert it holds back).

use std::collections::{HashMap, HashSet};

use super::expr::{Condition, Truth};
use super::fields::Observation;
use crate::RuleId;
use crate::state::WorkloadState;

/// The workload states in which `cond` holds on the state alone (every other field unknown,
/// the state held for ever): `state == idle` holds in `idle`.
pub fn holds_in(cond: &Condition) -> Vec<WorkloadState> {
    WorkloadState::ALL
        .into_iter()
        .filter(|state| cond.eval(&Observation::of_state_alone(*state)) == Truth::True)
        .collect()
}

crate::named_enum! {
    /// Where an inhibiting alert's reach ends (a rule's `inhibit_scope`).
    pub enum InhibitScope("inhibit scope") {
        /// The same GPU (the default).
        Gpu = "gpu",
        /// The same host.
        Host = "host",
        /// The same `owner_job` (the same GPU for GPUs without one).
        Job = "job",
    }
}

/// One entry of a rule's `inhibits`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// Every other rule.
    All,
    /// Rules that hold whenever the GPU is in this state.
    State(WorkloadState),
    /// A shipped rule's key or a rule's name.
    Rule(String),
}

impl Target {
    pub fn parse(s: &str) -> Result<Target, String> {
        let s = s.trim();
        if s == "*" {
            return Ok(Target::All);
        }
        if let Some(state) = s.strip_prefix("state:") {
            return WorkloadState::parse(state.trim())
                .map(Target::State)
                .ok_or_else(|| format!("{s:?}: unknown workload state {state:?}"));
        }
        if s.is_empty() || s.chars().count() > 200 {
            return Err("a rule key or name (1–200 characters), `*` or `state:<state>`".into());
        }
        Ok(Target::Rule(s.to_string()))
    }
}

/// A rule as inhibition sees it.
#[derive(Debug, Clone)]
pub struct RuleRef<'a> {
    pub id: RuleId,
    /// The shipped rule's key.
    pub key: Option<&'a str>,
    pub name: &'a str,
    /// States in which the rule's condition holds on the state alone.
    pub holds_in: &'a [WorkloadState],
}

impl Target {
    pub fn matches(&self, rule: &RuleRef<'_>) -> bool {
        match self {
            Target::All => true,
            Target::State(s) => rule.holds_in.contains(s),
            Target::Rule(k) => rule.key == Some(k.as_str()) || rule.name == k,
        }
    }
}

/// Which rules each rule inhibits (by id), and where: `rule id → (scope, targets)`. A rule
/// never inhibits itself.
pub type Inhibitions = HashMap<RuleId, (InhibitScope, HashSet<RuleId>)>;

/// Resolve every rule's `inhibits` against the organisation's rules.
pub fn resolve(rules: &[(RuleRef<'_>, InhibitScope, Vec<Target>)]) -> Inhibitions {
    let mut out = Inhibitions::new();
    for (src, scope, targets) in rules {
        let ids: HashSet<RuleId> = rules
            .iter()
            .map(|(r, _, _)| r)
            .filter(|r| r.id != src.id && targets.iter().any(|t| t.matches(r)))
            .map(|r| r.id)
            .collect();
        if !ids.is_empty() {
            out.insert(src.id, (*scope, ids));
        }
    }
    out
}

/// An open alert.
#[derive(Debug, Clone)]
pub struct OpenAlert<'a> {
    /// The caller's handle of the alert (what [`inhibited_by`] answers in).
    pub id: i64,
    pub rule_id: RuleId,
    pub gpu: &'a str,
    pub host: &'a str,
    pub job: Option<&'a str>,
    pub firing: bool,
    pub active_since_ms: i64,
}

impl OpenAlert<'_> {
    fn same_place(&self, other: &OpenAlert<'_>, scope: InhibitScope) -> bool {
        match scope {
            InhibitScope::Gpu => self.gpu == other.gpu,
            InhibitScope::Host => self.host == other.host,
            InhibitScope::Job => match (self.job, other.job) {
                (Some(a), Some(b)) => a == b,
                _ => self.gpu == other.gpu,
            },
        }
    }
}

/// Does `src` inhibit `dst` (rules and place, not yet the tie between mutual inhibitors)?
fn reaches(rules: &Inhibitions, src: &OpenAlert<'_>, dst: &OpenAlert<'_>) -> bool {
    src.id != dst.id
        && rules
            .get(&src.rule_id)
            .is_some_and(|(scope, targets)| targets.contains(&dst.rule_id) && src.same_place(dst, *scope))
}

/// For each inhibited alert, the alert that inhibits it (a firing one before a pending one,
/// then the oldest).
pub fn inhibited_by(alerts: &[OpenAlert<'_>], rules: &Inhibitions) -> HashMap<i64, i64> {
    // Only alerts of inhibiting rules can be sources; index them by place so a big fleet is
    // not compared pairwise.
    let mut by_place: HashMap<(InhibitScope, &str), Vec<&OpenAlert<'_>>> = HashMap::new();
    for a in alerts {
        let Some((scope, _)) = rules.get(&a.rule_id) else { continue };
        let place = match scope {
            InhibitScope::Gpu => a.gpu,
            InhibitScope::Host => a.host,
            InhibitScope::Job => a.job.unwrap_or(a.gpu),
        };
        by_place.entry((*scope, place)).or_default().push(a);
        if *scope == InhibitScope::Job && a.job.is_some() {
            // Reaches alerts without a job on its own GPU too.
            by_place.entry((*scope, a.gpu)).or_default().push(a);
        }
    }
    let mut out = HashMap::new();
    for dst in alerts {
        let places = [
            (InhibitScope::Gpu, dst.gpu),
            (InhibitScope::Host, dst.host),
            (InhibitScope::Job, dst.job.unwrap_or(dst.gpu)),
            (InhibitScope::Job, dst.gpu),
        ];
        let mut best: Option<&OpenAlert<'_>> = None;
        for p in places {
            for src in by_place.get(&p).map(Vec::as_slice).unwrap_or_default() {
                if !reaches(rules, src, dst) {
                    continue;
                }
                // Mutual: the older alert is not held back by the younger.
                if reaches(rules, dst, src) && (dst.active_since_ms, dst.id) < (src.active_since_ms, src.id) {
                    continue;
                }
                let better = best
                    .is_none_or(|b| (!src.firing, src.active_since_ms, src.id) < (!b.firing, b.active_since_ms, b.id));
                if better {
                    best = Some(src);
                }
            }
        }
        if let Some(b) = best {
            out.insert(dst.id, b.id);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule<'a>(id: i64, key: &'a str, holds_in: &'a [WorkloadState]) -> RuleRef<'a> {
        RuleRef { id: RuleId(id), key: Some(key), name: key, holds_in }
    }

    fn alert<'a>(id: i64, rule_id: i64, gpu: &'a str, host: &'a str, firing: bool, since: i64) -> OpenAlert<'a> {
        OpenAlert { id, rule_id: RuleId(rule_id), gpu, host, job: None, firing, active_since_ms: since }
    }

    /// The shipped defaults: stalled (3) → hollow (1), inefficient (2); offline (5) → all;
    /// idle_held (4) → rules that hold on `idle` (8).
    fn shipped() -> Inhibitions {
        let idle = [WorkloadState::Idle];
        let none: [WorkloadState; 0] = [];
        let t = |s: &[&str]| s.iter().map(|x| Target::parse(x).unwrap()).collect::<Vec<_>>();
        resolve(&[
            (rule(1, "busy_but_hollow", &none), InhibitScope::Gpu, vec![]),
            (rule(2, "inefficient", &none), InhibitScope::Gpu, vec![]),
            (rule(3, "stalled", &none), InhibitScope::Gpu, t(&["busy_but_hollow", "inefficient"])),
            (rule(4, "idle_held", &none), InhibitScope::Gpu, t(&["state:idle"])),
            (rule(5, "agent_offline", &none), InhibitScope::Gpu, t(&["*"])),
            (rule(8, "my_idle", &idle), InhibitScope::Gpu, vec![]),
        ])
    }

    #[test]
    fn states_a_condition_holds_in() {
        let c = |s: &str| holds_in(&Condition::parse(s).unwrap());
        assert_eq!(c("state == idle"), vec![WorkloadState::Idle]);
        assert_eq!(c("state == idle && duration_in_state_s > 600"), vec![WorkloadState::Idle]);
        assert!(c("gpu_util_pct < 5").is_empty(), "unknown without a sample");
    }

    #[test]
    fn targets_resolve_to_rule_ids() {
        let r = shipped();
        let ids = |ids: &[i64]| ids.iter().copied().map(RuleId).collect::<HashSet<_>>();
        assert_eq!(r[&RuleId(3)].1, ids(&[1, 2]));
        assert_eq!(r[&RuleId(4)].1, ids(&[8]));
        assert_eq!(r[&RuleId(5)].1, ids(&[1, 2, 3, 4, 8]), "everything else, not itself");
        assert!(!r.contains_key(&RuleId(1)));
        assert!(Target::parse("state:busy").is_err());
        assert!(Target::parse(" ").is_err());
    }

    #[test]
    fn stalled_holds_back_hollow_and_inefficient_on_its_gpu_only() {
        let r = shipped();
        let alerts = [
            alert(10, 1, "g1", "h", true, 0),
            alert(11, 2, "g1", "h", true, 0),
            alert(12, 3, "g1", "h", false, 0), // pending stalled
            alert(13, 1, "g2", "h", true, 0),  // another GPU
        ];
        let got = inhibited_by(&alerts, &r);
        assert_eq!(got, HashMap::from([(10, 12), (11, 12)]));
    }

    #[test]
    fn offline_inhibits_everything_and_chains_show() {
        let r = shipped();
        let alerts =
            [alert(10, 1, "g1", "h", true, 0), alert(12, 3, "g1", "h", true, 5), alert(14, 5, "g1", "h", true, 9)];
        let got = inhibited_by(&alerts, &r);
        // hollow ← stalled (firing, older than offline), stalled ← offline.
        assert_eq!(got, HashMap::from([(10, 12), (12, 14)]));
    }

    #[test]
    fn scopes_and_mutual_rules() {
        let t = |s: &[&str]| s.iter().map(|x| Target::parse(x).unwrap()).collect::<Vec<_>>();
        let none: [WorkloadState; 0] = [];
        let r = resolve(&[
            (rule(1, "a", &none), InhibitScope::Host, t(&["b"])),
            (rule(2, "b", &none), InhibitScope::Gpu, t(&["a"])),
            (rule(3, "c", &none), InhibitScope::Job, t(&["b"])),
        ]);
        // Host scope reaches another GPU of the host.
        let alerts = [alert(1, 1, "g1", "h1", true, 0), alert(2, 2, "g2", "h1", true, 0)];
        assert_eq!(inhibited_by(&alerts, &r), HashMap::from([(2, 1)]));
        // Mutual on one GPU: the older one wins.
        let alerts = [alert(1, 1, "g1", "h1", true, 50), alert(2, 2, "g1", "h1", true, 10)];
        assert_eq!(inhibited_by(&alerts, &r), HashMap::from([(1, 2)]));
        // Job scope: the same job on other hosts.
        let mut a = alert(3, 3, "g9", "h9", true, 0);
        a.job = Some("48213");
        let mut b = alert(4, 2, "g1", "h1", true, 0);
        b.job = Some("48213");
        let mut c = alert(5, 2, "g2", "h1", true, 0);
        c.job = Some("other");
        assert_eq!(inhibited_by(&[a, b, c], &r), HashMap::from([(4, 3)]));
    }
}
