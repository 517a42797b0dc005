//! The billing report: per team, host, GPU or model, GPU-hours paid, allocated hours, hours per
//! state, mean use, energy, price, cost and wasted cost — added up from the hourly credits,
//! pro-rated at partial hours.

use std::collections::BTreeMap;

use fleetlens_api::BillingRow;
use fleetlens_api::reports::GpuGrouping;
use fleetlens_core::{Funnel, PriceTable, WorkloadState};
use fleetlens_store::GpuRecord;

use super::ledger::GpuLedger;
use super::summary::{Credits, ledgers};

#[derive(Default)]
pub(crate) struct Acc {
    gpus: u32,
    funnel: Funnel,
    seconds: BTreeMap<WorkloadState, f64>,
    energy_j: f64,
    prices: Vec<Option<f64>>,
    cost: Option<f64>,
    wasted: Option<f64>,
    unpriced_s: f64,
}

impl Acc {
    /// Adds one GPU's ledger (a GPU counted once per call).
    pub(crate) fn add(&mut self, g: &GpuRecord, l: &GpuLedger, prices: &PriceTable) {
        self.gpus += 1;
        self.funnel += Funnel::gpu(&l.usage);
        for (s, secs) in &l.state_time.seconds {
            *self.seconds.entry(*s).or_default() += secs;
        }
        self.energy_j += l.energy_j;
        let price = g.info.name.as_deref().and_then(|n| prices.price_for(n));
        self.prices.push(price);
        match price {
            Some(p) => {
                let w = l.state_time.wasted_cost(p);
                *self.cost.get_or_insert(0.0) += w.cost;
                *self.wasted.get_or_insert(0.0) += w.wasted;
            }
            None => self.unpriced_s += l.paid_s,
        }
    }

    pub(crate) fn hours(&self, state: WorkloadState) -> f64 {
        self.seconds.get(&state).copied().unwrap_or(0.0) / 3600.0
    }

    pub(crate) fn into_row(self, group: String) -> BillingRow {
        let a = self;
        let pct = |level: fleetlens_core::Level| level.fraction.map(|f| f * 100.0);
        let (util, sm) = (pct(a.funnel.kernel()), pct(a.funnel.sm()));
        let same_price = a.prices.windows(2).all(|w| w[0] == w[1]);
        BillingRow {
            group,
            gpus: a.gpus,
            gpu_hours: a.funnel.paid_gpu_hours(),
            allocated_hours: a.funnel.allocated_gpu_hours(),
            hours_by_state: WorkloadState::ALL.iter().map(|s| (s.as_str().to_string(), a.hours(*s))).collect(),
            mean_gpu_util_pct: util,
            mean_sm_active_pct: sm,
            mean_tensor_active_pct: pct(a.funnel.tensor()),
            energy_kwh: a.energy_j / 3.6e6,
            price_per_gpu_hour: if same_price { a.prices.first().copied().flatten() } else { None },
            cost: a.cost,
            wasted_cost: a.wasted,
            unpriced_gpu_hours: a.unpriced_s / 3600.0,
            efficiency_pct: match (sm, util) {
                (Some(sm), Some(u)) if u > 0.0 => Some((sm / u * 100.0).min(100.0)),
                _ => None,
            },
        }
    }
}

/// `team_of` names a GPU's team (unassigned GPUs group under "unassigned").
pub fn billing_rows(
    gpus: &[GpuRecord],
    credits: &Credits,
    prices: &PriceTable,
    group_by: GpuGrouping,
    team_of: &dyn Fn(&GpuRecord) -> Option<String>,
) -> Vec<BillingRow> {
    let mut groups: BTreeMap<String, Acc> = BTreeMap::new();
    for (i, l) in ledgers(gpus, credits) {
        let g = &gpus[i];
        let key = match group_by {
            GpuGrouping::Team => team_of(g).unwrap_or_else(|| "unassigned".into()),
            GpuGrouping::Host => g.info.host.clone(),
            GpuGrouping::Gpu => g.info.uuid.clone(),
            GpuGrouping::Model => g.info.name.clone().unwrap_or_else(|| "unknown model".into()),
        };
        groups.entry(key).or_default().add(g, &l, prices);
    }
    groups.into_iter().map(|(group, a)| a.into_row(group)).collect()
}

