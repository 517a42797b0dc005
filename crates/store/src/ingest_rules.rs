//! What an ingest batch may do to an organisation's registry, checked by both backends inside
//! the batch's own transaction (so two concurrent batches cannot both slip under a quota):
//! quotas on GPUs and hosts, and the rule that a GPU stays with the host it was registered on.
//! The decisions are here; the backends only read what they need.

use crate::{Result, StoreError};

/// Per-organisation ceilings and the GPU-host rule for [`crate::SampleStore::ingest_with`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IngestRules {
    /// Most GPUs the organisation may have registered.
    pub max_gpus: u64,
    /// Most distinct hosts the organisation's GPUs may be on.
    pub max_hosts: u64,
    /// A GPU registered on another host moves to the batch's host only when its newest sample
    /// is older than `now_ms - move_after_ms` (its old host has been silent that long: the GPU
    /// was physically moved, or the host renamed). `None`: only an admin moves GPUs.
    pub move_after_ms: Option<i64>,
    /// The server's clock, for `move_after_ms`.
    pub now_ms: i64,
}

/// A GPU of the batch that the organisation already has.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub(crate) struct KnownGpu {
    pub uuid: String,
    pub host: String,
    pub last_seen_ms: i64,
}

impl IngestRules {
    /// The first GPU of `known` that the batch of `host` may not write to, as the error.
    pub(crate) fn check_hosts(&self, host: &str, known: &[KnownGpu]) -> Result<()> {
        for gpu in known.iter().filter(|g| g.host != host) {
            let silent_long_enough =
                self.move_after_ms.is_some_and(|after| gpu.last_seen_ms < self.now_ms.saturating_sub(after));
            if !silent_long_enough {
                return Err(StoreError::GpuOnOtherHost {
                    uuid: gpu.uuid.clone(),
                    owner: gpu.host.clone(),
                    host: host.to_string(),
                });
            }
        }
        Ok(())
    }
}

/// Refuses `adding` more of `quota` to the `current` ones when that passes `limit`.
pub(crate) fn check_quota(quota: &'static str, current: u64, adding: u64, limit: u64) -> Result<()> {
    let would_be = current.saturating_add(adding);
    if adding > 0 && would_be > limit {
        return Err(StoreError::QuotaExceeded { quota, limit, would_be });
    }
    Ok(())
}

/// The distinct GPU uuids of a batch, in first-seen order.
pub(crate) fn batch_uuids(samples: &[crate::Sample]) -> Vec<&str> {
    let mut seen = std::collections::HashSet::new();
    samples.iter().map(|s| s.uuid.as_str()).filter(|u| seen.insert(*u)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn known(uuid: &str, host: &str, last_seen_ms: i64) -> KnownGpu {
        KnownGpu { uuid: uuid.into(), host: host.into(), last_seen_ms }
    }

    #[test]
    fn a_gpu_stays_with_its_host_unless_silent_past_the_move_rule() {
        let strict = IngestRules { max_gpus: 10, max_hosts: 10, move_after_ms: None, now_ms: 10_000_000 };
        let gpus = [known("GPU-a", "n1", 1_000), known("GPU-b", "n2", 9_990_000)];
        assert!(strict.check_hosts("n1", &gpus[..1]).is_ok());
        let err = strict.check_hosts("n1", &gpus).unwrap_err();
        assert!(matches!(&err, StoreError::GpuOnOtherHost { uuid, owner, .. } if uuid == "GPU-b" && owner == "n2"));
        // Silent for ages: even then, no move without the rule.
        assert!(strict.check_hosts("n2", &gpus[..1]).is_err());
        let moving = IngestRules { move_after_ms: Some(3_600_000), ..strict };
        assert!(moving.check_hosts("n2", &gpus[..1]).is_ok(), "n1 silent for 2.8 h");
        assert!(moving.check_hosts("n1", &gpus[1..]).is_err(), "n2 reported 10 s ago");
    }

    #[test]
    fn quotas_refuse_only_what_passes_the_limit() {
        assert!(check_quota("GPUs", 8, 2, 10).is_ok());
        assert!(check_quota("GPUs", 12, 0, 10).is_ok(), "nothing added: an organisation over its quota still reports");
        let err = check_quota("GPUs", 8, 3, 10).unwrap_err();
        assert!(matches!(err, StoreError::QuotaExceeded { quota: "GPUs", limit: 10, would_be: 11 }));
        assert!(err.to_string().contains("quota of 10 GPUs"), "{err}");
    }
}
