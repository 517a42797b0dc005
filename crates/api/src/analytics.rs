//! The fleet summary's query and the organisation's prices (`/fleet/summary`, `/prices`).

use std::collections::BTreeMap;

use fleetlens_core::PriceTable;
use serde::{Deserialize, Serialize};

/// `GET /api/v1/fleet/summary?from=&to=&gpu=&host=&model=`: the filters narrow the summary
/// to one GPU, one host or one GPU model.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams), into_params(parameter_in = Query))]
pub struct SummaryQuery {
    /// A period ending now: `1h`, `24h`, `7d` or `30d` (instead of from/to). Summaries of such
    /// periods are cached for a few seconds, so dashboards that poll them stay cheap.
    #[cfg_attr(feature = "openapi", param(pattern = "^(1h|24h|7d|30d)$"))]
    pub range: Option<String>,
    /// RFC 3339 or Unix milliseconds.
    pub from: Option<String>,
    /// RFC 3339 or Unix milliseconds.
    pub to: Option<String>,
    /// Only this GPU (UUID).
    pub gpu: Option<String>,
    /// Only this host.
    pub host: Option<String>,
    /// Only this GPU model (NVML name or model id).
    pub model: Option<String>,
}

/// `GET /api/v1/prices` (and the answer to `PUT /api/v1/prices`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Prices {
    /// The currency every cost of the organisation is computed in: the overrides' when set
    /// (overrides in another currency than the defaults' replace the defaults whole).
    #[serde(default)]
    pub currency: String,
    /// The shipped defaults: public on-demand list prices, labelled as such.
    pub defaults: PriceTable,
    /// The organisation's own prices, if set (they win over the defaults).
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
