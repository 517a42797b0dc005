//! Data quality at ingest (`fleetlens_core::quality`): each GPU's samples are checked in time
//! order by its tracker, the fields that cannot be true are dropped before they are stored (so
//! no rollup, mean or state ever sees them), and every flag is counted — per minute in the
//! rollups (the GPU detail's `data_quality`) and per flag kind in this process (`/metrics`).
//!
//! The trackers live in this process: after a restart, or on a replica that has not seen the
//! GPU before, the rules that need history (energy counter, a condition held for minutes)
//! start again from the next batch.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use fleetlens_core::Sample;
use fleetlens_core::quality::{QualityFlag, QualityFlags, QualityTracker, scrub};
use fleetlens_store::OrgId;

/// Samples flagged by this process since it started, per flag (indexed like `QualityFlag::ALL`).
static FLAGGED: [AtomicU64; QualityFlag::ALL.len()] = [const { AtomicU64::new(0) }; QualityFlag::ALL.len()];

/// Samples flagged by this process since it started, per flag.
pub fn flagged_counts() -> impl Iterator<Item = (QualityFlag, u64)> {
    QualityFlag::ALL.into_iter().map(|f| (f, FLAGGED[f.index()].load(Ordering::Relaxed)))
}

/// One tracker per (organisation, GPU uuid) seen by this process.
#[derive(Default)]
pub struct QualityTrackers {
    trackers: Mutex<HashMap<(OrgId, String), QualityTracker>>,
}

impl QualityTrackers {
    /// Checks a validated batch, drops the flagged fields, and returns each sample's flags
    /// (in batch order).
    pub fn check_batch(&self, org: OrgId, samples: &mut [Sample]) -> Vec<QualityFlags> {
        let mut order: Vec<usize> = (0..samples.len()).collect();
        order.sort_by(|&a, &b| (&samples[a].uuid, samples[a].ts_ms).cmp(&(&samples[b].uuid, samples[b].ts_ms)));
        let mut flags = vec![QualityFlags::NONE; samples.len()];
        let mut trackers = self.trackers.lock().expect("quality trackers lock");
        let mut run_start = 0;
        while run_start < order.len() {
            let uuid = samples[order[run_start]].uuid.clone();
            let run_end = run_start + order[run_start..].iter().take_while(|&&i| samples[i].uuid == uuid).count();
            let tracker = trackers.entry((org, uuid)).or_default();
            for &i in &order[run_start..run_end] {
                let f = tracker.check(&samples[i]);
                if !f.is_empty() {
                    scrub(&mut samples[i], f);
                    for flag in f.iter() {
                        FLAGGED[flag.index()].fetch_add(1, Ordering::Relaxed);
                    }
                }
                flags[i] = f;
            }
            run_start = run_end;
        }
        flags
    }
}