/// A text cell that a spreadsheet will show as text: one starting with `=`, `+`, `-`, `@`, a
/// tab, a carriage return or a line feed is a formula to Excel, LibreOffice and Google Sheets
/// (`=HYPERLINK(…)`, `=cmd|' /C calc'!A0`), so it gets a leading `'` (OWASP's rule for CSV
/// injection). For cells of agent- or user-supplied text (group names, the grouping, the
/// currency); the numbers the report computes are written as numbers, as they are.
pub fn spreadsheet_text(text: &str) -> String {
    if text.starts_with(['=', '+', '-', '@', '\t', '\r', '\n']) { format!("'{text}") } else { text.to_string() }
}

/// The rows as CSV with a header row (RFC 4180 quoting; opens cleanly in a spreadsheet). Text
/// cells go through [`spreadsheet_text`]: a host or process owner named like a formula reads as
/// text, not as a formula.
pub fn to_csv(from: &str, to: &str, group_by: &str, currency: &str, rows: &[BillingRow]) -> String {
    let mut w = csv::Writer::from_writer(Vec::new());
    let group_by = spreadsheet_text(group_by);
    let mut header: Vec<String> = ["period_from", "period_to", &group_by, "gpus", "gpu_hours", "allocated_hours"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    header.extend(WorkloadState::ALL.iter().map(|s| format!("{}_hours", s.as_str())));
    header.extend(
        [
            "mean_gpu_util_pct",
            "mean_sm_active_pct",
            "mean_tensor_active_pct",
            "energy_kwh",
            "currency",
            "price_per_gpu_hour",
            "cost",
            "wasted_cost",
            "unpriced_gpu_hours",
            "efficiency_pct",
        ]
        .iter()
        .map(|s| s.to_string()),
    );
    w.write_record(&header).expect("csv to memory");
    let num = |v: f64| format!("{v:.6}");
    let opt = |v: Option<f64>| v.map(num).unwrap_or_default();
    for r in rows {
        let mut rec = vec![
            from.to_string(),
            to.to_string(),
            spreadsheet_text(&r.group),
            r.gpus.to_string(),
            num(r.gpu_hours),
            num(r.allocated_hours),
        ];
        rec.extend(WorkloadState::ALL.iter().map(|s| num(r.hours_by_state.get(s.as_str()).copied().unwrap_or(0.0))));
        rec.extend([
            opt(r.mean_gpu_util_pct),
            opt(r.mean_sm_active_pct),
            opt(r.mean_tensor_active_pct),
            num(r.energy_kwh),
            spreadsheet_text(currency),
            opt(r.price_per_gpu_hour),
            opt(r.cost),
            opt(r.wasted_cost),
            num(r.unpriced_gpu_hours),
            opt(r.efficiency_pct),
        ]);
        w.write_record(&rec).expect("csv to memory");
    }
    String::from_utf8(w.into_inner().expect("csv flush")).expect("csv is utf-8")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formula_prefixes_get_a_quote_and_other_text_is_kept() {
        for hostile in ["=HYPERLINK(\"http://evil\",\"x\")", "+1", "-2+3", "@SUM(A1)", "\tx", "\rx", "\nx"] {
            assert_eq!(spreadsheet_text(hostile), format!("'{hostile}"));
        }
        for plain in ["gpu-node-01", "alice", "(no process)", " =not a formula", "'quoted", ""] {
            assert_eq!(spreadsheet_text(plain), plain);
        }
    }

    #[test]
    fn csv_neutralises_text_cells_and_keeps_numbers() {
        let row = BillingRow {
            group: "=cmd|' /C calc'!A0".into(),
            gpus: 1,
            gpu_hours: 1.5,
            allocated_hours: 1.0,
            hours_by_state: BTreeMap::new(),
            mean_gpu_util_pct: None,
            mean_sm_active_pct: None,
            mean_tensor_active_pct: None,
            energy_kwh: 0.0,
            price_per_gpu_hour: Some(-1.0),
            cost: None,
            wasted_cost: None,
            unpriced_gpu_hours: 0.0,
            efficiency_pct: None,
        };
        let csv = to_csv("2026-01-01T00:00:00Z", "2026-01-02T00:00:00Z", "@grouping", "@USD", &[row]);
        let mut reader = csv::Reader::from_reader(csv.as_bytes());
        let header = reader.headers().unwrap().clone();
        assert_eq!(&header[2], "'@grouping");
        let rec = reader.records().next().unwrap().unwrap();
        let cell = |name: &str| rec[header.iter().position(|h| h == name).unwrap()].to_string();
        assert_eq!(cell("'@grouping"), "'=cmd|' /C calc'!A0");
        assert_eq!(cell("currency"), "'@USD");
        assert_eq!(cell("price_per_gpu_hour"), "-1.000000", "a number stays a number");
    }
}
