//! Answers of endpoints whose types live in the server rather than in `fleetlens-api`: only
//! the fields the dashboard shows, each defaulted, so that additions on the server never break
//! the page.

use std::collections::BTreeMap;

use fleetlens_core::PriceTable;
use serde::Deserialize;

/// `GET /api/v1/alerts`: `{"alerts": [...]}`.
#[derive(Debug, Clone, PartialEq, Deserialize, Default)]
pub struct AlertList {
    #[serde(default)]
    pub alerts: Vec<Alert>,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Default)]
#[serde(default)]
pub struct Alert {
    pub id: i64,
    pub rule_name: String,
    pub severity: String,
    /// `pending`, `firing` or `resolved`.
    pub status: String,
    pub silenced: bool,
    pub gpu: String,
    pub host: String,
    pub team: Option<String>,
    pub active_since_ms: i64,
    pub fired_at_ms: Option<i64>,
    pub resolved_at_ms: Option<i64>,
    pub summary: String,
    pub condition: String,
}

/// `GET /api/v1/alert-rules`: `{"rules": [...]}`.
#[derive(Debug, Clone, PartialEq, Deserialize, Default)]
pub struct RuleList {
    #[serde(default)]
    pub rules: Vec<Rule>,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Default)]
#[serde(default)]
pub struct Rule {
    pub id: i64,
    pub name: String,
    pub condition: String,
    pub for_s: i64,
    pub severity: String,
    pub description: String,
    pub advice: String,
    pub channels: Vec<i64>,
    pub enabled: bool,
    pub builtin: Option<String>,
}

/// `GET /api/v1/notification-channels`: `{"channels": [...]}`.
#[derive(Debug, Clone, PartialEq, Deserialize, Default)]
pub struct ChannelList {
    #[serde(default)]
    pub channels: Vec<Channel>,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Default)]
#[serde(default)]
pub struct Channel {
    pub id: i64,
    pub name: String,
    pub kind: String,
    pub url: String,
    pub default: bool,
}

/// `GET /api/v1/prices`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Prices {
    #[serde(default)]
    pub currency: String,
    pub defaults: PriceTable,
    #[serde(default)]
    pub overrides: Option<PriceTable>,
}

impl Prices {
    /// Price per GPU-hour for an NVML model name and whether it is the organisation's own.
    pub fn price_for(&self, nvml_name: &str) -> Option<(f64, bool)> {
        if let Some(p) = self.overrides.as_ref().and_then(|o| o.price_for(nvml_name)) {
            return Some((p, true));
        }
        self.defaults.price_for(nvml_name).map(|p| (p, false))
    }

    /// The organisation's entries (empty when it has none).
    pub fn own(&self) -> BTreeMap<String, f64> {
        self.overrides.as_ref().map(|o| o.per_gpu_hour.clone()).unwrap_or_default()
    }
}
