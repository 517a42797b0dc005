//! GPU-hour prices per model. Fleetlens ships public on-demand list prices as a starting
//! point, labelled as such; teams set their own. A model with no price has no cost: the
//! lookup returns `None` ("no price set"), never 0.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::datasheet::GpuModel;

/// Where the shipped defaults come from, shown next to every figure computed from them.
pub const DEFAULT_PRICE_SOURCE: &str = "Defaults: approximate public on-demand list prices per \
GPU-hour in USD as of 2025 (per-GPU share of on-demand instance prices at US cloud providers: \
hyperscalers for T4, L4, A10G and V100, GPU clouds for the data-centre parts). Rounded, not a \
quote: set your own prices.";

/// Shipped default prices, USD per GPU-hour, by model id.
pub const DEFAULT_PRICES: [(GpuModel, f64); 18] = [
    (GpuModel::B200, 6.00),
    (GpuModel::H200, 3.80),
    (GpuModel::H200Nvl, 3.50),
    (GpuModel::Gh200, 3.20),
    (GpuModel::H100Sxm, 3.00),
    (GpuModel::H100Nvl, 2.80),
    (GpuModel::H100Pcie, 2.50),
    (GpuModel::A100_80, 1.80),
    (GpuModel::A100_40, 1.30),
    (GpuModel::L40S, 1.20),
    (GpuModel::L40, 1.00),
    (GpuModel::A10G, 1.01),
    (GpuModel::L4, 0.80),
    (GpuModel::A40, 0.80),
    (GpuModel::A10, 0.75),
    (GpuModel::V100_32, 3.90),
    (GpuModel::V100_16, 3.06),
    (GpuModel::T4, 0.53),
];

/// Prices per GPU-hour. Keys are model ids (`h100-sxm`, see [`GpuModel::id`]) or, for models
/// the datasheet table does not know, the exact NVML name (`NVIDIA GeForce RTX 4090`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PriceTable {
    pub currency: String,
    /// Where the prices come from (shown with every cost).
    pub source: String,
    pub per_gpu_hour: BTreeMap<String, f64>,
}

/// A price that cannot be right.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct PriceError {
    /// The field at fault as the API names it: `currency`, or `per_gpu_hour.<key>`.
    pub field: String,
    pub message: String,
}

impl Default for PriceTable {
    /// The shipped public on-demand defaults.
    fn default() -> Self {
        PriceTable {
            currency: "USD".into(),
            source: DEFAULT_PRICE_SOURCE.into(),
            per_gpu_hour: DEFAULT_PRICES.iter().map(|(m, p)| (m.id().to_string(), *p)).collect(),
        }
    }
}

impl PriceTable {
    /// A table with no prices (every lookup is "no price set").
    pub fn empty(currency: &str, source: &str) -> Self {
        PriceTable { currency: currency.into(), source: source.into(), per_gpu_hour: BTreeMap::new() }
    }

    pub fn set(&mut self, key: &str, price_per_gpu_hour: f64) {
        self.per_gpu_hour.insert(key.trim().to_string(), price_per_gpu_hour);
    }

    /// This table with another's entries on top (a team's prices over the organisation's).
    ///
    /// Amounts of two currencies are never mixed: overrides in another currency than this
    /// table's replace it whole (a model they do not price has no price), so every figure
    /// computed from the result is in the result's `currency`.
    pub fn with_overrides(&self, overrides: &PriceTable) -> PriceTable {
        if !overrides.currency.eq_ignore_ascii_case(&self.currency) {
            return overrides.clone();
        }
        let mut out = self.clone();
        out.per_gpu_hour.extend(overrides.per_gpu_hour.iter().map(|(k, v)| (k.clone(), *v)));
        if !overrides.per_gpu_hour.is_empty() {
            out.source = format!("{} Overrides: {}", self.source, overrides.source);
        }
        out
    }

    pub fn price_of(&self, model: GpuModel) -> Option<f64> {
        self.per_gpu_hour.get(model.id()).copied()
    }

