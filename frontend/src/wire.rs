//! Answers whose types are not yet in `fleetlens-api`: only the fields the dashboard shows,
//! each defaulted, so that additions on the server never break the page.

use std::collections::BTreeMap;

use fleetlens_core::PriceTable;
use serde::Deserialize;

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

/// An error answer with everything the forms use: the field at fault and, for a condition,
/// where in it.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct ErrorAnswer {
    pub error: ErrorFields,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Default)]
#[serde(default)]
pub struct ErrorFields {
    pub code: String,
    pub message: String,
    pub field: Option<String>,
    pub column: Option<u32>,
}
