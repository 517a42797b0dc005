//! Silences: "do not notify about alerts that match these matchers between these times".
//! A silenced alert is still evaluated and recorded (and shown as silenced); only its
//! notifications are held back.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::SilenceId;

/// The alert labels a silence can match on. Each given matcher must match; a value may use
/// `*` as a wildcard (`GPU-b8c2*`, `node-*`). `rule` matches the rule's name or its id.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Matchers {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// GPU UUID.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub team: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub severity: Option<String>,
    /// Owners of the GPU's processes (the alert's `owner_*` labels; absent never matches).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner_user: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner_namespace: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner_pod: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner_job: Option<String>,
}

/// Alert label names (Alertmanager-style) that matchers read.
pub const LABEL_ALERTNAME: &str = "alertname";
pub const LABEL_RULE_ID: &str = "rule_id";
pub const LABEL_SEVERITY: &str = "severity";
pub const LABEL_HOST: &str = "host";
pub const LABEL_GPU: &str = "gpu";
pub const LABEL_TEAM: &str = "team";

impl Matchers {
    /// A silence needs at least one matcher: an empty one would silence everything.
    pub fn is_empty(&self) -> bool {
        self.rule.is_none()
            && self.host.is_none()
            && self.gpu.is_none()
            && self.team.is_none()
            && self.severity.is_none()
            && self.owner_user.is_none()
            && self.owner_namespace.is_none()
            && self.owner_pod.is_none()
            && self.owner_job.is_none()
    }

    /// Do the alert's labels match every given matcher?
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        let get = |k: &str| labels.get(k).map(String::as_str);
        let one = |pattern: &Option<String>, keys: &[&str]| match pattern {
            None => true,
            Some(p) => keys.iter().any(|k| get(k).is_some_and(|v| glob(p, v))),
        };
        one(&self.rule, &[LABEL_ALERTNAME, LABEL_RULE_ID])
            && one(&self.host, &[LABEL_HOST])
            && one(&self.gpu, &[LABEL_GPU])
            && one(&self.team, &[LABEL_TEAM])
            && one(&self.severity, &[LABEL_SEVERITY])
            && one(&self.owner_user, &["owner_user"])
            && one(&self.owner_namespace, &["owner_namespace"])
            && one(&self.owner_pod, &["owner_pod"])
            && one(&self.owner_job, &["owner_job"])
    }
}

/// A silence in force from `starts_at_ms` (inclusive) to `ends_at_ms` (exclusive).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SilenceWindow {
    pub id: SilenceId,
    pub matchers: Matchers,
    pub starts_at_ms: i64,
    pub ends_at_ms: i64,
}

impl SilenceWindow {
    pub fn active_at(&self, now_ms: i64) -> bool {
        self.starts_at_ms <= now_ms && now_ms < self.ends_at_ms
    }
}

/// The first silence (lowest id) that silences an alert with `labels` at `now_ms`.
pub fn silenced_by(silences: &[SilenceWindow], labels: &BTreeMap<String, String>, now_ms: i64) -> Option<SilenceId> {
    silences.iter().filter(|s| s.active_at(now_ms) && s.matchers.matches(labels)).map(|s| s.id).min()
}

/// `*` matches any run of characters; everything else matches itself.
pub fn glob(pattern: &str, value: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let v: Vec<char> = value.chars().collect();
    let (mut pi, mut vi) = (0, 0);
    let (mut star, mut mark) = (None, 0);
    while vi < v.len() {
        if pi < p.len() && p[pi] != '*' && p[pi] == v[vi] {
            pi += 1;
            vi += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some(pi);
            mark = vi;
            pi += 1;
        } else if let Some(s) = star {
            pi = s + 1;
            mark += 1;
            vi = mark;
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|c| *c == '*')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels() -> BTreeMap<String, String> {
        [
            ("alertname", "Busy but hollow"),
            ("rule_id", "3"),
            ("severity", "warning"),
            ("host", "node-1"),
            ("gpu", "GPU-abc"),
            ("team", "ml"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
    }

    #[test]
    fn matchers() {
        let l = labels();
        assert!(Matchers { rule: Some("Busy but hollow".into()), ..Default::default() }.matches(&l));
        assert!(Matchers { rule: Some("3".into()), host: Some("node-*".into()), ..Default::default() }.matches(&l));
        assert!(!Matchers { rule: Some("3".into()), host: Some("node-2".into()), ..Default::default() }.matches(&l));
        assert!(Matchers { gpu: Some("GPU-a*".into()), team: Some("ml".into()), ..Default::default() }.matches(&l));
        assert!(!Matchers { severity: Some("critical".into()), ..Default::default() }.matches(&l));
        let mut no_team = l.clone();
        no_team.remove("team");
        assert!(!Matchers { team: Some("*".into()), ..Default::default() }.matches(&no_team), "absent never matches");
        let mut owned = labels();
        owned.insert("owner_namespace".into(), "ml".into());
        owned.insert("owner_user".into(), "alice".into());
        let ns = |n: &str| Matchers { owner_namespace: Some(n.into()), ..Default::default() };
        assert!(ns("ml").matches(&owned) && ns("m*").matches(&owned) && !ns("ops").matches(&owned));
        assert!(!ns("*").matches(&labels()), "no owner label: no match");
        assert!(!ns("ml").is_empty());
        let both = Matchers { owner_user: Some("alice".into()), owner_job: Some("1".into()), ..Default::default() };
        assert!(!both.matches(&owned), "every matcher must match");
        assert!(Matchers::default().is_empty());
    }

    #[test]
    fn windows() {
        let s = |id, start, end| SilenceWindow {
            id,
            matchers: Matchers { host: Some("node-1".into()), ..Default::default() },
            starts_at_ms: start,
            ends_at_ms: end,
        };
        let list = [s(SilenceId(5), 0, 100), s(SilenceId(2), 50, 60)];
        assert_eq!(silenced_by(&list, &labels(), 55), Some(SilenceId(2)));
        assert_eq!(silenced_by(&list, &labels(), 60), Some(SilenceId(5)));
        assert_eq!(silenced_by(&list, &labels(), 100), None);
    }

    #[test]
    fn globbing() {
        assert!(glob("a*c", "abbbc"));
        assert!(glob("*", ""));
        assert!(glob("a**", "a"));
        assert!(!glob("a*c", "abd"));
        assert!(glob("*b*", "abc"));
        assert!(!glob("abc", "abcd"));
    }
}