    /// Price per GPU-hour for a GPU as NVML names it: an entry under the exact name first
    /// (case-insensitive), else the entry of the model the name maps to, else `None`.
    pub fn price_for(&self, nvml_name: &str) -> Option<f64> {
        let name = nvml_name.trim();
        if name.is_empty() {
            return None;
        }
        self.per_gpu_hour
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, p)| *p)
            .or_else(|| GpuModel::from_nvml_name(name).and_then(|m| self.price_of(m)))
    }

    /// Reject negative, non-finite and unnamed prices. (0 is allowed: hardware that is
    /// written off can be declared free on purpose.)
    /// The currency must be an ISO 4217 code (three capital letters, `EUR`).
    pub fn validate(&self) -> Result<(), PriceError> {
        let c = &self.currency;
        if c.len() != 3 || !c.bytes().all(|b| b.is_ascii_uppercase()) {
            return Err(PriceError {
                field: "currency".into(),
                message: format!("must be an ISO 4217 code of three capital letters, like USD or EUR, not {c:?}"),
            });
        }
        for (key, p) in &self.per_gpu_hour {
            let e = |m: &str| PriceError { field: format!("per_gpu_hour.{key}"), message: m.into() };
            if key.trim().is_empty() {
                return Err(e("a price needs a model id or NVML name"));
            }
            if !p.is_finite() || *p < 0.0 {
                return Err(e("must be a finite, non-negative price per GPU-hour"));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nvml_names_find_default_prices() {
        let t = PriceTable::default();
        assert_eq!(t.validate(), Ok(()));
        assert!(t.source.contains("public on-demand"));
        assert_eq!(t.price_for("NVIDIA H100 80GB HBM3"), Some(3.00));
        assert_eq!(t.price_for("NVIDIA H200"), Some(3.80));
        assert_eq!(t.price_for("NVIDIA A100-SXM4-80GB"), Some(1.80));
        assert_eq!(t.price_for("NVIDIA A100-PCIE-40GB"), Some(1.30));
        assert_eq!(t.price_for("Tesla T4"), Some(0.53));
        assert_eq!(t.price_for("NVIDIA L4"), Some(0.80));
        assert_eq!(t.price_for("NVIDIA L40S"), Some(1.20));
    }

    #[test]
    fn unknown_models_have_no_price_not_zero() {
        let t = PriceTable::default();
        assert_eq!(t.price_for("NVIDIA GeForce RTX 4090"), None);
        assert_eq!(t.price_for("NVIDIA A30"), None);
        assert_eq!(t.price_for(""), None);
        assert_eq!(PriceTable::empty("USD", "none").price_for("NVIDIA H200"), None);
    }

    #[test]
    fn exact_names_and_overrides() {
        let mut team = PriceTable::empty("USD", "team contract");
        team.set("NVIDIA GeForce RTX 4090", 0.40);
        team.set("h100-sxm", 2.10);
        let t = PriceTable::default().with_overrides(&team);
        assert_eq!(t.price_for("nvidia geforce rtx 4090"), Some(0.40));
        assert_eq!(t.price_for("NVIDIA H100 80GB HBM3"), Some(2.10));
        assert_eq!(t.price_for("NVIDIA H200"), Some(3.80));
        assert!(t.source.contains("team contract"));
        let json = serde_json::to_string(&t).unwrap();
        assert_eq!(serde_json::from_str::<PriceTable>(&json).unwrap(), t);
    }

    #[test]
    fn bad_prices_are_rejected() {
        let mut t = PriceTable::empty("USD", "x");
        t.set("h200", -1.0);
        assert_eq!(t.validate().unwrap_err().field, "per_gpu_hour.h200");
        let mut t = PriceTable::empty("USD", "x");
        t.set("h200", f64::NAN);
        assert!(t.validate().is_err());
        assert_eq!(PriceTable::empty("euro", "x").validate().unwrap_err().field, "currency");
    }

    #[test]
    fn overrides_in_another_currency_replace_the_defaults() {
        let mut eur = PriceTable::empty("EUR", "our contract");
        eur.set("h200", 2.5);
        let t = PriceTable::default().with_overrides(&eur);
        assert_eq!(t.currency, "EUR");
        assert_eq!(t.price_for("NVIDIA H200"), Some(2.5));
        // The USD list price of an H100 must not be shown as euros.
        assert_eq!(t.price_for("NVIDIA H100 80GB HBM3"), None);
    }
}
