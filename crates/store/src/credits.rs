//! The classifier that credits each minute (crates/core/src/credit.rs) when the rollup job
//! writes it, or when a read adds it as an open minute (`rollup_close`).

use fleetlens_core::{Credit, RollupBucket, Thresholds, WorkloadState};

use crate::OrgId;

/// Classifies a minute for an organisation (its thresholds) and returns the minute's credit.
pub trait MinuteClassifier: Send + Sync + 'static {
    fn credit(
        &self,
        org: OrgId,
        bucket: &RollupBucket,
        power_limit_w: Option<f64>,
        mem_total_bytes: Option<i64>,
    ) -> (Credit, WorkloadState);

    /// The key of the organisation settings (`org_settings`) this classifier classifies with,
    /// if any. The rollup job reads those rows in the transaction that writes minutes, after
    /// it has read the minutes' marks, and hands them to [`MinuteClassifier::use_settings`]
    /// before crediting: a settings change committed before a minute's samples were stored
    /// (on any replica) is never missed by that minute's credit.
    fn settings_key(&self) -> Option<&'static str> {
        None
    }

    /// The current `(organisation, value)` rows of [`MinuteClassifier::settings_key`].
    fn use_settings(&self, _rows: Vec<(OrgId, String)>) {}
}

/// METRICS.md's default thresholds for every organisation.
pub struct DefaultClassifier;

impl MinuteClassifier for DefaultClassifier {
    fn credit(
        &self,
        _org: OrgId,
        b: &RollupBucket,
        power_limit_w: Option<f64>,
        mem: Option<i64>,
    ) -> (Credit, WorkloadState) {
        let (credit, c) = Credit::of_minute(b, power_limit_w, mem, &Thresholds::default());
        (credit, c.state)
    }
}

/// How many of a GPU's stored timestamps before a minute are read to continue its sampled time
/// (`fleetlens_core::sampled_ms_since_previous`): the previous sample, and enough neighbours
/// that one sample arriving after an outage still finds the GPU's interval.
pub(crate) const PREVIOUS_TIMESTAMPS: i64 = 4;
